//! The background writer ("snowflake_id reserver"): keeps the durable mark a
//! second or so ahead of the newest tick in use while IDs are being issued
//! (and writes nothing while none are), logs the mark again after each
//! checkpoint so that recovery from any checkpoint replays it, settles a
//! promoted or restored server right after recovery, and watches the system
//! clock for backward steps.

use crate::clock::now_ms;
use crate::durable::{self, Trigger};
use crate::errors;
use crate::settings;
use crate::shmem;
use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::prelude::*;
use pgrx::{pg_sys, PgLogLevel};
use std::sync::atomic::{AtomicBool, Ordering};
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

// Postgres's reload handler as the C function it is: pgrx's bindings wrap
// it into a Rust function, which cannot be handed to pqsignal.
unsafe extern "C-unwind" {
    fn SignalHandlerForConfigReload(signal: std::ffi::c_int);
}

/// Set by SIGTERM (a shutdown, or an administrator's kill).
static TERMINATE: AtomicBool = AtomicBool::new(false);

/// Set when that SIGTERM came from the postmaster: the server is shutting
/// down (smart or fast), not this process alone being ended by a role's
/// `pg_terminate_backend` or this extension's own hook.
static BY_POSTMASTER: AtomicBool = AtomicBool::new(false);

/// Whether SIGTERM also interrupts what Postgres is doing in this process,
/// as `die` does (the reserver's waits for a synchronous standby have no
/// other end). The claims worker's waits are bounded by its own timeouts,
/// and it has one last transaction to run at a shutdown: it only sets the
/// flag, which its loop reads at every turn.
static INTERRUPT_ON_TERM: AtomicBool = AtomicBool::new(true);

/// Called by a worker whose loop ends itself on SIGTERM (see above).
pub fn sigterm_ends_loop_only() {
    INTERRUPT_ON_TERM.store(false, Ordering::Relaxed);
}

/// Whether this process is the background writer and was told to stop.
pub fn terminating() -> bool {
    TERMINATE.load(Ordering::Relaxed)
}

/// Whether the SIGTERM that ends this worker is the server's shutdown.
pub fn server_shutting_down() -> bool {
    BY_POSTMASTER.load(Ordering::Relaxed)
}

/// SIGTERM: what Postgres's `die` does to end waits inside Postgres (a
/// synchronous standby's, say), plus a flag of our own so the loop can
/// exit quietly instead of with a FATAL at every shutdown.
unsafe extern "C-unwind" fn on_sigterm(_signal: std::ffi::c_int) {
    // SAFETY: only async-signal-safe stores and SetLatch, errno preserved.
    unsafe {
        let saved = *libc::__errno_location();
        TERMINATE.store(true, Ordering::Relaxed);
        if INTERRUPT_ON_TERM.load(Ordering::Relaxed) {
            pg_sys::ProcDiePending = 1;
            pg_sys::InterruptPending = 1;
        }
        pg_sys::SetLatch(pg_sys::MyLatch);
        *libc::__errno_location() = saved;
    }
}

/// SIGTERM with the sender's process id: `pqsignal` hands a handler the
/// signal number alone.
extern "C" fn on_sigterm_from(
    signal: std::ffi::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut std::ffi::c_void,
) {
    // SAFETY: the kernel's siginfo for this delivery; an atomic store.
    unsafe {
        if !info.is_null() && (*info).si_pid() == pg_sys::PostmasterPid {
            BY_POSTMASTER.store(true, Ordering::Relaxed);
        }
        on_sigterm(signal);
    }
}

/// Installs a Postgres signal handler (the function was renamed in 18).
unsafe fn handle(signal: u32, handler: unsafe extern "C-unwind" fn(std::ffi::c_int)) {
    unsafe {
        #[cfg(not(feature = "pg18"))]
        pg_sys::pqsignal(signal as i32, Some(handler));
        #[cfg(feature = "pg18")]
        pg_sys::pqsignal_be(signal as i32, Some(handler));
    }
}

/// The signal handling of this extension's background workers: SIGTERM
/// ends them (see `on_sigterm`), SIGHUP asks for a reload.
pub fn handle_signals() {
    // SAFETY: the documented start of a background worker.
    unsafe {
        handle(pg_sys::SIGHUP, SignalHandlerForConfigReload);
        // As pqsignal installs a handler (restarting system calls, nothing
        // else blocked), asking the kernel for the sender too.
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigterm_from as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut()) != 0 {
            handle(pg_sys::SIGTERM, on_sigterm);
        }
        pg_sys::BackgroundWorkerUnblockSignals();
    }
}

/// Takes in a changed configuration, if a reload was asked for.
pub fn reload_if_asked() {
    // SAFETY: the flag and reload of every Postgres auxiliary loop.
    unsafe {
        if pg_sys::ConfigReloadPending != 0 {
            pg_sys::ConfigReloadPending = 0;
            pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP);
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_pid(_code: i32, _arg: pg_sys::Datum) {
    if let Some(st) = shmem::state() {
        st.reserver_pid.store(0, Ordering::Relaxed);
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_reserver_main(_arg: pg_sys::Datum) {
    // SIGTERM ends the loop with exit status 1: the postmaster starts the
    // worker again after a second, unless the server is shutting down.
    handle_signals();
    // SAFETY: registering an exit callback in this process.
    unsafe { pg_sys::before_shmem_exit(Some(forget_pid), pg_sys::Datum::from(0)) };
    let Some(st) = shmem::state() else { return };
    st.reserver_pid
        .store(unsafe { pg_sys::MyProcPid }, Ordering::Relaxed);
    let mut watch = StepWatch::new();
    let mut reported = false;
    let mut end_warned_at: Option<i64> = None;
    let mut seen_next = st.gen.next();
    loop {
        crate::clock::sleep_on_latch(PERIOD.as_millis() as u64);
        if TERMINATE.load(Ordering::Relaxed) {
            // SAFETY: the normal way out of a background worker.
            unsafe { pg_sys::proc_exit(1) };
        }
        reload_if_asked();
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
        let next = st.gen.next();
        let active = std::mem::replace(&mut seen_next, next) != next;
        let trigger = Trigger::Background {
            active,
            relog: durable::relog_due(st),
        };
        match durable::extend(st, cfg, &policy.limits(), now_tick, trigger) {
            Ok(_) => reported = false,
            // Callers will meet the same error themselves; say it once here.
            Err(f) if !reported => {
                reported = true;
                errors::log(f, PgLogLevel::WARNING);
            }
            Err(_) => {}
        }
    }
}
