//! The backfill leases' rows of the record of floors: written beside the
//! IDs they cover (so that a copy of the data carries them), read back by
//! the floor of a copy and by the backfill map.
//!
//! Calls `changes` and `record`.

use super::changes::own_write;
use super::record::{not_updated, record};
use crate::pg::{role, spi, xlog};
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use snowflake_id_core::backfill::Raise;
use snowflake_id_core::Failure;

/// Notes a backfill lease in this database's record, in the caller's
/// transaction (as the bootstrap superuser, as the floors' rows are
/// written): a copy of the data (`pg_upgrade`, a dump, a logical copy)
/// carries it with the IDs, and the server that floors the copy raises its
/// backfill map over it. An aborted transaction takes the row with the
/// rows that hold its IDs; the caller then forgets the lease.
pub fn record_lease(raise: &Raise) -> Result<(), Failure> {
    if record().is_none() {
        return Err(not_updated());
    }
    let me = xlog::origin().0 as i64;
    role::acting_as(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID), || {
        own_write(|| {
            spi::run(
                "INSERT INTO snowflake_id.snowflake_floors (system_identifier, backfilled) VALUES ($1, $2)",
                &[
                    DatumWithOid::from(me),
                    DatumWithOid::from(raise.to_row().to_vec()),
                ],
            )
        })
    });
    Ok(())
}

/// Every backfill lease this database's record holds (whichever server
/// took it), read as the bootstrap superuser.
pub fn recorded_leases() -> Result<Vec<Raise>, Failure> {
    if record().is_none() {
        return Err(not_updated());
    }
    Ok(role::acting_as(
        pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID),
        read_leases,
    ))
}

/// The leases of the record's rows: three numbers each, as the extension
/// writes them (only its own rows and a superuser's keep the column, see
/// floors.sql); any other shape is passed over, never raised on.
pub(super) fn read_leases() -> Vec<Raise> {
    let mut out = Vec::new();
    spi::each_of_latest_data(
        "SELECT backfilled[1], backfilled[2], backfilled[3] FROM snowflake_id.snowflake_floors \
         WHERE pg_catalog.cardinality(backfilled) OPERATOR(pg_catalog.=) 3",
        &[],
        0,
        |row| {
            if let (Some(lo), Some(hi), Some(depth)) =
                (row.get::<i64>(1)?, row.get::<i64>(2)?, row.get::<i64>(3)?)
            {
                out.extend(Raise::from_row(&[lo, hi, depth]));
            }
            Ok(true)
        },
    );
    out
}
