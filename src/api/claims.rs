//! `snowflake_id.snowflake_claims`, the table where servers keep their
//! worker-id claims (see `bgworkers::claims`), and the trigger that guards
//! it.

use crate::pg::error;
use crate::pg::role;
use crate::pg::text::{ident, Text};
use crate::pg::{process, spi};
use crate::shmem;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgLogLevel};
use snowflake_id_core::{Class, Failure};
use std::sync::atomic::{AtomicBool, Ordering};

/// The guard on `snowflake_claims`: its rows are written by this server's
/// claims worker, and by replication (apply workers run with
/// `session_replication_role = replica`, which only a superuser may set).
/// Any other session is refused, whatever its privileges on the table: a
/// claim a role could forge would stop this server's IDs (a live claim on
/// its worker id) or hide a collision (a deleted one).
///
/// A row replication brings for a claim the table already holds replaces
/// it: a publisher whose table was emptied or made again (TRUNCATE, DROP
/// and CREATE EXTENSION) writes its claim afresh, and that must not stop
/// the subscription on a duplicate key, the application's rows with it.
#[pg_trigger]
fn snowflake_claims_guard<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, PgHeapTupleError> {
    // SAFETY: a plain read of this process's setting.
    let replica = unsafe {
        pg_sys::SessionReplicationRole == pg_sys::SESSION_REPLICATION_ROLE_REPLICA as i32
    };
    let worker = shmem::get().is_some_and(|shm| shm.claims.pid.get() == Some(process::pid()));
    // Replication is trusted as the table's owner (the superuser who
    // created the extension) applying it, as an apply worker does unless
    // its subscription runs as its own owner: a role that may set
    // session_replication_role, or own a subscription, is not enough.
    // SAFETY: the relation the trigger fired on, open for the statement.
    let owner = unsafe { (*(*trigger.trigger_data().tg_relation).rd_rel).relowner };
    let trusted = role::acts_as(owner);
    let op = trigger.op().unwrap_or(PgTriggerOperation::Truncate);
    // SAFETY: a plain read of this process's kind.
    let applying = unsafe { pg_sys::MyBackendType } == pg_sys::BackendType::B_BG_WORKER;
    if replica && !trusted && applying && !worker && !matches!(op, PgTriggerOperation::Truncate) {
        // A row replication applies is skipped, not refused: an error would
        // stop the whole subscription, and the application's rows that
        // travel with the claims.
        skipped_untrusted();
        return Ok(None);
    }
    if !((replica && trusted) || worker) {
        error::raise(
            Failure::new(
                Class::Privilege,
                "snowflake_id.snowflake_claims is written only by the claims worker and by replication",
            )
            .detail("A claim written by hand could stop this server's IDs, or hide two servers issuing under one worker id.")
            .hint("To remove the claims of a server gone for good, a superuser runs SET session_replication_role = replica; DELETE FROM snowflake_id.snowflake_claims WHERE ...; RESET session_replication_role;"),
        );
    }
    match op {
        PgTriggerOperation::Insert => {
            let new = trigger.new();
            if let (true, Some(row)) = (replica && !worker, &new) {
                replace_replicated(trigger, row);
            }
            Ok(new)
        }
        PgTriggerOperation::Update => Ok(trigger.new()),
        PgTriggerOperation::Delete => Ok(trigger.old()),
        PgTriggerOperation::Truncate => Ok(None),
    }
}

/// Tells the log, once per process, that replicated claims are skipped
/// because they are not applied as the table's owner.
fn skipped_untrusted() {
    static TOLD: AtomicBool = AtomicBool::new(false);
    if !TOLD.swap(true, Ordering::Relaxed) {
        error::log(
            Failure::new(
                Class::Warning,
                "snowflake_id: claims arriving by this replication are skipped: they are not applied as the owner of snowflake_id.snowflake_claims",
            )
            .detail("A subscription that runs as a role other than the table's owner (run_as_owner, or an owner without a superuser's rights) could forge claims.")
            .hint("Let a superuser own the subscription, without run_as_owner, to receive claims by it."),
            PgLogLevel::WARNING,
        );
    }
}

/// Deletes the row holding the same claim as `row`, which replication is
/// about to insert.
fn replace_replicated(trigger: &PgTrigger<'_>, row: &PgHeapTuple<'_, AllocatedByPostgres>) {
    let (schema, name) = spi::ok(Spi::get_two_with_args::<Text, Text>(
        "SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         WHERE c.oid OPERATOR(pg_catalog.=) $1",
        &[trigger.relid().unwrap_or(pg_sys::InvalidOid).into()],
    ));
    let table = format!(
        "{}.{}",
        ident(schema.unwrap_or(Text(String::new())).as_str()),
        ident(name.unwrap_or(Text(String::new())).as_str())
    );
    let get = |name: &str| row.get_by_name::<i64>(name).ok().flatten();
    let worker = row.get_by_name::<i32>("worker_id").ok().flatten();
    spi::run(
        &format!(
            "DELETE FROM {table} WHERE system_identifier OPERATOR(pg_catalog.=) $1 \
             AND timeline OPERATOR(pg_catalog.=) $2 AND instance OPERATOR(pg_catalog.=) $3 \
             AND worker_id OPERATOR(pg_catalog.=) $4"
        ),
        &[
            get("system_identifier").into(),
            get("timeline").into(),
            get("instance").into(),
            worker.into(),
        ],
    );
}

extension_sql_file!(
    "sql/claims.sql",
    name = "snowflake_claims",
    requires = [snowflake_claims_guard]
);
