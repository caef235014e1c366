//! Locks on relations, taken as Postgres's own commands take them: held to
//! the end of the (sub)transaction; and the lightweight locks of this
//! library's own tranche, held around a step in shared memory.

use pgrx::pg_sys;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The lock modes this library takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// What every reader takes: conflicts with ACCESS EXCLUSIVE alone.
    AccessShare,
    /// What VACUUM and ANALYZE take: conflicts with itself and DDL, not
    /// with reads and writes.
    ShareUpdateExclusive,
    /// What ALTER TABLE takes: conflicts with everything.
    AccessExclusive,
}

impl Mode {
    fn lockmode(self) -> pg_sys::LOCKMODE {
        (match self {
            Mode::AccessShare => pg_sys::AccessShareLock,
            Mode::ShareUpdateExclusive => pg_sys::ShareUpdateExclusiveLock,
            Mode::AccessExclusive => pg_sys::AccessExclusiveLock,
        }) as pg_sys::LOCKMODE
    }
}

/// Locks relation `oid` in `mode`, waiting as long as `lock_timeout` says
/// (its error, if it runs out, is Postgres's). Inside a transaction only:
/// outside one the lock would be held by no resource owner until the
/// process ends.
pub fn relation(oid: pg_sys::Oid, mode: Mode) {
    // SAFETY: a lock on a relation by OID; an OID that names no relation
    // is locked all the same, as LockRelationOid does (a lock taken outside
    // a transaction is leaked, not unsound).
    unsafe { pg_sys::LockRelationOid(oid, mode.lockmode()) }
}

/// Runs `f` holding relation `oid` (of this database) locked in `mode` for
/// the session, not the transaction: released when `f` returns or raises,
/// so that sessions waiting for it wait for `f` alone, never for the rest
/// of its caller's transaction (which a role may leave open for ever).
pub fn relation_during<R>(
    oid: pg_sys::Oid,
    mode: Mode,
    f: impl FnOnce() -> R + std::panic::UnwindSafe,
) -> R {
    let lockmode = mode.lockmode();
    let mut id = pg_sys::LockRelId {
        relId: oid,
        // SAFETY: a plain read of this backend's database.
        dbId: unsafe { pg_sys::MyDatabaseId },
    };
    // SAFETY: a session lock on a relation of this database, released
    // below however `f` ends (an abort does not release session locks).
    unsafe { pg_sys::LockRelationIdForSession(&mut id, lockmode) };
    pgrx::PgTryBuilder::new(f)
        .finally(move || {
            let mut id = id;
            // SAFETY: the lock taken above, held by this session.
            unsafe { pg_sys::UnlockRelationIdForSession(&mut id, lockmode) }
        })
        .execute()
}

/// Locks relation `oid` in `mode` if no one holds a conflicting lock;
/// whether it did.
pub fn relation_if_free(oid: pg_sys::Oid, mode: Mode) -> bool {
    // SAFETY: as `relation`, without waiting.
    unsafe { pg_sys::ConditionalLockRelationOid(oid, mode.lockmode()) }
}

/// Locks relation `oid` in `mode` for the transaction, waiting at most
/// `wait` for a conflicting lock to go, whatever `lock_timeout` says; false
/// if it did not. Polled rather than queued for, so that a lock a role holds
/// for ever bounds the caller's wait, not its own; a cancel ends the wait.
pub fn relation_within(oid: pg_sys::Oid, mode: Mode, wait: std::time::Duration) -> bool {
    let started = std::time::Instant::now();
    let mut nap = 1u64;
    loop {
        if relation_if_free(oid, mode) {
            return true;
        }
        let left = wait.saturating_sub(started.elapsed());
        if left.is_zero() {
            return false;
        }
        crate::pg::clock::sleep_on_latch(nap.min(left.as_millis() as u64 + 1));
        pgrx::check_for_interrupts!();
        nap = (nap * 2).min(50);
    }
}

/// A lightweight lock of this library's tranche, kept in shared memory.
#[repr(C)]
pub struct SharedLock(AtomicPtr<pg_sys::LWLock>);

impl SharedLock {
    /// # Safety
    /// `lock` must be a lightweight lock that lives as long as the shared
    /// memory this is kept in.
    pub unsafe fn new(lock: *mut pg_sys::LWLock) -> SharedLock {
        SharedLock(AtomicPtr::new(lock))
    }

    /// Runs `f` holding the lock exclusively. An ERROR inside `f` releases
    /// it with every LWLock, as Postgres's abort does; a Rust panic, by
    /// the guard.
    pub fn exclusive<R>(&self, f: impl FnOnce() -> R) -> R {
        let lock = self.0.load(Ordering::Relaxed);
        // SAFETY: valid for the shared memory's life (`new`).
        unsafe { pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE) };
        struct Release(*mut pg_sys::LWLock);
        impl Drop for Release {
            fn drop(&mut self) {
                // SAFETY: acquired above, by this process.
                unsafe { pg_sys::LWLockRelease(self.0) };
            }
        }
        let _release = Release(lock);
        f()
    }
}
