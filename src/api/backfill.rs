//! IDs for past times: `snowflake_nextval_at(ts)` and its batch.

use crate::backfill::{self, Run};
use crate::issue;
use crate::pg::clock::unix_us;
use crate::pg::error::{raise, OrRaise};
use crate::pg::int8_array::Int8Array;
use crate::settings;
use pgrx::prelude::*;
use snowflake_id_core::{Class, Failure};

/// Hands the run's IDs over, the last remembered for `snowflake_lastval()`
/// as a drawn ID is.
fn drawn(run: Run) -> Vec<i64> {
    let ids: Vec<i64> = run.ids().collect();
    if let Some(&last) = ids.last() {
        issue::remember(last);
    }
    ids
}

/// An ID whose time is `ts` (to the layout's tick), under this server's
/// backfill worker id, that no server issued or will issue: for rows that
/// happened in the past. VOLATILE (a new ID each call); STRICT (no time,
/// no ID); PARALLEL UNSAFE (a lease it takes is noted in the database's
/// record of floors, a write).
#[pg_extern(volatile, strict, parallel_unsafe)]
pub fn snowflake_nextval_at(ts: TimestampWithTimeZone) -> i64 {
    let run = backfill::at(unix_us(ts.into()), 1).or_raise();
    let id = run.first_id();
    issue::remember(id);
    id
}

/// `n` IDs for the one time `ts`, increasing, as one `bigint[]`: up to
/// every sequence number a worker id has in a tick (4,096 for the default
/// layout). Marked as `snowflake_nextval_at` is.
#[pg_extern(volatile, strict, parallel_unsafe)]
pub fn snowflake_nextval_at_array(ts: TimestampWithTimeZone, n: i32) -> Int8Array {
    let layout = settings::config().or_raise().layout;
    let most = backfill::max_batch(&layout);
    if n < 1 || n as u64 > most {
        raise(
            Failure::new(
                Class::InvalidParameter,
                format!("snowflake_nextval_at_array(ts, n) takes n from 1 to {most}, not {n}"),
            )
            .detail(format!(
                "All the IDs of one call carry the one time, and a worker id has {most} in a tick of {}.",
                layout.title()
            ))
            .hint("For more rows, give each its own time (snowflake_nextval_at(created_at)), or call it for the ticks beside that time."),
        );
    }
    Int8Array(drawn(backfill::at(unix_us(ts.into()), n as u64).or_raise()))
}
