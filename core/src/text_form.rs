//! IDs as short text: fixed width, and ordered like the numbers.
//!
//! Every alphabet here is in ascending ASCII order and every text of one
//! encoding has the same width (leading zeros kept), so comparing two texts
//! byte by byte (`COLLATE "C"`) gives the order of their IDs: the text can
//! be the sort key of a URL slug or a file name.

use crate::failure::{Class, Failure};

/// A text encoding of IDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `0-9A-Za-z`, 11 characters.
    Base62,
    /// Crockford's base 32 (`0-9` and `A-Z` without I, L, O, U), 13 characters.
    Base32,
    /// `0-9a-f`, 16 characters.
    Hex,
}

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const HEX: &[u8; 16] = b"0123456789abcdef";

/// The encodings' names, as SQL takes them.
pub const NAMES: &str = "'base62', 'base32' (Crockford's alphabet), 'hex'";

impl Encoding {
    pub fn parse(name: &str) -> Result<Encoding, Failure> {
        match name.trim().to_ascii_lowercase().as_str() {
            "base62" => Ok(Encoding::Base62),
            "base32" => Ok(Encoding::Base32),
            "hex" => Ok(Encoding::Hex),
            // Keyed text is not IMMUTABLE (keys rotate), so it has its own
            // STABLE functions rather than a name here.
            "opaque" => Err(Failure::new(
                Class::InvalidParameter,
                "opaque IDs are not an encoding of snowflake_to_text()",
            )
            .hint("Use snowflake_to_opaque(id) and snowflake_from_opaque(text): their text depends on secret keys that can be rotated.")),
            _ => Err(Failure::new(
                Class::InvalidParameter,
                format!("unknown ID text encoding \"{name}\""),
            )
            .hint(format!("The encodings are {NAMES}."))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Encoding::Base62 => "base62",
            Encoding::Base32 => "base32",
            Encoding::Hex => "hex",
        }
    }

    fn alphabet(self) -> &'static [u8] {
        match self {
            Encoding::Base62 => BASE62,
            Encoding::Base32 => CROCKFORD,
            Encoding::Hex => HEX,
        }
    }

    /// Characters in every text: enough digits for the largest `bigint`.
    pub fn width(self) -> usize {
        match self {
            Encoding::Base62 => 11,
            Encoding::Base32 => 13,
            Encoding::Hex => 16,
        }
    }

    /// The value of one character, with the spellings each alphabet's
    /// definition allows: Crockford's lower case and I, L (1) and O (0);
    /// upper-case hex digits.
    fn digit(self, c: u8) -> Option<u64> {
        let c = match self {
            Encoding::Base62 => c,
            Encoding::Base32 => match c.to_ascii_uppercase() {
                b'I' | b'L' => b'1',
                b'O' => b'0',
                u => u,
            },
            Encoding::Hex => c.to_ascii_lowercase(),
        };
        self.alphabet()
            .iter()
            .position(|&a| a == c)
            .map(|p| p as u64)
    }

    /// The text of `id`. IDs are never negative; a negative number is not one.
    pub fn encode(self, id: i64) -> Result<String, Failure> {
        if id < 0 {
            return Err(Failure::new(
                Class::IdOutOfRange,
                format!("{id} is not a snowflake ID: IDs are never negative"),
            )
            .hint("Pass an ID from 0 to 9223372036854775807."));
        }
        let base = self.alphabet().len() as u64;
        let mut out = vec![b'0'; self.width()];
        let mut v = id as u64;
        for slot in out.iter_mut().rev() {
            *slot = self.alphabet()[(v % base) as usize];
            v /= base;
        }
        Ok(String::from_utf8(out).expect("alphabets are ASCII"))
    }

    /// The ID a text of this encoding holds: exactly `width` characters of
    /// the alphabet, no sign, no spaces, nothing else.
    pub fn decode(self, text: &str) -> Result<i64, Failure> {
        let invalid = |why: String| {
            Failure::new(
                Class::InvalidText,
                format!(
                    "invalid {} snowflake ID \"{}\": {why}",
                    self.name(),
                    text.escape_debug()
                ),
            )
            .hint(format!(
                "A {} ID is exactly {} characters of {}, as snowflake_to_text(id, '{}') writes it.",
                self.name(),
                self.width(),
                self.describe_alphabet(),
                self.name()
            ))
        };
        if text.chars().count() != self.width() {
            return Err(invalid(format!(
                "it has {} characters, not {}",
                text.chars().count(),
                self.width()
            )));
        }
        let base = self.alphabet().len() as u128;
        let mut v: u128 = 0;
        for (i, c) in text.chars().enumerate() {
            let d = u8::try_from(c)
                .ok()
                .and_then(|b| self.digit(b))
                .ok_or_else(|| {
                    invalid(format!(
                        "'{}' at position {} is not in the alphabet",
                        c.escape_debug(),
                        i + 1
                    ))
                })?;
            v = v * base + u128::from(d);
        }
        i64::try_from(v).map_err(|_| {
            Failure::new(
                Class::IdOutOfRange,
                format!(
                    "{} snowflake ID \"{text}\" is {v}, beyond the largest bigint",
                    self.name()
                ),
            )
            .hint(format!(
                "The largest is \"{}\".",
                self.encode(i64::MAX).expect("not negative")
            ))
        })
    }

    fn describe_alphabet(self) -> &'static str {
        match self {
            Encoding::Base62 => "0-9, A-Z and a-z",
            Encoding::Base32 => "Crockford's base 32 (0-9 and A-Z without I, L, O and U; lower case, I, L and O are read as their usual counterparts)",
            Encoding::Hex => "0-9 and a-f (or A-F)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ALL: [Encoding; 3] = [Encoding::Base62, Encoding::Base32, Encoding::Hex];

    #[test]
    fn alphabets_are_in_ascending_byte_order() {
        for e in ALL {
            assert!(e.alphabet().windows(2).all(|w| w[0] < w[1]), "{e:?}");
        }
    }

    #[test]
    fn the_width_holds_the_largest_bigint_and_no_more_than_needed() {
        for e in ALL {
            let base = e.alphabet().len() as u128;
            assert!(base.pow(e.width() as u32) > i64::MAX as u128, "{e:?}");
            assert!(base.pow(e.width() as u32 - 1) <= i64::MAX as u128, "{e:?}");
        }
    }

    #[test]
    fn known_values() {
        // Crockford's own examples: 32 is "10", 1234 is "16J".
        assert_eq!(Encoding::Base32.encode(32).unwrap(), "0000000000010");
        assert_eq!(Encoding::Base32.encode(1234).unwrap(), "000000000016J");
        assert_eq!(Encoding::Hex.encode(255).unwrap(), "00000000000000ff");
        assert_eq!(Encoding::Base62.encode(61).unwrap(), "0000000000z");
        assert_eq!(Encoding::Hex.encode(i64::MAX).unwrap(), "7fffffffffffffff");
        assert_eq!(Encoding::Base62.encode(i64::MAX).unwrap(), "AzL8n0Y58m7");
        assert_eq!(Encoding::Base32.encode(i64::MAX).unwrap(), "7ZZZZZZZZZZZZ");
        assert_eq!(Encoding::Base32.decode("000000000016j").unwrap(), 1234);
        assert_eq!(Encoding::Base32.decode("0000000000oIl").unwrap(), 33);
        assert_eq!(Encoding::Hex.decode("00000000000000FF").unwrap(), 255);
    }

    #[test]
    fn bad_text_is_refused_with_what_is_wrong() {
        let e = Encoding::Base62.decode("abc").unwrap_err();
        assert_eq!(e.class, Class::InvalidText);
        assert!(e.message.contains("3 characters, not 11"), "{}", e.message);
        assert!(e.hint.unwrap().contains("exactly 11 characters"));
        let e = Encoding::Base32.decode("00000000000U0").unwrap_err();
        assert!(e.message.contains("'U' at position 12"), "{}", e.message);
        for bad in [
            "-000000000000001",
            " 00000000000000f",
            "00000000000000g0",
            "0000000000000é0",
        ] {
            assert_eq!(
                Encoding::Hex.decode(bad).unwrap_err().class,
                Class::InvalidText,
                "{bad}"
            );
        }
        let e = Encoding::Base62.decode("zzzzzzzzzzz").unwrap_err();
        assert_eq!(e.class, Class::IdOutOfRange);
        assert!(e.hint.unwrap().contains("AzL8n0Y58m7"));
        assert_eq!(
            Encoding::Hex.decode("8000000000000000").unwrap_err().class,
            Class::IdOutOfRange
        );
        assert_eq!(
            Encoding::Hex.encode(-1).unwrap_err().class,
            Class::IdOutOfRange
        );
        assert_eq!(
            Encoding::parse("base64").unwrap_err().class,
            Class::InvalidParameter
        );
        assert_eq!(Encoding::parse(" Base62 ").unwrap(), Encoding::Base62);
    }

    proptest! {
        #[test]
        fn round_trip_at_fixed_width(id in 0..=i64::MAX) {
            for e in ALL {
                let t = e.encode(id).unwrap();
                prop_assert_eq!(t.len(), e.width());
                prop_assert_eq!(e.decode(&t).unwrap(), id);
            }
        }

        #[test]
        fn byte_order_is_numeric_order(a in 0..=i64::MAX, b in 0..=i64::MAX, small in 0..100_000i64) {
            for e in ALL {
                for (x, y) in [(a, b), (small, b), (a, small), (small, small + 1)] {
                    let (tx, ty) = (e.encode(x).unwrap(), e.encode(y).unwrap());
                    prop_assert_eq!(tx.as_bytes().cmp(ty.as_bytes()), x.cmp(&y), "{:?} {} {}", e, x, y);
                }
            }
        }
    }
}
