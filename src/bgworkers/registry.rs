//! The registry worker ("snowflake_id registry"): where
//! `worker_id_source = 'registry'`, it gives this server its worker id
//! (`registry::take`: kept from the lease file once the registry says it
//! still holds it or cannot be asked, or leased), asking again (after 2 s,
//! then twice as long each time, up to 30 s) until it has one, then renews
//! the lease every ten seconds (`registry::renew`). What the registry last
//! answered is published for the status, and a failure is logged once for
//! each new reason.
//!
//! A process of its own: it waits on the network, which neither the
//! reserver nor a caller may.

use super::skeleton::{enter, BgWorker};
use crate::pg::clock::{now_ms, sleep_on_latch};
use crate::pg::libpq::Connection;
use crate::pg::{process, signals};
use crate::registry::{renew, take, Taken};
use crate::settings;
use crate::shmem::Shmem;
use crate::worker_id;
use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowflake_id_core::config::WorkerSource;
use std::time::Duration;

/// How soon a server without a lease asks again, at first, and at most.
const RETRY_MS: i64 = 2_000;
const MAX_RETRY_MS: i64 = 30_000;
/// How often a held lease is renewed (its `renewed_at` in the registry, and
/// a check that it is still this server's).
const RENEW_MS: i64 = 10_000;

/// Registers the worker where the worker id comes from the registry (never
/// in binary-upgrade mode: pg_upgrade's servers issue nothing). It starts
/// once recovery has ended: it writes WAL.
pub(super) fn register() {
    let leases =
        settings::config().is_ok_and(|c| matches!(c.worker, WorkerSource::Registry { .. }));
    if !leases || process::binary_upgrade() {
        return;
    }
    BackgroundWorkerBuilder::new("snowflake_id registry")
        .set_type("snowflake_id registry")
        .set_library("snowflake_id")
        .set_function("snowflake_registry_main")
        .enable_shmem_access(None)
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(5)))
        .load();
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_registry_main(_arg: pg_sys::Datum) {
    let Some(shm) = enter(BgWorker::Registry) else {
        return;
    };
    let Ok(cfg) = settings::config() else {
        return;
    };
    let WorkerSource::Registry { policy } = cfg.worker else {
        return;
    };
    let mut conn: Option<Connection> = None;
    let mut next_renew = 0;
    let mut retry_ms = RETRY_MS;
    let mut logged = String::new();
    loop {
        if signals::terminating() {
            process::exit(0);
        }
        // A changed connection string is used from the next question on.
        let conninfo = settings::registry_conninfo();
        signals::reload_if_asked();
        if settings::registry_conninfo() != conninfo {
            conn = None;
            retry_ms = RETRY_MS;
        }
        let wait = match worker_id::in_force(shm) {
            None => match take(shm, cfg, policy, &mut conn) {
                Ok(Taken::Kept(said) | Taken::Leased(said)) => {
                    answered(shm, &said);
                    logged.clear();
                    next_renew = now_ms() + RENEW_MS;
                    RENEW_MS
                }
                Err(f) => {
                    conn = None;
                    failed(shm, &f, &mut logged);
                    // Doubling up to half a minute: a registry that
                    // refuses (full, a bad answer) is not asked in a loop.
                    let wait = retry_ms;
                    retry_ms = (retry_ms * 2).min(MAX_RETRY_MS);
                    wait
                }
            },
            Some(w) if now_ms() >= next_renew && shm.registry.gone().is_none() => {
                match renew(shm, cfg, w, policy, &mut conn) {
                    Ok(said) => {
                        answered(shm, &said);
                        logged.clear();
                    }
                    Err(f) => {
                        conn = None;
                        failed(shm, &f, &mut logged);
                    }
                }
                next_renew = now_ms() + RENEW_MS;
                RENEW_MS
            }
            Some(_) => (next_renew - now_ms()).clamp(100, RENEW_MS),
        };
        sleep_on_latch(wait as u64);
    }
}

fn answered(shm: &Shmem, text: &str) {
    shm.registry.answered(text, now_ms());
}

/// A failed question: in the status, and in the server's log once for each
/// new reason (a registry that keeps refusing is not logged every turn).
fn failed(shm: &Shmem, f: &snowflake_id_core::Failure, logged: &mut String) {
    answered(shm, &f.to_text());
    if *logged != f.message {
        logged.clone_from(&f.message);
        crate::pg::error::log(
            snowflake_id_core::Failure::new(
                snowflake_id_core::Class::Warning,
                format!("snowflake_id: the registry: {}", f.message),
            )
            .hint(f.hint.clone().unwrap_or_else(|| "SELECT registry FROM snowflake_id.snowflake_status says what the registry last answered.".into())),
            pgrx::PgLogLevel::WARNING,
        );
    }
}
