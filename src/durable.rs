//! The durable high-water mark: read from the state file when shared memory
//! starts, raised by every mark record replayed from WAL, moved ahead by the
//! background writer (or, rarely, by a caller that got ahead of it), and
//! re-established by `snowflake_adopt_settings()` and
//! `snowflake_resume_above()`.
//!
//! Every move of the mark is WAL-logged and flushed, then written to the
//! state file, then (where a synchronous standby is configured) confirmed by
//! the standby, and only then published to callers.

use crate::clock::now_ms;
use crate::settings;
use crate::shmem::{MarkSource, Refusal, State, RECOVERY_FILES};
use crate::wal;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgLogLevel};
use snowflake_id_core::config::Config;
use snowflake_id_core::generator::{Limits, Reservation};
use snowflake_id_core::layout::Layout;
use snowflake_id_core::mark::{Identity, MarkFile, Record, Stored};
use snowflake_id_core::resume::{self, Origin, Resume};
use snowflake_id_core::timefmt::{format_duration, format_instant};
use snowflake_id_core::{Class, Failure};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// Why generation was refused at start, for every later call to raise.
/// Written by the postmaster before backends fork from it.
static REFUSAL: Mutex<Option<Failure>> = Mutex::new(None);

pub fn data_dir() -> std::path::PathBuf {
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

/// What the state file holds, decided against the settings.
fn decide(cfg: &Config) -> Resume {
    let file = mark_file();
    match file.read() {
        Ok(stored) => resume::decide(
            &stored,
            &cfg.layout,
            cfg.worker_id,
            &file.path().to_string_lossy(),
        ),
        Err(e) => Resume::Refused(io_failure("read", e)),
    }
}

/// Notes `rec` as the newest mark known, learnt from `source`.
fn note_mark(st: &State, rec: &Record, source: MarkSource) {
    st.mark_generation.store(rec.generation, Ordering::Relaxed);
    st.mark_tick.store(rec.mark_tick, Ordering::Relaxed);
    st.mark_written_at_ms
        .store(rec.written_at_ms, Ordering::Relaxed);
    st.mark_system_id.store(rec.system_id, Ordering::Relaxed);
    st.mark_timeline.store(rec.timeline, Ordering::Relaxed);
    st.mark_source.store(source as u8, Ordering::Relaxed);
}

fn refuse(st: &State, why: Refusal) {
    st.refusal.store(why as u8, Ordering::Relaxed);
    st.refused.store(true, Ordering::Release);
}

/// Sets up the generator from the state file. Runs where shared memory is
/// created: in the postmaster at start and after a crash of any backend.
pub fn resume(st: &State) {
    let mut refusal = REFUSAL.lock().unwrap_or_else(|e| e.into_inner());
    *refusal = None;
    // Read before the startup process renames backup_label or removes the
    // signal files: they are how a copy of another server's data shows.
    let dir = data_dir();
    let files = RECOVERY_FILES
        .iter()
        .enumerate()
        .filter(|(_, f)| dir.join(f).exists())
        .fold(0u8, |bits, (i, _)| bits | 1 << i);
    st.recovery_files.store(files, Ordering::Relaxed);
    crate::claims::resume(st);
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
    let s = cfg.layout.sequence_bits();
    match decide(cfg) {
        Resume::Fresh => st.gen.reset(None, s),
        Resume::Continue { rec, worker_was } => {
            st.gen.reset(Some(rec.mark_tick), s);
            note_mark(st, &rec, MarkSource::StateFile);
            if let Some(was) = worker_was {
                log!("snowflake_id: worker id changed from {was} to {}; new IDs continue above every ID issued before", cfg.worker_id);
            }
        }
        Resume::Refused(f) => {
            crate::errors::log(f.clone(), PgLogLevel::WARNING);
            st.gen.reset(None, s);
            refuse(st, Refusal::AtStart);
            *refusal = Some(f);
        }
    }
}

/// Redo of a mark record (startup process: crash recovery, a standby,
/// archive recovery). Persists the mark to the state file, since no
/// checkpoint callback will, then raises the generator above it. Raises
/// nothing: an ERROR here would stop the server.
#[cfg_attr(any(feature = "pg13", feature = "pg14"), allow(dead_code))] // no WAL marks before 15
pub fn replay(rec: &Record) {
    let Some(st) = crate::shmem::state() else {
        return;
    };
    st.counters.marks_replayed.fetch_add(1, Ordering::Relaxed);
    st.with_lock(|| {
        let cfg = settings::config();
        let same_settings = cfg
            .as_ref()
            .is_ok_and(|c| Identity::of(&c.layout) == rec.identity);
        // Under the same settings a mark only ever rises: a lower one (an
        // older timeline's, replayed after a newer mark was read) keeps the
        // higher tick and takes the record's origin.
        let tick = match known_mark(st) {
            Some(k) if same_settings => rec.mark_tick.max(k),
            _ => rec.mark_tick,
        };
        let same_origin = st.mark_system_id.load(Ordering::Relaxed) == rec.system_id
            && st.mark_timeline.load(Ordering::Relaxed) == rec.timeline;
        if known_mark(st) == Some(tick) && same_origin {
            return; // nothing new (a mark logged again after a checkpoint)
        }
        let stored = Record {
            generation: st.mark_generation.load(Ordering::Relaxed) + 1,
            mark_tick: tick,
            ..*rec
        };
        if let Err(e) = mark_file().write(&stored) {
            // Kept in shared memory all the same; only a restart before the
            // next readable mark could forget it.
            crate::errors::log(io_failure("write", e), PgLogLevel::WARNING);
        }
        note_mark(st, &stored, MarkSource::WalReplay);
        match settings::config() {
            Ok(cfg) if Identity::of(&cfg.layout) == rec.identity => {
                st.gen
                    .raise_floor(rec.mark_tick, cfg.layout.sequence_bits());
            }
            // Under other settings the mark's ticks mean other IDs: refuse as
            // a restart would, with the same way out (adopt settings).
            Ok(_) => refuse(st, Refusal::ReplayedOtherSettings),
            Err(_) => {}
        }
    });
}

/// Redo of a mark record that cannot be read: generation is refused, since
/// the mark it held is unknown.
#[cfg_attr(any(feature = "pg13", feature = "pg14"), allow(dead_code))]
pub fn replay_unreadable(why: &str) {
    crate::errors::log(
        Failure::new(
            Class::Corrupted,
            format!("snowflake_id: a durable mark record in WAL cannot be read: {why}"),
        )
        .detail("Generation is refused on this server until the mark is re-established."),
        PgLogLevel::WARNING,
    );
    if let Some(st) = crate::shmem::state() {
        refuse(st, Refusal::UnreadableRecord);
    }
}

/// Why generation is refused right now, if it is.
fn refused(st: &State) -> Option<Failure> {
    if !st.refused.load(Ordering::Acquire) {
        return crate::claims::refusal(st);
    }
    let f = match st.refusal.load(Ordering::Relaxed) {
        r if r == Refusal::ReplayedOtherSettings as u8 => settings::config()
            .ok()
            .and_then(|cfg| match decide(cfg) {
                Resume::Refused(f) => Some(f),
                _ => None,
            }),
        r if r == Refusal::UnreadableRecord as u8 => Some(
            Failure::new(Class::Corrupted, "a durable mark record in this server's WAL could not be read")
                .detail("Without it, IDs the original server issued could be issued again.")
                .hint("If the system clock is certainly later than every ID this server's data holds, run SELECT snowflake_adopt_settings(); as a superuser to start a new state from the clock."),
        ),
        _ => REFUSAL.lock().unwrap_or_else(|e| e.into_inner()).clone(),
    };
    Some(f.unwrap_or_else(|| Failure::new(Class::NotReady, "snowflake_id generation is refused")))
}

/// The newest mark known under the current settings (refused otherwise).
fn known_mark(st: &State) -> Option<u64> {
    Some(st.mark_tick.load(Ordering::Relaxed)).filter(|m| *m != crate::shmem::NO_MARK)
}

/// Whether this server is in recovery (a standby, or not yet promoted).
pub fn in_recovery() -> bool {
    // SAFETY: plain read of shared recovery state.
    unsafe { pg_sys::RecoveryInProgress() }
}

/// The error for generation asked of a server in recovery.
pub fn read_only() -> Failure {
    Failure::new(Class::ReadOnly, "cannot issue snowflake IDs during recovery")
        .detail("A standby replays its primary's durable mark; it issues IDs only once promoted, and then above that mark.")
        .hint("Issue IDs on the primary.")
}

/// Checks that this server may issue IDs at all (not a standby, not refused).
/// The error the next write of the mark would meet in opening the state
/// file (permissions, a read-only file system), if any.
pub fn write_problem() -> Option<Failure> {
    mark_file()
        .check_writable()
        .err()
        .map(|e| io_failure("write", e))
}

pub fn may_issue(st: &State) -> Result<(), Failure> {
    if in_recovery() {
        return Err(read_only());
    }
    refused(st).map_or(Ok(()), Err)
}

/// Runs once per server start, before the first mark is written: if the
/// data is a copy of another server's, puts the generator above what the
/// copy may hold and says so in the log. Call holding the state's lock,
/// after recovery.
fn settle(st: &State, cfg: &Config, lim: &Limits) {
    if st.settled.load(Ordering::Acquire) {
        return;
    }
    let (system_id, timeline) = wal::origin();
    let bits = st.recovery_files.load(Ordering::Relaxed);
    let files: Vec<&str> = RECOVERY_FILES
        .iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, f)| *f)
        .collect();
    let has_mark = st.mark_tick.load(Ordering::Relaxed) != crate::shmem::NO_MARK;
    let origin = Origin {
        system_id,
        timeline,
        recovery_files: &files,
        mark: has_mark.then(|| {
            (
                st.mark_system_id.load(Ordering::Relaxed),
                st.mark_timeline.load(Ordering::Relaxed),
            )
        }),
        replayed_marks: st.counters.marks_replayed.load(Ordering::Relaxed),
        latest_xtime_ms: wal::latest_replayed_commit_ms(),
    };
    let settled = resume::settle(&cfg.layout, lim.lead_ticks, &origin);
    if let Some(floor) = settled.floor_tick {
        st.gen.raise_floor(floor, lim.sequence_bits);
    }
    if let Some(note) = settled.note {
        log!("snowflake_id: {note}");
    }
    st.settled.store(true, Ordering::Release);
}

/// Who moves the mark.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A caller needs ticks through this one covered before it may return;
    /// it may wait `budget_ms` for a synchronous standby.
    Caller { through_tick: u64, budget_ms: u64 },
    /// The background writer, keeping ahead of callers. `active`: IDs were
    /// issued since it last looked. `relog`: the latest checkpoint began
    /// after the last mark this server logged, so recovery from it would
    /// not replay the mark: log it again.
    Background { active: bool, relog: bool },
}

/// A mark written to WAL and the state file, not yet published.
#[derive(Clone, Copy)]
struct Written {
    mark: u64,
    lsn: Option<u64>,
}

/// Moves the durable mark ahead: writes it, waits for a synchronous standby
/// where one is configured, then publishes it.
pub fn extend(
    st: &State,
    cfg: &Config,
    lim: &Limits,
    now_tick: u64,
    trigger: Trigger,
) -> Result<u64, Failure> {
    may_issue(st)?;
    let reservation = Reservation::for_layout(&cfg.layout);
    let pending = st.with_lock(|| {
        settle(st, cfg, lim);
        let written_here =
            MarkSource::of(st.mark_source.load(Ordering::Relaxed)) == MarkSource::WrittenHere;
        let through_tick = match trigger {
            Trigger::Caller { through_tick, .. } if st.gen.durable_end() > through_tick => {
                return Ok(None)
            }
            // Written already and waiting for the standby: wait for it too.
            Trigger::Caller { through_tick, .. }
                if written_here && st.mark_tick.load(Ordering::Relaxed) >= through_tick =>
            {
                return Ok(Some(Written {
                    mark: st.mark_tick.load(Ordering::Relaxed),
                    lsn: Some(st.logged_lsn.load(Ordering::Relaxed)).filter(|l| *l != 0),
                }));
            }
            Trigger::Caller { through_tick, .. } => through_tick,
            // The first mark is written by the first caller: a state file means
            // "IDs were issued under these settings", so none is written before.
            Trigger::Background { .. } if st.mark_generation.load(Ordering::Relaxed) == 0 => {
                return Ok(None)
            }
            Trigger::Background { active, relog } => {
                if !relog && !reservation.due(&st.gen, lim, now_tick, active) {
                    return Ok(None);
                }
                0
            }
        };
        let mark = reservation.next_mark(&st.gen, lim, now_tick, through_tick, known_mark(st));
        let w = write(st, cfg, mark)?;
        let counter = match trigger {
            Trigger::Caller { .. } => &st.counters.caller_writes,
            Trigger::Background { .. } => &st.counters.background_writes,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(Some(w))
    })?;
    let budget_ms = match trigger {
        Trigger::Caller { budget_ms, .. } => budget_ms,
        Trigger::Background { .. } => BACKGROUND_STANDBY_WAIT_MS,
    };
    match pending {
        Some(w) => publish(st, w, budget_ms),
        None => Ok(0),
    }
}

/// Writes `mark` to WAL (flushed) and to the state file. Call holding the
/// state's lock; publish the result with [`publish`] after releasing it.
fn write(st: &State, cfg: &Config, mark: u64) -> Result<Written, Failure> {
    let (system_id, timeline) = wal::origin();
    let rec = Record {
        generation: st.mark_generation.load(Ordering::Relaxed) + 1,
        identity: Identity::of(&cfg.layout),
        worker_id: cfg.worker_id,
        mark_tick: mark,
        written_at_ms: now_ms(),
        system_id,
        timeline,
    };
    let lsn = wal::log_mark(&rec);
    mark_file()
        .write(&rec)
        .map_err(|e| io_failure("write", e))?;
    note_mark(st, &rec, MarkSource::WrittenHere);
    if let Some(lsn) = lsn {
        st.logged_lsn.store(lsn, Ordering::Relaxed);
    }
    Ok(Written { mark, lsn })
}

/// Publishes a written mark once a synchronous standby (if any) has it.
/// Outside the lock: the wait can be long, and must stay cancellable.
/// How long the background writer waits for a synchronous standby before
/// it looks again (and takes in a reload, e.g. one that drops the standby).
const BACKGROUND_STANDBY_WAIT_MS: u64 = 1000;
/// How long `snowflake_adopt_settings()` and `snowflake_resume_above()`
/// wait for one; a superuser can cancel them sooner.
const ADMIN_STANDBY_WAIT_MS: u64 = 60_000;

/// Publishes a written mark once a synchronous standby (if any is asked
/// for) confirmed it; returns how long that took, in µs.
fn publish(st: &State, w: Written, budget_ms: u64) -> Result<u64, Failure> {
    let waited = wal::confirm(&st.standby_wait_since_ms, w.lsn, budget_ms)?;
    if let Some(us) = waited {
        st.counters.standby_waits.fetch_add(1, Ordering::Relaxed);
        st.counters.standby_wait_us.fetch_add(us, Ordering::Relaxed);
    }
    st.gen.publish_durable(w.mark);
    std::sync::atomic::fence(Ordering::SeqCst);
    // A claim refusal that came while this mark was written revoked the
    // window before this publish: revoke it again (the flag is set before
    // the claims worker revokes, both sequentially consistent).
    if st.claims.refused() {
        st.gen.revoke_durable();
    }
    Ok(waited.unwrap_or(0))
}

/// The error a call needing the mark moved would meet now because a
/// synchronous standby has not confirmed the last mark for `max_wait`.
pub fn standby_problem(st: &State, max_wait_ms: u64) -> Option<Failure> {
    let since = st.standby_wait_since_ms.load(Ordering::Relaxed);
    (since != 0 && wal::sync_standbys_named() && now_ms() - since >= max_wait_ms as i64)
        .then(|| wal::standby_silent(max_wait_ms))
}

/// Whether the background writer should log the mark again: recovery from
/// the newest checkpoint would not replay the last mark this server logged.
/// Recovery starts *at* the redo pointer, and a record ending exactly there
/// (the last record before an otherwise idle checkpoint) is not replayed.
pub fn relog_due(st: &State) -> bool {
    wal::enabled()
        && st.mark_generation.load(Ordering::Relaxed) != 0
        && st.logged_lsn.load(Ordering::Relaxed) <= wal::redo_start()
}

pub fn require_superuser(function: &str) -> Result<(), Failure> {
    // SAFETY: plain reads of the session's role and recovery state.
    if !unsafe { pg_sys::superuser() } {
        return Err(Failure::new(
            Class::Privilege,
            format!("only a superuser may run {function}"),
        ));
    }
    if in_recovery() {
        return Err(read_only());
    }
    Ok(())
}

/// Re-establishes the durable state under the current settings, so that new
/// IDs continue numerically above every ID the old state could cover.
pub fn adopt(st: &State, cfg: &Config, lim: &Limits) -> Result<String, Failure> {
    require_superuser("snowflake_adopt_settings()")?;
    let (w, text) = st.with_lock(|| {
        // Only a refused state is replaced: a running generator is never moved back.
        if !st.refused.load(Ordering::Acquire) {
            return Ok((
                None,
                format!(
                    "nothing to adopt: IDs are already issued under {} with worker id {}",
                    Identity::of(&cfg.layout).describe(),
                    cfg.worker_id
                ),
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
        settle(st, cfg, lim);
        let reservation = Reservation::for_layout(&cfg.layout);
        let mark = reservation.target(&st.gen, lim, now_tick, floor.unwrap_or(0));
        let w = write(st, cfg, mark)?;
        st.refused.store(false, Ordering::Release);
        let from = match old {
            Some(r) => format!("{} (worker id {})", r.identity.describe(), r.worker_id),
            None => "no readable state".to_string(),
        };
        let first = cfg
            .layout
            .tick_start_ms(floor.map_or(now_tick, |f| (f + 1).max(now_tick)));
        Ok((
            Some(w),
            format!(
            "adopted {} with worker id {} (from {from}); the next ID carries a time of {} or later",
            Identity::of(&cfg.layout).describe(),
            cfg.worker_id,
            format_instant(first)
        ),
        ))
    })?;
    if let Some(w) = w {
        publish(st, w, ADMIN_STANDBY_WAIT_MS)?;
    }
    Ok(text)
}

/// Puts every later ID of this server above `id` (an ID of this server's
/// layout, from any worker), durably: for data that arrived without the
/// mark (pg_upgrade, a logical dump restored into a server that keeps the
/// worker id).
pub fn resume_above(st: &State, cfg: &Config, lim: &Limits, id: i64) -> Result<String, Failure> {
    require_superuser("snowflake_resume_above()")?;
    if let Some(f) = refused(st) {
        return Err(f);
    }
    let layout: &Layout = &cfg.layout;
    let tick = layout.decode_tick(id)?;
    if tick >= layout.last_tick() {
        return Err(Failure::new(
            Class::IdOutOfRange,
            format!("{} has no tick left above the ID {id}", layout.title()),
        )
        .hint("Move this server to a layout with a later end; see \"Changing the layout\" in the README."));
    }
    let now = now_ms();
    let now_tick = layout.tick_at_ms(now).unwrap_or(0);
    let w = st.with_lock(|| {
        settle(st, cfg, lim);
        st.gen.raise_floor(tick, lim.sequence_bits);
        let reservation = Reservation::for_layout(layout);
        let mark = reservation.next_mark(&st.gen, lim, now_tick, tick + 1, known_mark(st));
        write(st, cfg, mark)
    })?;
    publish(st, w, ADMIN_STANDBY_WAIT_MS)?;
    let first_tick = (st.gen.next() >> lim.sequence_bits).max(now_tick);
    let first_ms = layout.tick_start_ms(first_tick);
    let ahead = first_ms - now;
    let mut text = format!(
        "every new ID is above {id}; the next carries a time of {} or later",
        format_instant(first_ms)
    );
    if ahead > 0 {
        text.push_str(&format!(
            ", {} ahead of the clock (calls wait or fail while that is more than snowflake_id.max_lead)",
            format_duration(ahead as u64)
        ));
    }
    Ok(text)
}
