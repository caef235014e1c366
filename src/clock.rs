//! The wall clock, read the way libfaketime and every NTP step can move it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since 1970-01-01 UTC by the system clock. A clock set
/// before 1970 reads as negative, so it is caught as "before the epoch".
#[inline]
pub fn now_ms() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64) - 1,
    }
}

/// Postgres `timestamptz` (microseconds since 2000-01-01) of a Unix millisecond.
pub fn pg_timestamp(unix_ms: i64) -> i64 {
    (unix_ms - 946_684_800_000) * 1000
}

/// Unix microseconds of a Postgres `timestamptz`, saturating the infinities.
pub fn unix_us(pg_timestamp: i64) -> i64 {
    match pg_timestamp {
        i64::MAX | i64::MIN => pg_timestamp,
        t => t.saturating_add(946_684_800_000_000),
    }
}
