//! The reserver ("snowflake_id reserver"): keeps the durable mark a
//! second or so ahead of the newest tick in use while IDs are being issued
//! (and writes nothing while none are), logs the mark again after each
//! checkpoint so that recovery from any checkpoint replays it, settles a
//! promoted or restored server right after recovery, and watches the system
//! clock for backward steps.

use super::skeleton::{enter, BgWorker};
use crate::mark::{self, Trigger};
use crate::pg::clock::{now_ms, sleep_on_latch};
use crate::pg::{error, process, signals};
use crate::settings;
use crate::shmem::Shmem;
use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
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

pub(super) fn register() {
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

    fn check(&mut self, shm: &Shmem) -> i64 {
        let (wall, mono) = (now_ms(), Instant::now());
        let expected = self.wall + mono.duration_since(self.mono).as_millis() as i64;
        let back = expected - wall;
        if back >= STEP_TOLERANCE_MS {
            shm.counters
                .clock_steps_back
                .fetch_add(1, Ordering::Relaxed);
            shm.counters
                .largest_step_back_ms
                .fetch_max(back as u64, Ordering::Relaxed);
            server_log!("snowflake_id: the system clock stepped back by {back} ms");
        }
        *self = StepWatch { wall, mono };
        wall
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_reserver_main(_arg: pg_sys::Datum) {
    // SIGTERM ends the loop with exit status 1: the postmaster starts the
    // worker again after a second, unless the server is shutting down.
    let Some(shm) = enter(BgWorker::Reserver) else {
        return;
    };
    let mut watch = StepWatch::new();
    let mut reported = false;
    let mut end_warned_at: Option<i64> = None;
    let mut seen_next = shm.gen.next();
    loop {
        sleep_on_latch(PERIOD.as_millis() as u64);
        if signals::terminating() {
            process::exit(1);
        }
        signals::reload_if_asked();
        let now = watch.check(shm);
        let (Ok(cfg), true) = (settings::config(), mark::may_issue(shm).is_ok()) else {
            continue;
        };
        // The server log hears of a layout's coming end at start and daily.
        if now >= cfg.warn_from_ms && end_warned_at.is_none_or(|t| now - t >= END_WARNING_EVERY_MS)
        {
            if let Some(w) = cfg.layout.end_warning(now) {
                error::log(w, PgLogLevel::WARNING);
                end_warned_at = Some(now);
            }
        }
        let Ok(policy) = settings::policy(&cfg.layout) else {
            continue;
        };
        let Some(now_tick) = cfg.layout.tick_at_ms(shm.generation_now(now)) else {
            continue;
        };
        let next = shm.gen.next();
        let active = std::mem::replace(&mut seen_next, next) != next;
        let trigger = Trigger::Reserver {
            active,
            relog: mark::relog_due(shm),
        };
        match mark::extend(shm, cfg, &policy.limits(), now_tick, trigger) {
            Ok(_) => reported = false,
            // Callers will meet the same error themselves; say it once here.
            Err(f) if !reported => {
                reported = true;
                error::log(f, PgLogLevel::WARNING);
            }
            Err(_) => {}
        }
    }
}
