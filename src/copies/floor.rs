//! Flooring: whether this database needs a floor before this backend's
//! next ID (once per change, see `changes`), reading its ID columns and
//! raising the mark above them, refusing copied IDs far ahead of the clock,
//! what the next call would meet (the status's `problem`), and
//! `snowflake_resume_above()`.
//!
//! Calls every other file of `copies`.

use super::changes::{checked, FLOORED_HERE, SEEN};
use super::columns::{all_columns, id_columns};
use super::leases::read_leases;
use super::reads::{highest, Found};
use super::record::{not_updated, read_record, record, write_record};
use crate::mark;
use crate::pg::process::{self};
use crate::pg::{clock, database, lock, role, spi, xlog};
use crate::shmem::Shmem;
use pgrx::pg_sys;
use snowflake_id_core::config::Config;
use snowflake_id_core::copies::{self, FloorRow};
use snowflake_id_core::generator::Limits;
use snowflake_id_core::layout::Layout;
use snowflake_id_core::timefmt::{format_duration, format_instant};
use snowflake_id_core::{Class, Failure};
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

/// Floors this database before this backend's next ID, if its data came
/// from another cluster and no session of this server floored it since
/// the last change (see the module's documentation).
pub fn floor_if_copied(
    shm: &Shmem,
    cfg: &Config,
    lim: &Limits,
    max_wait_ms: u64,
) -> Result<(), Failure> {
    // Read before anything else: a change while this check runs leaves the
    // database to be checked again.
    let generation = shm.floored.generation();
    let db = process::database_id().to_u32();
    if shm.floored.is_checked(db, generation) {
        SEEN.0.set(generation);
        return Ok(());
    }
    // Copied IDs ahead of the clock this database holds refuse, without a
    // read, until the clock brings them within the hour (then the floor
    // runs again) or an operator settles them. Restored from a durable mark
    // (their IDs unknown), a floor finds out whether they still are.
    let me = xlog::origin().0 as i64;
    let mut set_aside = false;
    if let Some((f, id)) = shm.refusal.copies_failure_in(db) {
        if id > copies::plausible_upper(&cfg.layout, clock::now_ms()) {
            return Err(f);
        }
        set_aside = id == 0;
    }
    let needed = |rows: &[FloorRow], copies_now| {
        copies::floor_needed(me, rows, copies_now).or(set_aside.then_some(copies::Why::SetAside))
    };
    role::acting_as(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID), || {
        let Some(oid) = record() else {
            return Err(not_updated());
        };
        // The newest data, not the caller's snapshot: a restore that
        // committed after the caller's statement (or repeatable-read
        // transaction) began is what the check is for. (Once the
        // transaction has written, SPI reads with its snapshot whatever is
        // active: a repeatable-read writer's check can miss such a restore;
        // the next session's does not.)
        let (rows, copies_now) = spi::with_latest_snapshot(read_record);
        if needed(&rows, copies_now).is_none() {
            continue_from_record(shm, cfg, me, &rows);
            return Ok(());
        }
        // One floor at a time in a database; the others wait for it alone
        // (a session lock, released when the floor ends, not when its
        // caller's transaction does), then find the database checked, or
        // fail as it did for a locked table (each waiter would otherwise
        // wait for the lock in turn).
        let busy_seen = shm.refusal.floors_busy();
        lock::relation_during(
            oid,
            lock::Mode::ShareUpdateExclusive,
            AssertUnwindSafe(|| {
                if shm.floored.is_checked(db, generation) {
                    return Ok(());
                }
                if let Some(f) = shm.refusal.floor_busy_since(db, busy_seen) {
                    return Err(f);
                }
                let (rows, copies_now) = spi::with_latest_snapshot(read_record);
                let Some(why) = needed(&rows, copies_now) else {
                    continue_from_record(shm, cfg, me, &rows);
                    return Ok(());
                };
                spi::with_latest_snapshot(|| {
                    floor(shm, cfg, lim, max_wait_ms, me, &rows, copies_now, &why)
                })?;
                shm.floored.note(db, generation);
                // Its row of the record goes with this transaction: an
                // abort makes the next ID floor again.
                FLOORED_HERE.0.set(db);
                Ok(())
            }),
        )
    })?;
    shm.floored.note(db, generation);
    SEEN.0.set(generation);
    Ok(())
}

/// Reads every ID column of this database and raises the mark above the
/// largest; writes this server's row of the record.
#[allow(clippy::too_many_arguments)]
pub(super) fn floor(
    shm: &Shmem,
    cfg: &Config,
    lim: &Limits,
    max_wait_ms: u64,
    me: i64,
    rows: &[FloorRow],
    copies_now: Option<u64>,
    why: &copies::Why,
) -> Result<(), Failure> {
    if process::in_parallel_mode() {
        return Err(in_parallel_query(why));
    }
    let started = Instant::now();
    let columns = id_columns();
    // Said first: a read cut short (a cancel, a timeout) is then not a mystery.
    server_log!(
        "snowflake_id: flooring database \"{}\" because {}: reading {} column(s)",
        database::current_name(),
        why.describe(),
        columns.len()
    );
    let now_ms = clock::now_ms();
    let found = highest(
        &columns,
        &cfg.layout,
        copies::plausible_upper(&cfg.layout, now_ms),
        Duration::from_millis(max_wait_ms),
    )
    .inspect_err(|f| {
        shm.refusal
            .note_floor_busy(process::database_id().to_u32(), f)
    })?;
    let said = match &found.highest {
        Some((id, _)) => mark::admin::floor_above(shm, cfg, lim, *id, max_wait_ms)?,
        None => "no column holds an ID".to_string(),
    };
    refuse_if_ahead(shm, cfg, &found)?;
    // What backfills leased at past times, wherever the data was made.
    let backfilled = mark::leases::raise_copied(shm, &read_leases())?;
    let said = match backfilled {
        0 => said,
        n => format!("{said}; {n} backfill lease(s) of the record raised this server's"),
    };
    let recorded = write_record(
        me,
        &copies::covered(me, rows),
        copies_now,
        found.highest.as_ref().map(|h| h.0),
    );
    server_log!(
        "snowflake_id: database \"{}\" was floored because {}: {} column(s) read in {} ms{}; {said}{}",
        database::current_name(),
        why.describe(),
        found.columns,
        started.elapsed().as_millis(),
        found
            .highest
            .as_ref()
            .map(|(id, at)| format!(", the highest ID {id} in {at}"))
            .unwrap_or_default(),
        if recorded { "" } else { " (not recorded: the transaction cannot write; the next start floors again)" }
    );
    Ok(())
}

/// A floor writes WAL, which a parallel query cannot.
fn in_parallel_query(why: &copies::Why) -> Failure {
    Failure::new(
        Class::NotReady,
        format!(
            "snowflake_id cannot floor database \"{}\" inside a parallel query",
            database::current_name()
        ),
    )
    .detail(format!(
        "Before its next ID, this database must be floored: {}.",
        why.describe()
    ))
    .hint("Take one ID outside a parallel query first: SELECT snowflake_nextval();")
}

/// Refuses this database's IDs while it holds a copied ID far ahead of the
/// clock that the mark does not cover yet; lifts the refusal otherwise.
fn refuse_if_ahead(shm: &Shmem, cfg: &Config, found: &Found) -> Result<(), Failure> {
    let db = process::database_id().to_u32();
    if let Some((id, at)) = &found.ahead {
        if !mark::covers(shm, &cfg.layout, *id) {
            let f = ahead_of_clock(&cfg.layout, *id, at);
            server_log!(
                "snowflake_id: {} (the database refuses IDs until then)",
                f.message
            );
            let ceiling = copies::ceiling_tick(&cfg.layout, found.ahead_lowest.unwrap_or(*id));
            mark::refuse_for_copies(shm, cfg, &f, *id, db, ceiling);
            return Err(f);
        }
    }
    // Nothing so far ahead here (any more).
    mark::lift_copies(shm, cfg, Some(db));
    Ok(())
}

/// The refusal for an ID a floor found more than an hour ahead of the
/// clock: below it, IDs could repeat copied ones; above it, IDs would
/// carry a time the clock may never have been meant to reach.
fn ahead_of_clock(layout: &Layout, id: i64, at: &str) -> Failure {
    let made = layout.decode(id).map(|d| d.unix_ms).unwrap_or(0);
    let db = database::current_name();
    let resume = format!("{}snowflake_resume_above", crate::catalog::qualifier());
    Failure::new(
        Class::NotReady,
        format!(
            "database \"{db}\" holds an ID made {} ahead of this server's clock: {at} holds {id} (made at {})",
            format_duration(made.saturating_sub(clock::now_ms()).max(0) as u64),
            format_instant(made)
        ),
    )
    .detail("The data came from another cluster; IDs issued below this one could repeat it. A server whose clock ran ahead made it, or this server's clock is behind. This database refuses IDs until it is settled (the others issue on; every database's status says so).")
    .hint(format!(
        "If this server's clock is behind, correct it: the next ID in database \"{db}\" floors again. If {id} is an ID to stay above: SELECT {resume}({id}); (IDs then wait for the clock while they run more than snowflake_id.max_lead ahead of it). If it is no ID (a sentinel, a typo): SELECT {resume}(); in database \"{db}\" floors below it and sets it aside."
    ))
}

/// IDs go on where they were after a floor this server made above copied
/// IDs ahead of its clock (the lead melting since, at an eighth of the
/// clock's pace). Each durable mark carries the term, so a restart has it
/// before any database's first ID; the record gives it where the mark was
/// written by a library that did not keep it.
fn continue_from_record(shm: &Shmem, cfg: &Config, me: i64, rows: &[FloorRow]) {
    if let Some(term) = rows
        .iter()
        .filter(|r| r.system_identifier == me)
        .filter_map(|r| copies::continue_term(&cfg.layout, r.floor?, r.written_ms))
        .max()
    {
        shm.continue_with(term);
    }
}

/// `snowflake_resume_above()`: every later ID above every ID this database
/// holds in any bigint or uuid column (IDs an application inserted without
/// the default included): values later than an hour ahead of the clock are
/// other numbers, not IDs. Superuser only.
pub fn resume_above_everything(
    shm: &Shmem,
    cfg: &Config,
    lim: &Limits,
    max_wait_ms: u64,
) -> Result<String, Failure> {
    mark::admin::require_superuser("snowflake_resume_above()")?;
    let me = xlog::origin().0 as i64;
    let upper = copies::plausible_upper(&cfg.layout, clock::now_ms());
    role::acting_as(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID), || {
        let started = Instant::now();
        let columns = all_columns();
        let found = highest(
            &columns,
            &cfg.layout,
            upper,
            Duration::from_millis(max_wait_ms),
        )?;
        let said = match &found.highest {
            Some((id, at)) => format!(
                "{} (the highest of {} column(s), in {at}, read in {} ms)",
                mark::admin::floor_above(shm, cfg, lim, *id, max_wait_ms)?,
                found.columns,
                started.elapsed().as_millis()
            ),
            None => format!(
                "no ID in {} column(s) at or below the largest an ID can be now ({}): nothing to resume above",
                found.columns,
                format_instant(cfg.layout.decode(upper).map(|d| d.unix_ms).unwrap_or(0))
            ),
        };
        // This database's copies are covered now, what was set aside too.
        if record().is_some() {
            let (rows, copies_now) = read_record();
            write_record(
                me,
                &copies::covered(me, &rows),
                copies_now,
                found.highest.as_ref().map(|h| h.0),
            );
        }
        mark::lift_copies(shm, cfg, Some(process::database_id().to_u32()));
        Ok(match found.ahead {
            Some((v, at)) => format!(
                "{said}; set aside as no ID: {at} holds {v} (made at {}, more than an hour ahead of the clock)",
                format_instant(cfg.layout.decode(v).map(|d| d.unix_ms).unwrap_or(0))
            ),
            None => said,
        })
    })
}

/// What the next call in this database would meet before its ID: the
/// refusal of copied IDs ahead of the clock it holds, or of a database
/// whose extension is not updated.
pub fn problem(shm: &Shmem) -> Option<Failure> {
    if let Some((f, _)) = shm
        .refusal
        .copies_failure_in(process::database_id().to_u32())
    {
        return Some(f);
    }
    if checked(shm) {
        return None;
    }
    // Catalog-cache lookups, which check no privilege: as the caller.
    record().is_none().then(not_updated)
}
