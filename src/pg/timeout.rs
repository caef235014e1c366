//! Timeouts: a statement timeout armed by hand, for a background worker's
//! statement that must not wait for ever (pgrx binds no part of
//! `utils/timeout.h`), and the lock and statement timeouts a statement runs
//! under.

use pgrx::pg_sys;
use pgrx::prelude::*;

/// `STATEMENT_TIMEOUT` of `enum TimeoutId`, the fourth in every supported
/// release (utils/timeout.h, 13 to 18: STARTUP_PACKET_TIMEOUT,
/// DEADLOCK_TIMEOUT, LOCK_TIMEOUT, STATEMENT_TIMEOUT, ...).
const STATEMENT_TIMEOUT: std::ffi::c_int = 3;

unsafe extern "C-unwind" {
    fn enable_timeout_after(id: std::ffi::c_int, delay_ms: std::ffi::c_int);
    fn disable_timeout(id: std::ffi::c_int, keep_indicator: bool);
    fn get_timeout_indicator(id: std::ffi::c_int, reset_indicator: bool) -> bool;
}

/// Runs `f` with the statement timeout armed for `ms`: when it fires, the
/// next CHECK_FOR_INTERRUPTS raises "canceling statement due to statement
/// timeout" (in a background worker with a database connection, whose
/// SIGINT handler is Postgres's own). Disarmed however `f` ends.
pub fn within<R>(ms: i32, f: impl FnOnce() -> R + std::panic::UnwindSafe) -> R {
    // SAFETY: the timeout every backend registers at start (InitPostgres);
    // arming it only schedules a signal to this process.
    unsafe { enable_timeout_after(STATEMENT_TIMEOUT, ms) };
    PgTryBuilder::new(f)
        .finally(|| {
            // SAFETY: disarms the timer armed above; if it fired after the
            // last interrupt check, the cancel it asked for is withdrawn, so
            // that it cannot end whatever this process does next.
            unsafe {
                disable_timeout(STATEMENT_TIMEOUT, true);
                if get_timeout_indicator(STATEMENT_TIMEOUT, true) {
                    pg_sys::QueryCancelPending = 0;
                }
            }
        })
        .execute()
}

/// This backend's `deadlock_timeout` and `lock_timeout`, in milliseconds
/// (0: no lock timeout).
pub fn lock_waits_ms() -> (i32, i32) {
    // SAFETY: plain reads of this backend's settings.
    unsafe { (pg_sys::DeadlockTimeout, pg_sys::LockTimeout) }
}

/// Whether the statement has run for its `statement_timeout` (never, where
/// none is set).
pub fn statement_time_is_up() -> bool {
    // SAFETY: plain reads of this backend's setting and clock.
    let (limit_ms, started, now) = unsafe {
        (
            pg_sys::StatementTimeout,
            pg_sys::GetCurrentStatementStartTimestamp(),
            pg_sys::GetCurrentTimestamp(),
        )
    };
    limit_ms > 0 && now - started >= i64::from(limit_ms) * 1000
}

/// Disarms the statement timeout, keeping whether it fired, and lets
/// Postgres raise its own error if it did: from here the statement timeout
/// cannot cancel the statement, so one error ends it, not two.
pub fn disarm_statement_timeout() {
    // SAFETY: disarms the timer every backend registers at start;
    // keep_indicator, so a firing already happened is still reported.
    unsafe { disable_timeout(STATEMENT_TIMEOUT, true) };
    pgrx::check_for_interrupts!();
}
