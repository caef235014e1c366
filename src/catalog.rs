//! The extension's own objects in the catalog of the database a backend is
//! in: its generating functions, which make a column one of IDs, a default
//! one that draws them, and a role one that may draw them.
//!
//! Found by their membership of the extension (`pg_depend`), not by name
//! alone: a function of the same name in another schema is not one of
//! them. Every name is qualified, so no object of the caller's search path
//! can stand in.

use crate::pg::spi;
use crate::pg::text::Text;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowflake_id_core::generator::generating_functions_sql;

/// `SELECT p.oid` of the extension's generating functions (`p` is
/// `pg_catalog.pg_proc`), for a CTE or a subquery.
pub fn generating_functions_query() -> String {
    format!(
        "SELECT p.oid, p.proname FROM pg_catalog.pg_depend e \
         JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) e.objid \
         JOIN pg_catalog.pg_extension x ON x.oid OPERATOR(pg_catalog.=) e.refobjid \
         WHERE e.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass \
           AND e.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass \
           AND e.deptype OPERATOR(pg_catalog.=) 'e' \
           AND x.extname OPERATOR(pg_catalog.=) 'snowflake_id' \
           AND p.proname::pg_catalog.text OPERATOR(pg_catalog.=) ANY (ARRAY[{}])",
        generating_functions_sql()
    )
}

/// The extension's generating functions in this database: oid and name
/// (none where the extension is not created).
pub fn generating_functions() -> Vec<(pg_sys::Oid, String)> {
    let query = format!(
        "SELECT g.oid, g.proname::pg_catalog.text FROM ({}) g",
        generating_functions_query()
    );
    spi::ok(Spi::connect(|c| {
        Ok(c.select(&query, None, &[])?
            .filter_map(|r| {
                let oid = r.get::<pg_sys::Oid>(1).ok().flatten()?;
                let name = r.get::<Text>(2).ok().flatten()?;
                Some((oid, name.0))
            })
            .collect())
    }))
}

/// Whether the current role may call one of the generating functions of
/// this database (EXECUTE), that is, draw IDs itself.
pub fn may_draw() -> bool {
    let query = format!(
        "SELECT EXISTS (SELECT FROM ({}) g \
                        WHERE pg_catalog.has_function_privilege(g.oid, 'EXECUTE'))",
        generating_functions_query()
    );
    spi::ok(Spi::connect(|c| {
        c.select(&query, None, &[])?.first().get_one::<bool>()
    })) == Some(true)
}

/// The schema the extension is in, quoted and followed by a dot (empty
/// where it is not created), so that a HINT's statement works when pasted
/// whatever the search path: `format!("{}snowflake_nextval", qualifier())`.
pub fn qualifier() -> String {
    let mut schema = None;
    spi::each_of_latest_data(
        "SELECT n.nspname::pg_catalog.text FROM pg_catalog.pg_extension x
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) x.extnamespace
         WHERE x.extname OPERATOR(pg_catalog.=) 'snowflake_id'",
        &[],
        1,
        |row| {
            schema = row.get::<String>(1)?;
            Ok(false)
        },
    );
    schema
        .map(|s| format!("{}.", crate::pg::text::ident(&s)))
        .unwrap_or_default()
}
