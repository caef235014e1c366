//! IDs as version 7 UUIDs: `snowflake_uuidv7()` from the shared generator,
//! the two mappings between a `bigint` ID and its `uuid`, and time bounds
//! for `uuid` columns (see `snowflake_id_core::uuid` for the bits).

use crate::issue;
use crate::pg::clock::unix_us;
use crate::pg::error::OrRaise;
use crate::pg::process::ProcessLocal;
use crate::pg::text::Text;
use crate::settings;
use pgrx::prelude::*;
use pgrx::Uuid;
use snowflake_id_core::layout::Layout;
use snowflake_id_core::uuid::{self, Filler};
use snowflake_id_core::{Class, Failure};
use std::cell::RefCell;

use super::decode::layout_arg;

fn server_layout() -> &'static Layout {
    settings::server_layout().or_raise()
}

/// This process's random filler, and the process it was seeded in: a
/// process forked from one that had seeded it must not repeat its stream.
static FILLER: ProcessLocal<RefCell<Option<(i32, Filler)>>> = ProcessLocal(RefCell::new(None));

/// `n` random bits for the filler of a new UUID.
#[inline]
fn random_filler(n: u32) -> u128 {
    let pid = crate::pg::process::pid();
    let mut filler = FILLER.0.borrow_mut();
    match filler.as_mut() {
        Some((p, f)) if *p == pid => f.bits(n),
        _ => {
            let mut seed = [0u8; 32];
            let ok = crate::pg::process::strong_random(&mut seed);
            if !ok {
                drop(filler);
                crate::pg::error::raise(Failure::new(
                    Class::Io,
                    "could not read random bytes for snowflake_uuidv7()",
                ));
            }
            let (_, f) = filler.insert((pid, Filler::new(seed)));
            f.bits(n)
        }
    }
}

/// A new RFC 9562 version 7 UUID from the same generator, marks and worker
/// id as `snowflake_nextval()`: strictly increasing across every backend of
/// the server, never repeated. Its time field is the ID's tick in Unix
/// milliseconds; its ID's worker and sequence follow; the bits below are
/// random. VOLATILE; PARALLEL SAFE as `snowflake_nextval()`.
#[pg_extern(volatile, parallel_safe)]
fn snowflake_uuidv7() -> Uuid {
    let (cfg, id) = issue::next();
    let filler = random_filler(uuid::random_bits(&cfg.layout));
    let u = uuid::from_id(&cfg.layout, id, filler).or_raise();
    Uuid::from_bytes(u)
}

/// The UUID an ID of this server's layout is given: the one
/// `snowflake_uuidv7()` would have made for it, with its random bits zero.
/// STABLE: the layout is fixed while the server runs.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_id_to_uuid(id: i64) -> Uuid {
    Uuid::from_bytes(uuid::from_id(server_layout(), id, 0).or_raise())
}

/// The UUID an ID of a named layout is given. IMMUTABLE.
#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_id_to_uuid")]
fn snowflake_id_to_uuid_in(id: i64, layout: Text) -> Uuid {
    let layout = layout_arg(layout.as_str());
    Uuid::from_bytes(uuid::from_id(&layout, id, 0).or_raise())
}

/// The ID a UUID of this server's layout holds; 22023 for any other UUID.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_uuid_to_id(uuid: Uuid) -> i64 {
    uuid::to_id(server_layout(), uuid.as_bytes()).or_raise()
}

/// The ID a UUID of a named layout holds. IMMUTABLE.
#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_uuid_to_id")]
fn snowflake_uuid_to_id_in(uuid: Uuid, layout: Text) -> i64 {
    let layout = layout_arg(layout.as_str());
    uuid::to_id(&layout, uuid.as_bytes()).or_raise()
}

/// The smallest UUID of the tick of `ts` under this server's layout:
/// `u >= snowflake_uuid_from_timestamp(t)` selects the UUIDs made at or
/// after `t`'s tick and can use the index.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_uuid_from_timestamp(ts: TimestampWithTimeZone) -> Uuid {
    Uuid::from_bytes(uuid::lower_bound(server_layout(), unix_us(ts.into())).or_raise())
}

/// The smallest UUID of the tick of `ts` under a named layout. IMMUTABLE.
#[pg_extern(
    immutable,
    strict,
    parallel_safe,
    name = "snowflake_uuid_from_timestamp"
)]
fn snowflake_uuid_from_timestamp_in(ts: TimestampWithTimeZone, layout: Text) -> Uuid {
    let layout = layout_arg(layout.as_str());
    Uuid::from_bytes(uuid::lower_bound(&layout, unix_us(ts.into())).or_raise())
}
