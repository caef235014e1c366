//! What this node reads of its own Citus metadata: its group id, which
//! `snowflake_id.worker_id_source = 'citus'` makes its worker id.
//!
//! Read by the calling backend, as the caller, from the database it is in:
//! Citus keeps its metadata per database, in tables of `pg_catalog` (where
//! only a superuser can create anything) that it lets every role read.
//! Every name, type and operator is qualified, so that no object of the
//! caller's search path can stand in.

use crate::pg::spi;
use crate::shmem::Shmem;
use pgrx::prelude::*;
use snowflake_id_core::layout::Layout;
use snowflake_id_core::worker_id::{from_citus_group, CitusNode};
use snowflake_id_core::{Class, Failure};

/// This node's group id and whether its metadata lists a coordinator; `None`
/// where the database has no Citus.
fn this_node() -> Option<CitusNode> {
    spi::ok(Spi::connect(|c| {
        let has_citus = c
            .select(
                "SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL \
                        AND pg_catalog.to_regclass('pg_catalog.pg_dist_node') IS NOT NULL",
                None,
                &[],
            )?
            .first()
            .get_one::<bool>()?;
        if has_citus != Some(true) {
            return Ok(None);
        }
        let row = c
            .select(
                "SELECT (SELECT groupid::pg_catalog.int8 FROM pg_catalog.pg_dist_local_group LIMIT 1), \
                        EXISTS (SELECT FROM pg_catalog.pg_dist_node \
                                WHERE groupid OPERATOR(pg_catalog.=) 0 \
                                  AND noderole OPERATOR(pg_catalog.=) 'primary'::pg_catalog.noderole)",
                None,
                &[],
            )?
            .first();
        let (group_id, coordinator_listed) = row.get_two::<i64, bool>()?;
        // A metadata table without its one row is no group id at all.
        Ok(group_id.map(|group_id| CitusNode {
            group_id,
            coordinator_listed: coordinator_listed.unwrap_or(false),
        }))
    }))
}

/// Settles this server's worker id from the Citus metadata of the caller's
/// database, or says why it cannot yet.
pub fn settle(shm: &Shmem, offset: i32, layout: &Layout) -> Result<u32, Failure> {
    let (worker, origin) = from_citus_group(this_node(), offset, layout)?;
    match shm.worker.settle(worker) {
        Ok(()) => {
            log!("snowflake_id: worker id {worker}, from {origin}");
            Ok(worker)
        }
        Err(in_force) => Err(Failure::new(
            Class::NotReady,
            format!(
                "this database's Citus metadata gives worker id {worker} ({origin}), but this server already issues IDs as worker {in_force}, read from another database's"
            ),
        )
        .hint("Keep Citus in one database per server, or restart PostgreSQL and take the first ID in the database that holds this node's cluster.")),
    }
}

/// The worker id's origin in words, for the status, once it is known.
pub fn origin(worker: u32, offset: i32, layout: &Layout) -> String {
    let group_id = i64::from(worker) - i64::from(offset);
    from_citus_group(
        Some(CitusNode {
            group_id,
            coordinator_listed: true,
        }),
        offset,
        layout,
    )
    .map_or_else(|f| f.message, |(_, origin)| origin)
}
