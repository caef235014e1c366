//! The mark in WAL: a custom WAL resource manager (PostgreSQL 15+) whose
//! one record is the mark, so that crash recovery, standbys, restored base
//! backups and point-in-time recovery all replay it. Logging a mark, its
//! redo and its description, as Postgres keeps `sequence_xlog.c` beside
//! `sequence.c`. PostgreSQL 13 and 14 have no custom resource managers:
//! marks are not WAL-logged there (see the README).

use super::file::{file, io_failure};
use crate::pg::error;
use crate::settings;
use crate::shmem::mark::MarkSource;
use crate::shmem::refusal::MarkRefusal;
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
use pgrx::pg_sys;
use pgrx::PgLogLevel;
use snowflake_id_core::mark::{Identity, Record};
use snowflake_id_core::{Class, Failure};
use std::sync::atomic::Ordering;

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
pub(super) fn log(rec: &Record) -> Option<u64> {
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    if enabled() {
        // SAFETY: RMGR_ID is written once in _PG_init.
        return Some(crate::pg::xlog::insert_flushed(
            unsafe { RMGR_ID },
            INFO_MARK,
            &rec.encode(),
        ));
    }
    let _ = rec;
    None
}

/// Redo of a mark record (startup process: crash recovery, a standby,
/// archive recovery). Persists the mark to the state file, since no
/// checkpoint callback will, then raises the generator above it. Raises
/// nothing: an ERROR here would stop the server.
#[cfg_attr(any(feature = "pg13", feature = "pg14"), allow(dead_code))]
fn replay(rec: &Record) {
    let Some(shm) = crate::shmem::get() else {
        return;
    };
    shm.counters.marks_replayed.fetch_add(1, Ordering::Relaxed);
    shm.mark.with_lock(|| {
        let cfg = settings::config();
        let same_settings = cfg
            .as_ref()
            .is_ok_and(|c| Identity::of(&c.layout) == rec.identity);
        // Under the same settings a mark only ever rises: a lower one (an
        // older timeline's, replayed after a newer mark was read) keeps the
        // higher tick and takes the record's origin.
        let known = shm.mark.tick();
        let tick = match known {
            Some(k) if same_settings => rec.mark_tick.max(k),
            _ => rec.mark_tick,
        };
        if known == Some(tick) && shm.mark.origin() == (rec.system_id, rec.timeline) {
            return; // nothing new (a mark logged again after a checkpoint)
        }
        let stored = Record {
            generation: shm.mark.generation() + 1,
            mark_tick: tick,
            ..*rec
        };
        if let Err(e) = file().write(&stored) {
            // Kept in shared memory all the same; only a restart before the
            // next readable mark could forget it.
            error::log(io_failure("write", e), PgLogLevel::WARNING);
        }
        shm.mark.note(&stored, MarkSource::WalReplay);
        match cfg {
            Ok(cfg) if same_settings => {
                shm.gen
                    .raise_floor(rec.mark_tick, cfg.layout.sequence_bits());
            }
            // Under other settings the mark's ticks mean other IDs: refuse as
            // a restart would, with the same way out (adopt settings).
            Ok(_) => shm.refusal.refuse_mark(MarkRefusal::ReplayedOtherSettings),
            Err(_) => {}
        }
    });
}

/// Redo of a mark record that cannot be read: generation is refused, since
/// the mark it held is unknown.
#[cfg_attr(any(feature = "pg13", feature = "pg14"), allow(dead_code))]
fn replay_unreadable(why: &str) {
    error::log(
        Failure::new(
            Class::Corrupted,
            format!("snowflake_id: a durable mark record in WAL cannot be read: {why}"),
        )
        .detail("Generation is refused on this server until the mark is re-established."),
        PgLogLevel::WARNING,
    );
    if let Some(shm) = crate::shmem::get() {
        shm.refusal.refuse_mark(MarkRefusal::UnreadableRecord);
    }
}

/// The record's bytes, if it is a mark record of this format.
///
/// # Safety
/// `record` must be the record being redone or described.
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
unsafe fn mark_of(record: *mut pg_sys::XLogReaderState) -> Result<Record, String> {
    use snowflake_id_core::mark::RECORD;
    // SAFETY: the decoded record Postgres hands the resource manager; its
    // main data is `main_data_len` bytes long.
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
    // SAFETY: Postgres redoes the record it hands us.
    let parsed = unsafe { mark_of(record) };
    let outcome = std::panic::catch_unwind(|| match parsed {
        Ok(rec) => replay(&rec),
        Err(why) => replay_unreadable(&why),
    });
    if outcome.is_err() {
        error::log(
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
    // SAFETY: Postgres describes the record it hands us.
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
