//! IDs for past times (`snowflake_nextval_at`): the checks a call makes,
//! and this backend's leases of the backfill map (see
//! `snowflake_id_core::backfill`), made durable by `mark::leases`.
//!
//! A backfilled ID carries the time it is asked for and the server's
//! backfill worker id, never its live one: so no live ID of this server
//! (nor of another, whose worker ids differ) can equal it, and what is
//! left to keep unique is the sequence number within each tick, which the
//! map does.

use crate::copies;
use crate::issue;
use crate::mark::{self, leases};
use crate::pg::error::log;
use crate::pg::process::{self, ProcessLocal};
use crate::pg::{clock, xact};
use crate::settings;
use crate::shmem::Shmem;
use crate::worker_id;
use pgrx::PgLogLevel;
use snowflake_id_core::backfill::{Backfiller, Exhausted, Shape};
use snowflake_id_core::config::Config;
use snowflake_id_core::layout::{Layout, Parts};
use snowflake_id_core::timefmt::{format_duration, format_instant};
use snowflake_id_core::{Class, Failure};
use std::cell::{Cell, RefCell};

/// This backend's leases, and the count of aborts they were taken after.
/// Made again when the layout is not the one they were made for, and
/// after any abort (or PREPARE TRANSACTION): a lease's row in the
/// database's record may have gone with the (sub)transaction that wrote
/// it, and no ID may be handed out under a lease a copy of the data would
/// not know of.
static LEASES: ProcessLocal<RefCell<Option<(Backfiller, u64)>>> = ProcessLocal(RefCell::new(None));

/// Whether this backend raised the map over its database's record.
static RECORD_READ: ProcessLocal<Cell<bool>> = ProcessLocal(Cell::new(false));

/// Raises the map over every lease this database's record holds, once per
/// backend: the leases of the rows this database holds are there, in the
/// transactions that wrote the rows, whatever became of the state file (a
/// restored or removed one) or of WAL (PostgreSQL 13 and 14 log none, and
/// a standby promoted there knows only what its copy of the table says).
fn follow_record(shm: &Shmem) -> Result<(), Failure> {
    let raised = leases::raise_copied(shm, &copies::recorded_leases()?)?;
    if raised > 0 {
        log(
            Failure::new(
                Class::Warning,
                format!(
                    "snowflake_id: {raised} backfill lease(s) of database \"{}\"'s record were not in this server's record of past times; it was raised over them",
                    crate::pg::database::current_name()
                ),
            )
            .detail("The state file snowflake_id.backfill was restored from an older copy or removed, or this server was promoted from a standby that could not replay them."),
            PgLogLevel::LOG,
        );
    }
    RECORD_READ.0.set(true);
    Ok(())
}

/// IDs handed out at one time: `n` consecutive sequence numbers from
/// `first`, at `tick`, under `worker`.
pub struct Run {
    pub layout: Layout,
    pub worker: u64,
    pub tick: u64,
    pub first: u64,
    pub n: u64,
}

impl Run {
    pub fn ids(&self) -> impl Iterator<Item = i64> + '_ {
        (self.first..self.first + self.n).map(|sequence| self.id(sequence))
    }

    #[inline]
    pub fn first_id(&self) -> i64 {
        self.id(self.first)
    }

    #[inline]
    fn id(&self, sequence: u64) -> i64 {
        self.layout.compose(Parts {
            tick: self.tick,
            worker: self.worker,
            sequence,
        }) as i64
    }
}

/// The most IDs one call may ask for at one time: every sequence number a
/// worker id has in a tick.
pub fn max_batch(layout: &Layout) -> u64 {
    layout.ids_per_tick()
}

/// `n` IDs at the instant `unix_us` (µs since 1970), or the error that
/// says why not.
pub fn at(unix_us: i128, n: u64) -> Result<Run, Failure> {
    let shm = issue::shmem();
    let (cfg, live) = match worker_id::in_force(shm) {
        Some(w) => (settings::config()?, w),
        None => issue::preflight(shm, true)?,
    };
    mark::may_issue(shm)?;
    let worker = worker_id::backfill(cfg, live)?;
    if shm.backfill.damaged() {
        return Err(leases::damaged());
    }
    if settings::claims_kept() && shm.backfill.judged() != Some(worker) {
        wait_for_judging(shm, worker)?;
    }
    if let Some(f) = shm.backfill.claimed_by_another.failure() {
        return Err(f);
    }
    let layout = cfg.layout;
    let tick = tick_of(&layout, unix_us)?;
    let policy = settings::policy(&layout)?;
    if process::read_only_transaction() {
        return Err(read_only());
    }
    if !copies::checked(shm) {
        copies::floor_if_copied(shm, cfg, &policy.limits(), policy.max_wait_ms)?;
    }
    if !RECORD_READ.0.get() {
        follow_record(shm)?;
    }
    // After the floor above, which is what notes copied IDs: and with the
    // live worker id as the state file will have it at its next mark (a
    // worker id changed since the last one is past already).
    let history = shm
        .mark
        .history()
        .with_live(live, shm.mark.tick().unwrap_or(u64::MAX), u64::MAX);
    if let Some(c) = history.conflict(worker, tick) {
        return Err(c.failure(&layout, worker, tick, &history));
    }
    let now = clock::now_ms();
    let at_ms = unix_us.div_euclid(1000) as i64;
    if at_ms > now.saturating_add(policy.max_lead_ms as i64) {
        return Err(ahead(at_ms, now, policy.max_lead_ms));
    }
    let first = take(shm, cfg, tick, n, policy.max_wait_ms)?;
    Ok(Run {
        layout,
        worker: u64::from(worker),
        tick,
        first,
        n,
    })
}

/// The first of `n` sequence numbers at `tick`, from this backend's leases.
fn take(shm: &Shmem, cfg: &Config, tick: u64, n: u64, max_wait_ms: u64) -> Result<u64, Failure> {
    let layout = cfg.layout;
    let per_tick = layout.ids_per_tick();
    let start = Shape::start(layout.unit_ms(), per_tick);
    let aborts = xact::count_aborts();
    let mut held = LEASES.0.borrow_mut();
    let leases_of = match held.as_mut() {
        Some((b, a)) if b.fits(start, per_tick) && *a == aborts => b,
        _ => &mut held.insert((Backfiller::new(start, per_tick), aborts)).0,
    };
    leases_of.take(tick, n, |ask| {
        let lease = leases::lease(shm, ask, per_tick, layout.last_tick(), max_wait_ms, |e| {
            exhausted(&layout, e)
        })?;
        copies::record_lease(&lease.raise())?;
        Ok(lease)
    })
}

/// The tick of the instant `unix_us`, or why the layout has none.
#[inline]
fn tick_of(layout: &Layout, unix_us: i128) -> Result<u64, Failure> {
    let since_us = unix_us.saturating_sub(i128::from(layout.epoch_ms()) * 1000);
    let tick = since_us.div_euclid(i128::from(layout.unit_ms()) * 1000);
    if tick < 0 || tick > i128::from(layout.last_tick()) {
        // The layout's own words for it (before the epoch, past the end,
        // infinity).
        layout.lower_bound(unix_us)?;
    }
    Ok(tick as u64)
}

/// Waits until the claims worker has judged the other servers' claims on
/// the backfill worker id `worker` (its first refresh after a start, or
/// after a reload set another): until then another live server may claim
/// it unseen.
fn wait_for_judging(shm: &Shmem, worker: u32) -> Result<(), Failure> {
    let started = std::time::Instant::now();
    while started.elapsed().as_millis() < u128::from(JUDGING_WAIT_MS) {
        clock::sleep_on_latch(20);
        pgrx::check_for_interrupts!();
        if shm.backfill.judged() == Some(worker) {
            return Ok(());
        }
    }
    Err(Failure::new(
        Class::NotReady,
        format!("the claims worker has not yet read the other servers' claims on the backfill worker id {worker}"),
    )
    .hint("Try again in a moment; if this lasts, the status's problem says why the claims are not kept (SELECT problem FROM snowflake_id.snowflake_status)."))
}

/// How long a backfill waits for the claims on a new backfill worker id:
/// three of the claims worker's refreshes.
const JUDGING_WAIT_MS: u64 = 3 * snowflake_id_core::claims::REFRESH_MS;

fn read_only() -> Failure {
    Failure::new(
        Class::ReadOnly,
        "snowflake_nextval_at cannot run in a read-only transaction",
    )
    .detail("Each window of numbers it leases is noted in this database's record, so that a copy of the data (pg_upgrade, a dump) knows of it.")
    .hint("Draw the IDs in the read-write transaction that stores them.")
}

fn ahead(at_ms: i64, now_ms: i64, max_lead_ms: u64) -> Failure {
    Failure::new(
        Class::InvalidParameter,
        format!(
            "snowflake_nextval_at is for past times: {} is later than now ({}) plus snowflake_id.max_lead ({})",
            format_instant(at_ms),
            format_instant(now_ms),
            format_duration(max_lead_ms)
        ),
    )
    .hint("Give the time the row happened at; for a row made now, call snowflake_nextval().")
}

fn exhausted(layout: &Layout, e: Exhausted) -> Failure {
    let at = format_instant(layout.tick_start_ms(e.tick));
    let all = layout.ids_per_tick();
    let message = if e.left == 0 {
        format!(
            "no backfilled IDs are left at {at}: all {all} sequence numbers of the backfill worker id in that tick of {} were handed out",
            layout.title()
        )
    } else {
        format!(
            "only {} backfilled IDs are left at {at}, and {} were asked for: the backfill worker id has {all} sequence numbers in a tick of {}",
            e.left,
            e.wanted,
            layout.title()
        )
    };
    Failure::new(Class::LayoutExhausted, message)
        .detail("Numbers are leased to sessions in windows; a window a session did not use up is not handed out again.")
        .hint("Give rows their own times, to the tick (not truncated to seconds), or spread rows that share a time over the ticks beside it.")
}
