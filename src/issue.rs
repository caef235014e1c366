//! Issuing IDs from a backend: the quick path nearly every call takes, the
//! full way with its waits and marks, and the checks a call makes before it
//! takes an ID, which the status's `problem` runs too (`problem`), so that
//! it is the error the next call would raise.

use crate::citus;
use crate::copies;
use crate::mark::{self, Trigger};
use crate::pg::clock;
use crate::pg::error::{log, raise};
use crate::pg::process::ProcessLocal;
use crate::pg::role;
use crate::pg::xlog;
use crate::settings;
use crate::shmem::{self, Shmem};
use crate::worker_id::{self, Resolve};
use pgrx::{pg_sys, PgLogLevel};
use snowflake_id_core::config::Config;
use snowflake_id_core::generator::{generate, take_at, time_problem, Env, Limits, Taken};
use snowflake_id_core::{Class, Failure};
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Generation as seen from one backend: the system clock, the backend's
/// latch for waiting, and the state file for durability.
struct Backend<'a> {
    shm: &'a Shmem,
    cfg: &'a Config,
    lim: Limits,
    /// The caller's clock reading, used for the first attempt.
    first_reading: Option<i64>,
}

impl Env for Backend<'_> {
    type Error = Failure;

    #[inline]
    fn now_ms(&mut self) -> i64 {
        let first = self.first_reading.take();
        first.unwrap_or_else(|| self.shm.generation_now(clock::now_ms()))
    }

    fn wait_ms(&mut self, ms: u64) -> Result<u64, Failure> {
        let started = Instant::now();
        clock::sleep_on_latch(self.shm.real_wait_ms(ms, clock::now_ms()));
        let waited_us = started.elapsed().as_micros() as u64;
        let c = &self.shm.counters;
        c.waits.fetch_add(1, Ordering::Relaxed);
        c.wait_us.fetch_add(waited_us, Ordering::Relaxed);
        // Cancel and statement_timeout land here.
        pgrx::check_for_interrupts!();
        Ok(waited_us)
    }

    fn make_durable(&mut self, through_tick: u64, budget_ms: u64) -> Result<u64, Failure> {
        let now = self.shm.generation_now(clock::now_ms());
        let now_tick = self.cfg.layout.tick_at_ms(now).unwrap_or(0);
        mark::extend(
            self.shm,
            self.cfg,
            &self.lim,
            now_tick,
            Trigger::Caller {
                through_tick,
                budget_ms,
            },
        )
    }

    fn fail(&mut self, failure: Failure) -> Failure {
        failure
    }
}

/// The error for a server that did not preload the library, with the exact
/// line that fixes it.
pub fn not_preloaded() -> Failure {
    let current = crate::pg::guc::text(c"shared_preload_libraries")
        .unwrap_or_default()
        .trim()
        .to_string();
    let line = if current.is_empty() {
        "snowflake_id".to_string()
    } else {
        format!("{current},snowflake_id")
    };
    Failure::new(Class::NotReady, "snowflake_id is not loaded through shared_preload_libraries")
        .detail("Its generator lives in shared memory, which only a library loaded at server start can have.")
        .hint(format!(
            "Add this line to postgresql.conf and restart PostgreSQL: shared_preload_libraries = '{line}'"
        ))
}

/// The shared memory, or the error that says how to get one.
pub fn shmem() -> &'static Shmem {
    shmem::get().unwrap_or_else(|| raise(not_preloaded()))
}

/// The first check a call makes, whatever the clock or the settings say: a
/// standby never issues. Then the identity settings, and the worker id
/// they name (read from Citus by the first call that needs it).
///
/// The status's `problem` asks with `settle` false: it says why the id is
/// not known, and neither waits nor settles it.
pub fn preflight(shm: &Shmem, settle: bool) -> Result<(&'static Config, u32), Failure> {
    if xlog::in_recovery() {
        return Err(mark::read_only());
    }
    let cfg = settings::config()?;
    // A look at the status in the Citus database tells the claims worker
    // where to keep claims, as a first ID there does: a node that is only
    // watched is claimed and judged too. So does an ID drawn there later
    // (after the database the worker was told was dropped, say): asked at
    // a backend's first call, which never takes the quick path (its
    // settings are not cached yet), and at every 1,024th call that comes
    // this way after it; a call here pays one increment for it.
    if (!settle || offer_check_due()) && citus::claims_follow_database() {
        citus::offer_this_database(shm);
    }
    let how = if settle {
        Resolve::Issue
    } else {
        Resolve::Peek
    };
    Ok((cfg, worker_id::resolve(shm, cfg, how)?))
}

/// Calls that came the full way in this backend, counted for
/// `offer_check_due`.
static CALLS: ProcessLocal<Cell<u32>> = ProcessLocal(Cell::new(0));

/// Whether this call is a backend's first to come the full way, or a
/// 1,024th after it.
#[inline]
fn offer_check_due() -> bool {
    let n = CALLS.0.get();
    CALLS.0.set(n.wrapping_add(1));
    n % 1024 == 0
}

/// The error the next call would raise at `now`, in the order a call meets
/// them: the preflight, then what `generate` meets (the clock and the
/// layout's range, a refusal, and the mark to move: the state file, a
/// synchronous standby), the last two only if the next ID is beyond the
/// published mark.
pub fn problem(shm: &Shmem, now: i64) -> Result<(), Failure> {
    let (cfg, _) = preflight(shm, false)?;
    if let Some(f) = copies::problem(shm) {
        return Err(f);
    }
    let now = shm.generation_now(now);
    let policy = settings::policy(&cfg.layout)?;
    if let Some(f) = time_problem(&shm.gen, &cfg.layout, &policy, now) {
        return Err(f);
    }
    mark::may_issue(shm)?;
    let s = cfg.layout.sequence_bits();
    let now_tick = cfg.layout.tick_at_ms(now).unwrap_or(0);
    let next_tick = shm.gen.next().max(now_tick << s) >> s;
    if next_tick < shm.gen.durable_end() {
        return Ok(());
    }
    if let Some(f) = mark::write_problem() {
        return Err(f);
    }
    mark::standby_problem(shm, policy.max_wait_ms).map_or(Ok(()), Err)
}

/// Issues `n` IDs through `sink` as increasing runs of counter values,
/// with the clock reading `now`; returns the settings and the worker id the
/// IDs are made with.
pub fn issue(n: u64, now: i64, mut sink: impl FnMut(Taken)) -> (&'static Config, u32) {
    let shm = shmem();
    let counted = |f: Failure| -> ! {
        shm.counters.errors.fetch_add(1, Ordering::Relaxed);
        raise(f)
    };
    let (cfg, worker) = preflight(shm, true).unwrap_or_else(|f| counted(f));
    if end_warning_due(cfg, now) {
        warn_once_of_end(cfg, now);
    }
    let policy = settings::policy(&cfg.layout).unwrap_or_else(|f| counted(f));
    if !copies::checked(shm) {
        copies::floor_if_copied(shm, cfg, &policy.limits(), policy.max_wait_ms)
            .unwrap_or_else(|f| counted(f));
    }
    let now = shm.generation_now(now);
    let mut env = Backend {
        shm,
        cfg,
        lim: policy.limits(),
        first_reading: Some(now),
    };
    let mut tally = Tally::default();
    let result = generate(&shm.gen, &cfg.layout, &policy, &mut env, n, |t| {
        tally.add(&t);
        sink(t);
    });
    tally.record(shm);
    if let Err(f) = result {
        counted(f);
    }
    (cfg, worker)
}

/// Whether this session was told that the layout is about to run out.
static END_WARNED: ProcessLocal<Cell<bool>> = ProcessLocal(Cell::new(false));

/// Whether this session is yet to be told that the layout runs out soon;
/// two loads, so the fast path can afford to ask.
#[inline]
fn end_warning_due(cfg: &Config, now: i64) -> bool {
    now >= cfg.warn_from_ms && !END_WARNED.0.get()
}

/// Tells the session (and the server log), once, that the layout is about
/// to run out.
#[cold]
fn warn_once_of_end(cfg: &Config, now: i64) {
    if let Some(w) = cfg.layout.end_warning(now) {
        END_WARNED.0.set(true);
        log(w, PgLogLevel::WARNING);
    }
}

/// What one call issued, for the shared counters.
#[derive(Default)]
struct Tally {
    issued: u64,
    borrowed: u64,
    ahead_ms: i64,
}

impl Tally {
    #[inline]
    fn add(&mut self, t: &Taken) {
        self.issued += t.count;
        self.borrowed += t.borrowed_ticks;
        self.ahead_ms = self.ahead_ms.max(t.ahead_ms);
    }

    #[inline]
    fn record(&self, shm: &Shmem) {
        shm.count_issued(self.issued);
        let c = &shm.counters;
        if self.borrowed > 0 {
            c.borrowed_ticks.fetch_add(self.borrowed, Ordering::Relaxed);
        }
        // Written only when the furthest lead grows: a read of a line nobody
        // writes costs callers nothing while IDs run ahead after a step back.
        if self.ahead_ms > 0 && self.ahead_ms as u64 > c.largest_lead_ms.load(Ordering::Relaxed) {
            c.largest_lead_ms
                .fetch_max(self.ahead_ms as u64, Ordering::Relaxed);
        }
    }
}

/// The last ID this session drew, for `snowflake_lastval()`, and the role
/// it was drawn as (another than the session's inside SECURITY DEFINER
/// code).
static LAST: ProcessLocal<Cell<Option<(i64, pg_sys::Oid)>>> = ProcessLocal(Cell::new(None));

/// Remembers the last ID this session drew, as the current role.
#[inline]
pub fn remember(id: i64) {
    LAST.0.set(Some((id, role::current())));
}

/// The last ID this session drew, if any, and the role it was drawn as.
pub fn last() -> Option<(i64, pg_sys::Oid)> {
    LAST.0.get()
}

/// Forgets the last ID drawn (`DISCARD ALL`, `DISCARD SEQUENCES`).
pub fn forget_last() {
    LAST.0.set(None);
}

/// The next ID of this server (see `snowflake_nextval`).
#[inline]
pub fn next_id() -> i64 {
    next().1
}

/// The next ID of this server, drawn for the extension's own use (the
/// order check of `snowflake_convert`): it is in no row, so the session's
/// `snowflake_lastval()` stays what the caller last drew.
pub fn next_id_unseen() -> i64 {
    let last = LAST.0.get();
    let id = next_id();
    LAST.0.set(last);
    id
}

/// The next ID of this server, with the settings it was made under.
#[inline]
pub fn next() -> (&'static Config, i64) {
    let now = clock::now_ms();
    // Nearly every call: settings checked before, the clock's tick open, the
    // durable mark ahead. Anything else (first call, a setting changed, a
    // wait, a mark to write, an error) goes the full way with the same
    // clock reading.
    let quick = || {
        let shm = shmem::get()?;
        let cfg = settings::config().ok()?;
        let worker = worker_id::in_force(shm)?;
        if !copies::checked(shm) {
            return None;
        }
        let now = shm.generation_now(now);
        if end_warning_due(cfg, now) {
            return None;
        }
        let lim = settings::cached_policy()?.limits();
        let t = take_at(&shm.gen, &cfg.layout, &lim, now, 1)?.ok()?;
        let mut tally = Tally::default();
        tally.add(&t);
        tally.record(shm);
        Some((cfg, worker, t.first))
    };
    let (cfg, worker, first) = quick().unwrap_or_else(|| {
        let mut first = 0;
        let (cfg, worker) = issue(1, now, |t| first = t.first);
        (cfg, worker, first)
    });
    let id = cfg.layout.id_from_counter(first, u64::from(worker)) as i64;
    remember(id);
    (cfg, id)
}
