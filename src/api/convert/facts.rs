//! The catalog read into the facts the core plans a conversion from: the
//! column and every column that references it, the views, publications,
//! grants and Citus tables that depend on them, and the old default.

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::{SpiClient, SpiResult};
use snowflake_id_core::convert::{
    self, CitusTable, Column, Facts, Grant, Leftover, OldDefault, Referencing, View,
};
use snowflake_id_core::{Class, Failure};

use crate::pg::spi::ok as spi;
use crate::pg::text::Text;

pub(super) fn args<'a>(
    values: impl IntoIterator<Item = DatumWithOid<'a>>,
) -> Vec<DatumWithOid<'a>> {
    values.into_iter().collect()
}

/// A column found by name in a table, with what is needed to follow it.
struct Found {
    relid: pg_sys::Oid,
    name: String,
    column: Column,
}

/// The facts, and the sequence the plan drops (to be locked with the tables).
/// What the caller asked for besides the column.
pub(super) struct Asked {
    pub(super) drop_sequence: bool,
    pub(super) subscribers_widened: bool,
}

/// The facts, the sequence the plan drops, and each table's OID by the
/// name the plan gives it (locks are taken by OID).
pub(super) type Read = (Facts, Option<pg_sys::Oid>, Vec<(String, pg_sys::Oid)>);

pub(super) fn read_facts(tbl: pg_sys::Oid, col: &str, asked: &Asked) -> Result<Read, Failure> {
    Spi::connect(|c| facts_with(c, tbl, col, asked))
}

/// A text column, in UTF-8 whatever the database's encoding.
fn text(r: SpiResult<Option<Text>>) -> Option<String> {
    spi(r).map(|t| t.0)
}

/// The column as the catalog has it, read in one statement.
struct ColumnRow {
    relkind: char,
    attnum: i16,
    target: Column,
    /// `attidentity`: empty where the column is no identity column.
    identity: String,
    /// The default's `pg_attrdef` row and its text, where it has one.
    default: Option<(pg_sys::Oid, String)>,
    /// A partition's or inheritance child's column.
    inherited: bool,
    /// The first column of a primary key or unique index.
    is_key: bool,
    owned_sequence: Option<pg_sys::Oid>,
}

/// What the column's default is, the sequence a kept conversion left
/// owned by it, and the sequence this conversion drops.
struct Defaults {
    default: OldDefault,
    leftover: Option<(Leftover, pg_sys::Oid)>,
    dropped: Option<pg_sys::Oid>,
    nextval: String,
}

fn facts_with(
    c: &SpiClient<'_>,
    tbl: pg_sys::Oid,
    col: &str,
    asked: &Asked,
) -> Result<Read, Failure> {
    let row = column_row(c, tbl, col)?;
    let Defaults {
        default,
        leftover,
        dropped,
        nextval,
    } = defaults(c, tbl, col, &row, asked.drop_sequence);
    let inherited_from = if row.inherited {
        top(c, tbl).map(|(_, name, _)| name)
    } else {
        None
    };
    let references: Option<String> = strings_with(
        c,
        "SELECT format('constraint %I to %s', conname, confrelid::regclass) FROM pg_constraint \
         WHERE contype = 'f' AND conrelid = $1 AND $2::int2 = ANY(conkey) ORDER BY conname LIMIT 1",
        args([tbl.into(), row.attnum.into()]),
    )
    .into_iter()
    .next();
    let start = Found {
        relid: tbl,
        name: col.to_string(),
        column: row.target.clone(),
    };
    let (referencing, found) = referencing(c, start);
    let mut facts = Facts {
        target: row.target,
        relkind: row.relkind,
        inherited_from,
        is_key: row.is_key,
        default,
        references,
        referencing,
        views: Vec::new(),
        nextval,
        drop_sequence: asked.drop_sequence,
        leftover: leftover.map(|(l, _)| l),
        publications: Vec::new(),
        subscribers_widened: asked.subscribers_widened,
        owned_apart: Vec::new(),
        citus: Vec::new(),
    };
    convert::check(&facts)?;
    let widened: Vec<&Found> = convert::widened(&facts)
        .into_iter()
        .filter_map(|w| found.iter().find(|f| &f.column == w))
        .collect();
    facts.views = views(c, &widened);
    facts.publications = publications(c, &widened);
    facts.owned_apart = owned_apart(c, &widened);
    facts.citus = citus_tables(c, tbl, &widened);
    let oids = found
        .iter()
        .map(|f| (f.column.table.clone(), f.relid))
        .collect();
    Ok((facts, dropped, oids))
}

/// The table's and the column's row of the catalog, or why there is none.
fn column_row(c: &SpiClient<'_>, tbl: pg_sys::Oid, col: &str) -> Result<ColumnRow, Failure> {
    let rows = spi(c.select(
        "SELECT c.relkind::text, format('%I.%I', n.nspname, c.relname), a.attnum, quote_ident(a.attname), \
                format_type(a.atttypid, a.atttypmod), a.attidentity::text, ad.oid, pg_get_expr(ad.adbin, ad.adrelid), \
                c.relispartition OR a.attinhcount > 0, \
                EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisunique) \
                        AND i.indkey[0] = a.attnum), \
                pg_get_serial_sequence(c.oid::regclass::text, a.attname)::regclass::oid, \
                quote_ident(pg_get_userbyid(c.relowner)) \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $2::name AND a.attnum > 0 AND NOT a.attisdropped \
         LEFT JOIN pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum \
         WHERE c.oid = $1",
        None,
        &args([tbl.into(), Text(col.to_string()).into()]),
    ));
    let Some(row) = rows.into_iter().next() else {
        return Err(Failure::new(
            Class::UndefinedTable,
            format!("no relation has the OID {}", tbl.to_u32()),
        )
        .hint("Name the table: snowflake_convert('orders')."));
    };
    let relkind: String = text(row.get(1)).unwrap_or_default();
    let table: String = text(row.get(2)).unwrap_or_default();
    let Some(attnum) = spi(row.get::<i16>(3)) else {
        return Err(Failure::new(
            Class::UndefinedColumn,
            format!("column \"{col}\" of {table} does not exist"),
        )
        .hint("Name the key column: snowflake_convert('orders', 'order_id')."));
    };
    let attrdef: Option<pg_sys::Oid> = spi(row.get(7));
    Ok(ColumnRow {
        relkind: relkind.chars().next().unwrap_or('?'),
        attnum,
        target: Column {
            table,
            column: text(row.get(4)).unwrap_or_default(),
            type_name: text(row.get(5)).unwrap_or_default(),
            owner: text(row.get(12)).unwrap_or_default(),
        },
        identity: text(row.get(6)).unwrap_or_default(),
        default: attrdef.zip(text(row.get(8))),
        inherited: spi(row.get(9)).unwrap_or(false),
        is_key: spi(row.get(10)).unwrap_or(false),
        owned_sequence: spi(row.get(11)),
    })
}

fn defaults(
    c: &SpiClient<'_>,
    tbl: pg_sys::Oid,
    col: &str,
    row: &ColumnRow,
    drop_sequence: bool,
) -> Defaults {
    let (nextval, nextval_oid) = snowflake_nextval(c);
    let (default, sequence) = if !row.identity.is_empty() {
        (OldDefault::Identity, row.owned_sequence)
    } else if let Some((def, expr)) = row.default.clone() {
        old_default(c, tbl, col, def, expr, nextval_oid)
    } else {
        (OldDefault::Nothing, None)
    };
    // A sequence the column still owns after a conversion that kept it.
    let leftover = match (&default, row.owned_sequence) {
        (OldDefault::Snowflake, Some(seq)) => Some((sequence_facts(c, seq, tbl, col), seq)),
        _ => None,
    };
    let dropped = match default {
        OldDefault::Identity => sequence,
        OldDefault::Sequence { .. } if drop_sequence => sequence,
        OldDefault::Snowflake if drop_sequence => leftover.as_ref().map(|(_, seq)| *seq),
        _ => None,
    };
    Defaults {
        default,
        leftover,
        dropped,
        nextval,
    }
}

/// A CTE `tree(relid)`: the relation the parameter `root` names, and its
/// partitions and children at every level.
pub(super) fn tree(root: &str) -> String {
    format!("WITH RECURSIVE tree(relid) AS (SELECT {root}::oid UNION SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.relid)")
}

/// The table at the top of `relid`'s partition or inheritance tree, and
/// its owner.
fn top(c: &SpiClient<'_>, relid: pg_sys::Oid) -> Option<(pg_sys::Oid, String, String)> {
    let rows = spi(c.select(
        "WITH RECURSIVE up(relid, depth) AS (SELECT $1::oid, 0 \
           UNION ALL SELECT i.inhparent, u.depth + 1 FROM pg_inherits i JOIN up u ON i.inhrelid = u.relid) \
         SELECT up.relid, format('%I.%I', n.nspname, r.relname), quote_ident(pg_get_userbyid(r.relowner)) \
         FROM up JOIN pg_class r ON r.oid = up.relid \
         JOIN pg_namespace n ON n.oid = r.relnamespace ORDER BY up.depth DESC LIMIT 1",
        None,
        &args([relid.into()]),
    ));
    rows.into_iter()
        .next()
        .and_then(|r| Some((spi(r.get(1))?, text(r.get(2))?, text(r.get(3))?)))
}

/// The extension's own `snowflake_nextval()`: the call a default makes
/// (qualified, so it does not depend on the search_path) and its OID.
/// Being the extension's member is not enough: its owner, who may be any
/// role with CREATE on the database (the extension is trusted), can add
/// a function of its own to it (ALTER EXTENSION ADD). Only a superuser can
/// create a C function, and this one is the library's own symbol, in the
/// extension's schema.
pub(super) fn snowflake_nextval(c: &SpiClient<'_>) -> (String, Option<pg_sys::Oid>) {
    let rows = spi(c.select(
        "SELECT format('%I.%I()', n.nspname, p.proname), p.oid FROM pg_proc p \
         JOIN pg_namespace n ON n.oid = p.pronamespace \
         JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e' \
         JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake_id' \
         JOIN pg_language l ON l.oid = p.prolang AND l.lanname = 'c' \
         WHERE p.proname = 'snowflake_nextval' AND p.pronargs = 0 AND p.pronamespace = e.extnamespace \
           AND p.prosrc = 'snowflake_nextval_wrapper'",
        None,
        &[],
    ));
    match rows.into_iter().next() {
        Some(r) => (text(r.get(1)).unwrap_or_default(), spi(r.get(2))),
        None => ("snowflake_nextval()".into(), None),
    }
}

fn old_default(
    c: &SpiClient<'_>,
    tbl: pg_sys::Oid,
    col: &str,
    attrdef: pg_sys::Oid,
    expr: String,
    nextval: Option<pg_sys::Oid>,
) -> (OldDefault, Option<pg_sys::Oid>) {
    let depends_on = |class: &str| -> Vec<(Option<String>, Option<pg_sys::Oid>, Option<String>)> {
        let q = format!(
            "SELECT CASE WHEN d.refclassid = 'pg_class'::regclass THEN \
                (SELECT format('%I.%I', n.nspname, s.relname) FROM pg_class s JOIN pg_namespace n ON n.oid = s.relnamespace \
                 WHERE s.oid = d.refobjid AND s.relkind = 'S') END, d.refobjid, \
                (SELECT quote_ident(pg_get_userbyid(s.relowner)) FROM pg_class s WHERE s.oid = d.refobjid) \
             FROM pg_depend d WHERE d.classid = 'pg_attrdef'::regclass AND d.objid = $1 AND d.refclassid = '{class}'::regclass"
        );
        spi(c.select(&q, None, &args([attrdef.into()])))
            .map(|r| (text(r.get(1)), spi(r.get(2)), text(r.get(3))))
            .collect()
    };
    if nextval.is_some() && depends_on("pg_proc").iter().any(|(_, f, _)| *f == nextval) {
        return (OldDefault::Snowflake, None);
    }
    if !expr.starts_with("nextval(") {
        return (OldDefault::Other(expr), None);
    }
    let Some((Some(sequence), Some(seq), owner)) = depends_on("pg_class")
        .into_iter()
        .find(|(name, _, _)| name.is_some())
    else {
        return (OldDefault::Other(expr), None);
    };
    let shared_with = sequence_users(c, seq, tbl, col);
    (
        OldDefault::Sequence {
            sequence,
            owner: owner.unwrap_or_default(),
            shared_with,
        },
        Some(seq),
    )
}

/// The other columns whose defaults take from `seq`: the defaults of this
/// table's partitions and children follow the parent's; any other keeps
/// the sequence alive.
fn sequence_users(c: &SpiClient<'_>, seq: pg_sys::Oid, tbl: pg_sys::Oid, col: &str) -> Vec<String> {
    spi(c.select(
        &format!(
        "{} \
         SELECT format('%I.%I.%I', n.nspname, r.relname, a.attname) \
         FROM pg_depend d JOIN pg_attrdef ad ON d.classid = 'pg_attrdef'::regclass AND ad.oid = d.objid \
         JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum \
         JOIN pg_class r ON r.oid = ad.adrelid JOIN pg_namespace n ON n.oid = r.relnamespace \
         WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = $1 \
           AND NOT (ad.adrelid IN (SELECT relid FROM tree) AND a.attname = $3::name) \
         ORDER BY 1",
            tree("$2")
        ),
        None,
        &args([seq.into(), tbl.into(), Text(col.to_string()).into()]),
    ))
    .filter_map(|r| text(r.get(1)))
    .collect()
}

/// The sequence `seq`, owned by the column, as a leftover to drop.
fn sequence_facts(c: &SpiClient<'_>, seq: pg_sys::Oid, tbl: pg_sys::Oid, col: &str) -> Leftover {
    let row = spi(c.select(
        "SELECT format('%I.%I', n.nspname, s.relname), quote_ident(pg_get_userbyid(s.relowner)) \
         FROM pg_class s JOIN pg_namespace n ON n.oid = s.relnamespace WHERE s.oid = $1",
        None,
        &args([seq.into()]),
    ))
    .first();
    Leftover {
        sequence: text(row.get(1)).unwrap_or_default(),
        owner: text(row.get(2)).unwrap_or_default(),
        shared_with: sequence_users(c, seq, tbl, col),
    }
}

/// The partitions and children of the widened tables that another role
/// owns, with their owner and the table's.
fn owned_apart(c: &SpiClient<'_>, widened: &[&Found]) -> Vec<(String, String, String, String)> {
    let mut out = Vec::new();
    for w in widened {
        let rows = spi(c.select(
            &format!(
                "{} \
                 SELECT format('%I.%I', n.nspname, r.relname), quote_ident(pg_get_userbyid(r.relowner)), \
                        quote_ident(pg_get_userbyid(top.relowner)) \
                 FROM tree t JOIN pg_class r ON r.oid = t.relid JOIN pg_namespace n ON n.oid = r.relnamespace \
                 JOIN pg_class top ON top.oid = $1 WHERE r.relowner <> top.relowner ORDER BY 1",
                tree("$1")
            ),
            None,
            &args([w.relid.into()]),
        ));
        for r in rows {
            if let (Some(child), Some(owner), Some(top)) =
                (text(r.get(1)), text(r.get(2)), text(r.get(3)))
            {
                out.push((child, owner, w.column.table.clone(), top));
            }
        }
    }
    out
}

/// The tables among the target and those whose columns widen that Citus
/// manages (none where this database has no Citus).
fn citus_tables(c: &SpiClient<'_>, target: pg_sys::Oid, widened: &[&Found]) -> Vec<CitusTable> {
    let has_citus = spi(c.select(
        "SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL",
        None,
        &[],
    ))
    .first()
    .get_one::<bool>();
    if spi(has_citus) != Some(true) {
        return Vec::new();
    }
    let mut relids = vec![target];
    relids.extend(widened.iter().map(|w| w.relid).filter(|r| *r != target));
    let mut out = Vec::new();
    for relid in relids {
        let rows = spi(c.select(
            "SELECT pg_catalog.format('%s', p.logicalrelid::pg_catalog.regclass), \
                    CASE WHEN p.partmethod OPERATOR(pg_catalog.<>) 'n' THEN 'distributed table' \
                         WHEN p.repmodel OPERATOR(pg_catalog.=) 't' THEN 'reference table' \
                         ELSE 'local table' END, \
                    CASE WHEN p.partmethod OPERATOR(pg_catalog.<>) 'n' THEN pg_catalog.quote_ident( \
                         pg_catalog.column_to_column_name(p.logicalrelid, p.partkey)) END \
             FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid OPERATOR(pg_catalog.=) $1",
            None,
            &args([relid.into()]),
        ));
        for r in rows {
            if let (Some(table), Some(kind)) = (text(r.get(1)), text(r.get(2))) {
                out.push(CitusTable {
                    table,
                    kind,
                    distribution_column: text(r.get(3)),
                });
            }
        }
    }
    out
}

/// The publications that hold the tables whose columns widen, their
/// partitions included, as (table, publication).
fn publications(c: &SpiClient<'_>, widened: &[&Found]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for w in widened {
        let rows = spi(c.select(
            &format!(
                "{} \
                 SELECT DISTINCT format('%I.%I', n.nspname, r.relname), quote_ident(p.pubname) \
                 FROM tree t JOIN pg_class r ON r.oid = t.relid JOIN pg_namespace n ON n.oid = r.relnamespace \
                 JOIN pg_publication_tables pt ON pt.schemaname = n.nspname AND pt.tablename = r.relname \
                 JOIN pg_publication p ON p.pubname = pt.pubname ORDER BY 1, 2",
                tree("$1")
            ),
            None,
            &args([w.relid.into()]),
        ));
        for r in rows {
            if let (Some(t), Some(p)) = (text(r.get(1)), text(r.get(2))) {
                out.push((t, p));
            }
        }
    }
    out
}

/// Every column that holds copies of the key through foreign keys, however
/// many hops away, and what was found of each (the key first). Foreign keys
/// to a partition or child of a table count too; those made by Postgres on
/// partitions for their parent's foreign key do not (the parent's stands
/// for them).
fn referencing(c: &SpiClient<'_>, start: Found) -> (Vec<Referencing>, Vec<Found>) {
    let mut found = vec![start];
    let mut out = Vec::new();
    let mut i = 0;
    let mut depth_of = vec![0u32];
    while i < found.len() {
        let (relid, name, depth) = (found[i].relid, found[i].name.clone(), depth_of[i]);
        let rows = spi(c.select(
            &format!(
            "{}, \
             keys AS (SELECT t.relid, a.attnum FROM tree t JOIN pg_attribute a ON a.attrelid = t.relid AND a.attname = $2::name) \
             SELECT DISTINCT k.conrelid, a.attname::text, format('%I.%I', n.nspname, r.relname), format('%I', a.attname), \
                    format_type(a.atttypid, a.atttypmod), a.attinhcount > 0, quote_ident(pg_get_userbyid(r.relowner)) \
             FROM keys JOIN pg_constraint k ON k.contype = 'f' AND k.confrelid = keys.relid AND keys.attnum = ANY(k.confkey) AND k.conparentid = 0 \
             JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.conkey[array_position(k.confkey, keys.attnum)] \
             JOIN pg_class r ON r.oid = k.conrelid JOIN pg_namespace n ON n.oid = r.relnamespace \
             ORDER BY 3, 4",
                tree("$1")
            ),
            None,
            &args([relid.into(), Text(name).into()]),
        ));
        for r in rows {
            let mut f = Found {
                relid: spi(r.get(1)).unwrap_or(pg_sys::InvalidOid),
                name: text(r.get(2)).unwrap_or_default(),
                column: Column {
                    table: text(r.get(3)).unwrap_or_default(),
                    column: text(r.get(4)).unwrap_or_default(),
                    type_name: text(r.get(5)).unwrap_or_default(),
                    owner: text(r.get(7)).unwrap_or_default(),
                },
            };
            // A foreign key made on a partition or child: its column can
            // only change type with the table at the top.
            if spi(r.get::<bool>(6)).unwrap_or(false) {
                if let Some((relid, table, owner)) = top(c, f.relid) {
                    f.relid = relid;
                    f.column.table = table;
                    f.column.owner = owner;
                }
            }
            if found.iter().any(|g| g.relid == f.relid && g.name == f.name) {
                continue;
            }
            out.push(Referencing {
                column: f.column.clone(),
                depth: depth + 1,
            });
            found.push(f);
            depth_of.push(depth + 1);
        }
        i += 1;
    }
    (out, found)
}

/// The views (plain or materialized) that select the widened columns, of
/// the tables or their partitions, and the views on those views.
fn views(c: &SpiClient<'_>, widened: &[&Found]) -> Vec<View> {
    let mut oids: Vec<pg_sys::Oid> = Vec::new();
    let mut edges: Vec<(pg_sys::Oid, pg_sys::Oid)> = Vec::new();
    for w in widened {
        let rows = spi(c.select(
            &format!(
            "{} \
             SELECT DISTINCT w.ev_class FROM tree t \
             JOIN pg_attribute a ON a.attrelid = t.relid AND a.attname = $2::name \
             JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass \
                              AND d.refobjid = t.relid AND d.refobjsubid = a.attnum \
             JOIN pg_rewrite w ON w.oid = d.objid \
             JOIN pg_class v ON v.oid = w.ev_class AND v.relkind IN ('v', 'm') \
             ORDER BY 1",
                tree("$1")
            ),
            None,
            &args([w.relid.into(), Text(w.name.clone()).into()]),
        ));
        for r in rows {
            let v: pg_sys::Oid = spi(r.get(1)).unwrap_or(pg_sys::InvalidOid);
            if !oids.contains(&v) {
                oids.push(v);
            }
        }
    }
    let mut i = 0;
    while i < oids.len() {
        let rows = spi(c.select(
            "SELECT DISTINCT w.ev_class FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid \
             JOIN pg_class v ON v.oid = w.ev_class AND v.relkind IN ('v', 'm') \
             WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass \
               AND d.refobjid = $1 AND w.ev_class <> $1 ORDER BY 1",
            None,
            &args([oids[i].into()]),
        ));
        for r in rows {
            let v: pg_sys::Oid = spi(r.get(1)).unwrap_or(pg_sys::InvalidOid);
            edges.push((v, oids[i]));
            if !oids.contains(&v) {
                oids.push(v);
            }
        }
        i += 1;
    }
    let mut views: Vec<View> = oids.iter().map(|&v| view(c, v)).collect();
    for (k, &oid) in oids.iter().enumerate() {
        views[k].depends_on = edges
            .iter()
            .filter(|(from, _)| *from == oid)
            .filter_map(|(_, to)| oids.iter().position(|o| o == to))
            .map(|j| views[j].name.clone())
            .collect();
    }
    views
}

fn strings(c: &SpiClient<'_>, query: &str, oid: pg_sys::Oid) -> Vec<String> {
    strings_with(c, query, args([oid.into()]))
}

/// The first column of every row, NULLs left out.
fn strings_with(c: &SpiClient<'_>, query: &str, args: Vec<DatumWithOid<'_>>) -> Vec<String> {
    spi(c.select(query, None, &args))
        .filter_map(|r| text(r.get(1)))
        .collect()
}

fn grants(c: &SpiClient<'_>, query: &str, oid: pg_sys::Oid) -> Vec<Grant> {
    spi(c.select(query, None, &args([oid.into()])))
        .map(|r| Grant {
            privilege: text(r.get(1)).unwrap_or_default(),
            column: text(r.get(2)),
            grantee: text(r.get(3)).unwrap_or_default(),
            grantor: text(r.get(5)).unwrap_or_default(),
            grantable: spi(r.get(4)).unwrap_or(false),
        })
        .collect()
}

const GRANTEE: &str =
    "CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(x.grantee)) END";
const GRANTOR: &str = "quote_ident(pg_get_userbyid(x.grantor))";

/// An SQL expression: the functions and operators outside pg_catalog the
/// catalog object (`class`, `objid`) depends on, one per line.
fn calls_sql(class: &str, objid: &str) -> String {
    format!(
        "(SELECT string_agg(DISTINCT CASE d.refclassid WHEN 'pg_proc'::regclass THEN d.refobjid::regprocedure::text \
                                      ELSE d.refobjid::regoperator::text END, E'\\n') \
          FROM pg_depend d WHERE d.classid = {class} AND d.objid = {objid} AND ( \
               (d.refclassid = 'pg_proc'::regclass \
                AND (SELECT pronamespace FROM pg_proc WHERE oid = d.refobjid) <> 'pg_catalog'::regnamespace) \
            OR (d.refclassid = 'pg_operator'::regclass \
                AND (SELECT oprnamespace FROM pg_operator WHERE oid = d.refobjid) <> 'pg_catalog'::regnamespace)))"
    )
}

fn lines(text: Option<String>) -> Vec<String> {
    let mut v: Vec<String> = text.unwrap_or_default().lines().map(String::from).collect();
    v.sort();
    v
}

/// The functions and operators outside pg_catalog the view `oid` calls.
pub(super) fn view_calls(c: &SpiClient<'_>, oid: pg_sys::Oid) -> Vec<String> {
    let rows = spi(c.select(
        &format!(
            "SELECT {} FROM pg_rewrite w WHERE w.ev_class = $1",
            calls_sql("'pg_rewrite'::regclass", "w.oid")
        ),
        None,
        &args([oid.into()]),
    ));
    rows.flat_map(|r| lines(text(r.get(1)))).collect()
}

/// What PostgreSQL makes again from its text when the columns of `relid`
/// (and of its partitions and children) change type: CHECK and exclusion
/// constraints, indexes, statistics objects; each named, with the
/// functions and operators outside pg_catalog it calls.
pub(super) fn rebuilt_calls(c: &SpiClient<'_>, relid: pg_sys::Oid) -> Vec<(String, Vec<String>)> {
    let rows = spi(c.select(
        &format!(
            "{} \
             SELECT 'constraint ' || quote_ident(k.conname) || ' on ' || k.conrelid::regclass::text, {} \
             FROM pg_constraint k WHERE k.conrelid IN (SELECT relid FROM tree) \
             UNION ALL \
             SELECT 'index ' || i.indexrelid::regclass::text, {} \
             FROM pg_index i WHERE i.indrelid IN (SELECT relid FROM tree) \
             UNION ALL \
             SELECT 'statistics ' || format('%I.%I', n.nspname, x.stxname), {} \
             FROM pg_statistic_ext x JOIN pg_namespace n ON n.oid = x.stxnamespace \
             WHERE x.stxrelid IN (SELECT relid FROM tree)",
            tree("$1"),
            calls_sql("'pg_constraint'::regclass", "k.oid"),
            calls_sql("'pg_class'::regclass", "i.indexrelid"),
            calls_sql("'pg_statistic_ext'::regclass", "x.oid"),
        ),
        None,
        &args([relid.into()]),
    ));
    rows.filter_map(|r| Some((text(r.get(1))?, lines(text(r.get(2))))))
        .collect()
}

/// What it takes to make the view again as it was.
fn view(c: &SpiClient<'_>, oid: pg_sys::Oid) -> View {
    let row = spi(c.select(
        "SELECT format('%I.%I', n.nspname, c.relname), c.relkind = 'm', pg_get_viewdef(c.oid), \
                quote_ident(pg_get_userbyid(c.relowner)), c.relacl IS NOT NULL, \
                quote_literal(obj_description(c.oid, 'pg_class')), \
                CASE WHEN c.relpersistence <> 't' THEN NULL \
                     WHEN c.relnamespace = pg_my_temp_schema() THEN 'this session' ELSE 'another session' END \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1",
        None,
        &args([oid.into()]),
    ))
    .first();
    let definition: String = text(row.get(3)).unwrap_or_default();
    let explicit: bool = spi(row.get(5)).unwrap_or(false);
    View {
        name: text(row.get(1)).unwrap_or_default(),
        materialized: spi(row.get(2)).unwrap_or(false),
        definition: definition.trim_end().trim_end_matches(';').to_string(),
        options: strings(
            c,
            "SELECT format('%s = %L', split_part(o, '=', 1), substr(o, strpos(o, '=') + 1)) \
             FROM pg_class c, unnest(c.reloptions) o WHERE c.oid = $1",
            oid,
        ),
        owner: text(row.get(4)).unwrap_or_default(),
        privileges: explicit.then(|| {
            grants(
                c,
                &format!(
                    "SELECT x.privilege_type, NULL::text, {GRANTEE}, x.is_grantable, {GRANTOR} \
                     FROM pg_class c, aclexplode(c.relacl) x WHERE c.oid = $1"
                ),
                oid,
            )
        }),
        column_privileges: grants(
            c,
            &format!(
                "SELECT x.privilege_type, quote_ident(a.attname), {GRANTEE}, x.is_grantable, {GRANTOR} \
                 FROM pg_attribute a, aclexplode(a.attacl) x \
                 WHERE a.attrelid = $1 AND a.attacl IS NOT NULL AND NOT a.attisdropped ORDER BY a.attnum"
            ),
            oid,
        ),
        comment: text(row.get(6)),
        column_comments: spi(c.select(
            "SELECT quote_ident(a.attname), quote_literal(d.description) FROM pg_description d \
             JOIN pg_attribute a ON a.attrelid = d.objoid AND a.attnum = d.objsubid \
             WHERE d.classoid = 'pg_class'::regclass AND d.objoid = $1 AND d.objsubid > 0 ORDER BY a.attnum",
            None,
            &args([oid.into()]),
        ))
        .map(|r| {
            (
                text(r.get(1)).unwrap_or_default(),
                text(r.get(2)).unwrap_or_default(),
            )
        })
        .collect(),
        depends_on: Vec::new(),
        temporary_of: text(row.get(7)),
        calls: view_calls(c, oid),
        attached: strings(
            c,
            "SELECT 'trigger ' || quote_ident(tgname) FROM pg_trigger WHERE tgrelid = $1 \
             UNION ALL SELECT 'rule ' || quote_ident(rulename) FROM pg_rewrite WHERE ev_class = $1 AND rulename <> '_RETURN' \
             UNION ALL SELECT 'a default on column ' || quote_ident(a.attname) FROM pg_attrdef ad \
               JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum WHERE ad.adrelid = $1 \
             UNION ALL SELECT 'a security label' FROM pg_seclabel WHERE objoid = $1 AND classoid = 'pg_class'::regclass",
            oid,
        ),
        // The view is made again by its owner: the owner's default
        // privileges in the view's schema (or everywhere) apply to it.
        default_grantees: strings(
            c,
            "SELECT DISTINCT CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(x.grantee)) END \
             FROM pg_class c, pg_default_acl d, aclexplode(d.defaclacl) x \
             WHERE c.oid = $1 AND d.defaclrole = c.relowner \
               AND d.defaclobjtype = 'r' AND d.defaclnamespace IN (0, c.relnamespace) AND x.grantee <> d.defaclrole \
             ORDER BY 1",
            oid,
        ),
    }
}
