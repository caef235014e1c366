//! The record of floors (`snowflake_id.snowflake_floors`): finding the
//! extension's own table, reading its rows and the subscriptions' finished
//! copies, writing this server's row, and the row that tells of copies a
//! subscription change may take away.
//!
//! Calls `changes` (its own writes are no change).

use super::changes::own_write;
use crate::pg::process::{self};
use crate::pg::{clock, database, role, spi, xlog};
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use snowflake_id_core::copies::{self, FloorRow};
use snowflake_id_core::{Class, Failure};

/// The record's OID, if this database's extension has one (0.1.0 had none):
/// the extension's own table of that name, never an object another role
/// made under it (it is read as the bootstrap superuser: a view there
/// would run its maker's functions so). Catalog lookups, no statement.
pub(super) fn record() -> Option<pg_sys::Oid> {
    // SAFETY: catalog lookups by name and OID inside a transaction; what is
    // missing is InvalidOid (missing_ok).
    unsafe {
        let extension = pg_sys::get_extension_oid(c"snowflake_id".as_ptr(), true);
        let schema = pg_sys::get_namespace_oid(c"snowflake_id".as_ptr(), true);
        if extension == pg_sys::InvalidOid || schema == pg_sys::InvalidOid {
            return None;
        }
        let oid = pg_sys::get_relname_relid(c"snowflake_floors".as_ptr(), schema);
        let ours = oid != pg_sys::InvalidOid
            && pg_sys::get_rel_relkind(oid) == pg_sys::RELKIND_RELATION as std::ffi::c_char
            && pg_sys::getExtensionOfObject(pg_sys::RelationRelationId, oid) == extension;
        ours.then_some(oid)
    }
}

/// The tables of this database's subscriptions, as SQL from `FROM` on
/// (`r`: `pg_subscription_rel`). Citus's own subscriptions move shards
/// between the nodes of one cluster, whose IDs are its own (their names:
/// Citus's multi_logical_replication.c). Only subscriptions owned by a
/// superuser or a member of the database's owner count (from 16 on, a
/// member of pg_create_subscription may subscribe): no other role makes a
/// database floor.
const SUBSCRIBED: &str = "FROM pg_catalog.pg_subscription_rel r
     JOIN pg_catalog.pg_subscription s ON s.oid OPERATOR(pg_catalog.=) r.srsubid
     JOIN pg_catalog.pg_database d ON d.oid OPERATOR(pg_catalog.=) s.subdbid
     WHERE NOT pg_catalog.starts_with(s.subname::pg_catalog.text, 'citus_shard_move_subscription_')
       AND NOT pg_catalog.starts_with(s.subname::pg_catalog.text, 'citus_shard_split_subscription_')
       AND pg_catalog.pg_has_role(s.subowner, d.datdba, 'MEMBER')";

/// Whether a table of this database's subscriptions is being copied (or
/// waits to be), as the newest committed data says.
fn copies_under_way() -> bool {
    let mut any = false;
    spi::each_of_latest_data(
        &format!("SELECT 1 {SUBSCRIBED} AND r.srsubstate IN ('i', 'd') LIMIT 1"),
        &[],
        1,
        |_| {
            any = true;
            Ok(false)
        },
    );
    any
}

/// The record's rows, and the state of this database's subscriptions'
/// finished initial copies, as the newest committed data has them (a
/// restore that committed after the caller's transaction began is what the
/// check is for, whether or not that transaction wrote). Read-only
/// statements (a write would give the caller's transaction an XID, and its
/// commit a wait for a synchronous standby that may never answer), as
/// plain as they can be: they run in every session's first ID, where a
/// cold backend pays for each operator and aggregate it looks up.
pub(super) fn read_record() -> (Vec<FloorRow>, Option<u64>) {
    let mut finished = Vec::new();
    spi::each_of_latest_data(
        &format!(
            "SELECT r.srsubid, r.srrelid, r.srsublsn::pg_catalog.text {SUBSCRIBED} AND r.srsubstate IN ('f', 's', 'r')"
        ),
        &[],
        0,
        |row| {
            finished.push(copies::FinishedCopy {
                subscription: row.get::<pg_sys::Oid>(1)?.map_or(0, |o| o.to_u32()),
                table: row.get::<pg_sys::Oid>(2)?.map_or(0, |o| o.to_u32()),
                lsn: row
                    .get::<String>(3)?
                    .as_deref()
                    .and_then(parse_lsn)
                    .unwrap_or(0),
            });
            Ok(true)
        },
    );
    let mut rows = Vec::new();
    spi::each_of_latest_data(
        "SELECT system_identifier, arrival, covers, subscription_copies, floor,
                (pg_catalog.date_part('epoch', at) * 1000)::pg_catalog.int8
         FROM snowflake_id.snowflake_floors WHERE backfilled IS NULL",
        &[],
        0,
        |row| {
            rows.push(FloorRow {
                system_identifier: row.get::<i64>(1)?.unwrap_or(0),
                arrival: row.get::<pgrx::Uuid>(2)?.map_or(0, arrival),
                // A superuser's row may hold NULLs: they name no row.
                covers: row
                    .get::<Vec<Option<pgrx::Uuid>>>(3)?
                    .unwrap_or_default()
                    .into_iter()
                    .flatten()
                    .map(arrival)
                    .collect(),
                subscription_copies: row.get::<i64>(4)?.map(|v| v as u64),
                floor: row.get::<i64>(5)?,
                written_ms: row.get::<i64>(6)?.unwrap_or(0),
            });
            Ok(true)
        },
    );
    (rows, copies::copies_state(&finished))
}

/// A row's arrival as the core counts it.
fn arrival(u: pgrx::Uuid) -> u128 {
    u128::from_be_bytes(*u.as_bytes())
}

/// An LSN as `pg_lsn` prints it (`16/B374D848`).
fn parse_lsn(text: &str) -> Option<u64> {
    let (hi, lo) = text.split_once('/')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

/// Adds this server's row: it floored, covering `covers`, with the
/// subscriptions' finished copies in the state `copies`, above `floor`.
/// Not where the transaction cannot write (the floor holds all the same,
/// in the mark: the next start floors again).
pub(super) fn write_record(
    me: i64,
    covers: &[u128],
    copies: Option<u64>,
    floor: Option<i64>,
) -> bool {
    if process::read_only_transaction() {
        return false;
    }
    own_write(|| {
        spi::run(
            "INSERT INTO snowflake_id.snowflake_floors (system_identifier, covers, subscription_copies, floor, at)
             VALUES ($1, $2, $3, $4, pg_catalog.to_timestamp($5::pg_catalog.float8 / 1000))",
            &[
                DatumWithOid::from(me),
                DatumWithOid::from(
                    covers
                        .iter()
                        .map(|a| pgrx::Uuid::from_bytes(a.to_be_bytes()))
                        .collect::<Vec<_>>(),
                ),
                DatumWithOid::from(copies.map(|v| v as i64)),
                DatumWithOid::from(floor),
                // The clock the floor was made at: a restart continues
                // from it exactly (`continue_term`).
                DatumWithOid::from(clock::now_ms()),
            ],
        )
    });
    true
}

/// Whether `rel` is this database's record of floors.
pub fn is_record(rel: pg_sys::Oid) -> bool {
    record() == Some(rel)
}

/// Notes in this database's record a floor `snowflake_resume_above(id)`
/// made, so that a restart continues from it as from a copy's floor; it
/// covers no row (a floor by hand may be below what they left).
pub fn note_floor(id: i64) {
    if record().is_some() {
        let me = xlog::origin().0 as i64;
        role::acting_as(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID), || {
            write_record(me, &[], None, Some(id));
        });
    }
}

/// The refusal in a database whose extension is older than its library
/// (0.1.0 kept no record of floors): whether its data came from another
/// cluster cannot be told until the update makes the record.
pub(super) fn not_updated() -> Failure {
    Failure::new(
        Class::NotReady,
        format!("snowflake_id in database \"{}\" is not updated to its library's version", database::current_name()),
    )
    .detail("Until it is, whether this database's data came from another cluster (pg_upgrade, a dump) cannot be told, and IDs issued here could repeat copied ones.")
    .hint("Run ALTER EXTENSION snowflake_id UPDATE; in this database.")
}

/// Before `DROP SUBSCRIPTION` or `ALTER SUBSCRIPTION`: copies of this
/// database's subscriptions that no floor of this server covers, or that
/// are under way, are noted in the record (a row of `COPIED_UNFLOORED`, in
/// the statement's transaction), since the statement may take the
/// catalog's account of them away. A database without the record has no
/// IDs to protect.
pub fn before_subscription_change() {
    if crate::shmem::get().is_none() || process::read_only_transaction() {
        return;
    }
    let me = xlog::origin().0 as i64;
    role::acting_as(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID), || {
        if record().is_none() {
            return;
        }
        let (rows, copies_now) = read_record();
        // A table still being copied counts too: its copy may commit
        // between this check and the statement's removal of its state.
        let uncovered =
            copies_now.is_some() && copies::floor_needed(me, &rows, copies_now).is_some();
        if uncovered || copies_under_way() {
            spi::run(
                "INSERT INTO snowflake_id.snowflake_floors (system_identifier) VALUES ($1)",
                &[DatumWithOid::from(copies::COPIED_UNFLOORED)],
            );
        }
    });
}
