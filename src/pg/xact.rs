//! Transactions begun by hand: a background worker's own, and a
//! subtransaction inside a statement (the pattern of PL/pgSQL's exception
//! blocks). Each is ended on every path, an error's included, with the
//! memory context, resource owner, user id and security context it began
//! with put back.

use super::process::ProcessLocal;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;

/// Runs `f` in a transaction of its own (a background worker, between
/// transactions), as the bootstrap superuser whatever role or session
/// authorization a database default set, in a security-restricted
/// operation (no SET ROLE, no temporary objects: what Postgres does while
/// it runs maintenance on a table). An error rolls it back and comes back
/// as its message and SQLSTATE instead of ending the process.
///
/// # Safety
/// Only between transactions, as a background worker's loop is: inside a
/// running transaction the abort of an error would free what its executor
/// still uses.
pub unsafe fn as_bootstrap_superuser<R>(
    f: impl FnOnce() -> R + std::panic::UnwindSafe + std::panic::RefUnwindSafe,
) -> Result<R, (String, PgSqlErrorCode)> {
    let (mut user, mut context) = (pg_sys::InvalidOid, 0);
    // SAFETY: between transactions (see above): the transaction calls of
    // every background worker's loop. The user id and security context are
    // put back below on success; an aborted transaction puts back what it
    // began with itself.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        pg_sys::SetUserIdAndSecContext(
            pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID),
            context | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
        );
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let result = PgTryBuilder::new(|| Ok(f()))
        .catch_others(|e| {
            let (message, code) = match &e {
                pg_sys::panic::CaughtError::PostgresError(r)
                | pg_sys::panic::CaughtError::ErrorReport(r)
                | pg_sys::panic::CaughtError::RustPanic { ereport: r, .. } => {
                    (r.message().to_string(), r.sql_error_code())
                }
            };
            Err((message, code))
        })
        .execute();
    // SAFETY: ends the transaction begun above, whichever way it went.
    unsafe {
        match result {
            Ok(_) => {
                pg_sys::PopActiveSnapshot();
                pg_sys::SetUserIdAndSecContext(user, context);
                pg_sys::CommitTransactionCommand();
            }
            Err(_) => pg_sys::AbortCurrentTransaction(),
        }
    }
    result
}

/// Runs `f` in a subtransaction, kept if it returns true and rolled back
/// (with the locks it took) if it returns false or raises `expected`, which
/// then counts as false. Any other error rolls it back and goes on.
pub fn attempt(
    expected: PgSqlErrorCode,
    f: impl FnOnce() -> bool + std::panic::UnwindSafe,
) -> bool {
    // SAFETY: the subtransaction pattern of PL/pgSQL's exception blocks:
    // begun here, and released or rolled back on every path below (an
    // error other than `expected` too, before it goes on), with the memory
    // context and resource owner put back.
    unsafe {
        let (context, owner) = (pg_sys::CurrentMemoryContext, pg_sys::CurrentResourceOwner);
        let end = |keep: bool| {
            if keep {
                pg_sys::ReleaseCurrentSubTransaction();
            } else {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
            }
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
        };
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        let kept = PgTryBuilder::new(f)
            .catch_when(expected, |_| false)
            .catch_others(|e| {
                end(false);
                e.rethrow()
            })
            .execute();
        end(kept);
        kept
    }
}

/// Transactions and subtransactions of this process that aborted (or were
/// prepared for two-phase commit, whose outcome this session will not
/// see) since [`count_aborts`] was first called.
static ABORTS: ProcessLocal<Cell<u64>> = ProcessLocal(Cell::new(0));
static COUNTING: ProcessLocal<Cell<bool>> = ProcessLocal(Cell::new(false));

/// How many transactions and subtransactions of this process aborted since
/// the first call: what was done in one that aborted is gone, and a caller
/// that keeps state across transactions compares counts to know.
pub fn count_aborts() -> u64 {
    if !COUNTING.0.get() {
        COUNTING.0.set(true);
        // SAFETY: callbacks registered once for the life of the process;
        // they only count.
        unsafe {
            pg_sys::RegisterXactCallback(Some(xact_ended), std::ptr::null_mut());
            pg_sys::RegisterSubXactCallback(Some(subxact_ended), std::ptr::null_mut());
        }
    }
    ABORTS.0.get()
}

#[pg_guard]
unsafe extern "C-unwind" fn xact_ended(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    if event == pg_sys::XactEvent::XACT_EVENT_ABORT
        || event == pg_sys::XactEvent::XACT_EVENT_PARALLEL_ABORT
        || event == pg_sys::XactEvent::XACT_EVENT_PREPARE
    {
        ABORTS.0.set(ABORTS.0.get() + 1);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn subxact_ended(
    event: pg_sys::SubXactEvent::Type,
    _sub: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        ABORTS.0.set(ABORTS.0.get() + 1);
    }
}
