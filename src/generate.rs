//! Issuing IDs: `snowflake_nextval()` and `snowflake_nextval_batch(n)`.

use crate::clock;
use crate::durable::{self, Trigger};
use crate::errors::raise;
use crate::local::ProcessLocal;
use crate::settings;
use crate::shmem::{self, State};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowflake_id_core::config::Config;
use snowflake_id_core::generator::{generate, take_at, Env, Limits, Taken};
use snowflake_id_core::{Class, Failure};
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// The most IDs one `snowflake_nextval_batch` call hands out.
pub const MAX_BATCH: i32 = 1_000_000;

/// Generation as seen from one backend: the system clock, the backend's
/// latch for waiting, and the state file for durability.
struct Backend<'a> {
    st: &'a State,
    cfg: &'a Config,
    lim: Limits,
    /// The caller's clock reading, used for the first attempt.
    first_reading: Option<i64>,
}

impl Env for Backend<'_> {
    type Error = Failure;

    #[inline]
    fn now_ms(&mut self) -> i64 {
        self.first_reading.take().unwrap_or_else(clock::now_ms)
    }

    fn wait_ms(&mut self, ms: u64) -> Result<u64, Failure> {
        let started = Instant::now();
        clock::sleep_on_latch(ms);
        let waited_us = started.elapsed().as_micros() as u64;
        let c = &self.st.counters;
        c.waits.fetch_add(1, Ordering::Relaxed);
        c.wait_us.fetch_add(waited_us, Ordering::Relaxed);
        // Cancel and statement_timeout land here.
        pgrx::check_for_interrupts!();
        Ok(waited_us)
    }

    fn make_durable(&mut self, through_tick: u64, budget_ms: u64) -> Result<u64, Failure> {
        let now_tick = self.cfg.layout.tick_at_ms(clock::now_ms()).unwrap_or(0);
        durable::extend(
            self.st,
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
    // SAFETY: reading a setting's current value.
    let current = unsafe {
        let p = pg_sys::GetConfigOption(c"shared_preload_libraries".as_ptr(), true, false);
        if p.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(p)
                .to_string_lossy()
                .trim()
                .to_string()
        }
    };
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

/// The shared state, or the error that says how to get one.
pub fn shared_state() -> &'static State {
    shmem::state().unwrap_or_else(|| raise(not_preloaded()))
}

/// Issues `n` IDs through `sink` as increasing runs of counter values,
/// with the clock reading `now`.
fn issue(n: u64, now: i64, mut sink: impl FnMut(Taken)) -> &'static Config {
    let st = shared_state();
    let counted = |f: Failure| -> ! {
        st.counters.errors.fetch_add(1, Ordering::Relaxed);
        raise(f)
    };
    // First, whatever the clock or settings say: a standby never issues.
    if durable::in_recovery() {
        counted(durable::read_only());
    }
    let cfg = settings::config().unwrap_or_else(|f| counted(f));
    if end_warning_due(cfg, now) {
        warn_once_of_end(cfg, now);
    }
    let policy = settings::policy(&cfg.layout).unwrap_or_else(|f| counted(f));
    let mut env = Backend {
        st,
        cfg,
        lim: policy.limits(),
        first_reading: Some(now),
    };
    let mut tally = Tally::default();
    let result = generate(&st.gen, &cfg.layout, &policy, &mut env, n, |t| {
        tally.add(&t);
        sink(t);
    });
    tally.record(st);
    if let Err(f) = result {
        counted(f);
    }
    cfg
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
        crate::errors::log(w, PgLogLevel::WARNING);
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
    fn record(&self, st: &State) {
        st.count_issued(self.issued);
        let c = &st.counters;
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

/// The next ID of this server: unique, and greater than every ID this
/// server issued before, on any backend.
#[pg_extern(volatile, parallel_safe)]
pub fn snowflake_nextval() -> i64 {
    let now = clock::now_ms();
    // Nearly every call: settings checked before, the clock's tick open, the
    // durable mark ahead. Anything else (first call, a setting changed, a
    // wait, a mark to write, an error) goes the full way with the same
    // clock reading.
    let quick = || {
        let st = shmem::state()?;
        let cfg = settings::config().ok()?;
        if end_warning_due(cfg, now) {
            return None;
        }
        let lim = settings::cached_policy()?.limits();
        let t = take_at(&st.gen, &cfg.layout, &lim, now, 1)?.ok()?;
        let mut tally = Tally::default();
        tally.add(&t);
        tally.record(st);
        Some((cfg, t.first))
    };
    let (cfg, first) = quick().unwrap_or_else(|| {
        let mut first = 0;
        let cfg = issue(1, now, |t| first = t.first);
        (cfg, first)
    });
    cfg.layout.id_from_counter(first, u64::from(cfg.worker_id)) as i64
}

/// `n` IDs (1 to 1,000,000) in increasing order, reserved in one step.
#[pg_extern(volatile, strict, parallel_safe)]
fn snowflake_nextval_batch(n: i32) -> SetOfIterator<'static, i64> {
    if !(1..=MAX_BATCH).contains(&n) {
        raise(
            Failure::new(
                Class::InvalidParameter,
                format!("snowflake_nextval_batch(n) takes n from 1 to {MAX_BATCH}, not {n}"),
            )
            .hint(format!(
                "For more than {MAX_BATCH} IDs, call it several times."
            )),
        );
    }
    let mut runs = Vec::with_capacity(1);
    let cfg = issue(n as u64, clock::now_ms(), |t| runs.push(t));
    let (layout, worker) = (cfg.layout, u64::from(cfg.worker_id));
    SetOfIterator::new(runs.into_iter().flat_map(move |t| {
        (t.first..t.first + t.count).map(move |c| layout.id_from_counter(c, worker) as i64)
    }))
}
