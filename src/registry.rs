//! Worker ids leased from the registry (`worker_id_source = 'registry'`):
//! what this server asks the registry database, over a libpq connection
//! (`snowflake_id.registry`), and what it does with the answers.
//!
//! - `take`: at start, the lease the lease file holds (policy 'keep', this
//!   cluster's), asking nobody; else a lease from the registry, with every
//!   ID put above the last ID time of the worker id's previous holder, the
//!   lease written to WAL and its file, and only then IDs under it.
//! - `renew`: the registry says whether the lease is still this server's;
//!   released there or another's stops generation here (fail closed); a
//!   registry that lost the row (restored from an older backup) gets it
//!   back. A registry that does not answer stops nothing: a lease never
//!   expires.
//! - `release`: `snowflake_release_worker_id()`: generation stops here,
//!   the lease file says released, and the registry frees the worker id
//!   above this server's last ID time.

use crate::mark;
use crate::pg::clock::now_ms;
use crate::pg::libpq::Connection;
use crate::pg::xlog;
use crate::settings;
use crate::shmem::registry::Gone;
use crate::shmem::Shmem;
use crate::worker_id;
use snowflake_id_core::config::{Config, WorkerSource};
use snowflake_id_core::registry::{
    conninfo_problem, leasable_max, lease_from, Answer, Lease, Policy,
};
use snowflake_id_core::timefmt::format_instant;
use snowflake_id_core::{Class, Failure};

/// How long connecting to the registry may take, and one statement there.
const CONNECT_TIMEOUT_S: u32 = 10;
const QUERY_TIMEOUT_S: u32 = 15;

/// What `take` did.
pub enum Taken {
    /// Kept from the lease file: the registry said it still holds it, or
    /// could not be asked.
    Kept(String),
    /// Leased from the registry now.
    Leased(String),
}

/// This server's lease: kept from its file, or leased from the registry.
pub fn take(
    shm: &Shmem,
    cfg: &Config,
    policy: Policy,
    conn: &mut Option<Connection>,
) -> Result<Taken, Failure> {
    if let Some(lease) = worker_id::kept_lease(cfg, policy)? {
        // The registry is asked before the first ID under a kept lease: a
        // copy of this server made before its lease was released or given
        // away (a backup restored, a standby promoted, a server written off
        // with release_gone() that came back) must not issue under it. Only
        // the answer that it is gone stops it: a registry that cannot be
        // asked stops nothing, as a restart must not need it.
        match ask_renew(shm, cfg, lease.worker_id, policy, conn) {
            Ok(Renewal::Held(words)) => {
                worker_id::settle_leased(shm, lease.worker_id, "kept from its lease file");
                return Ok(Taken::Kept(format!(
                    "worker id {} kept from this server's lease file; {words}",
                    lease.worker_id
                )));
            }
            Err(f) => {
                *conn = None;
                worker_id::settle_leased(
                    shm,
                    lease.worker_id,
                    "kept from its lease file; the registry could not confirm it",
                );
                return Ok(Taken::Kept(format!(
                    "worker id {} kept from this server's lease file at {} without the registry's word ({}); asked again in a few seconds",
                    lease.worker_id,
                    format_instant(now_ms()),
                    f.message
                )));
            }
            // Nothing was issued under it since this start: the server
            // leases anew at once, as a restart would.
            Ok(Renewal::Gone(why)) => {
                release_in_file(lease.worker_id)?;
                crate::pg::error::log(
                    Failure::new(
                        Class::Warning,
                        format!(
                            "snowflake_id: the registry says worker id {} of this server's lease file is no longer this server's ({}): no ID was issued under it since this start, and a worker id is leased anew",
                            lease.worker_id,
                            why.words()
                        ),
                    )
                    .hint("A copy of a server made before its lease was released or given away (a backup, a standby) does this; nothing is needed."),
                    pgrx::PgLogLevel::WARNING,
                );
            }
        }
    }
    // A lease is written to WAL before its first ID: none is asked for
    // before this server can write (a disposable one would be spent).
    if xlog::in_recovery() {
        return Err(mark::read_only());
    }
    let sysid = xlog::system_identifier();
    let max = leasable_max(cfg.layout.max_worker());
    let c = connected(conn)?;
    let rows = c.query(
        "SELECT worker_id, system_identifier, leased_at_ms, floor_ms FROM snowflake_registry.lease(\
         $1::pg_catalog.numeric, $2, $3, $4::pg_catalog.int4, $5, $6::pg_catalog.int4)",
        &[
            &sysid.to_string(),
            &settings::server_name(),
            policy.name(),
            &max.to_string(),
            &shm.registry.start_token().to_string(),
            &backfill_text(cfg),
        ],
        QUERY_TIMEOUT_S,
    )?;
    let [row] = rows.as_slice() else {
        return Err(Failure::new(
            Class::Corrupted,
            format!(
                "the registry's answer to this server's lease is refused: {} rows instead of one",
                rows.len()
            ),
        ));
    };
    let col = |i: usize| row.get(i).and_then(|v| v.as_deref());
    let answer = Answer {
        worker_id: col(0),
        system_identifier: col(1),
        leased_at_ms: col(2),
        floor_ms: col(3),
    };
    let lease = lease_from(&answer, sysid, max, policy, now_ms())?;
    above_previous_holder(shm, cfg, &lease)?;
    mark::keep_worker_lease(&lease)?;
    worker_id::settle_leased(shm, lease.worker_id, "leased now");
    Ok(Taken::Leased(format!(
        "leased worker id {} at {}{}",
        lease.worker_id,
        format_instant(lease.leased_at_ms),
        lease.floor_ms.map_or(String::new(), |f| format!(
            ", issuing above its previous holder's last ID time {}",
            format_instant(f)
        ))
    )))
}

/// This server's backfill worker id for the registry to keep free, -1:
/// none, or one above every worker id the registry leases (a layout with
/// more worker bits counts them down from its largest), which it never
/// hands out and would refuse to be told of.
fn backfill_text(cfg: &Config) -> String {
    let leasable = leasable_max(cfg.layout.max_worker());
    worker_id::backfill_as_set()
        .filter(|b| u64::from(*b) <= leasable)
        .map_or(-1, i64::from)
        .to_string()
}

/// Every ID under `lease` above the last ID time of the worker id's
/// previous holder, durably, before the first: the previous holder's IDs
/// at that time and before carry the same worker id.
fn above_previous_holder(shm: &Shmem, cfg: &Config, lease: &Lease) -> Result<(), Failure> {
    let Some(floor_ms) = lease.floor_ms else {
        return Ok(());
    };
    let layout = &cfg.layout;
    let Some(tick) = layout.tick_at_ms(floor_ms) else {
        return Ok(()); // before the epoch: no ID of this layout is that old
    };
    if tick >= layout.last_tick() {
        return Err(Failure::new(
            Class::IdOutOfRange,
            format!(
                "the previous holder of worker id {} issued up to {}, past the end of {}",
                lease.worker_id,
                format_instant(floor_ms),
                layout.title()
            ),
        ));
    }
    let id = layout.id_from_counter(tick << layout.sequence_bits(), 0) as i64;
    let lim = settings::policy(layout)?.limits();
    mark::admin::floor_above(shm, cfg, &lim, id, 10_000).map(|_| ())
}

/// The registry's word on a lease this server holds.
enum Renewal {
    /// Still this server's (in words for the status).
    Held(String),
    /// Released there, or another server's (or no one's) now.
    Gone(Gone),
}

/// The registry says whether this server still holds `worker`; a lease
/// released there, or another's now, is released here too (WAL and the
/// lease file: a restart, a standby, a later copy lease anew) and stops
/// generation.
pub fn renew(
    shm: &Shmem,
    cfg: &Config,
    worker: u32,
    policy: Policy,
    conn: &mut Option<Connection>,
) -> Result<String, Failure> {
    let gone = match ask_renew(shm, cfg, worker, policy, conn)? {
        Renewal::Held(words) => return Ok(words),
        Renewal::Gone(gone) => gone,
    };
    mark::refuse_for_lease(shm, gone);
    release_in_file(worker)?;
    // Logged by the worker, as every failed renew.
    Err(mark::refused(shm).unwrap_or_else(|| Failure::new(Class::NotReady, "the lease is gone")))
}

/// Marks the lease of `worker` released in WAL and the lease file.
fn release_in_file(worker: u32) -> Result<(), Failure> {
    if let Some(mut lease) =
        mark::worker_lease::read()?.filter(|l| l.worker_id == worker && !l.released)
    {
        lease.released = true;
        mark::keep_worker_lease(&lease)?;
    }
    Ok(())
}

/// Renews `worker` in the registry: its answer.
fn ask_renew(
    shm: &Shmem,
    cfg: &Config,
    worker: u32,
    policy: Policy,
    conn: &mut Option<Connection>,
) -> Result<Renewal, Failure> {
    let sysid = xlog::system_identifier();
    let c = connected(conn)?;
    let rows = c.query(
        "SELECT snowflake_registry.renew($1::pg_catalog.int4, $2::pg_catalog.numeric, $3, $4, \
         $5::pg_catalog.int4, $6::pg_catalog.int4)",
        &[
            &worker.to_string(),
            &sysid.to_string(),
            &settings::server_name(),
            policy.name(),
            &leasable_max(cfg.layout.max_worker()).to_string(),
            &backfill_text(cfg),
        ],
        QUERY_TIMEOUT_S,
    )?;
    let said = rows
        .first()
        .and_then(|r| r.first().cloned().flatten())
        .unwrap_or_default();
    let gone = match said.as_str() {
        "held" | "restored" | "backfill_taken" => {
            let taken = said == "backfill_taken";
            if shm.registry.set_backfill_taken(taken) != taken && taken {
                crate::pg::error::log(
                    snowflake_id_core::registry::backfill_taken(),
                    pgrx::PgLogLevel::WARNING,
                );
            }
            let mut words = format!("worker id {worker} renewed at {}", format_instant(now_ms()));
            if said == "restored" {
                words = format!(
                    "the registry had no row for worker id {worker}, held here: written back at {}",
                    format_instant(now_ms())
                );
                crate::pg::error::log(
                    Failure::new(Class::Warning, format!("snowflake_id: {words}")).hint("A registry restored from an older backup, or a row deleted by hand: every holder's lease is written back at its next renew; until then the registry may hand out a worker id that a server still holds."),
                    pgrx::PgLogLevel::WARNING,
                );
            }
            if taken {
                words.push_str("; ");
                words.push_str(&snowflake_id_core::registry::backfill_taken().message);
            }
            return Ok(Renewal::Held(words));
        }
        "released" => Gone::ReleasedThere,
        "lost" => Gone::Lost,
        // Not an answer this server knows: asked again, nothing stopped.
        other => {
            return Err(Failure::new(
                Class::NotReady,
                format!(
                    "the registry's answer to the renew is not one of held, released, lost: {:?}",
                    other.chars().take(40).collect::<String>()
                ),
            ))
        }
    };
    Ok(Renewal::Gone(gone))
}

/// The open connection to the registry, opened if need be.
fn connected(conn: &mut Option<Connection>) -> Result<&mut Connection, Failure> {
    if conn.is_none() {
        *conn = Some(open()?);
    }
    Ok(conn.as_mut().expect("opened above"))
}

fn open() -> Result<Connection, Failure> {
    let Some(info) = settings::registry_conninfo() else {
        return Err(Failure::new(
            Class::NotReady,
            "snowflake_id.worker_id_source = 'registry', but snowflake_id.registry is not set",
        )
        .hint("ALTER SYSTEM SET snowflake_id.registry = 'host=... dbname=... user=...' (a libpq connection string; the password goes in the password file), then SELECT pg_reload_conf(). A value the server refused is named in its log."));
    };
    let keywords = snowflake_id_core::registry::conninfo_words(&info).map_err(|why| {
        Failure::new(Class::InvalidParameter, format!("snowflake_id.registry cannot be read: {why}"))
            .hint("Write it as a libpq connection string (host=... dbname=... user=...) or URI, then SELECT pg_reload_conf().")
    })?;
    if let Some(f) = conninfo_problem(&keywords) {
        return Err(f);
    }
    Connection::open(&info, "snowflake_id registry", CONNECT_TIMEOUT_S).map_err(|why| {
        Failure::new(Class::NotReady, format!("cannot connect to the registry: {why}"))
            .hint("Check that the registry server is up and that snowflake_id.registry names it, its database and a role granted by snowflake_registry_init(); the password goes in the password file. The server asks again every few seconds.")
    })
}

/// `snowflake_release_worker_id()`: this server stops issuing under its
/// lease (at once, and after a restart, which leases anew), and gives the
/// worker id back to the registry with the time every ID it issued is at
/// or before. Run again if the registry did not answer: the release here
/// stands, and is said to the registry again.
pub fn release(shm: &Shmem, cfg: &Config) -> Result<String, Failure> {
    mark::admin::require_superuser("snowflake_release_worker_id()")?;
    if !matches!(cfg.worker, WorkerSource::Registry { .. }) {
        return Err(Failure::new(
            Class::NotReady,
            "this server's worker id is not leased from a registry",
        )
        .hint("snowflake_release_worker_id() is for snowflake_id.worker_id_source = 'registry'; a worker id from the settings is freed by taking it out of them."));
    }
    let sysid = xlog::system_identifier();
    let Some(mut lease) = mark::worker_lease::read()?.filter(|l| l.system_identifier == sysid)
    else {
        return Err(Failure::new(Class::NotReady, "this server holds no lease from the registry")
            .hint("Nothing to release: SELECT worker_id_source, registry FROM snowflake_id.snowflake_status says what the registry last answered."));
    };
    mark::refuse_for_lease(shm, Gone::ReleasedHere);
    // Read under the mark's lock: a mark written meanwhile is either in
    // this reading, or refused by the flag set above (`mark::extend` looks
    // at it under the same lock).
    let last_ms = shm.mark.with_lock(|| last_id_time(shm, cfg));
    if !lease.released {
        lease.released = true;
        mark::keep_worker_lease(&lease)?;
    }
    let mut conn = open()?;
    conn.query(
        "SELECT snowflake_registry.release($1::pg_catalog.int4, $2::pg_catalog.numeric, $3::pg_catalog.int8)",
        &[&lease.worker_id.to_string(), &sysid.to_string(), &last_ms.to_string()],
        QUERY_TIMEOUT_S,
    )
    .map_err(|f| {
        let hint = if f.message.contains("is not leased to system identifier") {
            "The registry holds no lease of this server's for it any more (released there, or another server's): there is nothing left to release, and this server issues no more IDs under it."
        } else {
            "The lease is released here all the same (this server issues no more IDs under it); run SELECT snowflake_release_worker_id() again once the registry answers."
        };
        Failure::new(Class::NotReady, format!("the registry did not take the release: {}", f.message)).hint(hint)
    })?;
    Ok(format!(
        "worker id {} released to the registry: every ID this server issued under it is at or before {}; it issues no more IDs until restarted (then it leases a worker id anew)",
        lease.worker_id,
        format_instant(last_ms)
    ))
}

/// The time no ID of this server reaches: the end of its durable mark
/// (every ID issued lies within it), or the clock where it never wrote one.
fn last_id_time(shm: &Shmem, cfg: &Config) -> i64 {
    let mark_end = shm.mark.tick().map(|m| cfg.layout.tick_start_ms(m + 1));
    mark_end.unwrap_or(0).max(now_ms())
}
