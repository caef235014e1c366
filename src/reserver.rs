//! The background writer ("snowflake_id reserver"): keeps the durable mark a
//! second or so ahead of the newest tick in use, so callers almost never
//! wait for a disk write, and watches the system clock for backward steps.

use crate::clock::now_ms;
use crate::durable::{self, Trigger};
use crate::errors;
use crate::settings;
use crate::shmem;
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::prelude::*;
use pgrx::{pg_sys, PgLogLevel};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How often the writer looks: a tenth of the one-second window.
const PERIOD: Duration = Duration::from_millis(100);
/// Backward steps smaller than this are scheduling noise, not clock steps.
const STEP_TOLERANCE_MS: i64 = 5;
/// How often the server log is reminded that the layout is running out.
const END_WARNING_EVERY_MS: i64 = 86_400_000;

pub fn register() {
    BackgroundWorkerBuilder::new("snowflake_id reserver")
        .set_type("snowflake_id reserver")
        .set_library("snowflake_id")
        .set_function("snowflake_reserver_main")
        .enable_shmem_access(None)
        .set_start_time(BgWorkerStartTime::PostmasterStart)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

/// Counts a backward step of the wall clock: the wall clock moved less
/// than the monotonic clock over the same interval.
struct StepWatch {
    wall: i64,
    mono: Instant,
}

impl StepWatch {
    fn new() -> StepWatch {
        StepWatch {
            wall: now_ms(),
            mono: Instant::now(),
        }
    }

    fn check(&mut self, st: &shmem::State) -> i64 {
        let (wall, mono) = (now_ms(), Instant::now());
        let expected = self.wall + mono.duration_since(self.mono).as_millis() as i64;
        let back = expected - wall;
        if back >= STEP_TOLERANCE_MS {
            st.counters.clock_steps_back.fetch_add(1, Ordering::Relaxed);
            st.counters
                .largest_step_back_ms
                .fetch_max(back as u64, Ordering::Relaxed);
            log!("snowflake_id: the system clock stepped back by {back} ms");
        }
        *self = StepWatch { wall, mono };
        wall
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_reserver_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let Some(st) = shmem::state() else { return };
    st.reserver_pid
        .store(unsafe { pg_sys::MyProcPid }, Ordering::Relaxed);
    let mut watch = StepWatch::new();
    let mut reported = false;
    let mut end_warned_at: Option<i64> = None;
    while BackgroundWorker::wait_latch(Some(PERIOD)) {
        if BackgroundWorker::sighup_received() {
            // SAFETY: the documented way for a background worker to reload settings.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        let now = watch.check(st);
        let (Ok(cfg), true) = (settings::config(), durable::may_issue(st).is_ok()) else {
            continue;
        };
        // The server log hears of a layout's coming end at start and daily.
        if now >= cfg.warn_from_ms && end_warned_at.is_none_or(|t| now - t >= END_WARNING_EVERY_MS)
        {
            if let Some(w) = cfg.layout.end_warning(now) {
                errors::log(w, PgLogLevel::WARNING);
                end_warned_at = Some(now);
            }
        }
        let Ok(policy) = settings::policy(&cfg.layout) else {
            continue;
        };
        let Some(now_tick) = cfg.layout.tick_at_ms(now) else {
            continue;
        };
        match durable::extend(st, cfg, &policy.limits(), now_tick, Trigger::Background) {
            Ok(()) => reported = false,
            // Callers will meet the same error themselves; say it once here.
            Err(f) if !reported => {
                reported = true;
                errors::log(f, PgLogLevel::WARNING);
            }
            Err(_) => {}
        }
    }
    st.reserver_pid.store(0, Ordering::Relaxed);
}
