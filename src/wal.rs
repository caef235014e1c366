//! The durable mark in WAL: a custom WAL resource manager (PostgreSQL 15+)
//! whose one record is the mark, so that crash recovery, standbys, restored
//! base backups and point-in-time recovery all replay it; and the wait for a
//! synchronous standby to confirm a mark before it is published.
//!
//! Version differences live here and only here: PostgreSQL 13 and 14 have
//! no custom resource managers (marks are not WAL-logged there, see the
//! README), and the current timeline is read differently before 15.

#[cfg(not(any(feature = "pg13", feature = "pg14")))]
use crate::errors;
use pgrx::pg_sys;
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
use pgrx::PgLogLevel;
use snowflake_id_core::mark::Record;
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
use snowflake_id_core::mark::RECORD;
use snowflake_id_core::{Class, Failure};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

/// The `xl_info` of a mark record (the low four bits belong to Postgres).
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
const INFO_MARK: u8 = 0x10;

#[cfg(not(any(feature = "pg13", feature = "pg14")))]
static mut RMGR_ID: u8 = 0;

/// Whether marks are WAL-logged on this server.
pub fn enabled() -> bool {
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    // SAFETY: written once in _PG_init, before any other process exists.
    return unsafe { RMGR_ID } != 0;
    #[cfg(any(feature = "pg13", feature = "pg14"))]
    false
}

/// Registers the resource manager under `id`. Call from `_PG_init` while
/// `shared_preload_libraries` is being processed: Postgres accepts custom
/// resource managers only then, and a server (or standby) that meets a
/// record of an unregistered one stops recovery.
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
pub fn register(id: u8) {
    static mut RMGR: pg_sys::RmgrData = pg_sys::RmgrData {
        rm_name: c"snowflake_id".as_ptr(),
        rm_redo: Some(redo),
        rm_desc: Some(desc),
        rm_identify: Some(identify),
        rm_startup: None,
        rm_cleanup: None,
        rm_mask: None,
        rm_decode: None,
    };
    // SAFETY: _PG_init of the postmaster, single-threaded; RMGR lives forever.
    unsafe {
        RMGR_ID = id;
        pg_sys::RegisterCustomRmgr(id, &raw mut RMGR);
    }
}

#[cfg(any(feature = "pg13", feature = "pg14"))]
pub fn register(_id: u8) {}

/// Writes `rec` to WAL and flushes it; returns the end of the record, or
/// `None` where marks are not WAL-logged.
pub fn log_mark(rec: &Record) -> Option<u64> {
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    if enabled() {
        let bytes = rec.encode();
        // SAFETY: the documented insert sequence; `bytes` outlives XLogInsert.
        // Unimportant: a mark alone does not make an idle server checkpoint or
        // switch segments for archive_timeout.
        unsafe {
            pg_sys::XLogBeginInsert();
            pg_sys::XLogRegisterData(bytes.as_ptr().cast_mut().cast(), bytes.len() as _);
            pg_sys::XLogSetRecordFlags(pg_sys::XLOG_MARK_UNIMPORTANT as u8);
            let lsn = pg_sys::XLogInsert(RMGR_ID, INFO_MARK);
            pg_sys::XLogFlush(lsn);
            return Some(lsn);
        }
    }
    let _ = rec;
    None
}

/// The start of the WAL that recovery from the latest checkpoint replays.
pub fn redo_start() -> u64 {
    // SAFETY: reads a shared position under Postgres's own spinlock.
    unsafe { pg_sys::GetRedoRecPtr() }
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
    (t != 0).then(|| crate::clock::unix_us(t).div_euclid(1000) as i64)
}

/// Whether marks must wait for synchronous standbys: wherever
/// `synchronous_standby_names` names any. A server-wide decision on purpose:
/// a session's own `synchronous_commit` (which any user may turn off) must
/// not publish a mark other sessions' IDs then rely on.
pub fn sync_standbys_named() -> bool {
    // Before 15 no mark is WAL-logged, so there is nothing to confirm.
    #[cfg(any(feature = "pg13", feature = "pg14"))]
    return false;
    // SAFETY: settings of this process, read on its one thread.
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    unsafe {
        let names = pg_sys::SyncRepStandbyNames;
        pg_sys::max_wal_senders > 0 && !names.is_null() && *names != 0
    }
}

/// Waits until the synchronous standbys have flushed WAL through `lsn`,
/// where `synchronous_standby_names` asks for them, for at most
/// `budget_ms`; returns at once otherwise. Returns how long it waited (µs),
/// if it waited.
///
/// Cancel and `statement_timeout` end the wait with their error; the
/// background writer's SIGTERM and the end of the budget end it with a
/// failure. Either way the mark stays unpublished. The wait is bounded,
/// unlike a commit's, because a caller asked for an ID, and `problem` in
/// the status says when a mark has waited longer than `max_wait`.
pub fn confirm(
    since: &AtomicI64,
    lsn: Option<u64>,
    budget_ms: u64,
) -> Result<Option<u64>, Failure> {
    let Some(lsn) = lsn.filter(|_| sync_standbys_named()) else {
        since.store(0, Ordering::Relaxed);
        return Ok(None);
    };
    let started = Instant::now();
    let _ = since.compare_exchange(
        0,
        crate::clock::now_ms(),
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    loop {
        // SAFETY: WalSndCtl lives as long as the server; the flush position
        // synchronous standbys confirmed only grows, and an aligned 8-byte
        // read is atomic.
        let confirmed = unsafe { std::ptr::read_volatile(&(*pg_sys::WalSndCtl).lsn[1]) };
        if confirmed >= lsn {
            since.store(0, Ordering::Relaxed);
            return Ok(Some(started.elapsed().as_micros() as u64));
        }
        if started.elapsed().as_millis() as u64 >= budget_ms {
            return Err(standby_silent(budget_ms));
        }
        if crate::reserver::terminating() {
            return Err(Failure::new(
                Class::NotReady,
                "stopped waiting for the synchronous standby to confirm the durable mark",
            ));
        }
        pgrx::check_for_interrupts!();
        // Not in Postgres's syncrep queue, so nobody wakes us: poll. Marks
        // move a few times a second at most; a millisecond is cheap.
        crate::clock::sleep_on_latch(1);
    }
}

/// The error of a call whose mark a synchronous standby did not confirm in
/// time.
pub fn standby_silent(waited_ms: u64) -> Failure {
    Failure::new(
        Class::NotReady,
        format!(
            "no synchronous standby confirmed snowflake_id's durable mark within {}",
            snowflake_id_core::timefmt::format_duration(waited_ms)
        ),
    )
    .detail("IDs above the mark are issued only once a standby named in synchronous_standby_names has flushed it, so that a failover to that standby cannot repeat them.")
    .hint("Check that the standbys named in synchronous_standby_names are connected (pg_stat_replication). To issue IDs without them, remove them from synchronous_standby_names and reload; commits then stop waiting for them too.")
}

/// The record's bytes, if it is a mark record of this format.
///
/// # Safety
/// `record` must be the record being redone or described.
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
unsafe fn mark_of(record: *mut pg_sys::XLogReaderState) -> Result<Record, String> {
    unsafe {
        let decoded = (*record).record;
        let info = (*decoded).header.xl_info & !(pg_sys::XLR_INFO_MASK as u8);
        if info != INFO_MARK {
            return Err(format!("unknown record type {info:#x}"));
        }
        let len = (*decoded).main_data_len as usize;
        if len != RECORD {
            return Err(format!("{len} bytes instead of {RECORD}"));
        }
        let data = std::slice::from_raw_parts((*decoded).main_data as *const u8, len);
        Record::decode(data).ok_or_else(|| "its checksum does not match".to_string())
    }
}

/// Redo of a mark record, in the startup process. An ERROR here would stop
/// the server, so nothing in it raises: a record it cannot read refuses
/// generation instead (the status and every call say why).
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    let parsed = unsafe { mark_of(record) };
    let outcome = std::panic::catch_unwind(|| match parsed {
        Ok(rec) => crate::durable::replay(&rec),
        Err(why) => crate::durable::replay_unreadable(&why),
    });
    if outcome.is_err() {
        errors::log(
            Failure::new(
                Class::Corrupted,
                "snowflake_id could not replay a durable mark record",
            ),
            PgLogLevel::WARNING,
        );
    }
}

#[cfg(not(any(feature = "pg13", feature = "pg14")))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn desc(buf: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    let text = match unsafe { mark_of(record) } {
        Ok(r) => format!(
            "mark tick {} worker {} generation {} system {} timeline {}",
            r.mark_tick, r.worker_id, r.generation, r.system_id, r.timeline
        ),
        Err(why) => format!("unreadable mark: {why}"),
    };
    let c = std::ffi::CString::new(text).unwrap_or_default();
    // SAFETY: appends to the buffer Postgres handed us.
    unsafe { pg_sys::appendStringInfoString(buf, c.as_ptr()) };
}

#[cfg(not(any(feature = "pg13", feature = "pg14")))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const std::ffi::c_char {
    if info & !(pg_sys::XLR_INFO_MASK as u8) == INFO_MARK {
        c"MARK".as_ptr()
    } else {
        std::ptr::null()
    }
}
