//! Worker-id claims ("snowflake_id claims" background worker): where
//! `snowflake_id.claims_database` names a database, this server keeps a row
//! there in `snowflake_claims` saying which worker id it issues IDs under,
//! refreshes it every two seconds, and judges the rows other servers' data
//! brought along (logical replication, pglogical). What it concludes is
//! published here in shared memory: a refusal (generation stops until the
//! other claim goes stale), or a warning, both shown in `problem` and the
//! server log.
//!
//! A separate worker, not the reserver: it runs SQL in a database, which
//! can wait on locks or a full disk, and the durable mark must never wait
//! for that. Generation itself pays nothing: a refusal revokes the
//! published durable window, which sends callers down the slow path that
//! checks for refusals anyway.

mod keeper;
mod memory;
mod session;
mod table;

use keeper::{hold_for_move, Keeper};
pub use memory::start;
pub use session::database_name;
use session::{connect, in_transaction, is_template, leave_template, pin_session, Database};

use super::skeleton::{enter, BgWorker};
use crate::pg::clock::{now_ms, sleep_on_latch};
use crate::pg::text::ident;
use crate::pg::{process, signals};
use crate::settings;
use crate::shmem::Shmem;
use crate::worker_id::{self};
use pgrx::bgworkers::BackgroundWorkerBuilder;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowflake_id_core::claims::REFRESH_MS;
use snowflake_id_core::config::{self};
use snowflake_id_core::failure::literal;
use snowflake_id_core::shared_text::SharedText;
use snowflake_id_core::{Class, Failure};
use std::time::Duration;

/// What the claims say short of a refusal: a collision this server goes on
/// through, or why claims are not being kept. For `problem`.
pub fn warning(shm: &Shmem) -> Option<String> {
    if !settings::claims_kept() {
        return None;
    }
    let text = |t: &SharedText| t.failure().map(|f| f.message);
    // Trouble first: while claims cannot be read, a finding is dated; so
    // it is while the worker is down.
    text(shm.claims.trouble())
        .or_else(|| {
            shm.claims.pid.get().is_none().then(|| {
                "the claims worker (snowflake_id claims) is not running: this server's worker-id claim is not refreshed".to_string()
            })
        })
        .or_else(|| text(shm.claims.finding()))
        .or_else(|| two_citus_databases(shm))
        .or_else(|| text(shm.claims.skipped()))
}

/// Where a second database lists this node in its Citus metadata (a copy of
/// the Citus database, made with CREATE DATABASE ... TEMPLATE), which of the
/// two the claims and the worker id follow. Citus keeps only its cluster's
/// database up to date, and nothing on this server tells which that is.
fn two_citus_databases(shm: &Shmem) -> Option<String> {
    let (kept, other) = (shm.claims.offered_database()?, shm.claims.other_member()?);
    if kept == other {
        return None;
    }
    let name = crate::pg::database::name;
    let (kept, other) = (name(kept)?, name(other)?);
    let (kept_id, other_id) = (ident(&kept), ident(&other));
    Some(format!(
        "databases {kept_id} and {other_id} both hold Citus metadata that lists this node: the worker-id claim is kept, and the worker id follows Citus's group id, in {kept_id} (the first one a session used); if {other_id} is the cluster's database, set snowflake_id.claims_database = {} and restart, or drop the copy that is not the cluster's",
        literal(&other)
    ))
}

/// Registers the claims worker when claims are kept (`settings::claims_kept`;
/// never in binary-upgrade mode: pg_upgrade starts both clusters so to read
/// and write their catalogs, neither issues IDs then, and a claim refreshed
/// by the old one would reach the upgraded cluster as another live server's
/// claim on its worker id). It starts once recovery has ended: a standby
/// issues no IDs and claims nothing, a promoted one claims under its new
/// timeline.
pub(super) fn register() {
    if !settings::claims_kept() {
        return;
    }
    BackgroundWorkerBuilder::new("snowflake_id claims")
        .set_type("snowflake_id claims")
        .set_library("snowflake_id")
        .set_function("snowflake_claims_main")
        .enable_spi_access()
        .set_restart_time(Some(Duration::from_secs(5)))
        .load();
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_claims_main(_arg: pg_sys::Datum) {
    let Some(shm) = enter(BgWorker::Claims) else {
        return;
    };
    let db = database_to_keep(shm);
    // Stays if the connection fails (FATAL ends this process; the
    // postmaster starts it again in 5 s), so the status says why.
    shm.claims.trouble().set(
        &Failure::new(
            Class::NotReady,
            format!(
                "this server's worker-id claim is not kept: the claims worker cannot connect to {}",
                db.words()
            ),
        )
        .to_text(),
    );
    // Out of the database while a command that needs it free runs.
    while shm.claims.kept_out(now_ms()) {
        if signals::terminating() {
            process::exit(1);
        }
        sleep_on_latch(100);
    }
    // Connecting waits for the database's lock without end (a RENAME of it
    // in an open or prepared transaction holds it): until connected and
    // pinned (lock_timeout), SIGTERM ends the wait, as it ends a backend's.
    let db = connect(&db);
    shm.claims.database().set(&db);
    pin_session();
    // From here every wait is bounded by the pinned timeouts, and SIGTERM
    // only asks the loop to end, so that a shutdown's last transaction
    // (`release`) runs.
    signals::sigterm_ends_loop_only();
    shm.claims.trouble().set("");
    // Calls that wait for this worker's first judging (on Citus) wait from now.
    worker_id::claims_worker_started(shm);
    let mut keeper = Keeper::new(shm, db);
    loop {
        if signals::terminating() {
            if signals::server_shutting_down() {
                keeper.release(shm);
            }
            // Status 1: the postmaster starts it again (after a shutdown
            // it does not); 0 would unregister it until the next restart.
            process::exit(1);
        }
        if let Some(f) = in_transaction(is_template).ok().flatten() {
            leave_template(shm, f);
        }
        signals::reload_if_asked();
        let group = follow_group(shm);
        if matches!(group, Group::Moved) {
            keeper.moving_unread = None;
        }
        keeper.group_read = !matches!(group, Group::Unread);
        keeper.refresh(shm);
        sleep_on_latch(REFRESH_MS);
    }
}

/// The database the claims are kept in: the claims database named in the
/// settings, or on a Citus node without one, the database whose Citus
/// metadata this node belongs to, once a backend has read it there (the
/// first ID, or the status, drawn or read there); waited for until then.
fn database_to_keep(shm: &Shmem) -> Database {
    if let Some(db) = settings::claims_database() {
        return Database::Named(db);
    }
    loop {
        if signals::terminating() {
            process::exit(1);
        }
        if let Some(oid) = shm.claims.offered_database() {
            return Database::Citus(oid);
        }
        // IDs go on meanwhile only where the worker id was settled without
        // the Citus database: from the settings, or before that database
        // was dropped.
        if worker_id::in_force(shm).is_some() {
            let why = if shm.claims.forgotten() {
                "the Citus database it was kept in was dropped"
            } else {
                "no session has drawn an ID or read the status in this node's Citus database since the server started"
            };
            shm.claims.trouble().set(
                &Failure::new(
                    Class::Warning,
                    format!("this server's worker-id claim is not kept: {why}"),
                )
                .hint("The first ID drawn, or status read, in this node's Citus database tells the claims worker where to keep it.")
                .to_text(),
            );
        }
        sleep_on_latch(100);
    }
}

/// What `follow_group` found of the node's group.
enum Group {
    /// Nothing to follow (the worker id is not a group id, or not settled
    /// yet), or the group it follows.
    Same,
    /// The worker id moved (`ClaimsState::moving` says from what to what).
    Moved,
    /// The group could not be read.
    Unread,
}

/// On a Citus node, the worker id follows the node's group id while the
/// server runs: Citus gives a node a new group id when it is added again
/// (and a promoted clone its own, which it waits for: see
/// `citus::read_worker_id`). Read at every refresh, so IDs carry the new
/// group within one refresh of Citus writing it.
fn follow_group(shm: &Shmem) -> Group {
    let Ok(cfg) = settings::config() else {
        return Group::Unread;
    };
    if !matches!(cfg.worker, config::WorkerSource::CitusGroup { .. }) {
        return Group::Same;
    }
    let Some(old) = worker_id::in_force(shm) else {
        return Group::Same;
    };
    let Ok(Some(Ok((new, origin)))) = in_transaction(|| worker_id::citus_group_now(shm, cfg))
    else {
        return Group::Unread;
    };
    if new == old {
        return Group::Same;
    }
    // Refused from before the move until a refresh has read the other
    // nodes' claims on the new id and judged them (it lifts the refusal
    // when none collides): a group id given by hand, or metadata edited,
    // must not issue a row under an id another node holds. Kept in shared
    // memory, so that a restart of this worker alone keeps refusing.
    hold_for_move(
        shm,
        &format!("this node's worker id moves from {old} to {new} ({origin})"),
    );
    worker_id::follow(shm, old, new, &origin);
    Group::Moved
}
