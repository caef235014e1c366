//! snowflake_id: trend-increasing, never-repeating 64-bit IDs generated
//! inside PostgreSQL.
//!
//! This crate is the thin Postgres shell around `snowflake_id_core`, which
//! holds the layouts, the generator and the durable mark in plain Rust.
//! Here live only what needs Postgres: settings, shared memory, the
//! background writer, and the SQL functions.

use pgrx::prelude::*;

mod claims;
mod claims_db;
mod clock;
mod convert;
mod decode;
mod durable;
mod errors;
mod generate;
mod local;
mod pg_text;
mod record;
mod reserver;
mod settings;
mod shmem;
mod status;
mod text;
mod wal;

::pgrx::pg_module_magic!(name, version);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    errors::quiet_backtraces();
    // SAFETY: a flag Postgres sets while it loads shared_preload_libraries.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        settings::define();
        wal::register(settings::wal_rmgr_id());
        shmem::install();
        reserver::register();
        claims::register();
    } else {
        settings::read_without_defining();
    }
}

/// Moves a server whose generation was refused (changed layout or epoch, or
/// a damaged state file) onto its current settings, so that new IDs
/// continue numerically above every ID the old state covered. Superuser only.
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_adopt_settings() -> String {
    use errors::OrRaise;
    let st = generate::shared_state();
    let cfg = settings::config().or_raise();
    let policy = settings::policy(&cfg.layout).or_raise();
    durable::adopt(st, cfg, &policy.limits()).or_raise()
}

/// Puts every later ID of this server above `id`, durably (WAL and state
/// file): for data that arrived without the durable mark, such as a
/// `pg_upgrade` or a logical dump restored into a server that keeps the
/// worker id. Typically `SELECT snowflake_resume_above(max(id)) FROM t;`.
/// Never moves generation back. Superuser only.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn snowflake_resume_above(id: i64) -> String {
    use errors::OrRaise;
    let st = generate::shared_state();
    let cfg = settings::config().or_raise();
    let policy = settings::policy(&cfg.layout).or_raise();
    durable::resume_above(st, cfg, &policy.limits(), id).or_raise()
}

extension_sql_file!(
    "sql/privileges.sql",
    name = "privileges",
    requires = [
        snowflake_adopt_settings,
        snowflake_resume_above,
        "snowflake_status",
        convert::snowflake_convert
    ]
);

#[cfg(any(test, feature = "pg_test"))]
mod sql_tests;

/// Required by `cargo pgrx test`: the test server preloads the library with a
/// worker id, as a real deployment must.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![
            "shared_preload_libraries = 'snowflake_id'",
            "snowflake_id.worker_id = 42",
        ]
    }
}
