//! Issuing IDs: `snowflake_nextval()`, its batches, and
//! `snowflake_lastval()`.

use crate::catalog;
use crate::issue;
use crate::pg::clock;
use crate::pg::error::raise;
use crate::pg::int8_array::Int8Array;
use crate::pg::role;
use pgrx::prelude::*;
use snowflake_id_core::{Class, Failure};

/// The most IDs one `snowflake_nextval_batch` call hands out.
const MAX_BATCH: i32 = 1_000_000;

/// The next ID of this server: unique, and greater than every ID this
/// server issued before, on any backend. VOLATILE (a new ID each call);
/// PARALLEL SAFE (the generator is in shared memory, so parallel workers
/// draw from it as their leader does).
#[pg_extern(volatile, parallel_safe)]
pub fn snowflake_nextval() -> i64 {
    issue::next_id()
}

/// `n` IDs of one call, in increasing order, reserved in one step.
fn batch(function: &str, n: i32) -> impl Iterator<Item = i64> {
    if !(1..=MAX_BATCH).contains(&n) {
        raise(
            Failure::new(
                Class::InvalidParameter,
                format!("{function}(n) takes n from 1 to {MAX_BATCH}, not {n}"),
            )
            .hint(format!(
                "For more than {MAX_BATCH} IDs, call it several times."
            )),
        );
    }
    let mut runs = Vec::with_capacity(1);
    let (cfg, worker) = issue::issue(n as u64, clock::now_ms(), |t| runs.push(t));
    let (layout, worker) = (cfg.layout, u64::from(worker));
    if let Some(t) = runs.last() {
        issue::remember(layout.id_from_counter(t.first + t.count - 1, worker) as i64);
    }
    runs.into_iter().flat_map(move |t| {
        (t.first..t.first + t.count).map(move |c| layout.id_from_counter(c, worker) as i64)
    })
}

/// `n` IDs (1 to 1,000,000) in increasing order, reserved in one step, one
/// row each.
#[pg_extern(volatile, strict, parallel_safe)]
fn snowflake_nextval_batch(n: i32) -> SetOfIterator<'static, i64> {
    SetOfIterator::new(batch("snowflake_nextval_batch", n))
}

/// The same IDs as one `bigint[]` value: no row per ID is made until the
/// caller unnests it.
#[pg_extern(volatile, strict, parallel_safe)]
fn snowflake_nextval_array(n: i32) -> Int8Array {
    Int8Array(batch("snowflake_nextval_array", n).collect())
}

/// The last ID this session drew, by any of the generating functions
/// (`snowflake_nextval()`, the last of a batch, the ID of a
/// `snowflake_uuidv7()`), as `lastval()` answers for sequences; kept
/// through a rollback, as `lastval()` keeps it. An ID drawn as another role
/// (inside SECURITY DEFINER code) is answered only to a role that has that
/// role's privileges or may draw IDs itself, as `lastval()` asks for the
/// privilege on the sequence. VOLATILE (each draw changes it); PARALLEL
/// RESTRICTED (a parallel worker's draws are its own).
#[pg_extern(volatile, parallel_restricted)]
fn snowflake_lastval() -> i64 {
    let Some((id, drawer)) = issue::last() else {
        raise(
            Failure::new(
                Class::NotReady,
                "snowflake_lastval is not yet defined in this session",
            )
            .hint("Draw an ID first in this session: snowflake_nextval(), snowflake_uuidv7(), snowflake_nextval_batch() or snowflake_nextval_array()."),
        )
    };
    if drawer != role::current() && !role::acts_as(drawer) && !catalog::may_draw() {
        raise(
            Failure::new(
                Class::Privilege,
                "permission denied for snowflake_lastval: the last ID was drawn inside a SECURITY DEFINER function, and this role may not draw IDs",
            )
            .detail("The ID was drawn as the function's owner; a role without EXECUTE on the generating functions is not told the IDs drawn for it.")
            .hint("Return the ID from the function (RETURNING id), or GRANT EXECUTE ON FUNCTION snowflake_nextval() to this role."),
        );
    }
    id
}
