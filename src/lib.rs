//! snowflake_id: trend-increasing, never-repeating 64-bit IDs generated
//! inside PostgreSQL.
//!
//! This crate is the thin Postgres shell around `snowflake_id_core`, which
//! holds the layouts, the generator, the durable mark's file and the claims'
//! judgement in plain Rust. The shell's layers import only downward:
//!
//! - `pg`: safe wrappers over Postgres's C API, nothing of ours;
//! - `catalog`: the extension's own objects in the current database;
//! - `settings`: the extension's settings, validated by the core;
//! - `shmem`: the shared memory, each part with one owner;
//! - `mark`: the durable mark (moves, start, WAL redo, admin);
//! - `citus`: what this node reads of its Citus metadata;
//! - `opaque`: the secret keys of opaque IDs, as this process holds them;
//! - `copies`: data from another cluster, floored before the first ID;
//! - `worker_id`: this server's worker id, where it comes from and when it
//!   is fixed;
//! - `issue`: issuing IDs, and the checks a call makes first;
//! - `backfill`: IDs for past times, from leases of the backfill map;
//! - `bgworkers`: the reserver and the claims worker;
//! - `api`: every SQL function.
//!
//! CONTRIBUTING.md has the map, with which file holds which feature.
//!
//! This file is the one place that knows every part: what runs at load,
//! and what runs when shared memory is made.

// Every unsafe block says why it is sound; clippy holds us to it.
#![deny(clippy::undocumented_unsafe_blocks)]

use pgrx::prelude::*;

/// A note to the server log, formatted as `format!` does, that reaches the
/// log on every major (`pg::error::server_log`).
macro_rules! server_log {
    ($($arg:tt)*) => {
        $crate::pg::error::server_log(format!($($arg)*))
    };
}

mod api;
mod backfill;
mod bgworkers;
mod catalog;
mod citus;
mod copies;
mod issue;
mod mark;
mod opaque;
mod pg;
mod registry;
mod settings;
mod shmem;
mod worker_id;

::pgrx::pg_module_magic!(name, version);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    pg::error::quiet_backtraces();
    if pg::process::loading_preloaded_libraries() {
        settings::define();
        opaque::define();
        // After every setting of the prefix: one defined later would lose
        // its value from postgresql.conf at each start.
        settings::close_prefix();
        mark::redo::register(settings::wal_rmgr_id());
        shmem::install(on_shmem_created);
        bgworkers::register();
        api::utility::install();
        copies::listen();
    } else {
        settings::read_without_defining();
        opaque::define();
    }
}

/// Where shared memory is made (the postmaster, at start and after a crash
/// of any process), before any backend can use it: the mark from the state
/// file, and a claim's refusal that must outlast the restart.
fn on_shmem_created(shm: &'static shmem::Shmem) {
    settings::share_judgement(&shm.judged);
    worker_id::start(shm);
    mark::resume::at_start(shm);
    mark::leases::at_start(shm);
    bgworkers::claims::start(shm);
}

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
