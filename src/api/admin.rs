//! The superuser's functions that re-establish the durable mark, and who
//! may call what (`sql/privileges.sql`).

use crate::copies;
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
    let said = mark::admin::resume_above(shm, cfg, &policy.limits(), id).or_raise();
    copies::note_floor(id);
    said
}

/// `snowflake_resume_above(id)` for a `uuid` column's IDs (made by
/// `snowflake_uuidv7()`), e.g. with the column's largest:
/// `SELECT snowflake_resume_above((SELECT id FROM t ORDER BY id DESC LIMIT 1));`.
/// Superuser only; STRICT as the bigint form.
#[pg_extern(volatile, strict, parallel_unsafe, name = "snowflake_resume_above")]
fn snowflake_resume_above_uuid(id: pgrx::Uuid) -> String {
    let shm = issue::shmem();
    let cfg = settings::config().or_raise();
    let policy = settings::policy(&cfg.layout).or_raise();
    let id = snowflake_id_core::uuid::to_id(&cfg.layout, id.as_bytes()).or_raise();
    let said = mark::admin::resume_above(shm, cfg, &policy.limits(), id).or_raise();
    copies::note_floor(id);
    said
}

/// Puts every later ID above every ID this database holds: in every
/// bigint and uuid column of every table (values more than an hour ahead
/// of the clock are not taken for IDs), for IDs an application inserted
/// without the column's default, which the automatic floor after a copy
/// does not look for. Superuser only. Reads every such column, through its
/// index where it has one.
#[pg_extern(volatile, parallel_unsafe, name = "snowflake_resume_above")]
fn snowflake_resume_above_everything() -> String {
    let shm = issue::shmem();
    let cfg = settings::config().or_raise();
    let policy = settings::policy(&cfg.layout).or_raise();
    copies::resume_above_everything(shm, cfg, &policy.limits(), policy.max_wait_ms.max(60_000))
        .or_raise()
}

/// Says, as a superuser, that `worker_id` never issued live IDs on any
/// server whose data this one holds (a `pg_upgrade`, a restored dump, a
/// logical copy): backfills under it may take times below the copied IDs
/// again (see "IDs for past times" in docs/operators.md). Durable (WAL and
/// state file) until data of another server arrives again. STRICT: no
/// worker id, nothing vouched for.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn snowflake_vouch_backfill_worker_id(worker_id: i32) -> String {
    let shm = issue::shmem();
    let cfg = settings::config().or_raise();
    mark::admin::vouch(shm, cfg, worker_id).or_raise()
}

/// The record of floors' trigger after each row its guard let in (a
/// restore's, an operator's, replication's): every database checks again
/// before its next ID (see `copies`). Only a trigger can call it.
#[pg_trigger]
fn snowflake_floors_written<'a>(
    _trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, PgHeapTupleError> {
    copies::record_written();
    Ok(None)
}

extension_sql_file!(
    "sql/floors.sql",
    name = "snowflake_floors",
    requires = ["snowflake_claims", snowflake_floors_written]
);

extension_sql_file!(
    "sql/privileges.sql",
    name = "privileges",
    requires = [
        snowflake_adopt_settings,
        snowflake_resume_above,
        snowflake_resume_above_uuid,
        snowflake_resume_above_everything,
        snowflake_vouch_backfill_worker_id,
        "snowflake_status",
        "snowflake_registry_init",
        registry::snowflake_release_worker_id,
        convert::snowflake_convert,
        backfill::snowflake_nextval_at,
        backfill::snowflake_nextval_at_array
    ]
);
