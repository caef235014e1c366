//! The durable high-water mark in the data directory: read once when shared
//! memory starts, moved ahead by the background writer (or, rarely, by a
//! caller that got ahead of it), and re-established by
//! `snowflake_adopt_settings()`.

use crate::clock::now_ms;
use crate::settings;
use crate::shmem::State;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgLogLevel};
use snowflake_id_core::config::Config;
use snowflake_id_core::generator::{Limits, Reservation};
use snowflake_id_core::mark::{Identity, MarkFile, Record, Stored};
use snowflake_id_core::resume::{self, Resume};
use snowflake_id_core::timefmt::format_instant;
use snowflake_id_core::{Class, Failure};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// Why generation was refused at start, for every later call to raise.
/// Written by the postmaster before backends fork from it.
static REFUSAL: Mutex<Option<Failure>> = Mutex::new(None);

fn data_dir() -> std::path::PathBuf {
    // SAFETY: DataDir is set before shared memory exists and never changes.
    let dir = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) };
    std::path::PathBuf::from(dir.to_string_lossy().into_owned())
}

fn mark_file() -> MarkFile {
    MarkFile::in_dir(data_dir())
}

fn io_failure(what: &str, e: std::io::Error) -> Failure {
    Failure::new(Class::Io, format!("could not {what} the durable state file \"{}\": {e}", mark_file().path().display()))
        .hint("Check the data directory's disk space and permissions; no ID is issued until the state can be written.")
}

/// Sets up the generator from the state file. Runs where shared memory is
/// created: in the postmaster at start and after a crash of any backend.
pub fn resume(st: &State) {
    let mut refusal = REFUSAL.lock().unwrap_or_else(|e| e.into_inner());
    *refusal = None;
    let Ok(cfg) = settings::config() else {
        // Settings problems are raised on use and were logged when they were read.
        if let Err(f) = settings::config() {
            crate::errors::log(
                f.detail("snowflake_id will not issue IDs until this is fixed."),
                PgLogLevel::WARNING,
            );
        }
        return;
    };
    let file = mark_file();
    let decision = match file.read() {
        Ok(stored) => resume::decide(
            &stored,
            &cfg.layout,
            cfg.worker_id,
            &file.path().to_string_lossy(),
        ),
        Err(e) => Resume::Refused(io_failure("read", e)),
    };
    let s = cfg.layout.sequence_bits();
    match decision {
        Resume::Fresh => st.gen.reset(None, s),
        Resume::Continue {
            mark,
            generation,
            worker_was,
        } => {
            st.gen.reset(Some(mark), s);
            st.mark_generation.store(generation, Ordering::Relaxed);
            st.mark_tick.store(mark, Ordering::Relaxed);
            if let Some(was) = worker_was {
                log!("snowflake_id: worker id changed from {was} to {}; new IDs continue above every ID issued before", cfg.worker_id);
            }
        }
        Resume::Refused(f) => {
            crate::errors::log(f.clone(), PgLogLevel::WARNING);
            st.gen.reset(None, s);
            st.refused.store(true, Ordering::Release);
            *refusal = Some(f);
        }
    }
}

/// Why generation is refused right now, if it is.
fn refused(st: &State) -> Option<Failure> {
    if !st.refused.load(Ordering::Acquire) {
        return None;
    }
    let stored = REFUSAL.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Some(
        stored
            .unwrap_or_else(|| Failure::new(Class::NotReady, "snowflake_id generation is refused")),
    )
}

/// Checks that this server may issue IDs at all (not a standby, not refused).
pub fn may_issue(st: &State) -> Result<(), Failure> {
    // SAFETY: plain read of shared recovery state.
    if unsafe { pg_sys::RecoveryInProgress() } {
        return Err(Failure::new(
            Class::ReadOnly,
            "cannot issue snowflake IDs during recovery",
        )
        .detail(
            "A standby shares its primary's worker id; IDs it issued could repeat the primary's.",
        )
        .hint("Issue IDs on the primary."));
    }
    refused(st).map_or(Ok(()), Err)
}

/// Who moves the mark.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A caller needs ticks through this one covered before it may return.
    Caller { through_tick: u64 },
    /// The background writer, keeping ahead of callers.
    Background,
}

/// Moves the durable mark ahead: writes and syncs it, then publishes it.
pub fn extend(
    st: &State,
    cfg: &Config,
    lim: &Limits,
    now_tick: u64,
    trigger: Trigger,
) -> Result<(), Failure> {
    may_issue(st)?;
    let reservation = Reservation::for_layout(&cfg.layout);
    st.with_lock(|| {
        let through_tick = match trigger {
            Trigger::Caller { through_tick } if st.gen.durable_end() > through_tick => {
                return Ok(())
            }
            Trigger::Caller { through_tick } => through_tick,
            // The first mark is written by the first caller: a state file means
            // "IDs were issued under these settings", so none is written before.
            Trigger::Background if st.mark_generation.load(Ordering::Relaxed) == 0 => return Ok(()),
            Trigger::Background if !reservation.due(&st.gen, lim, now_tick) => return Ok(()),
            Trigger::Background => 0,
        };
        let mark = reservation.target(&st.gen, lim, now_tick, through_tick);
        write(st, cfg, mark)?;
        let counter = match trigger {
            Trigger::Caller { .. } => &st.counters.caller_writes,
            Trigger::Background => &st.counters.background_writes,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })
}

/// Writes `mark` durably and publishes it. Call holding the state's lock.
fn write(st: &State, cfg: &Config, mark: u64) -> Result<(), Failure> {
    let generation = st.mark_generation.load(Ordering::Relaxed) + 1;
    let written_at_ms = now_ms();
    let rec = Record {
        generation,
        identity: Identity::of(&cfg.layout),
        worker_id: cfg.worker_id,
        mark_tick: mark,
        written_at_ms,
    };
    mark_file()
        .write(&rec)
        .map_err(|e| io_failure("write", e))?;
    st.mark_generation.store(generation, Ordering::Relaxed);
    st.mark_tick.store(mark, Ordering::Relaxed);
    st.mark_written_at_ms
        .store(written_at_ms, Ordering::Relaxed);
    st.gen.publish_durable(mark);
    Ok(())
}

/// Re-establishes the durable state under the current settings, so that new
/// IDs continue numerically above every ID the old state could cover.
pub fn adopt(st: &State, cfg: &Config, lim: &Limits) -> Result<String, Failure> {
    // SAFETY: plain reads of the session's role and recovery state.
    if !unsafe { pg_sys::superuser() } {
        return Err(Failure::new(
            Class::Privilege,
            "only a superuser may run snowflake_adopt_settings()",
        ));
    }
    if unsafe { pg_sys::RecoveryInProgress() } {
        return Err(Failure::new(
            Class::ReadOnly,
            "cannot adopt settings during recovery",
        ));
    }
    st.with_lock(|| {
        // Only a refused state is replaced: a running generator is never moved back.
        if !st.refused.load(Ordering::Acquire) {
            return Ok(format!(
                "nothing to adopt: IDs are already issued under {} with worker id {}",
                Identity::of(&cfg.layout).describe(),
                cfg.worker_id
            ));
        }
        let file = mark_file();
        let old = match file.read().map_err(|e| io_failure("read", e))? {
            Stored::Valid(r) => Some(r),
            Stored::Missing => None,
            Stored::Damaged(_) => {
                let aside = data_dir().join(format!("snowflake_id.state.damaged-{}", now_ms()));
                std::fs::rename(file.path(), &aside).map_err(|e| io_failure("move aside", e))?;
                None
            }
        };
        let floor = resume::adopted_mark(old.as_ref(), &cfg.layout)?;
        let now_tick = cfg.layout.tick_at_ms(now_ms()).unwrap_or(0);
        st.gen.revoke_durable();
        st.gen.reset(floor, cfg.layout.sequence_bits());
        st.mark_generation
            .store(old.map_or(0, |r| r.generation), Ordering::Relaxed);
        let reservation = Reservation::for_layout(&cfg.layout);
        let mark = reservation.target(&st.gen, lim, now_tick, floor.unwrap_or(0));
        write(st, cfg, mark)?;
        st.refused.store(false, Ordering::Release);
        let from = match old {
            Some(r) => format!("{} (worker id {})", r.identity.describe(), r.worker_id),
            None => "no readable state".to_string(),
        };
        let first = cfg
            .layout
            .tick_start_ms(floor.map_or(now_tick, |f| (f + 1).max(now_tick)));
        Ok(format!(
            "adopted {} with worker id {} (from {from}); the next ID carries a time of {} or later",
            Identity::of(&cfg.layout).describe(),
            cfg.worker_id,
            format_instant(first)
        ))
    })
}
