//! The statements the claims worker runs on `snowflake_id.snowflake_claims`:
//! where the table is, writing this server's claim, reading every claim,
//! ending the claim at shutdown, and who holds the table's lock. They run
//! with the search path pinned to nothing (`pin_session`), so every name
//! and operator is qualified.

use crate::pg::clock::now_ms;
use crate::pg::spi;
use crate::pg::text::{ident, Text};
use crate::pg::timeout;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowflake_id_core::claims::{Claim, Claimant, Row};
use snowflake_id_core::{Class, Failure};

/// Where the extension's claims table is found: as a member of the
/// extension, not by name in a search path. Being a member is not enough:
/// the extension's owner, who may be any role with CREATE on the database
/// (it is trusted), can add a table of its own to it (ALTER EXTENSION ADD),
/// whose triggers would run as this worker. The install script's table is
/// a plain table in the schema `snowflake_id`, both owned by a superuser,
/// which no other role can create or give away to one.
const CLAIMS_TABLE: &str = "FROM pg_catalog.pg_extension e \
     JOIN pg_catalog.pg_depend d ON d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass \
          AND d.refobjid OPERATOR(pg_catalog.=) e.oid AND d.deptype OPERATOR(pg_catalog.=) 'e' \
          AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
     JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objid AND c.relname OPERATOR(pg_catalog.=) 'snowflake_claims' \
          AND c.relkind OPERATOR(pg_catalog.=) 'r' \
     JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
          AND n.nspname OPERATOR(pg_catalog.=) 'snowflake_id' \
     JOIN pg_catalog.pg_authid t ON t.oid OPERATOR(pg_catalog.=) c.relowner AND t.rolsuper \
     JOIN pg_catalog.pg_authid s ON s.oid OPERATOR(pg_catalog.=) n.nspowner AND s.rolsuper \
     WHERE e.extname OPERATOR(pg_catalog.=) 'snowflake_id'";

/// The extension's own claims table, schema-qualified and quoted: found as
/// a member of the extension, not by name in a search path, so no table a
/// user created elsewhere can stand in for it.
pub(super) fn claims_table() -> Option<String> {
    let (schema, table) = Spi::get_two::<Text, Text>(&format!(
        "SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text {CLAIMS_TABLE}"
    ))
    .ok()?;
    Some(format!(
        "{}.{}",
        ident(schema?.as_str()),
        ident(table?.as_str())
    ))
}

/// Whether the claims table tells backfill claims apart (its `backfill`
/// column): a database whose extension an earlier build of 0.2.0 made has
/// none, and its claims are then written and read as before.
fn tells_backfill(table: &str) -> bool {
    Spi::get_one_with_args::<bool>(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_attribute a \
                        WHERE a.attrelid OPERATOR(pg_catalog.=) $1::pg_catalog.regclass \
                          AND a.attname OPERATOR(pg_catalog.=) 'backfill' AND NOT a.attisdropped)",
        &[table.into()],
    ) == Ok(Some(true))
}

/// What one refresh found.
pub(super) struct Read {
    pub claims: Vec<Claim>,
    /// Each row that could not be judged, described.
    pub skipped: Vec<String>,
    /// When this server's claim says it claimed its worker id.
    pub claimed_at_ms: Option<i64>,
}

/// Writes this server's claim (unless it has no worker id to claim) and
/// reads every claim the table holds.
pub(super) fn write_and_read(
    who: &Claimant,
    claiming: bool,
    backfill: Option<u32>,
    previous: Option<u64>,
    claimed_at: Option<i64>,
    name: &str,
) -> Result<Read, Failure> {
    let db = crate::shmem::get()
        .and_then(super::database_name)
        .unwrap_or_default();
    let Some(table) = claims_table() else {
        let installed: Option<bool> = Spi::get_one(
            "SELECT true FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'snowflake_id'",
        )
        .unwrap_or(None);
        let what = if installed.is_some() {
            "the installed snowflake_id has no snowflake_claims table"
        } else {
            "snowflake_id is not installed"
        };
        return Err(Failure::new(Class::NotReady, format!("this server's worker-id claim is not kept: {what} in database \"{db}\", where this server keeps it"))
            .hint(format!("Run CREATE EXTENSION snowflake_id (or ALTER EXTENSION snowflake_id UPDATE) in database \"{db}\", or point snowflake_id.claims_database at the database that has it.")));
    };
    if let Some(previous) = previous {
        // This server's rows from before its restart: claims no more.
        spi::run(
            &format!("DELETE FROM {table} WHERE system_identifier OPERATOR(pg_catalog.=) $1 \
                      AND timeline OPERATOR(pg_catalog.=) $2 AND instance OPERATOR(pg_catalog.=) $3"),
            &[
                (who.system_identifier as i64).into(),
                i64::from(who.timeline).into(),
                (previous as i64).into(),
            ],
        );
    }
    let kinds = tells_backfill(&table);
    let claimed_at_ms = if claiming {
        // The backfill worker id first: the live claim's statement drops
        // this server's rows on every other id.
        if let Some(b) = backfill {
            claim(
                &table,
                &Claimant {
                    worker_id: b,
                    ..who.clone()
                },
                name,
                None,
                None,
                kinds.then_some(true),
            );
        }
        let keep: Vec<i32> = std::iter::once(who.worker_id)
            .chain(backfill)
            .map(|w| w as i32)
            .collect();
        Some(claim(
            &table,
            who,
            name,
            claimed_at,
            Some(&keep),
            kinds.then_some(false),
        ))
    } else {
        None
    };
    let (claims, skipped) = read(&table, kinds)?;
    Ok(Read {
        claims,
        skipped,
        claimed_at_ms,
    })
}

/// Writes this server's claim afresh and says when the claim was made;
/// with `keep`, also drops its claims on any worker id not in it.
fn claim(
    table: &str,
    who: &Claimant,
    name: &str,
    claimed_at: Option<i64>,
    keep: Option<&[i32]>,
    backfill: Option<bool>,
) -> i64 {
    let (worker, sysid, tli, instance) = (
        who.worker_id as i32,
        who.system_identifier as i64,
        i64::from(who.timeline),
        who.instance as i64,
    );
    let remembered = claimed_at.map(|ms| ms as f64 / 1000.0);
    // Deleted and inserted again, not updated: a subscriber that missed the
    // first insert (a subscription made without copying data, or after the
    // claim was written) would skip every update of a row it does not have,
    // and never see the claim. Two statements: the insert must come after
    // the delete, which a data-modifying WITH does not promise.
    let old: Option<f64> = spi::first_value(
        &format!(
            "DELETE FROM {table} \
             WHERE system_identifier OPERATOR(pg_catalog.=) $2 AND timeline OPERATOR(pg_catalog.=) $3 \
               AND instance OPERATOR(pg_catalog.=) $4 AND worker_id OPERATOR(pg_catalog.=) $1 \
             RETURNING CASE WHEN pg_catalog.isfinite(claimed_at) THEN pg_catalog.date_part('epoch', claimed_at) END"
        ),
        &[worker.into(), sysid.into(), tli.into(), instance.into()],
    );
    let mut args: Vec<DatumWithOid<'_>> = vec![
        worker.into(),
        sysid.into(),
        tli.into(),
        instance.into(),
        name.into(),
        remembered.into(),
        old.into(),
    ];
    args.extend(backfill.map(DatumWithOid::from));
    let at: Option<f64> = spi::first_value(
        // The claim keeps the time this server remembers claiming the id
        // (rows can be deleted, or made again with the extension; the
        // memory cannot), else the time its row said, else a promoted
        // standby's old primary's (it continues that server's IDs, and must
        // not become the later claimant against a server that collided
        // with it), else now.
        &format!(
            "INSERT INTO {table} (worker_id, system_identifier, timeline, instance, name, claimed_at, last_seen{}) \
             VALUES ($1, $2, $3, $4, $5, \
                     COALESCE(pg_catalog.to_timestamp($6), pg_catalog.to_timestamp($7), \
                              (SELECT pg_catalog.min(c.claimed_at) FROM {table} c \
                               WHERE c.system_identifier OPERATOR(pg_catalog.=) $2 AND c.timeline OPERATOR(pg_catalog.<) $3 \
                                 AND c.worker_id OPERATOR(pg_catalog.=) $1 AND pg_catalog.isfinite(c.claimed_at)), \
                              pg_catalog.clock_timestamp()), \
                     pg_catalog.clock_timestamp(){}) \
             RETURNING pg_catalog.date_part('epoch', claimed_at)",
            if backfill.is_some() { ", backfill" } else { "" },
            if backfill.is_some() { ", $8" } else { "" },
        ),
        &args,
    );
    // A worker id this server had earlier in this run is claimed no more.
    if let Some(kept) = keep {
        spi::run(
            &format!(
                "DELETE FROM {table} \
                 WHERE system_identifier OPERATOR(pg_catalog.=) $1 AND timeline OPERATOR(pg_catalog.=) $2 \
                   AND instance OPERATOR(pg_catalog.=) $3 AND worker_id OPERATOR(pg_catalog.<>) ALL ($4)"
            ),
            &[sysid.into(), tli.into(), instance.into(), kept.to_vec().into()],
        );
    }
    at.map_or_else(now_ms, |s| (s * 1000.0).floor() as i64)
}

/// Every claim the table holds, and a description of each row that cannot
/// be judged (skipped, so that one bad row cannot stop the judging of the
/// others). Timestamps are read as seconds, which infinite ones survive.
fn read(table: &str, kinds: bool) -> Result<(Vec<Claim>, Vec<String>), Failure> {
    Spi::connect(|client| {
        let rows = client.select(
            &format!(
                "SELECT worker_id, system_identifier, timeline, instance, \
                 pg_catalog.date_part('epoch', claimed_at), pg_catalog.date_part('epoch', last_seen), \
                 pg_catalog.convert_to(name, 'UTF8'), {} \
                 FROM {table}",
                if kinds { "backfill" } else { "NULL::pg_catalog.bool" }
            ),
            None,
            &[],
        )?;
        let (mut claims, mut skipped) = (Vec::new(), Vec::new());
        sort_rows(rows, &mut claims, &mut skipped)?;
        Ok::<_, pgrx::spi::SpiError>((claims, skipped))
    })
    .map_err(|e| Failure::new(Class::Warning, format!("could not read snowflake_claims: {e}")))
}

/// Claim rows, as this table's and the other nodes' readings give them
/// (worker_id, system_identifier, timeline, instance, claimed_at and
/// last_seen in seconds, the name as UTF-8 bytes, backfill), into the claims
/// that can be judged and a description of each that cannot.
fn sort_rows(
    rows: pgrx::spi::SpiTupleTable<'_>,
    claims: &mut Vec<Claim>,
    skipped: &mut Vec<String>,
) -> Result<(), pgrx::spi::SpiError> {
    for r in rows {
        let row = Row {
            worker_id: r.get::<i32>(1)?,
            system_identifier: r.get::<i64>(2)?,
            timeline: r.get::<i64>(3)?,
            instance: r.get::<i64>(4)?,
            // In the database's encoding; read as UTF-8 whatever that is.
            name: r
                .get::<Vec<u8>>(7)?
                .map(|b| String::from_utf8_lossy(&b).into_owned()),
            claimed_at_s: r.get::<f64>(5)?,
            last_seen_s: r.get::<f64>(6)?,
            backfill: r.get::<bool>(8)?,
        };
        match row.claim() {
            Ok(c) => claims.push(c),
            Err(why) => skipped.push(row.describe_skipped(&why)),
        }
    }
    Ok(())
}

/// Who holds a lock on the claims table (the sessions this worker's last
/// write waited behind), for `problem`: anyone with UPDATE, DELETE or
/// TRUNCATE on it (pg_write_all_data) can LOCK it, and no privilege of its
/// own stops that.
pub(super) fn lock_holders() -> Option<String> {
    let table = claims_table_oid()?;
    let who: Option<Text> = Spi::get_one_with_args(
        "SELECT pg_catalog.string_agg(pg_catalog.format('process %s (role %s, in a transaction since %s)', \
                a.pid, a.usename, a.xact_start), ', ') \
         FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid \
         WHERE l.locktype OPERATOR(pg_catalog.=) 'relation' AND l.relation OPERATOR(pg_catalog.=) $1 \
           AND l.granted AND l.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()",
        &[table.into()],
    )
    .ok()
    .flatten();
    who.map(|t| t.0)
}

fn claims_table_oid() -> Option<pg_sys::Oid> {
    Spi::get_one::<pg_sys::Oid>(&format!("SELECT c.oid {CLAIMS_TABLE}"))
        .ok()
        .flatten()
}

/// Marks the claims of this server's start (`who`'s system, timeline and
/// instance) as ended: `last_seen` becomes 1970. `None` if the table is
/// not there or the statement failed.
pub(super) fn end_claims(system_identifier: u64, timeline: u32, instance: u64) -> Option<()> {
    let table = claims_table()?;
    Spi::run_with_args(
        &format!(
            "UPDATE {table} SET last_seen = pg_catalog.to_timestamp(0) \
             WHERE system_identifier OPERATOR(pg_catalog.=) $1 \
               AND timeline OPERATOR(pg_catalog.=) $2 AND instance OPERATOR(pg_catalog.=) $3"
        ),
        &[
            (system_identifier as i64).into(),
            i64::from(timeline).into(),
            (instance as i64).into(),
        ],
    )
    .ok()
}

/// How long reading the other nodes' claims may take in all (2 s to
/// connect, then the query; each node's own wait for the table's lock is
/// 1 s): a node that answers later is one that did not answer.
const CLUSTER_READ_MS: i32 = 3_000;

/// What the other nodes of a Citus cluster said of their claims.
pub(super) struct Cluster {
    pub claims: Vec<Claim>,
    pub skipped: Vec<String>,
    /// The nodes whose claims could not be read, and why.
    pub unread: Vec<String>,
}

/// On a Citus cluster (this database holds Citus's metadata), the claims
/// every other primary node holds for itself, asked through Citus's own
/// connections (its conninfo and authentication): so a worker id given
/// twice within one cluster meets without publications set up by hand.
///
/// The question is `pg_catalog.snowflake_id_claims_here()`, which the
/// install script makes where only a superuser can create anything: on a
/// node where a role dropped the extension and made objects of its own,
/// nothing of theirs runs as this worker (that node is said to be unread).
/// Bounded in time by a timer of this process (the wait in Citus's loop
/// ends on it) and, on each node, by the function's lock timeout.
pub(super) fn read_cluster() -> Result<Cluster, Failure> {
    let has_citus = Spi::get_one::<bool>(
        "SELECT pg_catalog.to_regprocedure('pg_catalog.run_command_on_all_nodes(text,boolean,boolean)') IS NOT NULL",
    );
    if has_citus != Ok(Some(true)) {
        return Ok(Cluster {
            claims: Vec::new(),
            skipped: Vec::new(),
            unread: Vec::new(),
        });
    }
    timeout::within(CLUSTER_READ_MS, || {
        ask_cluster("SELECT pg_catalog.snowflake_id_claims_here()")
    })
    .map_err(|e| {
        Failure::new(
            Class::Warning,
            format!("could not read the claims of the Citus cluster's other nodes: {e}"),
        )
    })
}

fn ask_cluster(command: &str) -> Result<Cluster, pgrx::spi::SpiError> {
    Spi::connect_mut(|client| {
        client.update(
            "SELECT pg_catalog.set_config('citus.node_connection_timeout', '2000', true)",
            None,
            &[],
        )?;
        let answers = client.update(
            "SELECT pg_catalog.format('%s:%s', n.nodename, n.nodeport), a.success, \
                    CASE WHEN a.result OPERATOR(pg_catalog.<>) '' THEN a.result END, a.result \
             FROM pg_catalog.run_command_on_all_nodes($1, true, false) a \
             LEFT JOIN pg_catalog.pg_dist_node n ON n.nodeid OPERATOR(pg_catalog.=) a.nodeid",
            None,
            &[command.into()],
        )?;
        let mut documents = Vec::new();
        let mut unread = Vec::new();
        for r in answers {
            let node = r
                .get::<Text>(1)?
                .map_or_else(|| "this node".into(), |t| t.0);
            match (r.get::<bool>(2)?, r.get::<Text>(3)?) {
                (Some(true), Some(json)) => documents.push(json.0),
                // No claims there: nothing to judge.
                (Some(true), None) => {}
                _ => unread.push(format!(
                    "node {node}: {}",
                    r.get::<Text>(4)?.map(|t| t.0).unwrap_or_default().trim()
                )),
            }
        }
        let (mut claims, mut skipped) = (Vec::new(), Vec::new());
        for document in documents {
            let rows = client.select(
                "SELECT (c.value OPERATOR(pg_catalog.->>) 'worker_id')::pg_catalog.int4, \
                        (c.value OPERATOR(pg_catalog.->>) 'system_identifier')::pg_catalog.int8, \
                        (c.value OPERATOR(pg_catalog.->>) 'timeline')::pg_catalog.int8, \
                        (c.value OPERATOR(pg_catalog.->>) 'instance')::pg_catalog.int8, \
                        pg_catalog.date_part('epoch', (c.value OPERATOR(pg_catalog.->>) 'claimed_at')::pg_catalog.timestamptz), \
                        pg_catalog.date_part('epoch', (c.value OPERATOR(pg_catalog.->>) 'last_seen')::pg_catalog.timestamptz), \
                        pg_catalog.convert_to(c.value OPERATOR(pg_catalog.->>) 'name', 'UTF8'), \
                        (c.value OPERATOR(pg_catalog.->>) 'backfill')::pg_catalog.bool \
                 FROM pg_catalog.json_array_elements($1::pg_catalog.json) c",
                None,
                &[Text(document).into()],
            )?;
            sort_rows(rows, &mut claims, &mut skipped)?;
        }
        Ok(Cluster {
            claims,
            skipped,
            unread,
        })
    })
}
