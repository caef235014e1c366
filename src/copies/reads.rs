//! Reading the largest ID of each column at the storage level (`pg::scan`),
//! under a bounded wait for each table's lock; values above the plausible
//! bound are kept apart for the caller to judge.
//!
//! Calls `columns`.

use super::columns::{Column, Kind};
use crate::pg::process::{self};
use crate::pg::{database, scan};
use snowflake_id_core::layout::Layout;
use snowflake_id_core::{uuid, Class, Failure};
use std::time::Duration;

/// What the columns hold.
pub(super) struct Found {
    /// The largest ID at or below the bound, and where it was.
    pub(super) highest: Option<(i64, String)>,
    /// The largest value of the layout above the bound, and where it was.
    pub(super) ahead: Option<(i64, String)>,
    /// The smallest value above the bound: no database's ID may reach its
    /// time while the values above the bound are unsettled.
    pub(super) ahead_lowest: Option<i64>,
    pub(super) columns: usize,
}

/// A number read as text (a bigint, or a numeric's integer part).
fn parse_number(text: &str) -> Option<i64> {
    text.split('.').next()?.parse().ok()
}

/// Reads the largest ID of each column (of `layout`; UUIDs that hold none
/// are passed over); IDs above `upper` are not taken but kept apart
/// (`ahead`): the caller decides what they mean.
/// A table's lock is waited for at most `wait` each.
pub(super) fn highest(
    columns: &[Column],
    layout: &Layout,
    upper: i64,
    wait: Duration,
) -> Result<Found, Failure> {
    let mut found = Found {
        highest: None,
        ahead: None,
        ahead_lowest: None,
        columns: columns.len(),
    };
    fn keep(slot: &mut Option<(i64, String)>, v: i64, at: &Column) {
        if slot.as_ref().is_none_or(|(h, _)| v > *h) {
            *slot = Some((v, at.name()));
        }
    }
    for c in columns {
        let read = largest(c, layout, upper, wait)?;
        if let Some(v) = read.below {
            keep(&mut found.highest, v, c);
        }
        if let Some(v) = read.above {
            keep(&mut found.ahead, v, c);
        }
        if let Some(v) = read.lowest_above {
            found.ahead_lowest = Some(found.ahead_lowest.map_or(v, |l| l.min(v)));
        }
    }
    Ok(found)
}

/// What one column holds about `upper`.
pub(super) struct Read {
    /// Its largest ID at or below.
    pub(super) below: Option<i64>,
    /// Its largest and smallest above.
    pub(super) above: Option<i64>,
    lowest_above: Option<i64>,
}

/// The largest ID of a column at or below `upper`, and the largest and
/// smallest above it, read at the storage level by the table's OID (`scan`): nothing its
/// owner wrote runs, nothing its owner revokes or locks in a policy fails
/// it. Through the column's index, the read stops at the first ID at or
/// below the bound. A table locked against readers for all of `wait`
/// fails it: its IDs are unknown, so no ID may be issued yet.
pub(super) fn largest(
    c: &Column,
    layout: &Layout,
    upper: i64,
    wait: Duration,
) -> Result<Read, Failure> {
    let (mut below, mut above, mut lowest_above) = (None::<i64>, None::<i64>, None::<i64>);
    let ty = match c.kind {
        Kind::Bigint => scan::Type::Int8,
        Kind::Numeric => scan::Type::Numeric,
        Kind::Uuid => scan::Type::Uuid,
    };
    let read = scan::read_column(c.rel, c.attnum, ty, wait, |value, order| {
        let id = match value {
            scan::Value::Int8(v) => Some(v),
            scan::Value::Numeric(text) => parse_number(&text),
            // Only version 7 UUIDs can hold IDs.
            scan::Value::Uuid(b) => (b[6] >> 4 == 7)
                .then(|| uuid::to_id(layout, &b).ok())
                .flatten(),
        };
        match id {
            Some(id) if (0..=upper).contains(&id) => below = below.max(Some(id)),
            Some(id) if id > upper => {
                above = above.max(Some(id));
                lowest_above = Some(lowest_above.map_or(id, |l| l.min(id)));
            }
            _ => {}
        }
        order == scan::Order::Stored || below.is_none()
    });
    match read {
        Ok(_) => Ok(Read {
            below,
            above,
            lowest_above,
        }),
        Err(scan::Busy) => Err(locked_against_reads(c, wait)),
    }
}

fn locked_against_reads(c: &Column, wait: Duration) -> Failure {
    Failure::new(
        Class::NotReady,
        format!(
            "snowflake_id cannot read {}: the table stayed locked against reading for {} ms",
            c.name(),
            wait.as_millis()
        ),
    )
    .detail(format!(
        "Database \"{}\" must be floored before its next ID, and the largest ID of this column is unknown until it is read. A transaction holds a lock on the table that conflicts with reading it (LOCK TABLE, ALTER TABLE, VACUUM FULL), or waits for one while others read.",
        database::current_name()
    ))
    .hint(format!(
        "Find it: SELECT pid, mode, granted FROM pg_catalog.pg_locks WHERE database = {} AND relation = {}; then COMMIT or ROLLBACK it, or SELECT pg_terminate_backend(pid); (a NULL pid is a prepared transaction: SELECT gid FROM pg_catalog.pg_prepared_xacts; then ROLLBACK PREPARED or COMMIT PREPARED it). The next ID floors again.",
        process::database_id().to_u32(),
        c.rel.to_u32()
    ))
}
