//! The backfill map's durable side (see `snowflake_id_core::backfill`):
//! its state file, `snowflake_id.backfill` in the data directory, read
//! where shared memory is made; every lease written to the file and to WAL
//! (and confirmed by a synchronous standby, where one is named) before an
//! ID under it is handed out; and leases replayed from WAL. The same
//! order as the mark's, for the same reasons: a crash finds the file, a
//! standby and a restored base backup the WAL.

use super::lease_file::{io_failure, path, read, write};
use super::standby::{standby_silent, waits_for_standbys};
use crate::pg::error;
use crate::pg::xlog::{self, StandbyWait};
use crate::shmem::Shmem;
use pgrx::PgLogLevel;
use snowflake_id_core::backfill::{Ask, Depths, Exhausted, Lease, Raise};
use snowflake_id_core::{Class, Failure};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The error of every backfill while the state file read at start was
/// damaged.
pub fn damaged() -> Failure {
    Failure::new(
        Class::Corrupted,
        format!("the backfill state file \"{}\" could not be read when this server started", path().display()),
    )
    .detail("It records which sequence numbers were handed out at which past times; without it, backfilled IDs could repeat. The server log says what was wrong with it. IDs for the present are not affected.")
    .hint("Restore the file from a copy of this data directory and restart PostgreSQL. If there is none, remove it, restart, and call SELECT snowflake_nextval_at(now()); once in every database that holds backfilled rows before backfilling anywhere: each takes up the leases its record of floors holds. IDs handed out without a row at times backfilled before may still be issued again.")
}

/// Reads the state file into shared memory; a damaged one refuses
/// backfills (a missing one is a server that never backfilled).
pub fn at_start(shm: &Shmem) {
    match read() {
        Ok(Some(d)) => shm.backfill.with_map(|map| *map = d),
        Ok(None) => {}
        Err(why) => {
            shm.backfill.set_damaged();
            error::log(
                Failure::new(
                    Class::Corrupted,
                    format!(
                        "snowflake_id: the backfill state file \"{}\" cannot be read: {why}",
                        path().display()
                    ),
                )
                .detail("Backfills are refused until it is restored or removed."),
                PgLogLevel::WARNING,
            );
        }
    }
}

/// Leases a window for `ask` and makes it durable; `exhausted` words the
/// error where the tick has too few numbers left. A standby named in
/// `synchronous_standby_names` is waited for at most `max_wait_ms`.
pub fn lease(
    shm: &Shmem,
    ask: &Ask,
    ids_per_tick: u64,
    last_tick: u64,
    max_wait_ms: u64,
    exhausted: impl FnOnce(Exhausted) -> Failure,
) -> Result<Lease, Failure> {
    let (lease, lsn) = shm.backfill.with_map(|map| {
        // The map is raised before the lease is durable: a lease that then
        // fails is never handed out, and a raise only wastes numbers.
        let lease = map.lease(ask, ids_per_tick, last_tick).map_err(exhausted)?;
        let lsn = super::redo::log_raises(&[lease.raise()]);
        write(map).map_err(|e| io_failure("write", e))?;
        Ok::<_, Failure>((lease, lsn))
    })?;
    if let Some(lsn) = lsn.filter(|_| waits_for_standbys()) {
        match xlog::wait_for_sync_standbys(lsn, Duration::from_millis(max_wait_ms)) {
            StandbyWait::Confirmed(_) => {}
            StandbyWait::TimedOut | StandbyWait::Stopped => {
                return Err(standby_silent(max_wait_ms))
            }
        }
    }
    shm.backfill.leases.fetch_add(1, Ordering::Relaxed);
    Ok(lease)
}

/// Raises the map over what a copy of another server's data says its
/// backfills leased (the rows of the database's record of floors), durably
/// as a lease; returns how many raises changed the map. The raises are
/// merged first, outside the lock (into at most the map's size): however
/// many rows the record holds, the lock is held for one map's worth.
pub fn raise_copied(shm: &Shmem, raises: &[Raise]) -> Result<usize, Failure> {
    if raises.is_empty() {
        return Ok(0);
    }
    let mut merged = Depths::default();
    for r in raises {
        merged.raise(r.lo, r.hi, r.depth);
    }
    let runs: Vec<Raise> = merged.runs().filter(|r| r.depth > 0).collect();
    shm.backfill.with_map(|map| {
        let new: Vec<Raise> = runs
            .iter()
            .filter(|r| map.min_over(r.lo, r.hi) < r.depth)
            .copied()
            .collect();
        if new.is_empty() {
            return Ok(0);
        }
        for r in &new {
            map.raise(r.lo, r.hi, r.depth);
        }
        super::redo::log_raises(&new);
        write(map).map_err(|e| io_failure("write", e))?;
        Ok(new.len())
    })
}
