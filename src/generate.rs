//! Issuing IDs: `snowflake_nextval()` and `snowflake_nextval_batch(n)`.

use crate::clock;
use crate::durable::{self, Trigger};
use crate::errors::raise;
use crate::settings;
use crate::shmem::{self, State};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowflake_id_core::config::Config;
use snowflake_id_core::generator::{generate, Env, Limits, Taken};
use snowflake_id_core::{Class, Failure};
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
}

impl Env for Backend<'_> {
    type Error = Failure;

    #[inline]
    fn now_ms(&mut self) -> i64 {
        clock::now_ms()
    }

    fn wait_ms(&mut self, ms: u64) -> Result<(), Failure> {
        let started = Instant::now();
        let events = pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH;
        // SAFETY: waiting on our own latch, as any backend does.
        unsafe {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                events as i32,
                ms.min(i32::MAX as u64) as _,
                pg_sys::PG_WAIT_EXTENSION,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
        }
        let c = &self.st.counters;
        c.waits.fetch_add(1, Ordering::Relaxed);
        c.wait_us
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        // Cancel and statement_timeout land here.
        pgrx::check_for_interrupts!();
        Ok(())
    }

    fn make_durable(&mut self, through_tick: u64) -> Result<(), Failure> {
        let now_tick = self.cfg.layout.tick_at_ms(clock::now_ms()).unwrap_or(0);
        durable::extend(
            self.st,
            self.cfg,
            &self.lim,
            now_tick,
            Trigger::Caller { through_tick },
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

/// Issues `n` IDs through `sink` as increasing runs of counter values.
#[inline]
fn issue(n: u64, mut sink: impl FnMut(Taken)) -> &'static Config {
    let st = shared_state();
    let counted = |f: Failure| -> ! {
        st.counters.errors.fetch_add(1, Ordering::Relaxed);
        raise(f)
    };
    let cfg = settings::config().unwrap_or_else(|f| counted(f));
    let policy = settings::policy(&cfg.layout).unwrap_or_else(|f| counted(f));
    let mut env = Backend {
        st,
        cfg,
        lim: policy.limits(&cfg.layout),
    };
    let (mut issued, mut borrowed, mut ahead) = (0, 0, 0);
    let result = generate(&st.gen, &cfg.layout, &policy, &mut env, n, |t| {
        issued += t.count;
        borrowed += t.borrowed_ticks;
        ahead = ahead.max(t.ahead_ms);
        sink(t);
    });
    st.count_issued(issued);
    // Only a take that borrowed ticks can set a new furthest lead, so these
    // shared writes happen at most once per tick.
    if borrowed > 0 {
        let c = &st.counters;
        c.borrowed_ticks.fetch_add(borrowed, Ordering::Relaxed);
        c.largest_lead_ms.fetch_max(ahead.max(0) as u64, Ordering::Relaxed);
    }
    if let Err(f) = result {
        counted(f);
    }
    cfg
}

/// The next ID of this server: unique, and greater than every ID this
/// server issued before, on any backend.
#[pg_extern(volatile, parallel_safe)]
fn snowflake_nextval() -> i64 {
    let mut first = 0;
    let cfg = issue(1, |t| first = t.first);
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
    let cfg = issue(n as u64, |t| runs.push(t));
    let (layout, worker) = (cfg.layout, u64::from(cfg.worker_id));
    SetOfIterator::new(runs.into_iter().flat_map(move |t| {
        (t.first..t.first + t.count).map(move |c| layout.id_from_counter(c, worker) as i64)
    }))
}
