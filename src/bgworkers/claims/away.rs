//! The commands that need the claims database to themselves: `DROP
//! DATABASE`, `ALTER DATABASE ... RENAME TO` and `... SET TABLESPACE`
//! refuse while any session is connected, and `CREATE DATABASE ...
//! TEMPLATE` refuses while its template has one. The claims worker stays
//! connected to its database; so, when its owner (or a superuser) runs one
//! of them on it, the worker is asked to leave first and to wait until the
//! command is over before it connects again.

use crate::pg::clock::{now_ms, sleep_on_latch};
use crate::pg::encoding::from_server;
use crate::pg::role;
use crate::pg::text::Text;
use crate::shmem;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgList;
use std::ffi::CStr;

/// How long the claims worker stays away at most, should the session that
/// asked it to never say the command is over (a crash).
const PAUSE_LIMIT_MS: i64 = 60_000;
/// How long the command waits for the worker to leave (Postgres then waits
/// another 5 s for sessions to go, as it always does).
const LEAVE_WAIT_MS: i64 = 5_000;
/// How often a role other than a superuser may send the worker away.
const AWAY_AT_MOST_EVERY_MS: i64 = 10_000;

/// The database a statement needs free of other sessions, if any.
///
/// # Safety
/// `stmt` is a utility statement's parse tree.
unsafe fn needs_free(stmt: *mut pg_sys::Node) -> Option<&'static CStr> {
    let option = |options: *mut pg_sys::List, name: &CStr| -> Option<*mut pg_sys::DefElem> {
        // SAFETY: a list of DefElem, as the parser makes these options.
        unsafe { PgList::<pg_sys::DefElem>::from_pg(options) }
            .iter_ptr()
            // SAFETY: each element is a DefElem with a name.
            .find(|d| unsafe { CStr::from_ptr((**d).defname) } == name)
    };
    // SAFETY: the node's tag says which statement it is; each name read is
    // a NUL-terminated string of the parse tree, which outlives the command.
    unsafe {
        match (*stmt).type_ {
            pg_sys::NodeTag::T_DropdbStmt => {
                Some(CStr::from_ptr((*stmt.cast::<pg_sys::DropdbStmt>()).dbname))
            }
            pg_sys::NodeTag::T_RenameStmt => {
                let r = stmt.cast::<pg_sys::RenameStmt>();
                ((*r).renameType == pg_sys::ObjectType::OBJECT_DATABASE)
                    .then(|| CStr::from_ptr((*r).subname))
            }
            pg_sys::NodeTag::T_CreatedbStmt => {
                let c = stmt.cast::<pg_sys::CreatedbStmt>();
                // TEMPLATE DEFAULT has no argument: the default template.
                option((*c).options, c"template")
                    .filter(|d| !(**d).arg.is_null())
                    .map(|d| CStr::from_ptr(pg_sys::defGetString(d)))
            }
            pg_sys::NodeTag::T_AlterDatabaseStmt => {
                let a = stmt.cast::<pg_sys::AlterDatabaseStmt>();
                option((*a).options, c"tablespace").map(|_| CStr::from_ptr((*a).dbname))
            }
            _ => None,
        }
    }
}

/// Whether the current user may run such a command on database `name`:
/// its owner, a member of the owner's role, or a superuser. Anyone else
/// would be refused by the command anyway, and must not be able to keep
/// the worker away by trying.
fn may_act_on(name: &CStr) -> bool {
    let owner: Option<pg_sys::Oid> = Spi::get_one_with_args(
        "SELECT datdba FROM pg_catalog.pg_database WHERE datname OPERATOR(pg_catalog.=) $1::pg_catalog.text::pg_catalog.name",
        &[Text(from_server(name.to_bytes()).unwrap_or_default()).into()],
    )
    .ok()
    .flatten();
    owner.is_some_and(role::acts_as)
}

/// Asks the claims worker to leave and stay away until `call_back`; waits
/// (up to 5 s) for it to go. Returns whether it was asked: for a role other
/// than a superuser, at most once in 10 s, so that no loop of commands,
/// failing or not, keeps claims off for more than the worker's restart (5 s)
/// in each 10. Raises nothing: interrupts wait until the command runs.
fn send_away() -> bool {
    let Some(shm) = shmem::get() else {
        return false;
    };
    let now = now_ms();
    if !shm.claims.hold_away(
        now,
        now + PAUSE_LIMIT_MS,
        role::is_superuser(),
        AWAY_AT_MOST_EVERY_MS,
    ) {
        return false;
    }
    let Some(pid) = shm.claims.pid.get() else {
        return true;
    };
    // SAFETY: signals the claims worker, a child of the same postmaster,
    // which ends on SIGTERM (and the postmaster starts it again).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = now + LEAVE_WAIT_MS;
    while shm.claims.pid.get() == Some(pid) && now_ms() < deadline {
        sleep_on_latch(10);
    }
    true
}

/// Lets the claims worker connect again, once no other command holds it away.
fn call_back() {
    if let Some(shm) = shmem::get() {
        shm.claims.release_away();
    }
}

/// Runs a utility statement (`run`), with the claims worker sent away
/// first when the statement needs its database free.
pub(crate) fn around(stmt: *mut pg_sys::Node, run: impl FnOnce() + std::panic::UnwindSafe) {
    // SAFETY: the statement Postgres is about to run, unchanged.
    let target = unsafe { needs_free(stmt) };
    let claims_db = shmem::get().and_then(super::database_name);
    let away = target
        .is_some_and(|t| Some(t.to_bytes()) == claims_db.as_deref().map(str::as_bytes))
        && target.is_some_and(may_act_on)
        && send_away();
    // A database dropped, whoever dropped it and whether or not the worker
    // was sent away (DROP DATABASE ... WITH (FORCE) ends it either way): if
    // it was the Citus database offered to the worker, the next backend to
    // read Citus's metadata offers one again, instead of the worker waiting
    // for what is gone until a restart.
    // SAFETY: the node's tag, as above.
    let drops = unsafe { pgrx::is_a(stmt, pg_sys::NodeTag::T_DropdbStmt) };
    let dropped = target
        .filter(|_| drops)
        // SAFETY: a NUL-terminated name; missing_ok, so a name not found
        // is InvalidOid rather than an error.
        .map(|t| unsafe { pg_sys::get_database_oid(t.as_ptr(), true) })
        .filter(|oid| *oid != pg_sys::InvalidOid);
    let forget = move || {
        if let (Some(oid), Some(shm)) = (dropped, shmem::get()) {
            shm.claims.forget_database(oid);
        }
    };
    if !away {
        run();
        return forget();
    }
    PgTryBuilder::new(move || {
        run();
        forget();
    })
    .finally(call_back)
    .execute()
}
