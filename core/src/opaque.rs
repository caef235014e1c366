//! Opaque IDs for public URLs: an ID enciphered under a secret key, as 17
//! URL-safe characters that say nothing of the ID's time, worker or
//! sequence, and that nobody without the key can make or alter.
//!
//! The text is one character naming the key, then 16 characters of
//! base64url (RFC 4648, section 5) holding 96 bits: FF1 (NIST SP 800-38G,
//! over AES-256, in radix 2: [`crate::ff1`]) enciphering the ID's 64 bits
//! followed by 32 zero bits, with the key's number as the tweak. The bits
//! are numerals in the order of the `fpe` crate's `BinaryNumeralString`
//! (each byte least significant bit first), which made every text handed
//! out before: a test checks both give the same text for a million IDs. FF1 is a keyed
//! permutation of the 96-bit strings, so each ID has one text per key; the
//! zero bits make it encode-then-encipher (Bellare and Rogaway): text that
//! was altered, or made under another key, deciphers to 32 bits that are
//! all zero once in 2^32 tries, and is refused otherwise.
//!
//! Keys live in a file only the server's operating-system user can read:
//! lines of `<number 0-63> <64 hex digits>`, optionally followed by
//! `decode-only`. New text uses the highest-numbered key not marked
//! `decode-only`; every listed key decodes, so adding a key rotates without
//! breaking links handed out before.

use crate::failure::{Class, Failure};
use crate::ff1::Ff1;
use aes::cipher::{Block, KeyInit};
use aes::Aes256;

/// The base64url alphabet (RFC 4648, section 5).
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
/// Characters of every opaque text: the key's and 16 of enciphered bits.
pub const WIDTH: usize = 17;
/// The enciphered bytes: the ID's 8 and 4 that must decipher to zero.
const BLOCK: usize = 12;
/// The largest key number (one base64url character names it).
pub const MAX_KEY: u8 = 63;

/// The enciphered bits, as FF1 numerals.
const NUMERALS: u32 = 8 * BLOCK as u32;

/// One key, ready to use.
struct Key {
    number: u8,
    ff1: Ff1<Aes256>,
    /// FF1's first PRF block for the one-byte tweak, enciphered once.
    start: Block<Aes256>,
}

impl Key {
    fn new(number: u8, key: &[u8; 32]) -> Key {
        let ff1 = Ff1::new(Aes256::new(key.into()), 2, NUMERALS).expect("96 bits fit");
        let start = ff1.start(1);
        Key { number, ff1, start }
    }

    fn encrypt(&self, plain: &[u8; BLOCK]) -> [u8; BLOCK] {
        let (a, b) = halves(plain);
        let (a, b) = self.ff1.encrypt(&self.start, &[self.number], a, b);
        join(a, b)
    }

    fn decrypt(&self, sealed: &[u8; BLOCK]) -> [u8; BLOCK] {
        let (a, b) = halves(sealed);
        let (a, b) = self.ff1.decrypt(&self.start, &[self.number], a, b);
        join(a, b)
    }
}

/// NUM_2 of each half of the numeral string whose numerals are the bits
/// of `bytes`, each byte least significant bit first: the first numeral,
/// bit 0 of byte 0, is the most significant. So NUM of 48 bits is their
/// little-endian value with the bits reversed.
fn halves(bytes: &[u8; BLOCK]) -> (u128, u128) {
    let num = |six: &[u8]| {
        let mut le = [0u8; 8];
        le[..6].copy_from_slice(six);
        u128::from(u64::from_le_bytes(le).reverse_bits() >> 16)
    };
    (num(&bytes[..6]), num(&bytes[6..]))
}

/// The bytes of two halves' values: the inverse of [`halves`].
fn join(a: u128, b: u128) -> [u8; BLOCK] {
    let mut out = [0u8; BLOCK];
    for (half, value) in out.chunks_mut(6).zip([a, b]) {
        half.copy_from_slice(&((value as u64).reverse_bits() >> 16).to_le_bytes()[..6]);
    }
    out
}

/// The keys of one key file: which encodes, and all that decode.
pub struct Keys {
    /// Indexed by key number.
    by_number: Vec<Option<Key>>,
    current: Option<u8>,
}

/// The one refusal of text that is not an opaque ID of ours: it says what
/// was expected, never which check failed, so that probing learns nothing.
fn invalid() -> Failure {
    Failure::new(Class::InvalidText, "invalid opaque snowflake ID")
        .hint(format!(
            "An opaque ID is {WIDTH} characters made by snowflake_to_opaque() on a server that still has the key it was made with."
        ))
}

/// Each byte's value in the alphabet (64: not in it), made at compile time:
/// a search of the alphabet per character was a third of reading a text.
const VALUES: [u8; 256] = {
    let mut values = [64u8; 256];
    let mut i = 0;
    while i < 64 {
        values[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    values
};

fn value(c: u8) -> Option<u8> {
    Some(VALUES[c as usize]).filter(|v| *v < 64)
}

impl Keys {
    /// Parses a key file. Errors name the line and what is wrong with it,
    /// never what it holds: they go to the server log.
    pub fn parse(text: &str) -> Result<Keys, Failure> {
        let mut by_number: Vec<Option<Key>> = (0..=MAX_KEY).map(|_| None).collect();
        let mut current = None;
        let bad = |line: usize, why: &str| {
            Failure::new(
                Class::InvalidParameter,
                format!("line {line} of the opaque ID key file {why}"),
            )
            .hint("Each line is a key number from 0 to 63, a space, a 256-bit key as 64 hex digits (openssl rand -hex 32), and optionally \"decode-only\"; # starts a comment.")
        };
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let words: Vec<&str> = raw
                .split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            let (number, hex, decode_only) = match words.as_slice() {
                [] => continue,
                [n, h] => (n, h, false),
                [n, h, "decode-only"] => (n, h, true),
                _ => {
                    return Err(bad(
                        line,
                        "is not \"<number> <key>\" or \"<number> <key> decode-only\"",
                    ))
                }
            };
            let number: u8 = number
                .parse()
                .ok()
                .filter(|n| *n <= MAX_KEY)
                .ok_or_else(|| bad(line, "has a key number that is not from 0 to 63"))?;
            if by_number[number as usize].is_some() {
                return Err(bad(line, &format!("repeats key number {number}")));
            }
            let key =
                parse_hex(hex).ok_or_else(|| bad(line, "has a key that is not 64 hex digits"))?;
            by_number[number as usize] = Some(Key::new(number, &key));
            if !decode_only {
                current = current.max(Some(number));
            }
        }
        if by_number.iter().all(Option::is_none) {
            return Err(Failure::new(
                Class::InvalidParameter,
                "the opaque ID key file holds no key",
            )
            .hint("Add a line \"1 <64 hex digits>\" (openssl rand -hex 32 makes a key)."));
        }
        Ok(Keys { by_number, current })
    }

    /// The number of the key new text is made with.
    pub fn current(&self) -> Option<u8> {
        self.current
    }

    /// The numbers of every key that decodes.
    pub fn numbers(&self) -> Vec<u8> {
        self.by_number.iter().flatten().map(|k| k.number).collect()
    }

    /// The opaque text of `id`, under the current key.
    pub fn encode(&self, id: i64) -> Result<String, Failure> {
        let number = self.current.ok_or_else(|| {
            Failure::new(Class::NotReady, "every key in the opaque ID key file is decode-only")
                .hint("Drop \"decode-only\" from the key new IDs should use, then reload the configuration.")
        })?;
        let key = self.by_number[number as usize]
            .as_ref()
            .expect("current key is listed");
        let mut plain = [0u8; BLOCK];
        plain[..8].copy_from_slice(&id.to_be_bytes());
        let out = key.encrypt(&plain);
        let mut text = String::with_capacity(WIDTH);
        text.push(ALPHABET[number as usize] as char);
        for chunk in out.chunks(3) {
            let v = u32::from(chunk[0]) << 16 | u32::from(chunk[1]) << 8 | u32::from(chunk[2]);
            for shift in [18, 12, 6, 0] {
                text.push(ALPHABET[(v >> shift) as usize & 63] as char);
            }
        }
        Ok(text)
    }

    /// The ID of an opaque text made under one of these keys; anything
    /// else is 22P02 with one message whatever was wrong.
    pub fn decode(&self, text: impl AsRef<[u8]>) -> Result<i64, Failure> {
        let bytes = text.as_ref();
        if bytes.len() != WIDTH {
            return Err(invalid());
        }
        let number = value(bytes[0]).ok_or_else(invalid)?;
        let key = self.by_number[number as usize]
            .as_ref()
            .ok_or_else(invalid)?;
        let mut sealed = [0u8; BLOCK];
        for (i, quad) in bytes[1..].chunks(4).enumerate() {
            let mut v = 0u32;
            for &c in quad {
                v = v << 6 | u32::from(value(c).ok_or_else(invalid)?);
            }
            sealed[i * 3..i * 3 + 3].copy_from_slice(&v.to_be_bytes()[1..]);
        }
        let plain = key.decrypt(&sealed);
        if plain[8..] != [0; BLOCK - 8] {
            return Err(invalid());
        }
        Ok(i64::from_be_bytes(plain[..8].try_into().expect("8 bytes")))
    }
}

fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut key = [0u8; 32];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(key)
}

/// The key file's bytes as text: UTF-8 without a byte order mark (editors
/// that add one, or save a comment in Latin-1, are named as such).
pub fn key_file_text(bytes: &[u8]) -> Result<&str, Failure> {
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        return Err(Failure::new(
            Class::InvalidParameter,
            "the opaque ID key file begins with a byte order mark (BOM)",
        )
        .hint("Save it as UTF-8 without a BOM (or as ASCII), then reload the configuration."));
    }
    std::str::from_utf8(bytes).map_err(|e| {
        let at = e.valid_up_to();
        let line = bytes[..at].iter().filter(|b| **b == b'\n').count() + 1;
        Failure::new(
            Class::InvalidParameter,
            format!(
                "line {line} of the opaque ID key file is not UTF-8 (byte 0x{:02X})",
                bytes[at]
            ),
        )
        .hint("Save the file as UTF-8 (a comment in another encoding, such as Latin-1, is enough to break it), then reload the configuration.")
    })
}

/// Refuses a key file that others than the server's user could read, as
/// PostgreSQL refuses such an SSL key file: owned by the server's user and
/// closed to group and others, or owned by root and closed to others (and
/// to the group's writing).
pub fn check_file_mode(mode: u32, owner: u32, server_user: u32) -> Result<(), Failure> {
    let ok = (owner == server_user && mode & 0o077 == 0) || (owner == 0 && mode & 0o037 == 0);
    if ok {
        return Ok(());
    }
    Err(Failure::new(
        Class::InvalidParameter,
        format!("the opaque ID key file can be read by others than the server (mode {:04o})", mode & 0o7777),
    )
    .hint("chmod 600 the file and have it owned by the server's operating-system user (or chmod 640 and owned by root)."))
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const K2: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

    fn keys(text: &str) -> Keys {
        Keys::parse(text).unwrap()
    }

    #[test]
    fn the_format_is_pinned() {
        // Texts handed out must decode after any upgrade: a change of the
        // construction, the crate or the encoding fails here first.
        let k = keys(&format!("1 {K1}\n"));
        assert_eq!(k.encode(0).unwrap(), "BRZntFB_7Oi9LJVQh");
        assert_eq!(k.encode(i64::MAX).unwrap(), "Bowk-tATVVaXadfl5");
        assert_eq!(
            k.encode(1_234_567_890_123_456_789).unwrap(),
            "BARioxTXKOBHwAnSR"
        );
    }

    #[test]
    fn a_million_random_ids_give_the_text_the_fpe_crate_made() {
        // Every text handed out before was made with the `fpe` crate's FF1
        // (BigUint arithmetic): the word arithmetic must give the same text
        // for every ID, under every key number (the tweak), both ways.
        use fpe::ff1::{BinaryNumeralString, FF1};
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for (number, hex) in [(1u8, K1), (63, K2), (0, K1)] {
            let ours = keys(&format!("{number} {hex}\n"));
            let theirs = FF1::<Aes256>::new(&parse_hex(hex).unwrap(), 2).unwrap();
            let key = ours.by_number[number as usize].as_ref().unwrap();
            for i in 0..(1_000_000 / 3 + 1) {
                let id = if i < 4 {
                    [0, -1, i64::MAX, i64::MIN][i]
                } else {
                    next() as i64
                };
                let mut plain = [0u8; BLOCK];
                plain[..8].copy_from_slice(&id.to_be_bytes());
                // Any 96 bits, not only those of IDs: the zero bits too.
                let mut any = [0u8; BLOCK];
                any[..8].copy_from_slice(&next().to_le_bytes());
                any[8..].copy_from_slice(&(next() as u32).to_le_bytes());
                for bits in [plain, any] {
                    let made = theirs
                        .encrypt(&[number], &BinaryNumeralString::from_bytes_le(&bits))
                        .unwrap()
                        .to_bytes_le();
                    assert_eq!(key.encrypt(&bits).to_vec(), made, "{bits:?}");
                    assert_eq!(key.decrypt(&key.encrypt(&bits)), bits);
                }
                let text = ours.encode(id).unwrap();
                assert_eq!(ours.decode(&text).unwrap(), id);
            }
        }
    }

    #[test]
    fn round_trip_at_the_extremes_and_over_random_ids() {
        let k = keys(&format!("1 {K1}\n2 {K2}\n"));
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut ids = vec![0, 1, i64::MAX, i64::MAX - 1, -1, i64::MIN];
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ids.push(x as i64);
        }
        for id in ids {
            let t = k.encode(id).unwrap();
            assert_eq!(t.len(), WIDTH);
            assert!(t.bytes().all(|b| ALPHABET.contains(&b)), "{t}");
            assert!(t.starts_with('C'), "key 2 is current: {t}");
            assert_eq!(k.decode(&t).unwrap(), id);
        }
    }

    #[test]
    fn neighbours_share_nothing_visible() {
        let k = keys(&format!("1 {K1}\n"));
        let (a, b) = (k.encode(1000).unwrap(), k.encode(1001).unwrap());
        let same = a
            .bytes()
            .zip(b.bytes())
            .skip(1)
            .filter(|(x, y)| x == y)
            .count();
        assert!(same < 5, "{a} {b}");
    }

    #[test]
    fn every_single_character_change_is_refused() {
        let k = keys(&format!("1 {K1}\n2 {K2}\n"));
        let t = k.encode(42).unwrap();
        let mut tried = 0;
        for i in 0..WIDTH {
            for &c in ALPHABET.iter() {
                if t.as_bytes()[i] == c {
                    continue;
                }
                let mut altered = t.clone().into_bytes();
                altered[i] = c;
                let altered = String::from_utf8(altered).unwrap();
                let e = k.decode(&altered).unwrap_err();
                assert_eq!(e.class, Class::InvalidText, "{altered}");
                assert_eq!(e.message, "invalid opaque snowflake ID");
                tried += 1;
            }
        }
        assert_eq!(tried, WIDTH * 63);
    }

    #[test]
    fn foreign_and_malformed_text_is_refused_alike() {
        let ours = keys(&format!("1 {K1}\n"));
        let theirs = keys(&format!("1 {K2}\n"));
        let t = theirs.encode(42).unwrap();
        for bad in [
            &t[..],
            "",
            "B",
            "BD9Fo8cLwQHQfQWJ",
            "BD9Fo8cLwQHQfQWJ7x",
            "BD9Fo8cLwQHQfQW+7",
            "éD9Fo8cLwQHQfQW7",
            "ZD9Fo8cLwQHQfQWJ7",
        ] {
            let e = ours.decode(bad).unwrap_err();
            assert_eq!(
                (e.class, e.message.as_str()),
                (Class::InvalidText, "invalid opaque snowflake ID"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn rotation_keeps_old_text_and_decode_only_keys_wait() {
        let before = keys(&format!("1 {K1}\n"));
        let old = before.encode(7).unwrap();
        // Step 1 of a rotation over several servers: the new key decodes everywhere first.
        let staged = keys(&format!("1 {K1}\n2 {K2} decode-only\n"));
        assert_eq!(staged.current(), Some(1));
        assert_eq!(staged.encode(7).unwrap(), old);
        // Step 2: new text uses key 2; text under key 1 still decodes.
        let after = keys(&format!("# rotated\n1 {K1}   # old\n2 {K2}\n"));
        let new = after.encode(7).unwrap();
        assert_ne!(new, old);
        assert_eq!(after.decode(&old).unwrap(), 7);
        assert_eq!(after.decode(&new).unwrap(), 7);
        assert_eq!(staged.decode(&new).unwrap(), 7);
        // Step 3, when old links may die: key 1 removed, its text refused.
        let retired = keys(&format!("2 {K2}\n"));
        assert_eq!(retired.decode(&old).unwrap_err().class, Class::InvalidText);
        assert_eq!(retired.numbers(), vec![2]);
    }

    #[test]
    fn key_file_errors_name_the_line_not_the_key() {
        let secret = "a".repeat(63);
        for (text, says) in [
            (
                format!("1 {secret}\n"),
                "line 1 of the opaque ID key file has a key that is not 64 hex digits",
            ),
            (
                format!("\n64 {K1}\n"),
                "line 2 of the opaque ID key file has a key number that is not from 0 to 63",
            ),
            (
                format!("1 {K1}\n1 {K2}\n"),
                "line 2 of the opaque ID key file repeats key number 1",
            ),
            (
                format!("1 {K1} spare\n"),
                "line 1 of the opaque ID key file is not",
            ),
            (
                "# nothing\n".to_string(),
                "the opaque ID key file holds no key",
            ),
        ] {
            let e = Keys::parse(&text).err().unwrap();
            assert!(e.message.starts_with(says), "{}", e.message);
            let all = format!("{} {:?} {:?}", e.message, e.detail, e.hint);
            assert!(
                !all.contains(&secret) && !all.contains(K1) && !all.contains(K2),
                "{all}"
            );
        }
        let only_staged = keys(&format!("3 {K1} decode-only\n"));
        assert_eq!(only_staged.encode(1).unwrap_err().class, Class::NotReady);
    }

    #[test]
    fn file_modes_as_postgres_takes_ssl_keys() {
        assert!(check_file_mode(0o600, 26, 26).is_ok());
        assert!(check_file_mode(0o400, 26, 26).is_ok());
        assert!(check_file_mode(0o640, 0, 26).is_ok());
        assert!(check_file_mode(0o640, 26, 26).is_err());
        assert!(check_file_mode(0o604, 26, 26).is_err());
        assert!(check_file_mode(0o644, 0, 26).is_err());
        assert!(check_file_mode(0o600, 1000, 26).is_err());
        let e = check_file_mode(0o100644, 26, 26).unwrap_err();
        assert!(e.message.contains("(mode 0644)"), "{}", e.message);
    }

    #[test]
    fn a_bom_and_bytes_that_are_not_utf8_are_named_as_such() {
        let good = format!("# rotated by José\n1 {K1}\n");
        assert_eq!(key_file_text(good.as_bytes()).unwrap(), good);
        let bom = [b"\xEF\xBB\xBF".as_slice(), good.as_bytes()].concat();
        let e = key_file_text(&bom).unwrap_err();
        assert_eq!(
            e.message,
            "the opaque ID key file begins with a byte order mark (BOM)"
        );
        assert!(e.hint.unwrap().contains("without a BOM"));
        let latin1 = [format!("1 {K1}\n# rotated by Jos").as_bytes(), b"\xE9\n"].concat();
        let e = key_file_text(&latin1).unwrap_err();
        assert_eq!(
            e.message,
            "line 2 of the opaque ID key file is not UTF-8 (byte 0xE9)"
        );
        assert!(!format!("{e:?}").contains(K1));
    }
}
