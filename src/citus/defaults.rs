//! The utility hook's guard for tables Citus keeps several placements of
//! (a copy each, on its node: reference tables, replicated shards):
//! `ALTER TABLE ... ADD COLUMN` with a default that would fill each
//! placement with other IDs is refused.
//!
//! Calls no sibling.

use crate::catalog;
use crate::pg::ddl::Statement;
use crate::pg::error::raise;
use crate::pg::guc;
use crate::pg::spi;
use crate::pg::text::{ident, Text};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowflake_id_core::citus::{replicated_table_add_column, Added, Fills, Placements};

/// Refuses `ALTER TABLE ... ADD COLUMN ... DEFAULT <a call that draws IDs>`
/// on a Citus table with rows kept in several placements (a reference table, or
/// a distributed table whose shards have more than one), before Citus
/// carries it to the placements: each would fill the old rows with IDs of its
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
    let Some(placements) = placements_of(relid) else {
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
        raise(replicated_table_add_column(
            &table,
            &placements,
            &added,
            &key,
        ));
    }
}

/// How many placements the rows of a Citus table have, if more than one.
fn placements_of(relid: pg_sys::Oid) -> Option<Placements> {
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
        let (reference, replicas) = c
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
        Ok(match (reference, replicas) {
            (Some(true), _) => Some(Placements::Reference),
            (Some(false), Some(n)) if n > 1 => Some(Placements::Replicated(n)),
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
