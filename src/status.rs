//! `snowflake_status()` and the `snowflake_status` view: what the generator
//! is doing, from counters that cost the hot path nothing.

use crate::clock::{now_ms, pg_timestamp};
use crate::durable;
use crate::generate::shared_state;
use crate::record::{finfo_v1, row};
use crate::settings;
use crate::shmem::{MarkSource, State, NO_MARK};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowflake_id_core::generator::time_problem;
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

/// Why the next call would fail, checked in the order a call meets them
/// (so it is the error that call would raise); when a call would succeed,
/// what is degraded; `None` when nothing is.
fn problem(st: &State, now: i64) -> Option<String> {
    let failure = || -> Result<(), Failure> {
        // Recovery first, whatever the clock or the settings say.
        if durable::in_recovery() {
            return Err(durable::read_only());
        }
        let cfg = settings::config()?;
        let policy = settings::policy(&cfg.layout)?;
        if let Some(f) = time_problem(&st.gen, &cfg.layout, &policy, now) {
            return Err(f);
        }
        durable::may_issue(st)?;
        // The state file and a synchronous standby matter to the next call
        // only if its ID is beyond the published mark.
        let s = cfg.layout.sequence_bits();
        let now_tick = cfg.layout.tick_at_ms(now).unwrap_or(0);
        let next_tick = st.gen.next().max(now_tick << s) >> s;
        if next_tick < st.gen.durable_end() {
            return Ok(());
        }
        if let Some(f) = durable::write_problem() {
            return Err(f);
        }
        durable::standby_problem(st, policy.max_wait_ms).map_or(Ok(()), Err)
    };
    if let Err(f) = failure() {
        return Some(f.message);
    }
    if let Some(w) = crate::claims::warning(st) {
        return Some(w);
    }
    (st.reserver_pid.load(Ordering::Relaxed) == 0).then(|| {
        "the background writer (snowflake_id reserver) is not running; IDs are still issued, each caller that needs the durable mark moved writes it".to_string()
    })
}

finfo_v1!(pg_finfo_snowflake_status);
/// One row describing this server's generator.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowflake_status(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    let st = shared_state();
    let now = now_ms();
    let layout = settings::server_layout().ok();
    let cfg = settings::config();
    let problem = problem(st, now);
    let issued = st.issued();
    let c = &st.counters;
    let last = match (layout, issued) {
        (Some(l), 1..) => {
            let counter = st.gen.next().saturating_sub(1);
            let worker = cfg.as_ref().map_or(0, |c| u64::from(c.worker_id));
            Some((
                l.id_from_counter(counter, worker) as i64,
                l.tick_start_ms(counter >> l.sequence_bits()),
            ))
        }
        _ => None,
    };
    let mark = st.mark_tick.load(Ordering::Relaxed);
    let mark_end = layout
        .filter(|_| mark != NO_MARK)
        .map(|l| l.tick_start_ms(mark + 1));
    let values = [
        cfg.as_ref()
            .ok()
            .map(|c| pg_sys::Datum::from(c.worker_id as i32)),
        cfg.as_ref()
            .ok()
            .map(|c| c.worker_id_origin.as_str())
            .into_datum(),
        layout.map(|l| l.describe()).into_datum(),
        layout.and_then(|l| ts(l.epoch_ms())),
        // Names from other servers' claims can be anything: written so that
        // the database's encoding can hold them.
        problem
            .map(|p| crate::pg_text::for_messages(&p).into_owned())
            .into_datum(),
        last.map(|(id, _)| pg_sys::Datum::from(id)),
        last.and_then(|(_, t)| ts(t)),
        // From the counter, not last_id: after a restart or
        // snowflake_resume_above it is where the next ID starts from.
        layout.filter(|_| st.gen.next() > 0).and_then(|l| {
            interval_ms(l.tick_start_ms((st.gen.next() - 1) >> l.sequence_bits()) - now)
        }),
        interval_ms(c.largest_lead_ms.load(Ordering::Relaxed) as i64),
        mark_end.and_then(ts),
        (mark != NO_MARK)
            .then(|| ts(st.mark_written_at_ms.load(Ordering::Relaxed)))
            .flatten(),
        MarkSource::of(st.mark_source.load(Ordering::Relaxed))
            .label()
            .into_datum(),
        Some(st.mark_system_id.load(Ordering::Relaxed))
            .filter(|s| *s != 0)
            .map(|s| pg_sys::Datum::from(s as i64)),
        Some(st.mark_timeline.load(Ordering::Relaxed))
            .filter(|t| *t != 0)
            .map(|t| pg_sys::Datum::from(t as i64)),
        count(c.marks_replayed.load(Ordering::Relaxed)),
        count(issued),
        count(c.borrowed_ticks.load(Ordering::Relaxed)),
        count(c.clock_steps_back.load(Ordering::Relaxed)),
        interval_ms(c.largest_step_back_ms.load(Ordering::Relaxed) as i64),
        count(c.waits.load(Ordering::Relaxed)),
        Interval::from_micros(c.wait_us.load(Ordering::Relaxed) as i64).into_datum(),
        count(c.errors.load(Ordering::Relaxed)),
        count(c.background_writes.load(Ordering::Relaxed)),
        count(c.caller_writes.load(Ordering::Relaxed)),
        count(c.standby_waits.load(Ordering::Relaxed)),
        Interval::from_micros(c.standby_wait_us.load(Ordering::Relaxed) as i64).into_datum(),
        layout.and_then(|l| ts(l.end_ms())),
        layout.and_then(|l| interval_ms(l.end_ms() - now)),
        Some(st.reserver_pid.load(Ordering::Relaxed))
            .filter(|p| *p != 0)
            .map(pg_sys::Datum::from),
        ts(st.started_at_ms.load(Ordering::Relaxed)),
    ];
    unsafe { row(fcinfo, &values) }
}

extension_sql_file!(
    "sql/status.sql",
    name = "snowflake_status",
    requires = ["snowflake_claims"]
);
