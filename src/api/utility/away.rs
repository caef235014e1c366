//! The commands that need the claims database to themselves: `DROP
//! DATABASE`, `ALTER DATABASE ... RENAME TO` and `... SET TABLESPACE`
//! refuse while any session is connected, and `CREATE DATABASE ...
//! TEMPLATE` refuses while its template has one. The claims worker stays
//! connected to its database; so, when its owner (or a superuser) runs one
//! of them on it, the worker is asked to leave first and to wait until the
//! command is over before it connects again.

use crate::bgworkers::claims;
use crate::pg::charset::from_server;
use crate::pg::clock::{now_ms, sleep_on_latch};
use crate::pg::ddl::Statement;
use crate::pg::process::{self, ProcessLocal};
use crate::pg::text::Text;
use crate::pg::{database, role, signals};
use crate::shmem;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;
use std::ffi::CStr;

/// How long the claims worker stays away at most, should the session that
/// asked it to never say the command is over (a crash).
const PAUSE_LIMIT_MS: i64 = 60_000;
/// How long the command waits for the worker to leave (Postgres then waits
/// another 5 s for sessions to go, as it always does).
const LEAVE_WAIT_MS: i64 = 5_000;
/// How often a role other than a superuser may send the worker away.
const AWAY_AT_MOST_EVERY_MS: i64 = 10_000;

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
    held_one_more();
    let Some(pid) = shm.claims.pid.get() else {
        return true;
    };
    // The claims worker ends on SIGTERM (and the postmaster starts it again).
    signals::terminate(pid);
    let deadline = now + LEAVE_WAIT_MS;
    while shm.claims.pid.get() == Some(pid) && now_ms() < deadline {
        sleep_on_latch(10);
    }
    true
}

/// The holds this process has on the claims worker (`send_away`), and
/// whether it releases them at its exit: a command that ends with a FATAL
/// error (`pg_terminate_backend` while it waits for the database's other
/// sessions, say) never reaches its `finally`, and its hold must not keep
/// the worker out for the rest of its 60 s, nor let every later hold of its
/// database's owner, one each 10 s, keep it out for good.
static HELD: ProcessLocal<Cell<u32>> = ProcessLocal(Cell::new(0));
static RELEASED_AT_EXIT: ProcessLocal<Cell<bool>> = ProcessLocal(Cell::new(false));

fn held_one_more() {
    HELD.0.set(HELD.0.get() + 1);
    if !RELEASED_AT_EXIT.0.replace(true) {
        process::at_exit(release_at_exit, 0);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn release_at_exit(_code: i32, _arg: pg_sys::Datum) {
    while HELD.0.get() > 0 {
        call_back();
    }
}

/// Lets the claims worker connect again, once no other command holds it away.
fn call_back() {
    let held = HELD.0.get();
    if held == 0 {
        return;
    }
    HELD.0.set(held - 1);
    if let Some(shm) = shmem::get() {
        shm.claims.release_away();
    }
}

/// Runs a utility statement (`run`), with the claims worker sent away
/// first when the statement needs its database free.
pub(crate) fn around(stmt: &Statement<'_>, run: impl FnOnce() + std::panic::UnwindSafe) {
    let target = stmt.database_needing_free();
    let claims_db = shmem::get().and_then(claims::database_name);
    let away = target
        .is_some_and(|t| Some(t.to_bytes()) == claims_db.as_deref().map(str::as_bytes))
        && target.is_some_and(may_act_on)
        && send_away();
    // A database dropped, whoever dropped it and whether or not the worker
    // was sent away (DROP DATABASE ... WITH (FORCE) ends it either way): if
    // it was the Citus database offered to the worker, the next backend to
    // read Citus's metadata offers one again, instead of the worker waiting
    // for what is gone until a restart.
    let dropped = target
        .filter(|_| stmt.drops_database())
        .and_then(database::oid_by_name);
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
