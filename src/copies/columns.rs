//! The columns that may hold IDs: those whose default calls a generating
//! function (what a floor reads), or every bigint, numeric and uuid column
//! (what `snowflake_resume_above()` reads), found in the catalog.
//!
//! Calls no sibling.

use crate::catalog;
use crate::pg::spi;
use pgrx::pg_sys;

/// How a column holds IDs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Bigint,
    /// `numeric`: an ID stored as a number (values outside bigint's range
    /// and fractions are no IDs; NaN and infinities neither).
    Numeric,
    Uuid,
}

/// A column that may hold IDs: its name for messages, and where it is.
pub(super) struct Column {
    pub(super) schema: String,
    pub(super) table: String,
    pub(super) column: String,
    pub(super) kind: Kind,
    pub(super) rel: pg_sys::Oid,
    pub(super) attnum: i16,
}

impl Column {
    pub(super) fn name(&self) -> String {
        format!("{}.{}.{}", self.schema, self.table, self.column)
    }
}

/// The types whose values may be IDs, with what they are at bottom:
/// bigint, numeric and uuid, and domains over them to any depth (`bases`,
/// SQL for a `WITH RECURSIVE`).
const BASES: &str = "bases(oid, base) AS (
             SELECT t.oid, t.oid FROM pg_catalog.pg_type t
             WHERE t.oid IN ('pg_catalog.int8'::pg_catalog.regtype, 'pg_catalog.numeric'::pg_catalog.regtype,
                             'pg_catalog.uuid'::pg_catalog.regtype)
             UNION ALL
             SELECT t.oid, b.base FROM pg_catalog.pg_type t JOIN bases b ON t.typbasetype = b.oid
             WHERE t.typtype = 'd')";

/// A column's kind, as SQL over `bases b`, for [`columns`].
const KIND: &str = "CASE b.base WHEN 'pg_catalog.uuid'::pg_catalog.regtype THEN 'u'
                                WHEN 'pg_catalog.numeric'::pg_catalog.regtype THEN 'n' ELSE 'b' END";

/// The columns that may hold IDs this extension made, of tables, of the
/// leaf partitions of partitioned tables and of tables that inherit them
/// (each read on its own, with its own index; a foreign table is not read:
/// its rows are another server's): bigint, numeric and uuid columns
/// (domains over them, to any depth, included) whose default calls a
/// generating function, their domain's default does, or a row trigger's
/// function sets them.
///
/// A function "calls" a generating function where it depends on one (a
/// SQL function with a standard body) or names one in its source (any
/// other language; in any case), and so on through functions that call
/// those: a default `my_id()` whose body calls `snowflake_nextval()` is
/// found. A trigger's function that calls one sets the table's columns its
/// source names. What is not found this way (a value computed in the
/// application, a function that builds its call at run time) is covered by
/// `snowflake_resume_above()`, which reads every column of these types.
/// The statement holds no backslash and no setting of the caller's changes
/// what it finds.
pub(super) fn id_columns() -> Vec<Column> {
    let query = format!(
        "WITH RECURSIVE {BASES},
         gens(oid, name) AS (
             SELECT g.oid, pg_catalog.lower(g.proname::pg_catalog.text) FROM ({generators}) g
             UNION
             SELECT p.oid, pg_catalog.lower(p.proname::pg_catalog.text) FROM pg_catalog.pg_proc p, gens g
             WHERE p.prolang NOT IN (SELECT l.oid FROM pg_catalog.pg_language l WHERE l.lanname IN ('internal', 'c'))
               AND (pg_catalog.strpos(pg_catalog.lower(p.prosrc), g.name) > 0
                    OR EXISTS (SELECT FROM pg_catalog.pg_depend d
                               WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid
                                 AND d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
                                 AND d.refobjid = g.oid))),
         calls AS (
             SELECT d.classid, d.objid FROM pg_catalog.pg_depend d
             WHERE d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
               AND d.refobjid IN (SELECT oid FROM gens)),
         gen_types(oid) AS (
             SELECT k.objid FROM calls k WHERE k.classid = 'pg_catalog.pg_type'::pg_catalog.regclass
             UNION
             SELECT t.oid FROM pg_catalog.pg_type t JOIN gen_types g ON t.typbasetype = g.oid
             WHERE t.typtype = 'd'),
         found AS (
             SELECT c.oid AS rel, a.attname
             FROM pg_catalog.pg_attribute a
             JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
             JOIN bases b ON b.oid = a.atttypid
             WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p')
               AND (EXISTS (SELECT FROM pg_catalog.pg_attrdef ad JOIN calls k ON k.objid = ad.oid
                            AND k.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass
                            WHERE ad.adrelid = a.attrelid AND ad.adnum = a.attnum)
                    OR a.atttypid IN (SELECT oid FROM gen_types)
                    OR EXISTS (SELECT FROM pg_catalog.pg_trigger tg
                               JOIN pg_catalog.pg_proc p ON p.oid = tg.tgfoid
                               WHERE tg.tgrelid = a.attrelid AND NOT tg.tgisinternal
                                 AND tg.tgfoid IN (SELECT oid FROM gens)
                                 AND pg_catalog.strpos(pg_catalog.lower(p.prosrc),
                                                       pg_catalog.lower(a.attname::pg_catalog.text)) > 0))),
         tables(rel, attname) AS (
             SELECT rel, attname FROM found
             UNION
             SELECT i.inhrelid, t.attname FROM pg_catalog.pg_inherits i JOIN tables t ON i.inhparent = t.rel)
         SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text, t.attname::pg_catalog.text,
                {KIND}, c.oid, a.attnum
         FROM tables t
         JOIN pg_catalog.pg_class c ON c.oid = t.rel
         JOIN pg_catalog.pg_attribute a ON a.attrelid = t.rel AND a.attname = t.attname AND NOT a.attisdropped
         JOIN bases b ON b.oid = a.atttypid
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE c.relkind = 'r' AND c.relpersistence OPERATOR(pg_catalog.<>) 't'
         ORDER BY 1, 2, 3",
        generators = catalog::generating_functions_query()
    );
    columns(&query)
}

/// Every bigint, numeric and uuid column (domains over them, to any
/// depth, included) of every table of this database, but the system's,
/// the extension's own and temporary ones: what `snowflake_resume_above()`
/// reads.
pub(super) fn all_columns() -> Vec<Column> {
    columns(&format!(
        "WITH RECURSIVE {BASES}
         SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text, a.attname::pg_catalog.text,
                {KIND}, c.oid, a.attnum
         FROM pg_catalog.pg_attribute a
         JOIN bases b ON b.oid = a.atttypid
         JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relkind = 'r'
           AND c.relpersistence OPERATOR(pg_catalog.<>) 't'
           AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'snowflake_id')
           AND pg_catalog.left(n.nspname::pg_catalog.text, 8) OPERATOR(pg_catalog.<>) 'pg_toast'
         ORDER BY 1, 2, 3"
    ))
}

pub(super) fn columns(query: &str) -> Vec<Column> {
    let mut out = Vec::new();
    spi::each_of_latest_data(query, &[], 0, |row| {
        out.push(Column {
            schema: row.get::<String>(1)?.unwrap_or_default(),
            table: row.get::<String>(2)?.unwrap_or_default(),
            column: row.get::<String>(3)?.unwrap_or_default(),
            kind: match row.get::<String>(4)?.as_deref() {
                Some("u") => Kind::Uuid,
                Some("n") => Kind::Numeric,
                _ => Kind::Bigint,
            },
            rel: row.get::<pg_sys::Oid>(5)?.unwrap_or(pg_sys::InvalidOid),
            attnum: row.get::<i16>(6)?.unwrap_or(0),
        });
        Ok(true)
    });
    out
}
