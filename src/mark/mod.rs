//! The durable high-water mark: every later ID of this server lies above
//! it, through crashes, restores and failovers. Read from the state file
//! when shared memory is made (`start`), raised by every mark record
//! replayed from WAL (`redo`), moved ahead by the reserver (or, rarely, by
//! a caller that got ahead of it) here, and re-established by the
//! superuser's functions (`admin`).
//!
//! Every move of the mark is WAL-logged and flushed, then written to the
//! state file, then (where a synchronous standby is configured) confirmed
//! by the standby, and only then published to callers. A refusal revokes
//! the published window; `publish` and `refuse_for_claim` keep the order
//! between the two.

pub mod admin;
mod file;
mod lease_file;
pub mod leases;
pub mod redo;
pub mod resume;
mod standby;
pub mod worker_lease;

use crate::pg::clock::now_ms;
use crate::pg::xlog::{self, StandbyWait};
use crate::shmem::mark::MarkSource;
use crate::shmem::refusal::MarkRefusal;
use crate::shmem::registry::Gone;
use crate::shmem::Shmem;
use file::{file, io_failure};
use snowflake_id_core::config::Config;
use snowflake_id_core::generator::{Limits, Reservation};
use snowflake_id_core::live_history::LiveHistory;
use snowflake_id_core::mark::{Ceiling, Identity, Record, WORKER_UNKNOWN};
use snowflake_id_core::resume::Resume;
use snowflake_id_core::{Class, Failure};
use standby::{standby_silent, waits_for_standbys};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long the reserver waits for a synchronous standby before it looks
/// again (and takes in a reload, e.g. one that drops the standby).
const RESERVER_STANDBY_WAIT_MS: u64 = 1000;

/// The error for generation asked of a server in recovery.
pub fn read_only() -> Failure {
    Failure::new(Class::ReadOnly, "cannot issue snowflake IDs during recovery")
        .detail("A standby replays its primary's durable mark; it issues IDs only once promoted, and then above that mark.")
        .hint("Issue IDs on the primary.")
}

/// Why generation is refused right now, if it is: the mark's reasons
/// first, then another server's claim.
pub fn refused(shm: &Shmem) -> Option<Failure> {
    let f = match shm.refusal.mark() {
        Some(MarkRefusal::AtStart) => shm.refusal.at_start(),
        Some(MarkRefusal::ReplayedOtherSettings) => crate::settings::config()
            .ok()
            .and_then(|cfg| match resume::decide(cfg) {
                Resume::Refused(f) => Some(f),
                _ => None,
            }),
        Some(MarkRefusal::UnreadableRecord) => Some(
            Failure::new(Class::Corrupted, "a durable mark record in this server's WAL could not be read")
                .detail("Without it, IDs the original server issued could be issued again.")
                .hint("If the system clock is certainly later than every ID this server's data holds, run SELECT snowflake_adopt_settings(); as a superuser to start a new state from the clock."),
        ),
        // Until the claims worker has taken it up, the finding is older.
        None if shm.refusal.claim() && shm.claims.rejudging() => Some(
            Failure::new(
                Class::NotReady,
                "a session offered this node's Citus database anew: the claims worker is reading this node's group id and the other nodes' claims there",
            )
            .hint("IDs are issued again once it has; its database was dropped, and the one offered now may give this node another group id."),
        ),
        None if shm.registry.gone().is_some() => shm.registry.gone().map(lease_gone),
        None if shm.refusal.claim() => Some(shm.claims.finding().failure().unwrap_or_else(|| {
            Failure::new(Class::NotReady, "another live server claims this server's worker id")
        })),
        None => return None,
    };
    Some(f.unwrap_or_else(|| Failure::new(Class::NotReady, "snowflake_id generation is refused")))
}

/// The refusal for a lease from the registry that no longer covers IDs.
fn lease_gone(why: Gone) -> Failure {
    let (message, hint) = match why {
        Gone::ReleasedHere => (
            "this server released its worker id to the registry (snowflake_release_worker_id()): it issues no more IDs under it",
            "A restart leases a worker id anew; released ones go to other servers, above the last ID time given at release.",
        ),
        Gone::ReleasedThere => (
            "the registry says this server's worker id was released: another server may lease it, so this one issues no more IDs under it",
            "If this server is to go on, restart it: it leases a worker id anew. Who released it shows in SELECT * FROM snowflake_registry.leases on the registry.",
        ),
        Gone::Lost => (
            "the registry holds this server's worker id for another server, or no longer holds it at all: this one issues no more IDs under it",
            "Look at SELECT * FROM snowflake_registry.leases on the registry; restart this server to lease a worker id anew.",
        ),
    };
    Failure::new(Class::NotReady, message).hint(hint)
}

/// Refuses generation for good (until a restart): the registry lease this
/// server issued under is gone. The flag first, then the revocation of the
/// durable window, as for a claim.
pub fn refuse_for_lease(shm: &Shmem, why: Gone) {
    if !shm.registry.set_gone(why) {
        shm.gen.revoke_durable();
    }
}

/// Keeps a worker lease from the registry durably: in WAL (flushed), then
/// in its file, so that a standby has it before the primary issues under it.
pub fn keep_worker_lease(lease: &snowflake_id_core::registry::Lease) -> Result<(), Failure> {
    let bytes = lease.encode();
    redo::log_worker_lease(&bytes);
    worker_lease::write_file(&bytes)
}

/// Checks that this server may issue IDs at all (not a standby, not refused).
pub fn may_issue(shm: &Shmem) -> Result<(), Failure> {
    if xlog::in_recovery() {
        return Err(read_only());
    }
    refused(shm).map_or(Ok(()), Err)
}

/// Sets or lifts the refusal for another server's claim on this worker id
/// (the claims worker's finding); returns whether it was set before. The
/// flag comes first, then the revocation of the durable window: a mark
/// published meanwhile sees the flag and revokes it again (`publish`).
pub fn refuse_for_claim(shm: &Shmem, refuse: bool) -> bool {
    let was = shm.refusal.set_claim(refuse);
    if refuse && !was {
        shm.gen.revoke_durable();
    }
    was
}

/// Refuses generation in database `db` for copied IDs up to `id` it holds,
/// ahead of the clock and above the mark (a floor found them); every
/// database's status says so. The other databases issue on (their data is
/// none of it), below `ceiling`, the first tick the set-aside IDs can
/// carry: no ID of any database reaches them while they are unsettled,
/// after a restart too (the ceiling is written into a durable mark now).
pub fn refuse_for_copies(shm: &Shmem, cfg: &Config, why: &Failure, id: i64, db: u32, ceiling: u64) {
    let written = shm.mark.with_lock(|| {
        shm.refusal.refuse_for_copies(why, id, db, ceiling);
        if shm.gen.durable_end() > ceiling {
            shm.gen.revoke_durable();
        }
        // The mark stays where it is; the record now carries the ceiling.
        // Where no ID was issued yet (a restore into a new server), the
        // first mark is the clock's tick: a restart must keep the ceiling.
        let tick = shm.mark.tick().unwrap_or_else(|| {
            let now = cfg.layout.tick_at_ms(now_ms()).unwrap_or(0);
            now.min(ceiling.saturating_sub(1))
        });
        Some(write(shm, cfg, tick))
    });
    if let Some(Err(f)) = written {
        crate::pg::error::log(f, pgrx::PgLogLevel::WARNING);
    }
}

/// The error of a caller whose ID would reach the ceiling of set-aside
/// copied IDs.
fn past_ceiling(layout: &snowflake_id_core::layout::Layout, c: Ceiling) -> Failure {
    let db = crate::pg::database::name(pgrx::pg_sys::Oid::from(c.database))
        .unwrap_or_else(|| format!("of OID {}", c.database));
    // One lookup for both names.
    let q = crate::catalog::qualifier();
    snowflake_id_core::copies::past_ceiling(
        layout,
        c.tick,
        &db,
        &format!("{q}snowflake_nextval"),
        &format!("{q}snowflake_resume_above"),
    )
}

/// Whether every later ID of this server is above `id` (of any worker).
pub fn covers(shm: &Shmem, layout: &snowflake_id_core::layout::Layout, id: i64) -> bool {
    layout
        .decode_tick(id)
        .is_ok_and(|tick| tick < shm.gen.next() >> layout.sequence_bits())
}

/// Lifts the refusal for copied IDs ahead of the clock where the next ID is
/// above them, or where their database holds none any more (`settled_in`:
/// a floor there found none so far ahead, or an operator said what they
/// are). Restored from a durable mark, their IDs are unknown: only their
/// database lifts it.
pub fn lift_copies(shm: &Shmem, cfg: &Config, settled_in: Option<u32>) {
    if !shm.refusal.copies() {
        return;
    }
    let written = shm.mark.with_lock(|| {
        let lifted = shm.refusal.lift_copies_where(|db, id| {
            settled_in == Some(db) || (id > 0 && covers(shm, &cfg.layout, id))
        });
        // Written, so that a crash does not bring the ceiling back.
        if lifted {
            shm.mark.tick().map(|tick| write(shm, cfg, tick))
        } else {
            None
        }
    });
    if let Some(Err(f)) = written {
        crate::pg::error::log(f, pgrx::PgLogLevel::WARNING);
    }
}

/// Where shared memory is made: a claim's refusal remembered from the
/// server's last run stands again. Nothing to revoke: no ID was issued
/// under the window the start just published, and none will be while the
/// flag stands.
pub fn refuse_for_claim_at_start(shm: &Shmem) {
    shm.refusal.set_claim(true);
}

/// The error the next write of the mark would meet in opening the state
/// file (permissions, a read-only file system), if any.
pub fn write_problem() -> Option<Failure> {
    file()
        .check_writable()
        .err()
        .map(|e| io_failure("write", e))
}

/// The error a call needing the mark moved would meet now because a
/// synchronous standby has not confirmed the last mark for `max_wait`.
pub fn standby_problem(shm: &Shmem, max_wait_ms: u64) -> Option<Failure> {
    let since = shm.mark.standby_wait_since_ms()?;
    (waits_for_standbys() && now_ms() - since >= max_wait_ms as i64)
        .then(|| standby_silent(max_wait_ms))
}

/// Whether the reserver should log the mark again: recovery from the
/// newest checkpoint would not replay the last mark this server logged.
/// Recovery starts *at* the redo pointer, and a record ending exactly there
/// (the last record before an otherwise idle checkpoint) is not replayed.
pub fn relog_due(shm: &Shmem) -> bool {
    redo::enabled()
        && shm.mark.generation() != 0
        && shm.mark.logged_lsn().unwrap_or(0) <= xlog::redo_start()
}

/// Who moves the mark.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A caller needs ticks through this one covered before it may return;
    /// it may wait `budget_ms` for a synchronous standby.
    Caller { through_tick: u64, budget_ms: u64 },
    /// The reserver, keeping ahead of callers. `active`: IDs were issued
    /// since it last looked. `relog`: the latest checkpoint began after the
    /// last mark this server logged, so recovery from it would not replay
    /// the mark: log it again.
    Reserver { active: bool, relog: bool },
}

/// A mark written to WAL and the state file, not yet published.
#[derive(Clone, Copy)]
struct Written {
    mark: u64,
    lsn: Option<u64>,
}

/// Moves the durable mark ahead: writes it, waits for a synchronous standby
/// where one is configured, then publishes it. Returns how long a standby
/// was waited for, in µs.
pub fn extend(
    shm: &Shmem,
    cfg: &Config,
    lim: &Limits,
    now_tick: u64,
    trigger: Trigger,
) -> Result<u64, Failure> {
    may_issue(shm)?;
    let reservation = Reservation::for_layout(&cfg.layout);
    let mut past = None;
    let pending = shm.mark.with_lock(|| {
        // Looked at again under the lock: a lease released while this call
        // waited for it must not be extended past the time the release
        // read (`registry::release`).
        if let Some(f) = refused(shm) {
            return Err(f);
        }
        resume::floor_if_copied(shm, cfg, lim);
        // While set-aside copied IDs are unsettled, no mark reaches them.
        let ceiling = shm.refusal.ceiling();
        let below = |mark: u64| ceiling.map_or(mark, |c| mark.min(c.tick.saturating_sub(1)));
        if let (Some(c), Trigger::Caller { through_tick, .. }) = (ceiling, trigger) {
            if through_tick >= c.tick {
                past = Some(c);
                return Ok(None);
            }
        }
        let written_here = shm.mark.source() == MarkSource::WrittenHere;
        let through_tick = match trigger {
            Trigger::Caller { through_tick, .. } if shm.gen.durable_end() > through_tick => {
                return Ok(None)
            }
            // Written already and waiting for the standby: wait for it too.
            Trigger::Caller { through_tick, .. }
                if written_here && shm.mark.tick().is_some_and(|m| m >= through_tick) =>
            {
                return Ok(Some(Written {
                    mark: below(shm.mark.tick().unwrap_or(0)),
                    lsn: shm.mark.logged_lsn(),
                }));
            }
            Trigger::Caller { through_tick, .. } => through_tick,
            // The first mark is written by the first caller: a state file means
            // "IDs were issued under these settings", so none is written before.
            Trigger::Reserver { .. } if shm.mark.generation() == 0 => return Ok(None),
            Trigger::Reserver { active, relog } => {
                if !relog && !reservation.due(&shm.gen, lim, now_tick, active) {
                    return Ok(None);
                }
                0
            }
        };
        let mark =
            below(reservation.next_mark(&shm.gen, lim, now_tick, through_tick, shm.mark.tick()));
        if ceiling.is_some() && shm.mark.tick().is_some_and(|m| m >= mark) && through_tick <= mark {
            // At the ceiling already: nothing to move (the reserver).
            return Ok(Some(Written {
                mark,
                lsn: shm.mark.logged_lsn(),
            }));
        }
        let w = write(shm, cfg, mark)?;
        let counter = match trigger {
            Trigger::Caller { .. } => &shm.counters.caller_writes,
            Trigger::Reserver { .. } => &shm.counters.reserver_writes,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(Some(w))
    })?;
    if let Some(c) = past {
        // Set-aside IDs that went with their database (dropped since, before
        // or after a restart) can meet no ID again: the ceiling goes too.
        if crate::pg::database::name(pgrx::pg_sys::Oid::from(c.database)).is_none() {
            lift_copies(shm, cfg, Some(c.database));
            if shm.refusal.ceiling() != Some(c) {
                return extend(shm, cfg, lim, now_tick, trigger);
            }
        }
        return Err(past_ceiling(&cfg.layout, c));
    }
    let budget_ms = match trigger {
        Trigger::Caller { budget_ms, .. } => budget_ms,
        Trigger::Reserver { .. } => RESERVER_STANDBY_WAIT_MS,
    };
    match pending {
        Some(w) => publish(shm, w, budget_ms),
        None => Ok(0),
    }
}

/// Writes `mark` to WAL (flushed) and to the state file. Call holding the
/// mark's lock; publish the result with [`publish`] after releasing it.
fn write(shm: &Shmem, cfg: &Config, mark: u64) -> Result<Written, Failure> {
    let (system_id, timeline) = xlog::origin();
    let worker = shm.worker.get().unwrap_or(WORKER_UNKNOWN);
    let rec = Record {
        generation: shm.mark.generation() + 1,
        identity: Identity::of(&cfg.layout),
        worker_id: worker,
        mark_tick: mark,
        written_at_ms: now_ms(),
        system_id,
        timeline,
        continue_term: shm.gen.continue_term(),
        ceiling: shm.refusal.ceiling().unwrap_or_default(),
        history: history_with(shm, cfg, worker),
    };
    let lsn = redo::log(&rec);
    file().write(&rec).map_err(|e| io_failure("write", e))?;
    shm.mark.note(&rec, MarkSource::WrittenHere);
    if let Some(lsn) = lsn {
        shm.mark.set_logged_lsn(lsn);
    }
    Ok(Written { mark, lsn })
}

/// The live worker ids' history once `worker` issues (a restart under
/// another worker id; a Citus group moved is noted when it moves, by
/// [`live_worker_moved`]). Call holding the mark's lock.
fn history_with(shm: &Shmem, cfg: &Config, worker: u32) -> LiveHistory {
    let known = shm.mark.history();
    if worker == WORKER_UNKNOWN || worker == known.current {
        return known;
    }
    // Every ID issued so far lies at or below the newest mark, and the
    // next goes at the generator's next tick or above. A server that never
    // issued takes the clock's tick, less an hour for a clock that steps
    // back before its first ID.
    let next_tick = shm.gen.next() >> cfg.layout.sequence_bits();
    let since = if next_tick > 0 {
        next_tick
    } else {
        let hour = 3_600_000 / cfg.layout.unit_ms();
        cfg.layout
            .tick_at_ms(now_ms())
            .unwrap_or(0)
            .saturating_sub(hour)
    };
    known.with_live(worker, shm.mark.tick().unwrap_or(u64::MAX), since)
}

/// Notes, durably, that the live worker id moved to `new` while the
/// server runs (Citus gave the node another group): a mark is written at
/// once, so that a crash before the next one cannot forget that `new`
/// issues from here on, nor that the old one stopped.
pub fn live_worker_moved(shm: &Shmem, new: u32) -> Result<(), Failure> {
    let cfg = crate::settings::config()?;
    let w = shm.mark.with_lock(|| {
        // In shared memory first: should the write fail, the next one
        // carries it all the same.
        shm.mark.set_history(history_with(shm, cfg, new));
        match shm.mark.tick() {
            Some(mark) => write(shm, cfg, mark).map(Some),
            None => Ok(None),
        }
    })?;
    match w {
        Some(w) => publish(shm, w, RESERVER_STANDBY_WAIT_MS).map(|_| ()),
        None => Ok(()),
    }
}

/// Publishes a written mark once a synchronous standby (if any is asked
/// for) confirmed it, waiting at most `budget_ms`; returns how long that
/// took, in µs. Outside the lock: the wait can be long, and must stay
/// cancellable. Cancel and `statement_timeout` end it with their error; the
/// reserver's SIGTERM and the end of the budget with a failure. Either way
/// the mark stays unpublished. Bounded, unlike a commit's wait, because a
/// caller asked for an ID; `problem` in the status says when a mark has
/// waited longer than `max_wait`.
fn publish(shm: &Shmem, w: Written, budget_ms: u64) -> Result<u64, Failure> {
    let waited_us =
        match w.lsn.filter(|_| waits_for_standbys()) {
            None => {
                shm.mark.standby_wait_ends();
                None
            }
            Some(lsn) => {
                shm.mark.standby_wait_begins(now_ms());
                match xlog::wait_for_sync_standbys(lsn, Duration::from_millis(budget_ms)) {
                    StandbyWait::Confirmed(took) => {
                        shm.mark.standby_wait_ends();
                        Some(took.as_micros() as u64)
                    }
                    StandbyWait::TimedOut => return Err(standby_silent(budget_ms)),
                    StandbyWait::Stopped => return Err(Failure::new(
                        Class::NotReady,
                        "stopped waiting for the synchronous standby to confirm the durable mark",
                    )),
                }
            }
        };
    if let Some(us) = waited_us {
        shm.counters.standby_waits.fetch_add(1, Ordering::Relaxed);
        shm.counters
            .standby_wait_us
            .fetch_add(us, Ordering::Relaxed);
    }
    shm.gen.publish_durable(w.mark);
    std::sync::atomic::fence(Ordering::SeqCst);
    // A claim refusal that came while this mark was written revoked the
    // window before this publish: revoke it again (the flag is set before
    // the revocation, both sequentially consistent: `refuse_for_claim`).
    // So does a lease gone meanwhile, and a ceiling set meanwhile that the
    // window now passes.
    if shm.refusal.claim()
        || shm.registry.gone().is_some()
        || shm
            .refusal
            .ceiling()
            .is_some_and(|c| shm.gen.durable_end() > c.tick)
    {
        shm.gen.revoke_durable();
    }
    Ok(waited_us.unwrap_or(0))
}
