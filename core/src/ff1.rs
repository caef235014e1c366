//! FF1 (NIST SP 800-38G, section 6.2) over numeral strings whose halves
//! fit in 128-bit integers, with the arithmetic in machine words: the
//! numeral strings come in and go out as the integers NUM_radix of their
//! halves, so each round is one AES block (two where the tweak is long)
//! and an addition, where a general implementation multiplies big numbers
//! numeral by numeral. Opaque IDs encipher 96 bits in radix 2; NIST's
//! published samples (radix 10 and 36) check the same rounds.

use aes::cipher::{Block, BlockCipherEncrypt};

/// FF1 under one key, for one radix and length: P, the first block of
/// every round's PRF input, is enciphered once here, per tweak length.
pub struct Ff1<C> {
    cipher: C,
    radix: u32,
    /// Numerals of the first half (A) and of the second (B).
    u: u32,
    v: u32,
    /// radix^u and radix^v.
    mod_u: u128,
    mod_v: u128,
    /// Bytes of NUM_radix(B) in Q.
    b: usize,
    /// Bytes of each round's output taken as y.
    d: usize,
    /// Whether the radix is a power of two: then radix^u and radix^v are
    /// too, and reducing by them is a mask, not a 128-bit division (which
    /// a round would otherwise pay three times).
    pow2: bool,
}

impl<C: BlockCipherEncrypt> Ff1<C> {
    /// FF1 over `n` numerals of `radix` under `cipher` (AES-128, -192 or
    /// -256). `None` where a half's values or a round's output do not fit
    /// the 128-bit arithmetic, or the radix or length are outside FF1's.
    pub fn new(cipher: C, radix: u32, n: u32) -> Option<Ff1<C>> {
        if !(2..=1 << 16).contains(&radix) || n < 2 {
            return None;
        }
        let (u, v) = (n / 2, n - n / 2);
        let pow = |m: u32| (radix as u128).checked_pow(m).filter(|p| *p < 1 << 126);
        let (mod_u, mod_v) = (pow(u)?, pow(v)?);
        // FF1's minimum domain: radix^n >= 1,000,000.
        if mod_u.checked_mul(mod_v).is_some_and(|d| d < 1_000_000) {
            return None;
        }
        // b = ceil(ceil(v * log2(radix)) / 8): the bytes of radix^v - 1.
        let b = (128 - (mod_v - 1).leading_zeros() as usize)
            .div_ceil(8)
            .max(1);
        let d = 4 * b.div_ceil(4) + 4;
        // y must come from one block of R.
        (d <= 16).then_some(Ff1 {
            cipher,
            radix,
            u,
            v,
            mod_u,
            mod_v,
            b,
            d,
            pow2: radix.is_power_of_two(),
        })
    }

    /// `x` mod `m` (`m` one of the halves' moduli).
    #[inline]
    fn reduce(&self, x: u128, m: u128) -> u128 {
        if self.pow2 {
            x & (m - 1)
        } else {
            x % m
        }
    }

    /// The two halves' moduli: radix^u for A, radix^v for B.
    pub fn moduli(&self) -> (u128, u128) {
        (self.mod_u, self.mod_v)
    }

    /// CIPH_K(P) for a tweak of `t` bytes: the chaining value every round's
    /// PRF starts from.
    pub fn start(&self, t: usize) -> Block<C> {
        let mut p = Block::<C>::default();
        p[..3].copy_from_slice(&[1, 2, 1]);
        p[3..6].copy_from_slice(&self.radix.to_be_bytes()[1..]);
        p[6] = 10;
        p[7] = (self.u % 256) as u8;
        p[8..12].copy_from_slice(&(self.u + self.v).to_be_bytes());
        p[12..16].copy_from_slice(&(t as u32).to_be_bytes());
        self.cipher.encrypt_block(&mut p);
        p
    }

    /// y of round `i`: NUM of the first d bytes of PRF(P || Q), Q being the
    /// tweak, zeros to a block boundary, i and `half` in b bytes.
    fn y(&self, start: &Block<C>, tweak: &[u8], i: u8, half: u128) -> u128 {
        let mut r = start.clone();
        if tweak.len() + self.b < 16 {
            // Q is one block: the tweak, zeros, then i and the half's b
            // bytes ending it (half < 2^(8b)), built as one number.
            let mut t = [0u8; 16];
            t[..tweak.len()].copy_from_slice(tweak);
            let q = u128::from_be_bytes(t) | (u128::from(i) << (8 * self.b)) | half;
            for (x, q) in r.iter_mut().zip(q.to_be_bytes()) {
                *x ^= q;
            }
            self.cipher.encrypt_block(&mut r);
            return r[..self.d]
                .iter()
                .fold(0u128, |y, &byte| (y << 8) | u128::from(byte));
        }
        let pad = (16 - (tweak.len() + self.b + 1) % 16) % 16;
        let total = tweak.len() + pad + 1 + self.b;
        let q_byte = |k: usize| -> u8 {
            if k < tweak.len() {
                tweak[k]
            } else if k < tweak.len() + pad {
                0
            } else if k == tweak.len() + pad {
                i
            } else {
                let at = k - tweak.len() - pad - 1;
                (half >> (8 * (self.b - 1 - at))) as u8
            }
        };
        for block in 0..total / 16 {
            for (j, x) in r.iter_mut().enumerate() {
                *x ^= q_byte(block * 16 + j);
            }
            self.cipher.encrypt_block(&mut r);
        }
        r[..self.d]
            .iter()
            .fold(0u128, |y, &byte| (y << 8) | u128::from(byte))
    }

    /// Enciphers (NUM(A), NUM(B)) under `tweak`; `start` is
    /// [`Ff1::start`] of the tweak's length.
    pub fn encrypt(&self, start: &Block<C>, tweak: &[u8], a: u128, b: u128) -> (u128, u128) {
        let (mut a, mut b) = (a, b);
        for i in 0..10u8 {
            let m = if i % 2 == 0 { self.mod_u } else { self.mod_v };
            let y = self.reduce(self.y(start, tweak, i, b), m);
            let c = self.reduce(self.reduce(a, m) + y, m);
            (a, b) = (b, c);
        }
        (a, b)
    }

    /// The inverse of [`Ff1::encrypt`].
    pub fn decrypt(&self, start: &Block<C>, tweak: &[u8], a: u128, b: u128) -> (u128, u128) {
        let (mut a, mut b) = (a, b);
        for i in (0..10u8).rev() {
            let m = if i % 2 == 0 { self.mod_u } else { self.mod_v };
            let y = self.reduce(self.y(start, tweak, i, a), m);
            let c = self.reduce(self.reduce(b, m) + m - y, m);
            (b, a) = (a, c);
        }
        (a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes::cipher::KeyInit;
    use aes::{Aes128, Aes192, Aes256};

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Numerals ("0123456789", or 0-9a-z for radix 36) to NUM of each half.
    fn halves(text: &str, radix: u32) -> (u128, u128, u32) {
        let digits: Vec<u32> = text.chars().map(|c| c.to_digit(radix).unwrap()).collect();
        let u = digits.len() / 2;
        let num = |d: &[u32]| d.iter().fold(0u128, |x, &n| x * radix as u128 + n as u128);
        (num(&digits[..u]), num(&digits[u..]), digits.len() as u32)
    }

    fn text(a: u128, b: u128, n: u32, radix: u32) -> String {
        let u = n / 2;
        let str_of = |mut x: u128, m: u32| {
            let mut s = vec!['0'; m as usize];
            for k in (0..m as usize).rev() {
                s[k] = char::from_digit((x % radix as u128) as u32, radix).unwrap();
                x /= radix as u128;
            }
            s.into_iter().collect::<String>()
        };
        str_of(a, u) + &str_of(b, n - u)
    }

    fn check<C: BlockCipherEncrypt>(
        cipher: C,
        radix: u32,
        tweak: &str,
        plain: &str,
        cipher_text: &str,
    ) {
        let (a, b, n) = halves(plain, radix);
        let ff1 = Ff1::new(cipher, radix, n).expect("in range");
        let tweak = hex(tweak);
        let start = ff1.start(tweak.len());
        let (ca, cb) = ff1.encrypt(&start, &tweak, a, b);
        assert_eq!(text(ca, cb, n, radix), cipher_text);
        assert_eq!(ff1.decrypt(&start, &tweak, ca, cb), (a, b));
    }

    /// NIST's FF1 samples (csrc.nist.gov, "FF1samples.pdf", the examples
    /// for SP 800-38G): AES-128, -192 and -256, radix 10 and 36, with and
    /// without tweaks (two of them longer than a block with Q).
    #[test]
    fn nist_samples() {
        let k128 = hex("2B7E151628AED2A6ABF7158809CF4F3C");
        let k192 = hex("2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F");
        let k256 = hex("2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F7F036D6F04FC6A94");
        let t10 = "39383736353433323130";
        let t11 = "3737373770717273373737";
        // (radix, tweak, plaintext, ciphertext under AES-128, -192, -256)
        let samples = [
            (
                10,
                "",
                "0123456789",
                ["2433477484", "2830668132", "6657667009"],
            ),
            (
                10,
                t10,
                "0123456789",
                ["6124200773", "2496655549", "1001623463"],
            ),
            (
                36,
                t11,
                "0123456789abcdefghi",
                [
                    "a9tv40mll9kdu509eum",
                    "xbj3kv35jrawxv32ysr",
                    "xs8a0azh2avyalyzuwd",
                ],
            ),
        ];
        for (radix, tweak, plain, [c128, c192, c256]) in samples {
            check(
                Aes128::new_from_slice(&k128).unwrap(),
                radix,
                tweak,
                plain,
                c128,
            );
            check(
                Aes192::new_from_slice(&k192).unwrap(),
                radix,
                tweak,
                plain,
                c192,
            );
            check(
                Aes256::new_from_slice(&k256).unwrap(),
                radix,
                tweak,
                plain,
                c256,
            );
        }
    }

    #[test]
    fn domains_outside_the_word_arithmetic_or_ff1_are_refused() {
        let key = || Aes256::new_from_slice(&[7; 32]).unwrap();
        assert!(Ff1::new(key(), 2, 96).is_some());
        assert!(
            Ff1::new(key(), 2, 19).is_none(),
            "under FF1's minimum domain"
        );
        assert!(Ff1::new(key(), 2, 256).is_none(), "a half past 126 bits");
        assert!(Ff1::new(key(), 1, 96).is_none());
    }
}
