//! The parse tree of a utility statement about to run, read the way the
//! utility hook needs it: which database a command needs free of sessions,
//! whether it drops one or discards sequences, and the columns an `ALTER
//! TABLE ... ADD COLUMN` adds with a default, with that default cooked as
//! PostgreSQL will cook it. The parse tree outlives the command; what is
//! made from it here (a cooked copy of a default, a name `defGetString`
//! turns from a number into text) is made in the current memory context,
//! which outlives the hook's call: both are read before the command runs.

use super::charset::from_server;
use super::error::raise;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgList};
use std::ffi::CStr;
use std::marker::PhantomData;

/// A utility statement's parse tree, valid for `'a` (the command).
#[derive(Clone, Copy)]
pub struct Statement<'a> {
    node: *mut pg_sys::Node,
    tree: PhantomData<&'a pg_sys::Node>,
}

impl<'a> Statement<'a> {
    /// # Safety
    /// `node` is NULL or the parse tree of the utility statement about to
    /// run, which outlives `'a`.
    pub unsafe fn new(node: *mut pg_sys::Node) -> Statement<'a> {
        Statement {
            node,
            tree: PhantomData,
        }
    }

    fn is(&self, tag: pg_sys::NodeTag) -> bool {
        // SAFETY: a parse tree node, read by its tag (see `new`).
        !self.node.is_null() && unsafe { pgrx::is_a(self.node, tag) }
    }

    /// Whether it is `DROP DATABASE`.
    pub fn drops_database(&self) -> bool {
        self.is(pg_sys::NodeTag::T_DropdbStmt)
    }

    /// Whether it is `DROP SUBSCRIPTION` or `ALTER SUBSCRIPTION`, which may
    /// remove the catalog's rows of the tables a subscription copied.
    pub fn changes_subscription(&self) -> bool {
        self.is(pg_sys::NodeTag::T_DropSubscriptionStmt)
            || self.is(pg_sys::NodeTag::T_AlterSubscriptionStmt)
    }

    /// Whether it is `DISCARD ALL` or `DISCARD SEQUENCES`.
    pub fn discards_sequences(&self) -> bool {
        if !self.is(pg_sys::NodeTag::T_DiscardStmt) {
            return false;
        }
        // SAFETY: a DiscardStmt node, by its tag.
        let target = unsafe { (*self.node.cast::<pg_sys::DiscardStmt>()).target };
        matches!(
            target,
            pg_sys::DiscardMode::DISCARD_ALL | pg_sys::DiscardMode::DISCARD_SEQUENCES
        )
    }

    /// The database the statement needs free of other sessions, if any:
    /// `DROP DATABASE`, `ALTER DATABASE ... RENAME TO` and `... SET
    /// TABLESPACE` (their database), `CREATE DATABASE ... TEMPLATE` (its
    /// template).
    pub fn database_needing_free(&self) -> Option<&'a CStr> {
        if self.node.is_null() {
            return None;
        }
        let option = |options: *mut pg_sys::List, name: &CStr| -> Option<*mut pg_sys::DefElem> {
            // SAFETY: a list of DefElem, as the parser makes these options.
            unsafe { PgList::<pg_sys::DefElem>::from_pg(options) }
                .iter_ptr()
                // SAFETY: each element is a DefElem with a name.
                .find(|d| unsafe { CStr::from_ptr((**d).defname) } == name)
        };
        let stmt = self.node;
        // SAFETY: the node's tag says which statement it is; each name read
        // is a NUL-terminated string of the parse tree, which outlives 'a.
        unsafe {
            match (*stmt).type_ {
                pg_sys::NodeTag::T_DropdbStmt => {
                    Some(CStr::from_ptr((*stmt.cast::<pg_sys::DropdbStmt>()).dbname))
                }
                pg_sys::NodeTag::T_RenameStmt => {
                    let r = stmt.cast::<pg_sys::RenameStmt>();
                    ((*r).renameType == pg_sys::ObjectType::OBJECT_DATABASE)
                        .then(|| CStr::from_ptr((*r).subname))
                }
                pg_sys::NodeTag::T_CreatedbStmt => {
                    let c = stmt.cast::<pg_sys::CreatedbStmt>();
                    // TEMPLATE DEFAULT has no argument: the default template.
                    // (A number given is turned into text in the current
                    // memory context, read before the command runs.)
                    option((*c).options, c"template")
                        .filter(|d| !(**d).arg.is_null())
                        .map(|d| CStr::from_ptr(pg_sys::defGetString(d)))
                }
                pg_sys::NodeTag::T_AlterDatabaseStmt => {
                    let a = stmt.cast::<pg_sys::AlterDatabaseStmt>();
                    option((*a).options, c"tablespace").map(|_| CStr::from_ptr((*a).dbname))
                }
                _ => None,
            }
        }
    }

    /// The table an `ALTER TABLE` names, if it exists (looked up without a
    /// lock: the command takes its own). `None` for any other statement.
    pub fn altered_table(&self) -> Option<pg_sys::Oid> {
        if !self.is(pg_sys::NodeTag::T_AlterTableStmt) {
            return None;
        }
        // SAFETY: an AlterTableStmt by its tag; missing_ok, so a table not
        // found is InvalidOid rather than an error.
        let relid = unsafe {
            let alter = self.node.cast::<pg_sys::AlterTableStmt>();
            pg_sys::RangeVarGetRelidExtended(
                (*alter).relation,
                pg_sys::NoLock as pg_sys::LOCKMODE,
                pg_sys::RVROption::RVR_MISSING_OK,
                None,
                std::ptr::null_mut(),
            )
        };
        (relid != pg_sys::InvalidOid).then_some(relid)
    }

    /// An `ALTER TABLE` that adds columns with a default: its table (not
    /// looked up yet) and those columns. `None` for any other statement.
    pub fn columns_added_with_default(&self) -> Option<AddColumns<'a>> {
        if !self.is(pg_sys::NodeTag::T_AlterTableStmt) {
            return None;
        }
        let alter = self.node.cast::<pg_sys::AlterTableStmt>();
        // SAFETY: an AlterTableStmt by its tag; its commands are
        // AlterTableCmd nodes, and an AT_AddColumn's def a ColumnDef once
        // its tag says so.
        let columns: Vec<AddedColumn<'a>> = unsafe {
            PgList::<pg_sys::AlterTableCmd>::from_pg((*alter).cmds)
                .iter_ptr()
                .filter(|c| {
                    (**c).subtype == pg_sys::AlterTableType::AT_AddColumn
                        && !(**c).def.is_null()
                        && pgrx::is_a((**c).def, pg_sys::NodeTag::T_ColumnDef)
                })
                .map(|c| (*c).def.cast::<pg_sys::ColumnDef>())
                .filter_map(|def| {
                    let default = match raw_default(def) {
                        Some(raw) => DefaultFrom::Own(raw),
                        None => {
                            let (domain, cooked) = domain_default(def)?;
                            DefaultFrom::Domain { domain, cooked }
                        }
                    };
                    Some(AddedColumn {
                        def,
                        default,
                        tree: PhantomData,
                    })
                })
                .collect()
        };
        (!columns.is_empty()).then_some(AddColumns {
            // SAFETY: as above.
            relation: unsafe { (*alter).relation },
            columns,
        })
    }
}

/// The raw expression of a column definition's default, if it has one: the
/// parser leaves it among the column's constraints.
///
/// # Safety
/// `def` is a column definition of a parse tree.
unsafe fn raw_default(def: *mut pg_sys::ColumnDef) -> Option<*mut pg_sys::Node> {
    // SAFETY: a ColumnDef's fields and its list of Constraint nodes.
    unsafe {
        if !(*def).raw_default.is_null() {
            return Some((*def).raw_default);
        }
        PgList::<pg_sys::Node>::from_pg((*def).constraints)
            .iter_ptr()
            .filter(|n| pgrx::is_a(*n, pg_sys::NodeTag::T_Constraint))
            .map(|n| n.cast::<pg_sys::Constraint>())
            .find(|c| {
                (**c).contype == pg_sys::ConstrType::CONSTR_DEFAULT && !(**c).raw_expr.is_null()
            })
            .map(|c| (*c).raw_expr)
    }
}

/// The default a column without one of its own takes from its type, a
/// domain's, as PostgreSQL fills the old rows of an `ADD COLUMN` with it
/// (`build_column_default` asks `get_typdefault`; a domain made over
/// another takes its default with it when made), with the domain's name.
///
/// # Safety
/// `def` is a column definition of a parse tree.
unsafe fn domain_default(def: *mut pg_sys::ColumnDef) -> Option<(String, *mut pg_sys::Node)> {
    // SAFETY: the ColumnDef's TypeName, looked up without an error for a
    // type not found (the command's own error, later); the catalog's
    // default, made in the current memory context, read before the
    // command runs.
    unsafe {
        if (*def).typeName.is_null() {
            return None;
        }
        let typid = pg_sys::LookupTypeNameOid(std::ptr::null_mut(), (*def).typeName, true);
        if typid == pg_sys::InvalidOid
            || pg_sys::get_typtype(typid) != pg_sys::TYPTYPE_DOMAIN as std::ffi::c_char
        {
            return None;
        }
        let cooked = pg_sys::get_typdefault(typid);
        (!cooked.is_null()).then(|| (server_text(pg_sys::format_type_be(typid)), cooked))
    }
}

/// What `columns_added_with_default` found.
pub struct AddColumns<'a> {
    relation: *mut pg_sys::RangeVar,
    pub columns: Vec<AddedColumn<'a>>,
}

impl AddColumns<'_> {
    /// The table altered, if it exists (looked up without a lock: the
    /// command takes its own).
    pub fn table(&self) -> Option<pg_sys::Oid> {
        // SAFETY: the statement's RangeVar; missing_ok, so a table not found
        // is InvalidOid rather than an error.
        let relid = unsafe {
            pg_sys::RangeVarGetRelidExtended(
                self.relation,
                pg_sys::NoLock as pg_sys::LOCKMODE,
                pg_sys::RVROption::RVR_MISSING_OK,
                None,
                std::ptr::null_mut(),
            )
        };
        (relid != pg_sys::InvalidOid).then_some(relid)
    }
}

/// A column an `ALTER TABLE` adds, with a default.
pub struct AddedColumn<'a> {
    def: *mut pg_sys::ColumnDef,
    default: DefaultFrom,
    tree: PhantomData<&'a pg_sys::Node>,
}

/// Where an added column's default comes from.
enum DefaultFrom {
    /// The column definition's, raw from the parser.
    Own(*mut pg_sys::Node),
    /// Its domain's (none of its own), cooked.
    Domain {
        domain: String,
        cooked: *mut pg_sys::Node,
    },
}

/// A string of the parse tree or of Postgres, in the database's encoding.
///
/// # Safety
/// `p` is a NUL-terminated string.
unsafe fn server_text(p: *const std::ffi::c_char) -> String {
    // SAFETY: see above.
    from_server(unsafe { CStr::from_ptr(p) }.to_bytes()).unwrap_or_else(|f| raise(f))
}

impl AddedColumn<'_> {
    /// The column's name, as written.
    pub fn name(&self) -> String {
        // SAFETY: a ColumnDef's name, NUL-terminated.
        unsafe { server_text((*self.def).colname) }
    }

    /// The column's type as PostgreSQL names it ("bigint", not the parser's
    /// "pg_catalog.int8"), so that a HINT reads as one would write it;
    /// "bigint" where the definition names none.
    pub fn type_name(&self) -> String {
        // SAFETY: the ColumnDef's TypeName, looked up as the command will
        // (an unknown type is Postgres's error, as the command's would be).
        unsafe {
            if (*self.def).typeName.is_null() {
                return "bigint".to_string();
            }
            let (mut typid, mut typmod) = (pg_sys::InvalidOid, -1);
            pg_sys::typenameTypeIdAndMod(
                std::ptr::null_mut(),
                (*self.def).typeName,
                &mut typid,
                &mut typmod,
            );
            server_text(pg_sys::format_type_with_typemod(typid, typmod))
        }
    }

    /// The domain whose default the column takes, where it has none of
    /// its own.
    pub fn domain(&self) -> Option<&str> {
        match &self.default {
            DefaultFrom::Own(_) => None,
            DefaultFrom::Domain { domain, .. } => Some(domain),
        }
    }

    /// The default transformed as PostgreSQL will transform it (a copy: the
    /// statement's own tree is left as it came). What PostgreSQL refuses in
    /// a default (a column, a subquery) it refuses here, with its own error.
    pub fn cooked_default(&self) -> Expression<'_> {
        let node = match self.default {
            // SAFETY: a parse state of no statement, as PostgreSQL cooks a
            // default; the copy is palloc'd in the current context, which
            // outlives the check that reads it.
            DefaultFrom::Own(raw) => unsafe {
                let pstate = pg_sys::make_parsestate(std::ptr::null_mut());
                let copy = pg_sys::copyObjectImpl(raw.cast()).cast::<pg_sys::Node>();
                pg_sys::transformExpr(
                    pstate,
                    copy,
                    pg_sys::ParseExprKind::EXPR_KIND_COLUMN_DEFAULT,
                )
            },
            DefaultFrom::Domain { cooked, .. } => cooked,
        };
        Expression {
            node,
            column: PhantomData,
        }
    }
}

/// A cooked expression, in the current memory context: borrowed from the
/// column it was cooked for, so it is read while the hook runs.
pub struct Expression<'c> {
    node: *mut pg_sys::Node,
    column: PhantomData<&'c ()>,
}

impl Expression<'_> {
    /// Every function the expression calls, however deep, in the order a
    /// walk meets them: the functions of its calls and of its operators
    /// (their OIDs filled in first, as the planner would).
    fn called_functions(&self) -> Vec<pg_sys::Oid> {
        #[pg_guard]
        unsafe extern "C-unwind" fn walk(
            node: *mut pg_sys::Node,
            context: *mut std::ffi::c_void,
        ) -> bool {
            // SAFETY: `context` is the Vec below, for the walk's length; a
            // FuncExpr or OpExpr by its tag.
            unsafe {
                if node.is_null() {
                    return false;
                }
                let found = &mut *context.cast::<Vec<pg_sys::Oid>>();
                if pgrx::is_a(node, pg_sys::NodeTag::T_FuncExpr) {
                    found.push((*node.cast::<pg_sys::FuncExpr>()).funcid);
                } else if pgrx::is_a(node, pg_sys::NodeTag::T_OpExpr) {
                    found.push((*node.cast::<pg_sys::OpExpr>()).opfuncid);
                }
                pg_sys::expression_tree_walker(node, Some(walk), context)
            }
        }
        let mut called: Vec<pg_sys::Oid> = Vec::new();
        // SAFETY: a cooked expression; the list outlives the walk.
        unsafe {
            pg_sys::fix_opfuncids(self.node);
            walk(self.node, (&mut called as *mut Vec<pg_sys::Oid>).cast());
        }
        called
    }

    /// The name of the first of `functions` (OID, name) the expression
    /// calls, however deep.
    pub fn first_call_of(&self, functions: &[(pg_sys::Oid, String)]) -> Option<String> {
        self.called_functions().into_iter().find_map(|called| {
            functions
                .iter()
                .find(|(oid, _)| *oid == called)
                .map(|(_, name)| name.clone())
        })
    }

    /// The first volatile function the expression calls (or an operator
    /// calls) that is written in SQL or a procedural language, schema-
    /// qualified and quoted: its body could draw IDs, and is not read here.
    pub fn first_opaque_volatile_call(&self) -> Option<String> {
        let called = self.called_functions();
        if called.is_empty() {
            return None;
        }
        let oids: Vec<Option<pg_sys::Oid>> = called.into_iter().map(Some).collect();
        super::spi::ok(Spi::connect(|c| {
            let found = c.select(
                "SELECT pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.' \
                        OPERATOR(pg_catalog.||) pg_catalog.quote_ident(p.proname) \
                 FROM pg_catalog.unnest($1::pg_catalog.oid[]) WITH ORDINALITY AS u(oid, i) \
                 JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) u.oid \
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace \
                 JOIN pg_catalog.pg_language l ON l.oid OPERATOR(pg_catalog.=) p.prolang \
                 WHERE p.provolatile OPERATOR(pg_catalog.=) 'v' \
                   AND l.lanname OPERATOR(pg_catalog.<>) ALL (ARRAY['internal', 'c']::pg_catalog.name[]) \
                 ORDER BY u.i LIMIT 1",
                None,
                &[oids.into()],
            )?;
            if found.is_empty() {
                return Ok(None);
            }
            found.first().get_one::<super::text::Text>()
        }))
        .map(|t| t.0)
    }

    /// The expression as PostgreSQL prints it (`pg_get_expr`'s text).
    pub fn deparse(&self) -> String {
        // SAFETY: a cooked expression with no variables to name.
        unsafe {
            server_text(pg_sys::deparse_expression(
                self.node,
                std::ptr::null_mut(),
                false,
                false,
            ))
        }
    }
}
