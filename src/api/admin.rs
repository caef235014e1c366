//! The superuser's functions that re-establish the durable mark, and who
//! may call what (`sql/privileges.sql`).

use crate::issue;
use crate::mark;
use crate::pg::error::OrRaise;
use crate::settings;
use pgrx::prelude::*;

/// Moves a server whose generation was refused (changed layout or epoch, or
/// a damaged state file) onto its current settings, so that new IDs
/// continue numerically above every ID the old state covered. Superuser
/// only. VOLATILE and PARALLEL UNSAFE: it writes WAL and the state file.
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_adopt_settings() -> String {
    let shm = issue::shmem();
    let cfg = settings::config().or_raise();
    let policy = settings::policy(&cfg.layout).or_raise();
    mark::admin::adopt(shm, cfg, &policy.limits()).or_raise()
}

/// Puts every later ID of this server above `id`, durably (WAL and state
/// file): for data that arrived without the durable mark, such as a
/// `pg_upgrade` or a logical dump restored into a server that keeps the
/// worker id. Typically `SELECT snowflake_resume_above(max(id)) FROM t;`.
/// Never moves generation back. Superuser only. STRICT: a NULL (the max of
/// an empty table) is no ID to resume above.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn snowflake_resume_above(id: i64) -> String {
    let shm = issue::shmem();
    let cfg = settings::config().or_raise();
    let policy = settings::policy(&cfg.layout).or_raise();
    mark::admin::resume_above(shm, cfg, &policy.limits(), id).or_raise()
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
