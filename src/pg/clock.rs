//! The wall clock, read the way libfaketime and every NTP step can move it.

use snowflake_id_core::layout::{INFINITY_US, NEG_INFINITY_US};

/// Milliseconds since 1970-01-01 UTC by the system clock. A clock set
/// before 1970 reads as negative, so it is caught as "before the epoch".
#[inline]
pub fn now_ms() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec we own. CLOCK_REALTIME cannot fail on Linux;
    // were it to, the zeroed reading is 1970, an error "before the epoch".
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    // tv_nsec is always 0..1e9, so this floors toward minus infinity for
    // times before 1970 as well.
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

/// Sleeps up to `ms` milliseconds on this process's latch, the Postgres way:
/// a signal (cancel, SIGTERM, reload) cuts it short, and the process exits
/// if the postmaster dies. The caller checks why it woke.
pub fn sleep_on_latch(ms: u64) {
    use pgrx::pg_sys;
    let events = pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH;
    // SAFETY: waiting on this process's own latch, as any backend or worker does.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            events as i32,
            ms.min(i32::MAX as u64) as _,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
}

/// Postgres `timestamptz` (microseconds since 2000-01-01) of a Unix millisecond.
pub fn pg_timestamp(unix_ms: i64) -> i64 {
    (unix_ms - 946_684_800_000) * 1000
}

/// Unix microseconds of a Postgres `timestamptz`, its infinities kept apart.
pub fn unix_us(pg_timestamp: i64) -> i128 {
    // In i128: the latest finite timestamptz, counted from 1970, passes i64::MAX.
    match pg_timestamp {
        i64::MAX => INFINITY_US,
        i64::MIN => NEG_INFINITY_US,
        t => i128::from(t) + 946_684_800_000_000,
    }
}
