//! When a database must be checked again: the generation of changes this
//! server hears (rows written into a record of floors, its definition
//! altered, a subscription's tables changing state, a database dropped),
//! the transaction-end callbacks that move it at commit, and which
//! generation this backend last found its database checked at.
//!
//! The lowest file of `copies`: it calls nothing of its siblings.

use crate::pg::process::ProcessLocal;
use crate::shmem::Shmem;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;

/// The generation of changes at which this backend last found its
/// database checked (0: never).
pub(super) static SEEN: ProcessLocal<Cell<u64>> = ProcessLocal(Cell::new(0));

/// Whether this process's transaction changed what decides a floor (the
/// generation moves at its commit).
static CHANGING: ProcessLocal<Cell<bool>> = ProcessLocal(Cell::new(false));

/// Whether this process is writing the extension's own row of the record
/// (a floor's, which changes no decision).
static WRITING_OWN: ProcessLocal<Cell<bool>> = ProcessLocal(Cell::new(false));

/// Whether this process's transaction added rows to a record of floors
/// (which two-phase commit would make visible after the change is heard).
static RECORD_WRITTEN: ProcessLocal<Cell<bool>> = ProcessLocal(Cell::new(false));

/// The database this process's transaction floored (0: none).
pub(super) static FLOORED_HERE: ProcessLocal<Cell<u32>> = ProcessLocal(Cell::new(0));

/// Whether this backend's database needs no check before its next ID (one
/// load: the quick path asks).
#[inline]
pub fn checked(shm: &Shmem) -> bool {
    SEEN.0.get() == shm.floored.generation()
}

/// Runs `write`, a write of the extension's own row, which the guard does
/// not count as a change (an error leaves the flag as it found it: the
/// next write sets it again, and a change counted too often costs one
/// read of the record, never a floor missed).
pub(super) fn own_write<R>(write: impl FnOnce() -> R) -> R {
    /// Cleared however the write ends (an error caught by a PL/pgSQL
    /// block around the caller included).
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            WRITING_OWN.0.set(false);
        }
    }
    WRITING_OWN.0.set(true);
    let _clear = Clear;
    write()
}

/// A database dropped: its OID may be another's later.
pub fn database_dropped(db: pg_sys::Oid) {
    if let Some(shm) = crate::shmem::get() {
        shm.floored.forget(db.to_u32());
    }
}

/// The record's guard, for a row written by anyone but the extension's
/// own floor: the generation moves when the transaction commits (and now,
/// so that a check running meanwhile does not count for after it).
pub fn record_written() {
    // The extension's creation writes its server's row, which changes no
    // decision either.
    // SAFETY: a plain read of this backend's state.
    if WRITING_OWN.0.get() || unsafe { pg_sys::creating_extension } {
        return;
    }
    if let Some(shm) = crate::shmem::get() {
        shm.floored.changed();
        CHANGING.0.set(true);
        RECORD_WRITTEN.0.set(true);
    }
}

/// The record's definition changed (`ALTER TABLE`: its triggers disabled
/// or enabled, as `pg_restore --disable-triggers` does around its rows):
/// every database checks again once the transaction commits, as after
/// rows the guard let in.
pub fn record_altered() {
    // SAFETY: a plain read of this backend's state.
    if unsafe { pg_sys::creating_extension } {
        return;
    }
    if let Some(shm) = crate::shmem::get() {
        shm.floored.changed();
        CHANGING.0.set(true);
    }
}

/// Registers, in the postmaster for every process it starts, what hears of
/// changes: the subscriptions' tables changing state (an initial copy
/// ending, a table added or removed), and the end of each transaction.
pub fn listen() {
    // SAFETY: called from _PG_init at preload, single-threaded: the
    // callbacks are inherited by every process the postmaster starts.
    unsafe {
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::SUBSCRIPTIONRELMAP as std::ffi::c_int,
            Some(subscriptions_changed),
            pg_sys::Datum::from(0),
        );
        pg_sys::RegisterXactCallback(Some(at_transaction_end), std::ptr::null_mut());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn subscriptions_changed(
    _arg: pg_sys::Datum,
    _cache: std::ffi::c_int,
    hash: u32,
) {
    // 0 is a reset of every cache (a process that fell behind the queue of
    // invalidations), not a change: the process that made a change hears
    // its own, with the row's hash.
    if hash != 0 {
        if let Some(shm) = crate::shmem::get() {
            shm.floored.changed();
            CHANGING.0.set(true);
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn at_transaction_end(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_PRE_PREPARE if RECORD_WRITTEN.0.get() => {
            // Its rows would become visible at COMMIT PREPARED, which no
            // session of this server hears of: sessions would not check again.
            pgrx::ereport!(
                PgLogLevel::ERROR,
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                "cannot prepare a transaction that added rows to snowflake_id.snowflake_floors",
                "Restore the record of floors in a transaction committed as usual."
            );
        }
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT | XACT_EVENT_PREPARE => {
            FLOORED_HERE.0.set(0);
            RECORD_WRITTEN.0.set(false);
            if CHANGING.0.replace(false) {
                if let Some(shm) = crate::shmem::get() {
                    shm.floored.changed();
                }
            }
        }
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT => {
            CHANGING.0.set(false);
            WRITING_OWN.0.set(false);
            RECORD_WRITTEN.0.set(false);
            let db = FLOORED_HERE.0.replace(0);
            if db != 0 {
                if let Some(shm) = crate::shmem::get() {
                    shm.floored.uncheck(db);
                }
            }
        }
        _ => {}
    }
}
