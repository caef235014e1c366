//! This node's group id, read from its own metadata or confirmed by asking
//! the nodes it lists, what kind of node it is (a primary, a clone or a
//! secondary promoted), and the worker id the group gives, in words.
//!
//! Calls `metadata` and `offer` (a member offers its database).

use super::metadata::has_citus;
use super::offer::offer_if_member;
use crate::pg::guc;
use crate::pg::spi;
use crate::pg::text::Text;
use crate::pg::timeout;
use crate::shmem::Shmem;
use pgrx::prelude::*;
use snowflake_id_core::layout::Layout;
use snowflake_id_core::worker_id::{from_citus_group, CitusNode, Promoted};
use snowflake_id_core::Failure;

/// How `this_node` learns whether this server is a promoted clone of another
/// node of its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// By asking the listed addresses, bounded, and publishing what it
    /// found: the claims worker, in a transaction of its own.
    Nodes,
    /// From what the claims worker found last: a backend, which never waits
    /// on the network (its first ID waits for the worker's first judging).
    Findings,
}

/// What `ClaimsState::promoted` holds.
const PROMOTED_NONE: u8 = 1;

const PROMOTED_CLONE: u8 = 2;

const PROMOTED_SECONDARY: u8 = 3;

/// This node's group id, whether its metadata lists a coordinator, and,
/// while its worker id is not settled, whether it is a promoted clone of
/// another node of its group; `None` where the database has no Citus.
fn this_node(shm: &Shmem, ask: Ask) -> Option<CitusNode> {
    spi::ok(Spi::connect(|c| {
        if !has_citus(c)? {
            return Ok(None);
        }
        offer_if_member(shm, c)?;
        let row = c
            .select(
                "SELECT (SELECT groupid::pg_catalog.int8 FROM pg_catalog.pg_dist_local_group LIMIT 1), \
                        EXISTS (SELECT FROM pg_catalog.pg_dist_node \
                                WHERE groupid OPERATOR(pg_catalog.=) 0 \
                                  AND noderole OPERATOR(pg_catalog.=) 'primary'::pg_catalog.noderole), \
                        EXISTS (SELECT FROM pg_catalog.pg_attribute \
                                WHERE attrelid OPERATOR(pg_catalog.=) 'pg_catalog.pg_dist_node'::pg_catalog.regclass \
                                  AND attname OPERATOR(pg_catalog.=) 'nodeisclone' AND NOT attisdropped)",
                None,
                &[],
            )?
            .first();
        let group_id = row.get::<i64>(1)?;
        let coordinator_listed = row.get::<bool>(2)?.unwrap_or(false);
        let clones = row.get::<bool>(3)?.unwrap_or(false);
        // A metadata table without its one row is no group id at all.
        let Some(group_id) = group_id else {
            return Ok(None);
        };
        // Asked before every settling (each start's, and after a crash's
        // reset), whatever the server was at its start: a copy promoted and
        // then restarted no longer has the recovery files that said so.
        // Once the id is settled, nothing asks again.
        let promoted = if shm.worker.get().is_none() {
            promoted_as(shm, c, group_id, clones, ask)?
        } else {
            None
        };
        Ok(Some(CitusNode {
            group_id,
            coordinator_listed,
            promoted,
        }))
    }))
}

/// What this server is listed as in its metadata, if it is one of its
/// group's clones (Citus 13.2+: `clones`) or secondaries: each such row is
/// asked whether it is this server (`ask_rows`). Ports and host names
/// cannot tell: nodes on other hosts often listen on the same port, and a
/// node does not know the name it was added under. A row that does not
/// answer is not this server (a secondary that is down must not stop its
/// primary).
pub(super) fn promoted_as(
    shm: &Shmem,
    c: &pgrx::spi::SpiClient<'_>,
    group_id: i64,
    clones: bool,
    ask: Ask,
) -> pgrx::spi::SpiResult<Option<Promoted>> {
    let query = format!(
        "SELECT s.nodename::pg_catalog.text, s.nodeport, false FROM pg_catalog.pg_dist_node s \
         WHERE s.groupid::pg_catalog.int8 OPERATOR(pg_catalog.=) $1 \
           AND s.noderole OPERATOR(pg_catalog.=) 'secondary'::pg_catalog.noderole{}",
        if clones {
            " UNION ALL SELECT k.nodename::pg_catalog.text, k.nodeport, true FROM pg_catalog.pg_dist_node k \
              JOIN pg_catalog.pg_dist_node p ON p.nodeid OPERATOR(pg_catalog.=) k.nodeprimarynodeid \
              WHERE k.nodeisclone AND p.groupid::pg_catalog.int8 OPERATOR(pg_catalog.=) $1"
        } else {
            ""
        }
    );
    let candidates: Vec<(String, i32, bool)> = c
        .select(&query, None, &[group_id.into()])?
        .filter_map(|r| {
            Some((
                r.get::<Text>(1).ok()??.0,
                r.get::<i32>(2).ok()??,
                r.get::<bool>(3).ok()??,
            ))
        })
        .collect();
    // A backend takes the claims worker's answer; where the worker has none
    // (it has not asked yet, or keeps its claims in another database, with
    // no Citus to read), the backend asks the rows itself, as the worker
    // does, bounded by its own statement_timeout.
    let known = if ask == Ask::Findings {
        shm.claims.promoted()
    } else {
        0
    };
    let found = if candidates.is_empty() {
        PROMOTED_NONE
    } else if known != 0 {
        known
    } else if ask == Ask::Nodes {
        // Everything within 3 s: a node that accepts the connection and
        // then goes silent ends the worker's transaction, not the worker.
        timeout::within(
            3_000,
            std::panic::AssertUnwindSafe(|| ask_rows(c, &candidates)),
        )?
    } else {
        ask_rows(c, &candidates)?
    };
    if ask == Ask::Nodes {
        shm.claims.set_promoted(found);
    }
    Ok(match found {
        PROMOTED_CLONE => Some(Promoted::Clone),
        PROMOTED_SECONDARY => Some(Promoted::Secondary),
        _ => None,
    })
}

/// Asks each listed row, all at once (each connection within 2 s, over
/// Citus's own connections), whether it is this server: its start to the
/// microsecond and its port, which any role may read, in words that read
/// alike on every server (no date or float formats). A row that does not
/// answer is not this server.
fn ask_rows(
    c: &pgrx::spi::SpiClient<'_>,
    candidates: &[(String, i32, bool)],
) -> pgrx::spi::SpiResult<u8> {
    const WHO: &str = "SELECT (pg_catalog.date_part('epoch', pg_catalog.pg_postmaster_start_time()) \
                        OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8::pg_catalog.text \
                       OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) pg_catalog.current_setting('port')";
    guc::with(c"citus.node_connection_timeout", c"2000", || {
        let me = c.select(WHO, None, &[])?.first().get_one::<Text>()?;
        let hosts: Vec<Text> = candidates.iter().map(|(h, _, _)| Text(h.clone())).collect();
        let ports: Vec<i32> = candidates.iter().map(|(_, p, _)| *p).collect();
        let questions: Vec<Text> = candidates.iter().map(|_| Text(WHO.to_string())).collect();
        let answers = c.select(
            "SELECT r.node_name::pg_catalog.text, r.node_port, CASE WHEN r.success THEN r.result END \
             FROM pg_catalog.master_run_on_worker($1::pg_catalog.text[], $2::pg_catalog.int4[], \
                  $3::pg_catalog.text[], true) r",
            None,
            &[hosts.into(), ports.into(), questions.into()],
        )?;
        let mut found = PROMOTED_NONE;
        for r in answers {
            let (Some(host), Some(port), answer) =
                (r.get::<Text>(1)?, r.get::<i32>(2)?, r.get::<Text>(3)?)
            else {
                continue;
            };
            if answer.is_none() || answer != me {
                continue;
            }
            if let Some((_, _, clone)) = candidates
                .iter()
                .find(|(h, p, _)| *h == host.0 && *p == port)
            {
                found = if *clone {
                    PROMOTED_CLONE
                } else {
                    PROMOTED_SECONDARY
                };
                break;
            }
        }
        Ok(found)
    })
}

/// This server's worker id as the Citus metadata of the caller's database
/// gives it, with its origin in words, or why it cannot yet.
pub fn read_worker_id(
    shm: &Shmem,
    offset: i32,
    layout: &Layout,
    ask: Ask,
) -> Result<(u32, String), Failure> {
    from_citus_group(this_node(shm, ask), offset, layout)
}

/// The worker id's origin in words, for the status, once it is known.
pub fn origin(worker: u32, offset: i32, layout: &Layout) -> String {
    let group_id = i64::from(worker) - i64::from(offset);
    from_citus_group(
        Some(CitusNode {
            group_id,
            coordinator_listed: true,
            promoted: None,
        }),
        offset,
        layout,
    )
    .map_or_else(|f| f.message, |(_, origin)| origin)
}
