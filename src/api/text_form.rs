//! IDs as fixed-width text that sorts like the numbers:
//! `snowflake_to_text(id, encoding)` and `snowflake_from_text(text, encoding)`.

use crate::pg::error::OrRaise;
use crate::pg::text::Text;
use pgrx::prelude::*;
use snowflake_id_core::text_form::Encoding;

/// `id` as fixed-width text in `encoding` ('base62', 'base32' or 'hex'),
/// whose byte order (`COLLATE "C"`) is the IDs' numeric order. IMMUTABLE:
/// the text depends on the arguments alone.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_to_text(id: i64, encoding: Text) -> String {
    Encoding::parse(encoding.as_str())
        .or_raise()
        .encode(id)
        .or_raise()
}

/// The ID a text of `encoding` holds; anything but exactly that encoding's
/// width in its alphabet is SQLSTATE 22P02. IMMUTABLE, as its inverse.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_from_text(text: Text, encoding: Text) -> i64 {
    Encoding::parse(encoding.as_str())
        .or_raise()
        .decode(text.as_str())
        .or_raise()
}
