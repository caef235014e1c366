//! Worker ids leased from a registry: `snowflake_registry_init()`, which
//! makes a database a registry (`sql/registry.sql`), and
//! `snowflake_release_worker_id()`, which gives this server's back.

use crate::issue;
use crate::pg::error::OrRaise;
use crate::registry;
use crate::settings;
use pgrx::prelude::*;

/// Gives this server's leased worker id back to the registry, at
/// decommission: generation stops here at once, and the worker id's next
/// holder issues above every ID this server issued. Superuser only.
/// VOLATILE, PARALLEL UNSAFE: it writes WAL and talks to another server.
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_release_worker_id() -> String {
    let shm = issue::shmem();
    let cfg = settings::config().or_raise();
    registry::release(shm, cfg).or_raise()
}

extension_sql_file!("sql/registry.sql", name = "snowflake_registry_init");
