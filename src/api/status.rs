//! `snowflake_status()` and the `snowflake_status` view: what the generator
//! is doing, from counters that cost the hot path nothing.

use crate::bgworkers::claims;
use crate::issue;
use crate::pg::charset::for_messages;
use crate::pg::clock::{now_ms, pg_timestamp};
use crate::pg::row::{finfo_v1, row};
use crate::settings;
use crate::shmem::Shmem;
use crate::worker_id;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowflake_id_core::config::{Config, WorkerSource};
use snowflake_id_core::timefmt::format_instant;
use snowflake_id_core::Failure;
use std::sync::atomic::Ordering;

fn ts(unix_ms: i64) -> Option<pg_sys::Datum> {
    TimestampWithTimeZone::try_from(pg_timestamp(unix_ms))
        .ok()
        .into_datum()
}

fn interval_ms(ms: i64) -> Option<pg_sys::Datum> {
    Interval::from_micros(ms.saturating_mul(1000)).into_datum()
}

fn count(n: u64) -> Option<pg_sys::Datum> {
    Some(pg_sys::Datum::from(n as i64))
}

/// Why the next call would fail (the error it would raise: `issue`
/// checks in the call's order); when a call would succeed, what is
/// degraded; `None` when nothing is.
fn problem(shm: &Shmem, now: i64) -> Option<String> {
    if let Err(f) = issue::problem(shm, now) {
        return Some(f.message);
    }
    // Another database's copied IDs ahead of the clock, which refuse there
    // (of several, the one whose stop comes first).
    let first = shm.refusal.ceiling();
    if let Some((f, _)) = first.and_then(|c| shm.refusal.copies_failure_in(c.database)) {
        return Some(f.message);
    }
    if let Some(w) = claims::warning(shm) {
        return Some(w);
    }
    if shm.backfill.damaged() {
        return Some(crate::mark::leases::damaged().message);
    }
    if let Some(f) = shm.backfill.claimed_by_another.failure() {
        return Some(f.message);
    }
    shm.reserver_pid.get().is_none().then(|| {
        "the reserver (snowflake_id reserver) is not running; IDs are still issued, each caller that needs the durable mark moved writes it".to_string()
    })
}

finfo_v1!(pg_finfo_snowflake_status);
/// One row describing this server's generator.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowflake_status(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    let shm = issue::shmem();
    let now = now_ms();
    let layout = settings::server_layout().ok();
    let cfg = settings::config();
    let problem = problem(shm, now);
    let issued = shm.issued();
    let c = &shm.counters;
    let next = shm.gen.next();
    let last = match (layout, issued) {
        (Some(l), 1..) => {
            let counter = next.saturating_sub(1);
            let worker = u64::from(worker_id::in_force(shm).unwrap_or(0));
            Some((
                l.id_from_counter(counter, worker) as i64,
                l.tick_start_ms(counter >> l.sequence_bits()),
            ))
        }
        _ => None,
    };
    let mark = shm.mark.tick();
    let (mark_system, mark_timeline) = shm.mark.origin();
    let n = |counter: &std::sync::atomic::AtomicU64| count(counter.load(Ordering::Relaxed));
    let us = |counter: &std::sync::atomic::AtomicU64| {
        Interval::from_micros(counter.load(Ordering::Relaxed) as i64).into_datum()
    };
    let values = [
        (
            "worker_id",
            worker_id::in_force(shm)
                .filter(|_| cfg.is_ok())
                .map(|w| pg_sys::Datum::from(w as i32)),
        ),
        (
            "worker_id_source",
            cfg.as_ref()
                .ok()
                .map(|c| worker_id::origin(shm, c))
                .into_datum(),
        ),
        ("layout", layout.map(|l| l.describe()).into_datum()),
        ("epoch", layout.and_then(|l| ts(l.epoch_ms()))),
        // Names from other servers' claims can be anything: written so that
        // the database's encoding can hold them.
        (
            "problem",
            problem.map(|p| for_messages(&p).into_owned()).into_datum(),
        ),
        ("last_id", last.map(|(id, _)| pg_sys::Datum::from(id))),
        ("last_id_time", last.and_then(|(_, t)| ts(t))),
        // From the counter, not last_id: after a restart or
        // snowflake_resume_above it is where the next ID starts from.
        (
            "lead",
            layout
                .filter(|_| next > 0)
                .and_then(|l| interval_ms(l.tick_start_ms((next - 1) >> l.sequence_bits()) - now)),
        ),
        (
            "largest_lead",
            interval_ms(c.largest_lead_ms.load(Ordering::Relaxed) as i64),
        ),
        (
            "durable_mark",
            layout
                .zip(mark)
                .and_then(|(l, m)| ts(l.tick_start_ms(m + 1))),
        ),
        (
            "durable_mark_written_at",
            mark.and_then(|_| ts(shm.mark.written_at_ms())),
        ),
        ("mark_source", shm.mark.source().label().into_datum()),
        (
            "mark_system_identifier",
            (mark_system != 0).then(|| pg_sys::Datum::from(mark_system as i64)),
        ),
        (
            "mark_timeline",
            (mark_timeline != 0).then(|| pg_sys::Datum::from(mark_timeline as i64)),
        ),
        ("marks_replayed", n(&c.marks_replayed)),
        ("ids_issued", count(issued)),
        ("ticks_borrowed", n(&c.borrowed_ticks)),
        ("clock_steps_back", n(&c.clock_steps_back)),
        (
            "largest_clock_step_back",
            interval_ms(c.largest_step_back_ms.load(Ordering::Relaxed) as i64),
        ),
        ("waits", n(&c.waits)),
        ("wait_time", us(&c.wait_us)),
        ("errors", n(&c.errors)),
        ("mark_writes", n(&c.reserver_writes)),
        ("mark_writes_by_callers", n(&c.caller_writes)),
        ("standby_waits", n(&c.standby_waits)),
        ("standby_wait_time", us(&c.standby_wait_us)),
        (
            "backfill_worker_id",
            worker_id::backfill_as_set().map(|w| pg_sys::Datum::from(w as i32)),
        ),
        ("backfill_leases", n(&shm.backfill.leases)),
        ("layout_ends", layout.and_then(|l| ts(l.end_ms()))),
        (
            "time_left",
            layout.and_then(|l| interval_ms(l.end_ms() - now)),
        ),
        (
            "reserver_pid",
            shm.reserver_pid.get().map(pg_sys::Datum::from),
        ),
        ("started_at", ts(shm.started_at_ms())),
        (
            "registry",
            cfg.as_ref()
                .ok()
                .and_then(|c| registry_words(shm, c))
                .map(|t| for_messages(&t).into_owned())
                .into_datum(),
        ),
    ];
    // SAFETY: the call Postgres makes of this function, declared in
    // status.sql; `row` checks the names against it, and each value is of
    // its column's type (integer, text, timestamptz, bigint, interval).
    unsafe { row(fcinfo, &values) }
}

/// The registry's last answer, where the worker id is leased from one:
/// "leased worker id 3 at ... (answered 2026-12-07 05:01:02 UTC)".
fn registry_words(shm: &Shmem, cfg: &Config) -> Option<String> {
    if !matches!(cfg.worker, WorkerSource::Registry { .. }) {
        return None;
    }
    Some(match shm.registry.answer() {
        None => "no answer yet".into(),
        Some((text, at)) => {
            let said = Failure::from_text(&text).map_or(text, |f| f.message);
            format!("{said} (answered {})", format_instant(at))
        }
    })
}

extension_sql_file!(
    "sql/status.sql",
    name = "snowflake_status",
    requires = ["snowflake_claims"]
);

// The status of every node of a Citus cluster, from each node's own.
extension_sql_file!(
    "sql/cluster.sql",
    name = "snowflake_cluster_status",
    requires = ["snowflake_status"]
);
