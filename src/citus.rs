//! What this node reads of its own Citus metadata: its group id, which
//! `snowflake_id.worker_id_source = 'citus'` makes its worker id.
//!
//! Read by the calling backend, as the caller, from the database it is in:
//! Citus keeps its metadata per database, in tables of `pg_catalog` (where
//! only a superuser can create anything) that it lets every role read.
//! Every name, type and operator is qualified, so that no object of the
//! caller's search path can stand in.

use crate::catalog;
use crate::pg::ddl::Statement;
use crate::pg::error::raise;
use crate::pg::guc;
use crate::pg::process;
use crate::pg::spi;
use crate::pg::text::{ident, Text};
use crate::pg::timeout;
use crate::settings;
use crate::shmem::Shmem;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowflake_id_core::citus::{copied_table_add_column, membership, Added, Copies, Fills, Listed};
use snowflake_id_core::layout::Layout;
use snowflake_id_core::worker_id::{from_citus_group, CitusNode, Promoted};
use snowflake_id_core::Failure;

/// Whether the caller's database holds Citus's metadata.
fn has_citus(c: &pgrx::spi::SpiClient<'_>) -> pgrx::spi::SpiResult<bool> {
    Ok(c.select(
        "SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL \
                AND pg_catalog.to_regclass('pg_catalog.pg_dist_node') IS NOT NULL",
        None,
        &[],
    )?
    .first()
    .get_one::<bool>()?
        == Some(true))
}

/// Whether the claims worker is told the Citus database by backends: on a
/// Citus node without a claims database.
pub fn claims_follow_database() -> bool {
    settings::first_id_waits_for_claims() && settings::claims_database().is_none()
}

/// Whether the claims worker waits to be told the Citus database: on a
/// Citus node without a claims database, until a backend offered one.
pub fn claims_await_database(shm: &Shmem) -> bool {
    claims_follow_database() && shm.claims.offered_database().is_none()
}

/// Offers the caller's database to the claims worker as the one whose
/// Citus metadata this node belongs to, if that metadata lists a node of
/// this node's group (a Citus database where no cluster was made is not
/// it); the first offer stands until the next start, or until that
/// database is dropped. A second database found listing this node too (a
/// copy of the first) is recorded, for the status to say. Whether a
/// database is offered now.
pub fn offer_this_database(shm: &Shmem) -> bool {
    if !offer_may_change(shm) {
        return shm.claims.offered_database().is_some();
    }
    spi::ok(Spi::connect(|c| {
        if has_citus(c)? {
            offer_if_member(shm, c)?;
        }
        Ok(shm.claims.offered_database().is_some())
    }))
}

/// Whether reading this database's Citus metadata can tell the claims
/// worker anything: not where the offer is this database already, or where
/// a second one was found already.
fn offer_may_change(shm: &Shmem) -> bool {
    let here = process::database_id();
    match shm.claims.offered_database() {
        None => true,
        Some(offered) => offered != here && shm.claims.other_member().is_none(),
    }
}

/// See `offer_this_database`; the caller's database holds Citus's metadata.
/// Asked by every backend's first call: a caller who may not read that
/// metadata offers nothing, and is not refused for it.
fn offer_if_member(shm: &Shmem, c: &pgrx::spi::SpiClient<'_>) -> pgrx::spi::SpiResult<()> {
    if !offer_may_change(shm) {
        return Ok(());
    }
    let readable = c
        .select(
            "SELECT pg_catalog.has_table_privilege('pg_catalog.pg_dist_node', 'SELECT') \
                    AND pg_catalog.has_table_privilege('pg_catalog.pg_dist_local_group', 'SELECT')",
            None,
            &[],
        )?
        .first()
        .get_one::<bool>()?;
    if readable != Some(true) {
        return Ok(());
    }
    let member = c
        .select(
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_node n, pg_catalog.pg_dist_local_group g \
                            WHERE n.groupid OPERATOR(pg_catalog.=) g.groupid)",
            None,
            &[],
        )?
        .first()
        .get_one::<bool>()?;
    if member == Some(true) {
        let here = process::database_id();
        if shm.claims.offer_database(here) {
            judge_again(shm);
        } else if shm.claims.offered_database() != Some(here) {
            shm.claims.note_other_member(here);
        }
    }
    Ok(())
}

/// A Citus database offered while IDs are issued already (the one offered
/// before was dropped): the group id there may be another, and no node's
/// claims have been read there. Refused, as a move of the worker id is,
/// until the claims worker has read both (`bgworkers::claims`).
fn judge_again(shm: &Shmem) {
    if shm.worker.get().is_none() {
        return;
    }
    shm.claims.set_rejudge(true);
    crate::mark::refuse_for_claim(shm, true);
}

/// How `this_node` learns whether this server is a promoted copy of another
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
/// while its worker id is not settled, whether it is a promoted copy of
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
fn promoted_as(
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

/// Refuses `ALTER TABLE ... ADD COLUMN ... DEFAULT <a call that draws IDs>`
/// on a Citus table with rows kept in several copies (a reference table, or
/// a distributed table whose shards have more than one), before Citus
/// carries it to the copies: each would fill the old rows with IDs of its
/// own node, as Citus refuses the same for `nextval()`. Only what must be
/// is looked at: the statement's tag and defaults, then whether the table
/// is such a table, and only then the defaults' calls. Reads as the caller,
/// who is about to alter the table.
pub fn refuse_divergent_default(stmt: &Statement<'_>) {
    let Some(adds) = stmt.columns_added_with_default() else {
        return;
    };
    // Commands Citus carries from the node where they were run come with
    // propagation off: that node checked them already, and a query of the
    // table from inside them would be a distributed query nested in one.
    if guc::text(c"citus.enable_ddl_propagation").as_deref() == Some("off") {
        return;
    }
    let Some(relid) = adds.table() else {
        return;
    };
    let Some(copies) = copies_of(relid) else {
        return;
    };
    let generators = catalog::generating_functions();
    for column in &adds.columns {
        let expr = column.cooked_default();
        let fills = match expr.first_call_of(&generators) {
            Some(g) => Fills::Generator(g),
            None => match expr.first_opaque_volatile_call() {
                Some(f) => Fills::Opaque(f),
                None => continue,
            },
        };
        let Some((table, key)) = filled(relid) else {
            return;
        };
        let added = Added {
            column: ident(&column.name()),
            column_type: column.type_name(),
            default: expr.deparse(),
            domain: column.domain().map(str::to_string),
            fills,
        };
        raise(copied_table_add_column(&table, &copies, &added, &key));
    }
}

/// How many copies the rows of a Citus table have, if more than one.
fn copies_of(relid: pg_sys::Oid) -> Option<Copies> {
    spi::ok(Spi::connect(|c| {
        let citus = c
            .select(
                "SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL \
                        AND pg_catalog.to_regclass('pg_catalog.pg_dist_placement') IS NOT NULL",
                None,
                &[],
            )?
            .first()
            .get_one::<bool>()?;
        if citus != Some(true) {
            return Ok(None);
        }
        let (reference, copies) = c
            .select(
                "SELECT (SELECT p.partmethod OPERATOR(pg_catalog.=) 'n' AND p.repmodel OPERATOR(pg_catalog.=) 't' \
                         FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid OPERATOR(pg_catalog.=) $1), \
                        (SELECT pg_catalog.max(per_shard.n)::pg_catalog.int8 FROM \
                           (SELECT pg_catalog.count(*) AS n FROM pg_catalog.pg_dist_shard s \
                            JOIN pg_catalog.pg_dist_placement l ON l.shardid OPERATOR(pg_catalog.=) s.shardid \
                            WHERE s.logicalrelid OPERATOR(pg_catalog.=) $1 \
                            GROUP BY s.shardid) per_shard)",
                None,
                &[relid.into()],
            )?
            .first()
            .get_two::<bool, i64>()?;
        Ok(match (reference, copies) {
            (Some(true), _) => Some(Copies::Reference),
            (Some(false), Some(n)) if n > 1 => Some(Copies::Replicated(n)),
            _ => None,
        })
    }))
}

/// The table, quoted and qualified, and its primary key's columns, if it
/// has at least one row.
fn filled(relid: pg_sys::Oid) -> Option<(String, Vec<String>)> {
    spi::ok(Spi::connect(|c| {
        // Quoted so as to read the same in every database encoding.
        let (schema, name) = c
            .select(
                "SELECT n.nspname::pg_catalog.text, r.relname::pg_catalog.text FROM pg_catalog.pg_class r \
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) r.relnamespace \
                 WHERE r.oid OPERATOR(pg_catalog.=) $1",
                None,
                &[relid.into()],
            )?
            .first()
            .get_two::<Text, Text>()?;
        let (Some(schema), Some(name)) = (schema, name) else {
            return Ok(None);
        };
        let table = format!("{}.{}", ident(schema.as_str()), ident(name.as_str()));
        // A row of one column: Citus plans `EXISTS (SELECT FROM t)` of a
        // distributed table into an intermediate result of no columns,
        // which it cannot read back.
        let filled = !c
            .select(&format!("SELECT 1 FROM {table} LIMIT 1"), None, &[])?
            .is_empty();
        if !filled {
            return Ok(None);
        }
        let key = c
            .select(
                "SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_index i \
                 JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) i.indrelid \
                  AND a.attnum OPERATOR(pg_catalog.=) ANY (i.indkey) \
                 WHERE i.indrelid OPERATOR(pg_catalog.=) $1 AND i.indisprimary \
                 ORDER BY pg_catalog.array_position(i.indkey::pg_catalog.int2[], a.attnum)",
                None,
                &[relid.into()],
            )?
            .filter_map(|r| r.get::<Text>(1).ok().flatten())
            .map(|a| ident(a.as_str()))
            .collect();
        Ok(Some((table, key)))
    }))
}

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
        if group == 0 {
            return Ok(Some(None));
        }
        const LIST: &str = "SELECT pg_catalog.json_agg(pg_catalog.json_build_array(n.nodeid, n.nodename, n.nodeport, \
                            n.groupid, n.noderole OPERATOR(pg_catalog.=) 'primary'::pg_catalog.noderole)) \
                            FROM pg_catalog.pg_dist_node n";
        // Connecting within 2 s, and everything within 3 s: a coordinator
        // that accepts the connection and then goes silent ends the
        // transaction.
        let answer = timeout::within(
            3_000,
            std::panic::AssertUnwindSafe(|| {
                guc::with(c"citus.node_connection_timeout", c"2000", || {
                    c.select(
                        "SELECT CASE WHEN r.success THEN r.result END \
                         FROM pg_catalog.master_run_on_worker(ARRAY[$1]::pg_catalog.text[], \
                              ARRAY[$2]::pg_catalog.int4[], ARRAY[$3]::pg_catalog.text[], false) r",
                        None,
                        &[
                            co_host.into(),
                            co_port.into(),
                            Text(LIST.to_string()).into(),
                        ],
                    )?
                    .first()
                    .get_one::<Text>()
                })
            }),
        )?;
        let Some(answer) = answer.filter(|a| !a.0.is_empty()) else {
            return Ok(None);
        };
        let listed: Vec<Listed> = c
            .select(
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
            .collect();
        let me = Listed {
            nodeid,
            host: host.0,
            port,
            group,
            primary: true,
        };
        Ok(Some(membership(&me, &listed, worker)))
    }))
}
