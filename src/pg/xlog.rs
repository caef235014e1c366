//! WAL and recovery, as this library uses them: inserting a record of a
//! custom resource manager, where recovery will start, which server and
//! timeline this is, and the wait for synchronous standbys.
//!
//! Version differences live here: PostgreSQL 13 and 14 have no custom
//! resource managers, and the current timeline is read differently before 15.

use pgrx::pg_sys;
use std::time::{Duration, Instant};

/// Writes a record of resource manager `rmgr` with `info` and `data`, and
/// flushes it; returns the end of the record. Marked unimportant: such a
/// record alone does not make an idle server checkpoint or switch segments
/// for `archive_timeout`.
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
pub fn insert_flushed(rmgr: u8, info: u8, data: &[u8]) -> u64 {
    let lsn = insert(rmgr, info, data);
    flush(lsn);
    lsn
}

/// Writes a record as [`insert_flushed`] does, without the flush: for a
/// run of records flushed once, after the last.
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
pub fn insert(rmgr: u8, info: u8, data: &[u8]) -> u64 {
    // SAFETY: the documented insert sequence; `data` outlives XLogInsert,
    // which copies it.
    unsafe {
        pg_sys::XLogBeginInsert();
        pg_sys::XLogRegisterData(data.as_ptr().cast_mut().cast(), data.len() as _);
        pg_sys::XLogSetRecordFlags(pg_sys::XLOG_MARK_UNIMPORTANT as u8);
        pg_sys::XLogInsert(rmgr, info)
    }
}

/// Flushes WAL through `lsn`.
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
pub fn flush(lsn: u64) {
    // SAFETY: XLogFlush takes any position up to the insert position.
    unsafe { pg_sys::XLogFlush(lsn) }
}

/// The start of the WAL that recovery from the latest checkpoint replays.
pub fn redo_start() -> u64 {
    // SAFETY: reads a shared position under Postgres's own spinlock.
    unsafe { pg_sys::GetRedoRecPtr() }
}

/// Whether this server is in recovery (a standby, or not yet promoted).
pub fn in_recovery() -> bool {
    // SAFETY: a plain read of shared recovery state.
    unsafe { pg_sys::RecoveryInProgress() }
}

/// This cluster's system identifier (any time after start, recovery too).
pub fn system_identifier() -> u64 {
    // SAFETY: a plain read of the control data in shared memory.
    unsafe { pg_sys::GetSystemIdentifier() }
}

/// This server's system identifier and current timeline.
pub fn origin() -> (u64, u32) {
    // SAFETY: plain reads of control data, valid once recovery has ended.
    unsafe {
        #[cfg(not(any(feature = "pg13", feature = "pg14")))]
        let tli = pg_sys::GetWALInsertionTimeLine();
        #[cfg(any(feature = "pg13", feature = "pg14"))]
        let tli = pg_sys::ThisTimeLineID;
        (pg_sys::GetSystemIdentifier(), tli)
    }
}

/// The time (Unix ms) of the last commit or abort replayed by recovery, if
/// this server went through archive recovery or is a standby.
pub fn latest_replayed_commit_ms() -> Option<i64> {
    // SAFETY: reads recovery's shared state.
    let t = unsafe { pg_sys::GetLatestXTime() };
    (t != 0).then(|| super::clock::unix_us(t).div_euclid(1000) as i64)
}

/// Whether `synchronous_standby_names` names any standby (and WAL is sent
/// at all). Not asked before 15, where this library writes no WAL of its
/// own to wait for (and pgrx binds no `max_wal_senders` for 13).
pub fn sync_standbys_named() -> bool {
    #[cfg(any(feature = "pg13", feature = "pg14"))]
    return false;
    // SAFETY: settings of this process, read on its one thread.
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    unsafe {
        let names = pg_sys::SyncRepStandbyNames;
        pg_sys::max_wal_senders > 0 && !names.is_null() && *names != 0
    }
}

/// How a wait for synchronous standbys ended.
pub enum StandbyWait {
    /// They flushed WAL through the position, after this long.
    Confirmed(Duration),
    /// Not within the budget.
    TimedOut,
    /// This worker was told to stop (SIGTERM).
    Stopped,
}

/// Waits until the synchronous standbys have flushed WAL through `lsn`,
/// for at most `budget`. Cancel and `statement_timeout` end the wait with
/// their error, as in any query.
pub fn wait_for_sync_standbys(lsn: u64, budget: Duration) -> StandbyWait {
    let started = Instant::now();
    loop {
        // SAFETY: WalSndCtl lives as long as the server; the flush position
        // synchronous standbys confirmed only grows, and an aligned 8-byte
        // read is atomic.
        let confirmed = unsafe {
            std::ptr::read_volatile(&(*pg_sys::WalSndCtl).lsn[pg_sys::SYNC_REP_WAIT_FLUSH as usize])
        };
        if confirmed >= lsn {
            return StandbyWait::Confirmed(started.elapsed());
        }
        if started.elapsed() >= budget {
            return StandbyWait::TimedOut;
        }
        if super::signals::terminating() {
            return StandbyWait::Stopped;
        }
        pgrx::check_for_interrupts!();
        // Not in Postgres's syncrep queue, so nobody wakes us: poll. A
        // millisecond is cheap beside the wait itself.
        super::clock::sleep_on_latch(1);
    }
}
