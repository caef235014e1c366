//! The mark in WAL: a custom WAL resource manager (PostgreSQL 15+) whose
//! records are the mark, the backfill map's leases and the worker id
//! leased from the registry, so that crash
//! recovery, standbys, restored base backups and point-in-time recovery
//! all replay them. Logging a record, its redo and its description, as
//! Postgres keeps `sequence_xlog.c` beside `sequence.c`. PostgreSQL 13
//! and 14 have no custom resource managers: nothing is WAL-logged there
//! (see the README).

use super::file::{file, io_failure};
use super::lease_file;
use super::worker_lease;
use crate::pg::error;
use crate::settings;
use crate::shmem::mark::MarkSource;
use crate::shmem::refusal::MarkRefusal;
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
use pgrx::pg_sys;
use pgrx::PgLogLevel;
use snowflake_id_core::backfill::Raise;
use snowflake_id_core::mark::{Identity, Record};
use snowflake_id_core::{Class, Failure};
use std::sync::atomic::Ordering;

/// The `xl_info` of a mark record and of a backfill lease's (the low four
/// bits belong to Postgres).
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
const INFO_MARK: u8 = 0x10;
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
const INFO_LEASE: u8 = 0x20;
/// A worker id leased from the registry (`worker_lease`).
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
const INFO_WORKER_LEASE: u8 = 0x30;

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
    return log_as(INFO_MARK, &rec.encode());
    #[cfg(any(feature = "pg13", feature = "pg14"))]
    {
        let _ = rec;
        None
    }
}

/// Writes raises of the backfill map to WAL, flushed once after the last,
/// as [`log`] a mark; returns the end of the last.
pub(super) fn log_raises(raises: &[Raise]) -> Option<u64> {
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    if enabled() {
        let mut end = None;
        for r in raises {
            // SAFETY: RMGR_ID is written once in _PG_init.
            end = Some(crate::pg::xlog::insert(
                unsafe { RMGR_ID },
                INFO_LEASE,
                &r.encode(),
            ));
        }
        end.inspect(|&lsn| crate::pg::xlog::flush(lsn));
        return end;
    }
    let _ = raises;
    None
}

/// Writes a worker lease (its file's bytes) to WAL and flushes it.
pub(super) fn log_worker_lease(bytes: &[u8]) -> Option<u64> {
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    return log_as(INFO_WORKER_LEASE, bytes);
    #[cfg(any(feature = "pg13", feature = "pg14"))]
    {
        let _ = bytes;
        None
    }
}

#[cfg(not(any(feature = "pg13", feature = "pg14")))]
fn log_as(info: u8, data: &[u8]) -> Option<u64> {
    // SAFETY: RMGR_ID is written once in _PG_init.
    enabled().then(|| crate::pg::xlog::insert_flushed(unsafe { RMGR_ID }, info, data))
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
        // Each record says whether a ceiling stands (records are replayed
        // in order, through the one the state file holds).
        if known == Some(tick)
            && shm.mark.origin() == (rec.system_id, rec.timeline)
            && shm.refusal.ceiling().unwrap_or_default() == rec.ceiling
            && shm.mark.history() == rec.history
        {
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
                shm.gen.continue_with(rec.continue_term);
                super::resume::restore_ceiling(shm, &cfg.layout, rec.ceiling);
            }
            // Under other settings the mark's ticks mean other IDs: refuse as
            // a restart would, with the same way out (adopt settings).
            Ok(_) => shm.refusal.refuse_mark(MarkRefusal::ReplayedOtherSettings),
            Err(_) => {}
        }
    });
}

/// Redo of a lease (startup process): raised in shared memory and
/// written to the state file, since no checkpoint will write it. Raises
/// nothing: an ERROR here would stop the server.
#[cfg_attr(any(feature = "pg13", feature = "pg14"), allow(dead_code))]
fn replay_lease(r: &Raise) {
    let Some(shm) = crate::shmem::get() else {
        return;
    };
    shm.backfill.with_map(|map| {
        if map.min_over(r.lo, r.hi) >= r.depth {
            return; // a lease this server's file had already
        }
        map.raise(r.lo, r.hi, r.depth);
        if let Err(e) = lease_file::write(map) {
            // Kept in shared memory all the same; only a restart before the
            // next lease could forget it.
            error::log(lease_file::io_failure("write", e), PgLogLevel::WARNING);
        }
    });
}

/// Redo of a worker lease record (startup process): its file written, since
/// no checkpoint writes it. Raises nothing: an ERROR here would stop the
/// server.
#[cfg_attr(any(feature = "pg13", feature = "pg14"), allow(dead_code))]
fn replay_worker_lease(bytes: &[u8]) {
    let written = snowflake_id_core::registry::Lease::decode(bytes)
        .map_err(|why| {
            Failure::new(
                Class::Corrupted,
                format!("snowflake_id: a worker lease record in WAL cannot be read: {why}"),
            )
        })
        .and_then(|_| worker_lease::write_file(bytes));
    if let Err(f) = written {
        error::log(f, PgLogLevel::WARNING);
    }
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
        shm.backfill.set_damaged();
    }
}

/// What a record of this resource manager holds.
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
#[allow(clippy::large_enum_variant)] // one per record redone, on the stack
enum Logged {
    Mark(Record),
    Lease(Raise),
    WorkerLease(Vec<u8>),
}

/// The record, if it is one of this format.
///
/// # Safety
/// `record` must be the record being redone or described.
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
unsafe fn logged(record: *mut pg_sys::XLogReaderState) -> Result<Logged, String> {
    use snowflake_id_core::backfill::RECORD as LEASE;
    // SAFETY: the decoded record Postgres hands the resource manager; its
    // main data is `main_data_len` bytes long.
    let (info, data) = unsafe {
        let decoded = (*record).record;
        let info = (*decoded).header.xl_info & !(pg_sys::XLR_INFO_MASK as u8);
        let len = (*decoded).main_data_len as usize;
        (
            info,
            std::slice::from_raw_parts((*decoded).main_data as *const u8, len),
        )
    };
    let sized = |want: &[usize]| match data.len() {
        n if want.contains(&n) => Ok(data),
        n => Err(format!("{n} bytes instead of {}", want[0])),
    };
    match info {
        // Formats 2 and 3 from earlier builds of this version, still replayed.
        INFO_MARK if !Record::whole(data) => {
            Err(format!("{} bytes are no whole mark record", data.len()))
        }
        INFO_MARK => Record::decode(data)
            .map(Logged::Mark)
            .ok_or_else(|| "its checksum does not match".to_string()),
        INFO_LEASE => Raise::decode(sized(&[LEASE])?)
            .map(Logged::Lease)
            .ok_or_else(|| "its block ends before it begins".to_string()),
        INFO_WORKER_LEASE => Ok(Logged::WorkerLease(data.to_vec())),
        _ => Err(format!("unknown record type {info:#x}")),
    }
}

/// Redo of a record, in the startup process. An ERROR here would stop
/// the server, so nothing in it raises: a record it cannot read refuses
/// generation instead (the status and every call say why).
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    // SAFETY: Postgres redoes the record it hands us.
    let parsed = unsafe { logged(record) };
    let outcome = std::panic::catch_unwind(|| match parsed {
        Ok(Logged::Mark(rec)) => replay(&rec),
        Ok(Logged::Lease(raise)) => replay_lease(&raise),
        Ok(Logged::WorkerLease(bytes)) => replay_worker_lease(&bytes),
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
    let text = match unsafe { logged(record) } {
        Ok(Logged::Mark(r)) => format!(
            "mark tick {} worker {} generation {} system {} timeline {}",
            r.mark_tick, r.worker_id, r.generation, r.system_id, r.timeline
        ),
        Ok(Logged::Lease(r)) => format!("backfill ticks {} to {} depth {}", r.lo, r.hi, r.depth),
        Ok(Logged::WorkerLease(b)) => match snowflake_id_core::registry::Lease::decode(&b) {
            Ok(l) => format!(
                "worker lease {} system {} released {}",
                l.worker_id, l.system_identifier, l.released
            ),
            Err(why) => format!("unreadable worker lease: {why}"),
        },
        Err(why) => format!("unreadable record: {why}"),
    };
    let c = std::ffi::CString::new(text).unwrap_or_default();
    // SAFETY: appends to the buffer Postgres handed us.
    unsafe { pg_sys::appendStringInfoString(buf, c.as_ptr()) };
}

#[cfg(not(any(feature = "pg13", feature = "pg14")))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const std::ffi::c_char {
    match info & !(pg_sys::XLR_INFO_MASK as u8) {
        INFO_MARK => c"MARK".as_ptr(),
        INFO_LEASE => c"BACKFILL".as_ptr(),
        INFO_WORKER_LEASE => c"WORKER_LEASE".as_ptr(),
        _ => std::ptr::null(),
    }
}
