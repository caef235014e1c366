//! What the coordinator's metadata says of this node's place in the
//! cluster (listed, active, the role its group gives it), for the claims
//! worker to publish and act on.
//!
//! Calls `metadata`.

use super::metadata::has_citus;
use crate::pg::guc;
use crate::pg::spi;
use crate::pg::text::Text;
use crate::pg::timeout;
use pgrx::prelude::*;
use snowflake_id_core::citus::{membership, Listed};
use snowflake_id_core::Failure;

/// On a worker, what the coordinator's metadata says of this node (see
/// `snowflake_id_core::citus::membership`), asked over Citus's own
/// connection within 3 s: `Some(None)` where nothing is wrong (and on the
/// coordinator), `None` where there is no answer: the coordinator could not
/// be asked, or this database's metadata does not say who it is (no Citus,
/// no row for this node or for a coordinator). No answer lifts no refusal.
pub fn membership_problem(worker: u32) -> Option<Option<Failure>> {
    spi::ok(Spi::connect(|c| {
        if !has_citus(c)? {
            return Ok(None);
        }
        let Some((me, coordinator)) = this_node_and_coordinator(c)? else {
            return Ok(None);
        };
        if me.group == 0 {
            return Ok(Some(None));
        }
        let Some(answer) = ask_coordinator(c, coordinator)? else {
            return Ok(None);
        };
        Ok(Some(membership(&me, &listed(c, answer)?, worker)))
    }))
}

/// This node as its own metadata lists it (the primary of its group), and
/// the coordinator's address; `None` where either row is missing.
fn this_node_and_coordinator(
    c: &pgrx::spi::SpiClient<'_>,
) -> pgrx::spi::SpiResult<Option<(Listed, (Text, i32))>> {
    let row = c
        .select(
            "SELECT g.groupid::pg_catalog.int8, me.nodeid, me.nodename::pg_catalog.text, me.nodeport, \
                    co.nodename::pg_catalog.text, co.nodeport \
             FROM (SELECT groupid FROM pg_catalog.pg_dist_local_group LIMIT 1) g \
             LEFT JOIN LATERAL (SELECT n.nodeid, n.nodename, n.nodeport FROM pg_catalog.pg_dist_node n \
                  WHERE n.groupid OPERATOR(pg_catalog.=) g.groupid \
                    AND n.noderole OPERATOR(pg_catalog.=) 'primary'::pg_catalog.noderole \
                  ORDER BY n.nodeid LIMIT 1) me ON true \
             LEFT JOIN LATERAL (SELECT n.nodename, n.nodeport FROM pg_catalog.pg_dist_node n \
                  WHERE n.groupid OPERATOR(pg_catalog.=) 0 \
                    AND n.noderole OPERATOR(pg_catalog.=) 'primary'::pg_catalog.noderole \
                  ORDER BY n.nodeid LIMIT 1) co ON true",
            None,
            &[],
        )?
        .first();
    let (Some(group), Some(nodeid), Some(host), Some(port), Some(co_host), Some(co_port)) = (
        row.get::<i64>(1)?,
        row.get::<i32>(2)?,
        row.get::<Text>(3)?,
        row.get::<i32>(4)?,
        row.get::<Text>(5)?,
        row.get::<i32>(6)?,
    ) else {
        return Ok(None);
    };
    let me = Listed {
        nodeid,
        host: host.0,
        port,
        group,
        primary: true,
    };
    Ok(Some((me, (co_host, co_port))))
}

/// The coordinator's list of nodes, as JSON, asked over Citus's own
/// connection; `None` where it gave no answer.
fn ask_coordinator(
    c: &pgrx::spi::SpiClient<'_>,
    (host, port): (Text, i32),
) -> pgrx::spi::SpiResult<Option<Text>> {
    const LIST: &str = "SELECT pg_catalog.json_agg(pg_catalog.json_build_array(n.nodeid, n.nodename, n.nodeport, \
                        n.groupid, n.noderole OPERATOR(pg_catalog.=) 'primary'::pg_catalog.noderole)) \
                        FROM pg_catalog.pg_dist_node n";
    // Connecting within 2 s, and everything within 3 s: a coordinator that
    // accepts the connection and then goes silent ends the transaction.
    let answer = timeout::within(
        3_000,
        std::panic::AssertUnwindSafe(|| {
            guc::with(c"citus.node_connection_timeout", c"2000", || {
                c.select(
                    "SELECT CASE WHEN r.success THEN r.result END \
                     FROM pg_catalog.master_run_on_worker(ARRAY[$1]::pg_catalog.text[], \
                          ARRAY[$2]::pg_catalog.int4[], ARRAY[$3]::pg_catalog.text[], false) r",
                    None,
                    &[host.into(), port.into(), Text(LIST.to_string()).into()],
                )?
                .first()
                .get_one::<Text>()
            })
        }),
    )?;
    Ok(answer.filter(|a| !a.0.is_empty()))
}

/// The nodes of the coordinator's answer; rows of another shape are
/// passed over.
fn listed(c: &pgrx::spi::SpiClient<'_>, answer: Text) -> pgrx::spi::SpiResult<Vec<Listed>> {
    Ok(c.select(
        "SELECT (e OPERATOR(pg_catalog.->>) 0)::pg_catalog.int4, e OPERATOR(pg_catalog.->>) 1, \
                (e OPERATOR(pg_catalog.->>) 2)::pg_catalog.int4, \
                (e OPERATOR(pg_catalog.->>) 3)::pg_catalog.int8, (e OPERATOR(pg_catalog.->>) 4)::pg_catalog.bool \
         FROM pg_catalog.json_array_elements($1::pg_catalog.json) e",
        None,
        &[answer.into()],
    )?
    .filter_map(|r| {
        Some(Listed {
            nodeid: r.get::<i32>(1).ok()??,
            host: r.get::<Text>(2).ok()??.0,
            port: r.get::<i32>(3).ok()??,
            group: r.get::<i64>(4).ok()??,
            primary: r.get::<bool>(5).ok()??,
        })
    })
    .collect())
}
