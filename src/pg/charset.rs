//! Text between Postgres and Rust in every database encoding. Rust strings
//! are UTF-8; a database's text is in the database's encoding (LATIN1,
//! EUC_JP, SQL_ASCII: bytes as they came), where pgrx's own conversions
//! raise an internal error on anything but UTF-8. Here text is converted
//! both ways instead, and what cannot be converted is a failure with the
//! SQLSTATE Postgres gives it.

use pgrx::pg_sys;
use snowflake_id_core::{Class, Failure};
use std::ffi::CStr;

/// The database's encoding, as Postgres numbers them.
pub(super) fn server_encoding() -> i32 {
    // SAFETY: a plain read of this backend's database encoding.
    unsafe { pg_sys::GetDatabaseEncoding() }
}

pub(super) fn utf8() -> i32 {
    pg_sys::pg_enc::PG_UTF8 as i32
}

pub(super) fn sql_ascii() -> i32 {
    pg_sys::pg_enc::PG_SQL_ASCII as i32
}

/// Where a SQL_ASCII database's bytes that are no UTF-8 go: one private-use
/// character each (U+F780 to U+F7FF for 0x80 to 0xFF), so
/// that such text comes back to the database byte for byte.
const RAW_BYTES: u32 = 0xF700;

/// Bytes of the database's encoding, as UTF-8. In a SQL_ASCII database,
/// whose bytes have no declared encoding, UTF-8 is taken as it is and any
/// other byte kept as a private-use character that `to_server` turns back
/// into it: a name or literal passes through unchanged, and an argument
/// that must be parsed (an ID, an encoding or layout name) fails as text
/// with a character it does not allow.
pub fn from_server(bytes: &[u8]) -> Result<String, Failure> {
    let enc = server_encoding();
    if enc == sql_ascii() {
        return Ok(keep_raw(bytes));
    }
    if enc == utf8() || bytes.is_ascii() {
        return String::from_utf8(bytes.to_vec()).map_err(|_| {
            Failure::new(
                Class::InvalidText,
                "invalid byte sequence for encoding UTF8",
            )
        });
    }
    let Ok(len) = i32::try_from(bytes.len()) else {
        return Err(Failure::new(
            Class::InvalidParameter,
            "the text is too long",
        ));
    };
    // SAFETY: converts `len` bytes it is given, which Postgres validated
    // in the database's encoding when they were made; the result is the
    // input itself or a palloc'd, NUL-terminated copy, read at once.
    let converted = unsafe {
        let p = pg_sys::pg_server_to_any(bytes.as_ptr().cast(), len, utf8());
        CStr::from_ptr(p).to_bytes().to_vec()
    };
    Ok(String::from_utf8_lossy(&converted).into_owned())
}

/// `bytes`, UTF-8 sequences as they are, every other byte as its
/// private-use character.
fn keep_raw(mut bytes: &[u8]) -> String {
    let mut out = String::new();
    while !bytes.is_empty() {
        match std::str::from_utf8(bytes) {
            Ok(s) => {
                out.push_str(s);
                break;
            }
            Err(e) => {
                let (good, rest) = bytes.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(good).unwrap_or_default());
                let bad = e.error_len().unwrap_or(rest.len()).max(1);
                for &b in &rest[..bad] {
                    out.push(char::from_u32(RAW_BYTES + u32::from(b)).unwrap_or('?'));
                }
                bytes = &rest[bad..];
            }
        }
    }
    out
}

/// UTF-8 text in the database's encoding, for SQL the extension runs or a
/// value it passes: every character came from the database or is ASCII, so
/// the conversion has nothing it cannot represent.
pub fn to_server(text: &str) -> Vec<u8> {
    let enc = server_encoding();
    if enc == sql_ascii() {
        let mut out = Vec::with_capacity(text.len());
        for c in text.chars() {
            match u32::from(c).checked_sub(RAW_BYTES) {
                Some(b @ 0x80..=0xFF) => out.push(b as u8),
                _ => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        return out;
    }
    if enc == utf8() || text.is_ascii() {
        return text.as_bytes().to_vec();
    }
    let len = i32::try_from(text.len()).unwrap_or(i32::MAX);
    // SAFETY: as in `from_server`, the other way.
    unsafe {
        let p = pg_sys::pg_any_to_server(text.as_ptr().cast(), len, utf8());
        CStr::from_ptr(p).to_bytes().to_vec()
    }
}

/// What a message shows of `text` in this database: as it is where the
/// database is UTF-8 (or SQL_ASCII, passed on as bytes), with characters
/// beyond ASCII written as U+XXXX elsewhere, since Postgres sends messages
/// in the database's encoding and the character may have no place there.
pub fn for_messages(text: &str) -> std::borrow::Cow<'_, str> {
    let enc = server_encoding();
    if text.is_ascii() || enc == utf8() {
        return text.into();
    }
    if enc == sql_ascii() {
        // Bytes that were no UTF-8, shown as what they were.
        return text
            .chars()
            .map(|c| match u32::from(c).checked_sub(RAW_BYTES) {
                Some(b @ 0x80..=0xFF) => format!("\\x{b:02X}"),
                _ => c.to_string(),
            })
            .collect::<String>()
            .into();
    }
    text.chars()
        .map(|c| {
            if c.is_ascii() {
                c.to_string()
            } else {
                format!("U+{:04X}", u32::from(c))
            }
        })
        .collect::<String>()
        .into()
}
