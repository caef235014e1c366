//! Opaque IDs for public URLs: `snowflake_to_opaque(id)` and
//! `snowflake_from_opaque(text)` (and its form that answers NULL), under the
//! keys of `crate::opaque`.

use crate::opaque::keys;
use crate::pg::error::OrRaise;
use crate::pg::text::CallText;
use pgrx::prelude::*;

/// `id` enciphered under the current key: 17 URL-safe characters that do
/// not reveal the ID's time, worker or sequence. STABLE, not IMMUTABLE: a
/// rotation of keys (at a reload) changes the text new calls make.
/// PARALLEL RESTRICTED: the keys are this process's, read at its reloads.
#[pg_extern(stable, strict, parallel_restricted)]
fn snowflake_to_opaque(id: i64) -> String {
    keys().or_raise().encode(id).or_raise()
}

/// The ID of an opaque text made under any key the file still lists;
/// anything else (altered, foreign, malformed) is 22P02 with one message.
#[pg_extern(stable, strict, parallel_restricted)]
fn snowflake_from_opaque(text: CallText) -> i64 {
    keys().or_raise().decode(text.bytes()).or_raise()
}

/// As `snowflake_from_opaque(text)`, but NULL for text that is no opaque ID
/// of ours: for public lookups (`WHERE id = snowflake_from_opaque_or_null($1)`
/// finds no row), where an error per bad link would fill the server log and
/// abort the caller's transaction. A missing key is still an error.
#[pg_extern(stable, strict, parallel_restricted)]
fn snowflake_from_opaque_or_null(text: CallText) -> Option<i64> {
    keys().or_raise().decode(text.bytes()).ok()
}
