//! What this node reads of its own Citus metadata: its group id, which
//! `snowflake_id.worker_id_source = 'citus'` makes its worker id.
//!
//! Read by the calling backend, as the caller, from the database it is in:
//! Citus keeps its metadata per database, in tables of `pg_catalog` (where
//! only a superuser can create anything) that it lets every role read.
//! Every name, type and operator is qualified, so that no object of the
//! caller's search path can stand in.

use crate::pg::encoding::from_server;
use crate::pg::error::raise;
use crate::pg::guc;
use crate::pg::spi;
use crate::pg::text::{ident, Text};
use crate::shmem::Shmem;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgList};
use snowflake_id_core::citus::reference_table_add_column;
use snowflake_id_core::layout::Layout;
use snowflake_id_core::worker_id::{from_citus_group, CitusNode};
use snowflake_id_core::{Class, Failure};
use std::ffi::CStr;

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

/// This server's worker id as the Citus metadata of the caller's database
/// gives it, with its origin in words, or why it cannot yet.
pub fn read_worker_id(offset: i32, layout: &Layout) -> Result<(u32, String), Failure> {
    from_citus_group(this_node(), offset, layout)
}

/// Settles this server's worker id from the Citus metadata of the caller's
/// database, or says why it cannot yet.
pub fn settle(shm: &Shmem, offset: i32, layout: &Layout) -> Result<u32, Failure> {
    let (worker, origin) = read_worker_id(offset, layout)?;
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

/// Refuses `ALTER TABLE ... ADD COLUMN ... DEFAULT snowflake_nextval()` on a
/// Citus reference table that has rows, before Citus carries it to the
/// nodes that hold copies (each would fill the old rows with IDs of its
/// own), as Citus refuses the same for `nextval()`. Reads as the caller, who
/// is about to alter the table.
///
/// # Safety
/// `stmt` is the parse tree of the utility statement about to run.
pub unsafe fn refuse_divergent_default(stmt: *mut pg_sys::Node) {
    // SAFETY: the node's tag says which statement it is; the lists and
    // nodes read are the parser's, which outlive the command.
    unsafe {
        if stmt.is_null() || (*stmt).type_ != pg_sys::NodeTag::T_AlterTableStmt {
            return;
        }
        // Commands Citus carries from the node where they were run come with
        // propagation off: that node checked them already, and a query of the
        // table from inside them would be a distributed query nested in one.
        if guc::text(c"citus.enable_ddl_propagation").as_deref() == Some("off") {
            return;
        }
        let alter = stmt.cast::<pg_sys::AlterTableStmt>();
        let adds: Vec<*mut pg_sys::ColumnDef> =
            PgList::<pg_sys::AlterTableCmd>::from_pg((*alter).cmds)
                .iter_ptr()
                .filter(|c| {
                    (**c).subtype == pg_sys::AlterTableType::AT_AddColumn && !(**c).def.is_null()
                })
                .map(|c| (*c).def.cast::<pg_sys::ColumnDef>())
                .filter(|d| calls_generator(*d))
                .collect();
        let Some(def) = adds.first() else {
            return;
        };
        let relid = pg_sys::RangeVarGetRelidExtended(
            (*alter).relation,
            pg_sys::NoLock as pg_sys::LOCKMODE,
            pg_sys::RVROption::RVR_MISSING_OK,
            None,
            std::ptr::null_mut(),
        );
        if relid == pg_sys::InvalidOid {
            return;
        }
        let Some((table, key)) = filled_reference_table(relid) else {
            return;
        };
        let server_text = |p: *const std::ffi::c_char| {
            from_server(CStr::from_ptr(p).to_bytes()).unwrap_or_else(|f| raise(f))
        };
        let column = ident(&server_text((**def).colname));
        let column_type = if (**def).typeName.is_null() {
            "bigint".to_string()
        } else {
            server_text(pg_sys::TypeNameToString((**def).typeName))
        };
        raise(reference_table_add_column(
            &table,
            &column,
            &column_type,
            &key,
        ));
    }
}

/// Whether a column definition's default calls the generator by name
/// (`snowflake_nextval()`, qualified or not), as the parser wrote it.
///
/// # Safety
/// `def` is a column definition of a parse tree.
unsafe fn calls_generator(def: *mut pg_sys::ColumnDef) -> bool {
    // SAFETY: nodeToString prints any parse node; the text is palloc'd.
    let text = unsafe { CStr::from_ptr(pg_sys::nodeToString(def.cast())) };
    // A function's name is the last string of its name list.
    text.to_string_lossy().contains("\"snowflake_nextval\")")
}

/// The table, quoted and qualified, and its primary key's columns, if it is
/// a Citus reference table with at least one row.
fn filled_reference_table(relid: pg_sys::Oid) -> Option<(String, Vec<String>)> {
    spi::ok(Spi::connect(|c| {
        let is_reference = c
            .select(
                "SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL \
                        AND EXISTS (SELECT FROM pg_catalog.pg_extension \
                                    WHERE extname OPERATOR(pg_catalog.=) 'snowflake_id')",
                None,
                &[],
            )?
            .first()
            .get_one::<bool>()?
            == Some(true)
            && c.select(
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition \
                 WHERE logicalrelid OPERATOR(pg_catalog.=) $1 \
                   AND partmethod OPERATOR(pg_catalog.=) 'n' AND repmodel OPERATOR(pg_catalog.=) 't')",
                None,
                &[relid.into()],
            )?
            .first()
            .get_one::<bool>()?
                == Some(true);
        if !is_reference {
            return Ok(None);
        }
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
        let filled = c
            .select(&format!("SELECT EXISTS (SELECT FROM {table})"), None, &[])?
            .first()
            .get_one::<bool>()?
            == Some(true);
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
