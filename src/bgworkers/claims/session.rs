//! The claims worker's session: connecting to the claims database, leaving
//! it while it is a template, pinning the session's settings, and each
//! transaction it runs.

use crate::pg::clock::now_ms;
use crate::pg::{error, process, xact};
use crate::settings;
use crate::shmem::Shmem;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgLogLevel};
use snowflake_id_core::{Class, Failure};

/// The longest a claims transaction waits for a lock before it gives up
/// until the next refresh (`lock_timeout`: a background worker's SPI never
/// arms `statement_timeout`).
const LOCK_TIMEOUT_MS: u64 = 1_500;
/// How long the worker stays out of a database it found to be a template.
const TEMPLATE_RECHECK_MS: i64 = 10_000;

/// The database claims are kept in: the one set, or on a Citus node
/// without one, the Citus database once the worker is connected to it.
pub fn database_name(shm: &Shmem) -> Option<String> {
    settings::claims_database().or_else(|| shm.claims.database().get().filter(|n| !n.is_empty()))
}

/// Connects to the claims database as the bootstrap superuser, the one
/// role every cluster has and no database owner can change. A database
/// whose owner set `ALLOW_CONNECTIONS false` is connected to all the same:
/// an owner alone cannot turn claims off.
/// The database the worker keeps claims in, before it is connected.
pub(super) enum Database {
    /// `snowflake_id.claims_database`.
    Named(String),
    /// The Citus database a backend offered.
    Citus(pg_sys::Oid),
}

impl Database {
    pub(super) fn words(&self) -> String {
        match self {
            Database::Named(db) => format!("database \"{db}\" (snowflake_id.claims_database)"),
            Database::Citus(oid) => format!("the Citus database (oid {})", oid.to_u32()),
        }
    }
}

/// Connects to the claims database; its name.
pub(super) fn connect(db: &Database) -> String {
    match db {
        Database::Named(db) => {
            if ["template0", "template1"].contains(&db.as_str()) {
                // Before connecting: a connection to a template makes every
                // CREATE DATABASE fail while it lasts.
                raise_template(db);
            }
            let name = std::ffi::CString::new(db.as_str()).unwrap_or_default();
            // SAFETY: called once, from a registered background worker
            // with database access, before any transaction.
            unsafe {
                pg_sys::BackgroundWorkerInitializeConnection(
                    name.as_ptr(),
                    std::ptr::null(),
                    pg_sys::BGWORKER_BYPASS_ALLOWCONN,
                )
            };
            db.clone()
        }
        Database::Citus(oid) => {
            // SAFETY: as above.
            unsafe {
                pg_sys::BackgroundWorkerInitializeConnectionByOid(
                    *oid,
                    pg_sys::InvalidOid,
                    pg_sys::BGWORKER_BYPASS_ALLOWCONN,
                )
            };
            in_transaction(|| {
                Spi::get_one::<String>("SELECT pg_catalog.current_database()::pg_catalog.text")
            })
            .ok()
            .and_then(Result::ok)
            .flatten()
            .unwrap_or_default()
        }
    }
}

fn template_failure(db: &str) -> Failure {
    Failure::new(
        Class::InvalidParameter,
        format!("snowflake_id.claims_database names the template database \"{db}\": claims are not kept"),
    )
    .detail("A template cannot be copied while a session is connected to it, and the claims worker stays connected; it looks again every 10 seconds.")
    .hint("Set snowflake_id.claims_database to a database that is not a template (one per server, where the extension is installed) and restart PostgreSQL, or make this one an ordinary database again (ALTER DATABASE ... IS_TEMPLATE false).")
}

fn raise_template(db: &str) -> ! {
    let f = template_failure(db);
    if let Some(shm) = crate::shmem::get() {
        shm.claims.trouble().set(&f.to_text());
    }
    error::log(f, PgLogLevel::WARNING);
    // Status 0: the postmaster does not start it again.
    process::exit(0)
}

/// Leaves a database that is (or became) a template: a template cannot be
/// copied while anyone is connected to it, and a claims worker there would
/// make every CREATE DATABASE from it fail. Looks again in 10 seconds (its
/// owner may make it an ordinary database again).
pub(super) fn leave_template(shm: &Shmem, f: Failure) -> ! {
    shm.claims.trouble().set(&f.to_text());
    error::log(f, PgLogLevel::WARNING);
    shm.claims.stay_out_until(now_ms() + TEMPLATE_RECHECK_MS);
    // Status 1: the postmaster starts it again, and it waits first.
    process::exit(1)
}

/// Whether the database connected to is a template, as the failure to say so.
pub(super) fn is_template() -> Option<Failure> {
    let template: Option<bool> = Spi::get_one_with_args(
        "SELECT d.datistemplate FROM pg_catalog.pg_database d WHERE d.oid OPERATOR(pg_catalog.=) $1",
        &[process::database_id().into()],
    )
    .unwrap_or(None);
    (template == Some(true)).then(|| {
        template_failure(
            &crate::shmem::get()
                .and_then(database_name)
                .unwrap_or_default(),
        )
    })
}

/// The settings every statement of this worker runs under, whatever the
/// database's or role's defaults say (`ALTER DATABASE ... SET` is the
/// database owner's to change; it reaches this worker at connection): no
/// schema but pg_catalog is searched, so no function, operator or type a
/// user created can stand in for a built-in one (the way Postgres's own
/// logical replication workers run); transactions are read-write at read
/// committed; no timeout a user set applies but the lock wait's own.
pub(super) fn pin_session() {
    let lock_timeout = LOCK_TIMEOUT_MS.to_string();
    #[cfg_attr(
        not(any(feature = "pg17", feature = "pg18", feature = "pg19")),
        allow(unused_mut)
    )]
    let mut pins: Vec<(&str, &str)> = vec![
        ("search_path", ""),
        ("default_transaction_read_only", "off"),
        ("default_transaction_isolation", "read committed"),
        ("default_transaction_deferrable", "off"),
        ("statement_timeout", "0"),
        ("lock_timeout", &lock_timeout),
        ("idle_in_transaction_session_timeout", "0"),
        ("synchronous_commit", "local"),
        ("standard_conforming_strings", "on"),
        ("transform_null_equals", "off"),
        ("row_security", "on"),
        // Small statements whose estimates can pass `jit_above_cost`.
        ("jit", "off"),
        // An error is the worker's to catch and report, never its end.
        ("exit_on_error", "off"),
    ];
    #[cfg(any(feature = "pg17", feature = "pg18", feature = "pg19"))]
    pins.push(("transaction_timeout", "0"));
    for (name, value) in pins {
        crate::pg::guc::pin(name, value);
    }
}

/// Runs `f` in a transaction of its own, as the bootstrap superuser
/// whatever role or session authorization a database default set, in a
/// security-restricted operation (no SET ROLE, no temporary objects: what
/// Postgres does while it runs maintenance on a table); an error rolls it
/// back and comes back as a failure instead of ending the worker.
pub(super) fn in_transaction<R>(
    f: impl FnOnce() -> R + std::panic::UnwindSafe + std::panic::RefUnwindSafe,
) -> Result<R, Failure> {
    // SAFETY: the claims worker calls this from its loop, between its
    // transactions, never from inside one.
    unsafe { xact::as_bootstrap_superuser(f) }.map_err(|(why, code)| {
        let class = if code == PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE {
            Class::LockNotAvailable
        } else {
            Class::Warning
        };
        Failure::new(class, format!("could not keep this server's worker-id claim in snowflake_id.snowflake_claims: {why}"))
            .hint("The claim is tried again every 2 seconds; until it is kept, collisions with other servers' worker ids go unnoticed.")
    })
}
