//! Switching an existing table's key column to snowflake IDs: from what the
//! shell reads in the catalog, the DDL that does it, in an order Postgres
//! accepts and with locks taken in an order that cannot deadlock with
//! inserts.
//!
//! Identifiers, literals and view definitions arrive already quoted: the
//! shell has Postgres quote them (`format('%I')`, `quote_literal`,
//! `pg_get_viewdef`), so nothing here guesses at SQL's quoting rules.
//!
//! Each statement names the role it runs as: the owner of what it changes
//! (so a table owner's code, a CHECK constraint or an index expression that
//! the rewrite evaluates, runs with that owner's rights and no more, as
//! Postgres runs maintenance), or, for a privilege given again, the role
//! that had granted it (so grant chains come back as they were).

use crate::failure::{Class, Failure};

/// The integer widths a key column can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Width {
    Small,
    Int,
    Big,
}

impl Width {
    /// From `format_type` of the column's type; `None` for anything that is
    /// not a built-in integer.
    pub fn of(type_name: &str) -> Option<Width> {
        match type_name {
            "smallint" => Some(Width::Small),
            "integer" => Some(Width::Int),
            "bigint" => Some(Width::Big),
            _ => None,
        }
    }
}

/// A column, named as SQL text: `table` schema-qualified and quoted,
/// `column` quoted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub table: String,
    pub column: String,
    /// `format_type` of its type.
    pub type_name: String,
    /// The table's owner, a quoted role.
    pub owner: String,
}

impl Column {
    fn display(&self) -> String {
        format!("{}.{}", self.table, self.column)
    }

    fn narrow(&self) -> bool {
        Width::of(&self.type_name).is_some_and(|w| w < Width::Big)
    }
}

/// What fills the column today.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldDefault {
    /// No default at all.
    Nothing,
    /// `DEFAULT nextval(...)`: serial, bigserial, or written by hand.
    Sequence {
        /// The sequence, qualified and quoted.
        sequence: String,
        /// Its owner, a quoted role.
        owner: String,
        /// Other columns whose defaults take from it (not this table's
        /// partitions or children, whose defaults follow the parent's).
        shared_with: Vec<String>,
    },
    /// `GENERATED ... AS IDENTITY`.
    Identity,
    /// Already `snowflake_nextval()`.
    Snowflake,
    /// Any other expression, as `pg_get_expr` shows it.
    Other(String),
}

/// A column that holds copies of the key through a foreign key, directly
/// or through another such column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referencing {
    pub column: Column,
    /// 1 for a foreign key to the key itself, 2 for one to such a column...
    pub depth: u32,
}

/// One privilege on a view, from `aclexplode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// `SELECT`, `INSERT`...
    pub privilege: String,
    /// The quoted column, for a column privilege.
    pub column: Option<String>,
    /// A quoted role, or `PUBLIC`.
    pub grantee: String,
    /// The quoted role that granted it.
    pub grantor: String,
    pub grantable: bool,
}

/// A view that depends on a column whose type changes: Postgres refuses to
/// change it under the view, so the view is dropped and made again.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct View {
    /// Qualified and quoted.
    pub name: String,
    pub materialized: bool,
    /// `pg_get_viewdef`, without its final semicolon.
    pub definition: String,
    /// `name = 'value'` each, from the view's reloptions.
    pub options: Vec<String>,
    /// Quoted role.
    pub owner: String,
    /// `None`: the default privileges (the owner's alone).
    pub privileges: Option<Vec<Grant>>,
    pub column_privileges: Vec<Grant>,
    /// A quoted literal.
    pub comment: Option<String>,
    /// (quoted column, quoted literal).
    pub column_comments: Vec<(String, String)>,
    /// Names of the views in this set it selects from.
    pub depends_on: Vec<String>,
    /// What on it cannot be made again here (its triggers and rules).
    pub attached: Vec<String>,
    /// For a temporary view, whose it is ("this session", "another
    /// session"): a temporary view cannot be made again by a conversion.
    pub temporary_of: Option<String>,
    /// The functions and operators outside pg_catalog it calls
    /// (`regprocedure` / `regoperator` text): made again from its text with
    /// a wider column, it must call no other.
    pub calls: Vec<String>,
    /// Roles that the owner's default privileges would grant the view
    /// when it is made again: taken back.
    pub default_grantees: Vec<String>,
}

/// Everything the plan depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub target: Column,
    /// `pg_class.relkind`: `r` table, `p` partitioned table.
    pub relkind: char,
    /// The table at the top, when the column is inherited (a partition's,
    /// a child's): only there can it be converted.
    pub inherited_from: Option<String>,
    /// Whether the column is (the first column of) a primary key or a
    /// unique constraint or index.
    pub is_key: bool,
    pub default: OldDefault,
    /// A foreign key on the key column itself, described: the column takes
    /// its values from another table, so it cannot generate them.
    pub references: Option<String>,
    pub referencing: Vec<Referencing>,
    pub views: Vec<View>,
    /// The call the new default makes, qualified and quoted.
    pub nextval: String,
    pub drop_sequence: bool,
    /// A sequence the column still owns after an earlier conversion kept
    /// it: dropped by a run with `drop_sequence`.
    pub leftover: Option<Leftover>,
    /// The publications each table whose column widens is in, as
    /// (table, publication): a subscriber whose copy of the column stays
    /// narrower stops applying the table's rows.
    pub publications: Vec<(String, String)>,
    /// The caller says every subscriber's copy is widened already.
    pub subscribers_widened: bool,
    /// Partitions and children of a widened table owned by another role
    /// than the table, as (child, its owner, table, table's owner): the
    /// rewrite would run their constraints as the table's owner.
    pub owned_apart: Vec<(String, String, String, String)>,
    /// The tables the conversion would change that Citus manages.
    pub citus: Vec<CitusTable>,
}

/// A table Citus manages, as its metadata (`pg_dist_partition`) says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CitusTable {
    /// Qualified and quoted.
    pub table: String,
    /// "distributed table", "reference table" or "local table" (each a Citus one).
    pub kind: String,
    /// The distribution column of a distributed table, quoted.
    pub distribution_column: Option<String>,
}

/// A sequence left owned by the column after it was converted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// Qualified and quoted.
    pub sequence: String,
    /// A quoted role.
    pub owner: String,
    /// Other columns whose defaults take from it.
    pub shared_with: Vec<String>,
}

pub use crate::failure::literal;

/// Refuses what cannot be converted, before anything about views is read.
pub fn check(f: &Facts) -> Result<(), Failure> {
    let target = f.target.display();
    if !matches!(f.relkind, 'r' | 'p') {
        let kind = match f.relkind {
            'v' => "a view",
            'm' => "a materialized view",
            'f' => "a foreign table",
            'S' => "a sequence",
            'i' | 'I' => "an index",
            'c' => "a composite type",
            't' => "a TOAST table",
            _ => "not a table",
        };
        return Err(Failure::new(
            Class::WrongObjectType,
            format!("{} is {kind}", f.target.table),
        )
        .hint("snowflake_convert switches a table's (or a partitioned table's) key column."));
    }
    if let Some(top) = &f.inherited_from {
        return Err(Failure::new(
            Class::NotSupported,
            format!("column {target} is inherited from {top}"),
        )
        .detail("A partition's or a child's columns follow the table they belong to.")
        .hint(format!(
            "Convert {top}: snowflake_convert({}, ...).",
            literal(top)
        )));
    }
    if Width::of(&f.target.type_name).is_none() {
        return Err(Failure::new(
            Class::DatatypeMismatch,
            format!(
                "column {target} is of type {}, not an integer type",
                f.target.type_name
            ),
        )
        .detail("Snowflake IDs are bigint; smallint and integer columns are widened to bigint.")
        .hint("Convert a smallint, integer or bigint key column."));
    }
    if let Some(fk) = &f.references {
        return Err(Failure::new(
            Class::NotSupported,
            format!("column {target} takes its values from another table ({fk})"),
        )
        .hint("Convert the column it references; this one is widened with it."));
    }
    if !f.is_key
        && !matches!(
            f.default,
            OldDefault::Sequence { .. } | OldDefault::Identity | OldDefault::Snowflake
        )
    {
        return Err(Failure::new(
            Class::NotSupported,
            format!("column {target} has no sequence default and is not a primary key or unique"),
        )
        .hint("snowflake_convert switches key columns; name the table's key column."));
    }
    if let OldDefault::Other(expr) = &f.default {
        return Err(Failure::new(
            Class::NotSupported,
            format!("column {target} has the default {expr}, which is not a sequence"),
        )
        .detail("snowflake_convert replaces serial, bigserial, identity and nextval() defaults.")
        .hint(format!(
            "If the column may lose that default, run ALTER TABLE {} ALTER COLUMN {} DROP DEFAULT first.",
            f.target.table, f.target.column
        )));
    }
    for r in &f.referencing {
        if Width::of(&r.column.type_name).is_none() {
            return Err(Failure::new(
                Class::DatatypeMismatch,
                format!(
                    "column {} references {target} but is of type {}",
                    r.column.display(),
                    r.column.type_name
                ),
            )
            .hint(
                "Columns that hold copies of the key must be integers to be widened to bigint.",
            ));
        }
    }
    if f.drop_sequence {
        let to_drop = match (&f.default, &f.leftover) {
            (
                OldDefault::Sequence {
                    sequence,
                    shared_with,
                    ..
                },
                _,
            ) => Some((sequence, shared_with)),
            (OldDefault::Snowflake, Some(l)) => Some((&l.sequence, &l.shared_with)),
            _ => None,
        };
        if let Some((sequence, shared_with)) = to_drop {
            if !shared_with.is_empty() {
                return Err(Failure::new(
                    Class::DependentObjects,
                    format!(
                        "sequence {sequence} cannot be dropped: the default of {} takes from it too",
                        shared_with.join(", ")
                    ),
                )
                .hint("Run it again with drop_sequence => false, and drop the sequence once nothing uses it."));
            }
        }
    }
    Ok(())
}

/// The columns whose type changes to bigint: the key, and every column
/// that holds copies of it, where narrower. Views on these must be made
/// again.
pub fn widened(f: &Facts) -> Vec<&Column> {
    std::iter::once(&f.target)
        .chain(f.referencing.iter().map(|r| &r.column))
        .filter(|c| c.narrow())
        .collect()
}

/// What an application must know before the conversion: the key it maps
/// as a 32-bit integer becomes a 64-bit one, and snowflake IDs do not fit
/// 32 bits. Nothing in the database fails: the application's own range
/// checks do, quietly (Django's `AutoField`, `auth_user.id` included,
/// finds no row for a new ID). `None` when no key column widens.
pub fn widening_warning(f: &Facts) -> Option<Failure> {
    let widened = widened(f);
    widened.first()?;
    let columns: Vec<String> = widened
        .iter()
        .map(|c| format!("{} ({})", c.display(), c.type_name))
        .collect();
    Some(
        Failure::new(
            Class::Warning,
            format!(
                "{} become{} bigint: an application that maps {} as a 32-bit integer must map {} as a 64-bit one before it meets a snowflake ID",
                columns.join(", "),
                if widened.len() == 1 { "s" } else { "" },
                if widened.len() == 1 { "it" } else { "them" },
                if widened.len() == 1 { "it" } else { "them" },
            ),
        )
        .detail("The database takes every new ID; a 32-bit field in the application treats it as out of range without an error: Django's AutoField (auth_user.id included) finds no row for it, edits become inserts, deletes delete nothing.")
        .hint("Change the application's field to 64 bits first (Django: a BigAutoField with the snowflake default, see docs/applications.md), deploy it, then convert."),
    )
}

/// One statement of a conversion and who runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub sql: String,
    /// The quoted role it runs as; `None`: the role calling.
    pub role: Option<String>,
    /// For a step run as an object's owner, that object ("table
    /// public.orders"): the caller must have the privileges of its owner,
    /// as for the statement itself. `None` for the caller's own steps and
    /// for privileges given again by their grantors.
    pub owner_of: Option<String>,
}

impl Step {
    fn caller(sql: String) -> Step {
        Step {
            sql,
            role: None,
            owner_of: None,
        }
    }

    fn owner(sql: String, role: &str, of: String) -> Step {
        Step {
            sql,
            role: Some(role.to_string()),
            owner_of: Some(of),
        }
    }
}

/// The statements that convert the column, in the order they must run.
/// Empty when there is nothing left to do (a second run).
pub fn plan(f: &Facts) -> Result<Vec<String>, Failure> {
    Ok(steps(f)?.into_iter().map(|s| s.sql).collect())
}

/// `plan`, with who runs each statement. The first is the lock, the
/// caller's.
pub fn steps(f: &Facts) -> Result<Vec<Step>, Failure> {
    check(f)?;
    let widened = widened(f);
    let new_default = f.default != OldDefault::Snowflake;
    let leftover = f
        .leftover
        .as_ref()
        .filter(|_| f.drop_sequence && !new_default);
    if widened.is_empty() && !new_default && leftover.is_none() {
        return Ok(Vec::new());
    }
    refuse_citus(f)?;
    refuse_owned_apart_or_published(f)?;
    refuse_views(f)?;
    Ok(statements(f, &widened, new_default, leftover))
}

/// Citus refuses a type change of a distribution column, and carries other
/// ALTERs to every shard one by one: refused before anything changes, with
/// the way that works.
fn refuse_citus(f: &Facts) -> Result<(), Failure> {
    if let Some(t) = f.citus.first() {
        let again = match &t.distribution_column {
            Some(column) => format!(
                "SELECT create_distributed_table({}, {})",
                literal(&t.table),
                literal(column)
            ),
            None if t.kind == "reference table" => {
                format!("SELECT create_reference_table({})", literal(&t.table))
            }
            None => format!(
                "SELECT citus_add_local_table_to_metadata({})",
                literal(&t.table)
            ),
        };
        return Err(Failure::new(
            Class::NotSupported,
            format!("{} is a Citus {}: snowflake_convert does not change Citus tables", t.table, t.kind),
        )
        .detail("Citus refuses to change the type of a distribution column, and runs other column changes shard by shard; a conversion could stop half-way across the cluster.")
        .hint(format!(
            "Convert it as a plain table, then give it back to Citus, on the coordinator: SELECT undistribute_table({}, cascade_via_foreign_keys => true); SELECT snowflake_convert({}); {again}; (and the same for the tables its foreign keys link it to).",
            literal(&t.table),
            literal(&f.target.table)
        )));
    }
    Ok(())
}

/// A child table another role owns (widened as the table's owner), or a
/// published table whose subscribers are not widened yet.
fn refuse_owned_apart_or_published(f: &Facts) -> Result<(), Failure> {
    if let Some((child, child_owner, table, owner)) = f.owned_apart.first() {
        return Err(Failure::new(
            Class::Privilege,
            format!("{child} is owned by role {child_owner}, not by {owner}, the owner of {table}"),
        )
        .detail(format!("Widening {table} rewrites {child} too, as {owner}: its constraints would run with {owner}'s rights."))
        .hint(format!("Give it to the table's owner first (ALTER TABLE {child} OWNER TO {owner}), then run it again.")));
    }
    if let (Some((table, publication)), false) = (f.publications.first(), f.subscribers_widened) {
        return Err(Failure::new(
            Class::NotReady,
            format!("{table} is published (publication {publication}): its subscribers' copies of the widened columns must be bigint first"),
        )
        .detail("A subscriber applies rows into its own table; one whose column is still integer stops at the first new ID, and the application's other rows wait behind it.")
        .hint(format!(
            "On every subscriber, widen the columns first (snowflake_convert there with dry_run => true lists them; ALTER TABLE ... TYPE bigint), then run it here with subscribers_widened => true: snowflake_convert({}, subscribers_widened => true).",
            literal(&f.target.table)
        )));
    }
    Ok(())
}

/// Views this conversion cannot drop and make again.
fn refuse_views(f: &Facts) -> Result<(), Failure> {
    if let Some(v) = f.views.iter().find(|v| v.materialized) {
        return Err(Failure::new(
            Class::NotSupported,
            format!(
                "materialized view {} depends on a column that must become bigint",
                v.name
            ),
        )
        .detail("A materialized view is not made again here: its data, indexes and refresh schedule are yours.")
        .hint("Drop it, run snowflake_convert, and create it again."));
    }
    if let Some(v) = f.views.iter().find(|v| v.temporary_of.is_some()) {
        let whose = v.temporary_of.as_deref().unwrap_or_default();
        return Err(Failure::new(
            Class::NotSupported,
            format!(
                "temporary view {} of {whose} (role {}) depends on a column that must become bigint",
                v.name, v.owner
            ),
        )
        .detail("A temporary view belongs to its session, and a conversion cannot make it again there.")
        .hint(if whose == "this session" {
            format!("DROP VIEW {}; then run snowflake_convert again, and create the view again afterwards.", v.name)
        } else {
            format!("Run it again once that session has ended or dropped the view; a superuser can drop it: DROP VIEW {};", v.name)
        }));
    }
    if let Some(v) = f.views.iter().find(|v| !v.attached.is_empty()) {
        return Err(Failure::new(
            Class::NotSupported,
            format!(
                "view {} depends on a column that must become bigint and has {}",
                v.name,
                v.attached.join(", ")
            ),
        )
        .detail("Views are dropped and made again around the type change; triggers and rules on them are not made again here.")
        .hint("Drop the view, run snowflake_convert, and create the view and what is on it again."));
    }
    Ok(())
}

/// The statements, once nothing refuses them.
fn statements(
    f: &Facts,
    widened: &[&Column],
    new_default: bool,
    leftover: Option<&Leftover>,
) -> Vec<Step> {
    let views = creation_order(&f.views);
    let mut sql = vec![Step::caller(lock(f))];
    let as_table_owner =
        |text: String, c: &Column| Step::owner(text, &c.owner, format!("table {}", c.table));
    for v in views.iter().rev() {
        sql.push(Step::owner(
            format!("DROP VIEW {}", v.name),
            &v.owner,
            format!("view {}", v.name),
        ));
    }
    if f.default == OldDefault::Identity {
        sql.push(as_table_owner(
            format!(
                "ALTER TABLE {} ALTER COLUMN {} DROP IDENTITY",
                f.target.table, f.target.column
            ),
            &f.target,
        ));
    }
    // One ALTER per table: one rewrite of it, however many columns widen.
    let mut tables: Vec<(&Column, Vec<&str>)> = Vec::new();
    for c in widened {
        match tables.iter_mut().find(|(t, _)| t.table == c.table) {
            Some((_, cols)) => cols.push(&c.column),
            None => tables.push((c, vec![&c.column])),
        }
    }
    for (table, cols) in tables {
        let alters: Vec<String> = cols
            .iter()
            .map(|c| format!("ALTER COLUMN {c} TYPE bigint"))
            .collect();
        sql.push(as_table_owner(
            format!("ALTER TABLE {} {}", table.table, alters.join(", ")),
            table,
        ));
    }
    if new_default {
        sql.push(as_table_owner(
            format!(
                "ALTER TABLE {} ALTER COLUMN {} SET DEFAULT {}",
                f.target.table, f.target.column, f.nextval
            ),
            &f.target,
        ));
    }
    if let (
        true,
        OldDefault::Sequence {
            sequence, owner, ..
        },
    ) = (f.drop_sequence, &f.default)
    {
        sql.push(Step::owner(
            format!("DROP SEQUENCE {sequence}"),
            owner,
            format!("sequence {sequence}"),
        ));
    }
    if let Some(l) = leftover {
        sql.push(Step::owner(
            format!("DROP SEQUENCE {}", l.sequence),
            &l.owner,
            format!("sequence {}", l.sequence),
        ));
    }
    for v in views {
        recreate(v, &mut sql);
    }
    for s in &mut sql {
        s.sql.push(';');
    }
    sql
}

/// Tables that hold copies of the key are locked before the table itself,
/// deepest first: an insert there holds its own table and then waits for
/// the key's table (its foreign-key check), so taking them in the other
/// order would deadlock with it.
fn lock(f: &Facts) -> String {
    format!(
        "LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
        lock_order(f).join(", ")
    )
}

/// The tables `lock` names, in its order.
pub fn lock_order(f: &Facts) -> Vec<&str> {
    let mut refs: Vec<&Referencing> = f.referencing.iter().collect();
    refs.sort_by_key(|r| std::cmp::Reverse(r.depth));
    let mut tables: Vec<&str> = Vec::new();
    for r in refs {
        let t = r.column.table.as_str();
        if t != f.target.table && !tables.contains(&t) {
            tables.push(t);
        }
    }
    tables.push(&f.target.table);
    tables
}

/// The views, each after every view it selects from.
fn creation_order(views: &[View]) -> Vec<&View> {
    fn visit<'a>(v: &'a View, all: &'a [View], out: &mut Vec<&'a View>, seen: &mut Vec<&'a str>) {
        if seen.contains(&v.name.as_str()) {
            return;
        }
        seen.push(&v.name);
        for d in &v.depends_on {
            if let Some(dep) = all.iter().find(|w| &w.name == d) {
                visit(dep, all, out, seen);
            }
        }
        out.push(v);
    }
    let (mut out, mut seen) = (Vec::new(), Vec::new());
    for v in views {
        visit(v, views, &mut out, &mut seen);
    }
    out
}

/// A view made again by its owner, as it was: options, privileges (each
/// given again by the role that had given it, so that a REVOKE ... CASCADE
/// from that role still reaches the ones it gave), comments.
fn recreate(v: &View, sql: &mut Vec<Step>) {
    let with = if v.options.is_empty() {
        String::new()
    } else {
        format!(" WITH ({})", v.options.join(", "))
    };
    let owned = |text: String| Step::owner(text, &v.owner, format!("view {}", v.name));
    sql.push(owned(format!(
        "CREATE VIEW {}{with} AS {}",
        v.name, v.definition
    )));
    // Who may give privileges on the view: its owner, then whoever has been
    // given a grant option by a grant already made.
    let mut able = vec![v.owner.clone()];
    if let Some(grants) = &v.privileges {
        // Explicit privileges replace the owner's defaults, so start from
        // none, and from none of what default privileges gave the new view.
        let mut from = vec!["PUBLIC", v.owner.as_str()];
        from.extend(
            v.default_grantees
                .iter()
                .map(|g| g.as_str())
                .filter(|g| *g != "PUBLIC" && *g != v.owner),
        );
        sql.push(owned(format!(
            "REVOKE ALL ON {} FROM {}",
            v.name,
            from.join(", ")
        )));
        grant(v, grants, &mut able, sql);
    } else {
        let from: Vec<&str> = v
            .default_grantees
            .iter()
            .map(|g| g.as_str())
            .filter(|g| *g != v.owner)
            .collect();
        if !from.is_empty() {
            sql.push(owned(format!(
                "REVOKE ALL ON {} FROM {}",
                v.name,
                from.join(", ")
            )));
        }
    }
    // A column privilege can be given through a grant option on the whole
    // view: `able` carries those over.
    grant(v, &v.column_privileges, &mut able, sql);
    if let Some(c) = &v.comment {
        sql.push(owned(format!("COMMENT ON VIEW {} IS {c}", v.name)));
    }
    for (col, c) in &v.column_comments {
        sql.push(owned(format!("COMMENT ON COLUMN {}.{col} IS {c}", v.name)));
    }
}

/// The GRANTs that give `grants` on `v` again, each by its grantor, one
/// per grantor, grantee and grant option (in the order first seen), every
/// grantor's after those that gave it the grant option (`able`: who holds
/// one so far).
fn grant(v: &View, grants: &[Grant], able: &mut Vec<String>, sql: &mut Vec<Step>) {
    let mut groups: Vec<(&str, &str, bool, Vec<String>)> = Vec::new();
    for g in grants {
        let privilege = match &g.column {
            Some(c) => format!("{} ({c})", g.privilege),
            None => g.privilege.clone(),
        };
        match groups.iter_mut().find(|(by, who, option, _)| {
            *by == g.grantor && *who == g.grantee && *option == g.grantable
        }) {
            Some((_, _, _, list)) => list.push(privilege),
            None => groups.push((&g.grantor, &g.grantee, g.grantable, vec![privilege])),
        }
    }
    // A grant whose grantor has the option from no one here is given by
    // the owner: it could not stand otherwise.
    while !groups.is_empty() {
        let next = groups
            .iter()
            .position(|(by, ..)| able.iter().any(|a| a == by))
            .unwrap_or(0);
        let (by, who, option, list) = groups.remove(next);
        let by = if able.iter().any(|a| a == by) {
            by
        } else {
            v.owner.as_str()
        };
        if option && !able.iter().any(|a| a == who) {
            able.push(who.to_string());
        }
        let option = if option { " WITH GRANT OPTION" } else { "" };
        let text = format!("GRANT {} ON {} TO {who}{option}", list.join(", "), v.name);
        sql.push(if by == v.owner {
            Step::owner(text, by, format!("view {}", v.name))
        } else {
            Step {
                sql: text,
                role: Some(by.to_string()),
                owner_of: None,
            }
        });
    }
}

/// An object made again from its text with a wider column (a view by the
/// conversion; a CHECK constraint, an index or a statistics object by
/// PostgreSQL's own `ALTER ... TYPE`) must call the functions and operators
/// outside pg_catalog it called: parsed again, another overload (`f(bigint)`
/// where it called `f(integer)`), perhaps one a stranger created, would
/// otherwise be called from then on by whoever uses it.
pub fn check_calls(what: &str, before: &[String], now: &[String]) -> Result<(), Failure> {
    match now.iter().find(|c| !before.contains(c)) {
        None => Ok(()),
        Some(c) => Err(Failure::new(
            Class::NotSupported,
            format!("{what}, made again with the wider column, would call {c}, which it did not call before"),
        )
        .detail(if before.is_empty() {
            "Before, it called no function or operator outside pg_catalog.".to_string()
        } else {
            format!("Before, it called {}.", before.join(", "))
        })
        .hint(format!("Drop {what}, run snowflake_convert, and create it again calling what you mean."))),
    }
}

/// New IDs must sort after every key already there: a key's order is its
/// age in snowflake tables, and an index scan for "the latest" must find
/// new rows last. `next` is an ID just issued on this server, so every
/// later one is greater.
pub fn check_above(target: &Column, largest: Option<i64>, next: i64) -> Result<(), Failure> {
    match largest {
        Some(max) if max >= next => Err(Failure::new(
            Class::NotReady,
            format!(
                "new IDs for {} would not be greater than its existing values: the largest is {max}, and this server's next ID is {next}",
                target.display()
            ),
        )
        .detail("A snowflake ID is made of the time and the worker id in this server's layout; with this layout, IDs issued now are smaller than the keys already there.")
        .hint(format!(
            "If the largest key is only a little ahead, SELECT snowflake_resume_above({max}); moves this server's IDs above it; otherwise choose a layout whose IDs are larger now (snowflake_id.layout), or keep the sequence."
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(table: &str, column: &str, type_name: &str) -> Column {
        Column {
            table: table.into(),
            column: column.into(),
            type_name: type_name.into(),
            owner: "app".into(),
        }
    }

    fn serial() -> Facts {
        Facts {
            target: col("public.orders", "id", "integer"),
            relkind: 'r',
            inherited_from: None,
            is_key: true,
            default: OldDefault::Sequence {
                sequence: "public.orders_id_seq".into(),
                owner: "seq_owner".into(),
                shared_with: vec![],
            },
            references: None,
            referencing: vec![],
            views: vec![],
            nextval: "public.snowflake_nextval()".into(),
            drop_sequence: false,
            leftover: None,
            publications: vec![],
            subscribers_widened: false,
            owned_apart: vec![],
            citus: vec![],
        }
    }

    fn referencing(table: &str, column: &str, type_name: &str, depth: u32) -> Referencing {
        Referencing {
            column: col(table, column, type_name),
            depth,
        }
    }

    #[test]
    fn widening_a_32_bit_key_warns_the_application_and_a_bigint_key_does_not() {
        let f = serial();
        let w = widening_warning(&f).expect("integer widens");
        assert_eq!(w.class, Class::Warning);
        assert!(
            w.message
                .starts_with("public.orders.id (integer) becomes bigint"),
            "{}",
            w.message
        );
        assert!(w
            .detail
            .as_deref()
            .unwrap_or_default()
            .contains("Django's AutoField"));
        let mut big = serial();
        big.target.type_name = "bigint".into();
        assert_eq!(widening_warning(&big), None);
    }

    #[test]
    fn a_serial_column_is_widened_and_given_the_new_default() {
        assert_eq!(
            plan(&serial()).unwrap(),
            [
                "LOCK TABLE public.orders IN ACCESS EXCLUSIVE MODE;",
                "ALTER TABLE public.orders ALTER COLUMN id TYPE bigint;",
                "ALTER TABLE public.orders ALTER COLUMN id SET DEFAULT public.snowflake_nextval();",
            ]
        );
        let f = Facts {
            drop_sequence: true,
            ..serial()
        };
        assert_eq!(
            plan(&f).unwrap().last().unwrap(),
            "DROP SEQUENCE public.orders_id_seq;"
        );
    }

    #[test]
    fn an_identity_is_dropped_before_the_type_changes() {
        let f = Facts {
            default: OldDefault::Identity,
            target: col("s.t", "\"Key\"", "bigint"),
            ..serial()
        };
        assert_eq!(
            plan(&f).unwrap(),
            [
                "LOCK TABLE s.t IN ACCESS EXCLUSIVE MODE;",
                "ALTER TABLE s.t ALTER COLUMN \"Key\" DROP IDENTITY;",
                "ALTER TABLE s.t ALTER COLUMN \"Key\" SET DEFAULT public.snowflake_nextval();",
            ]
        );
    }

    #[test]
    fn foreign_keys_are_widened_and_their_tables_locked_first_deepest_first() {
        let f = Facts {
            referencing: vec![
                referencing("public.items", "order_id", "integer", 1),
                referencing("public.orders", "parent_id", "integer", 1),
                referencing("public.notes", "item_order_id", "smallint", 2),
                referencing("public.audit", "order_id", "bigint", 1),
                referencing("public.items", "first_order_id", "integer", 1),
            ],
            ..serial()
        };
        let sql = plan(&f).unwrap();
        assert_eq!(
            sql[0],
            "LOCK TABLE public.notes, public.items, public.audit, public.orders IN ACCESS EXCLUSIVE MODE;"
        );
        assert_eq!(
            &sql[1..4],
            [
                "ALTER TABLE public.orders ALTER COLUMN id TYPE bigint, ALTER COLUMN parent_id TYPE bigint;",
                "ALTER TABLE public.items ALTER COLUMN order_id TYPE bigint, ALTER COLUMN first_order_id TYPE bigint;",
                "ALTER TABLE public.notes ALTER COLUMN item_order_id TYPE bigint;",
            ]
        );
        assert!(!sql.iter().any(|s| s.contains("audit ALTER")), "{sql:?}");
    }

    #[test]
    fn a_second_run_has_nothing_to_do_but_mends_what_is_still_narrow() {
        let done = Facts {
            target: col("public.orders", "id", "bigint"),
            default: OldDefault::Snowflake,
            ..serial()
        };
        assert_eq!(plan(&done).unwrap(), Vec::<String>::new());
        let f = Facts {
            referencing: vec![referencing("public.items", "order_id", "integer", 1)],
            ..done
        };
        assert_eq!(
            plan(&f).unwrap()[1..],
            ["ALTER TABLE public.items ALTER COLUMN order_id TYPE bigint;"]
        );
    }

    fn view(name: &str, depends_on: &[&str]) -> View {
        View {
            name: name.into(),
            definition: format!(" SELECT id FROM public.orders /* {name} */"),
            owner: "app".into(),
            depends_on: depends_on.iter().map(|s| s.to_string()).collect(),
            ..View::default()
        }
    }

    #[test]
    fn views_are_dropped_dependents_first_and_made_again_in_the_other_order() {
        let mut top = view("public.top", &["public.mid", "public.base"]);
        top.options = vec!["security_barrier = 'true'".into()];
        let on_table = |privilege: &str, grantee: &str, grantable: bool| Grant {
            privilege: privilege.into(),
            column: None,
            grantee: grantee.into(),
            grantor: "app".into(),
            grantable,
        };
        top.privileges = Some(vec![
            on_table("SELECT", "PUBLIC", false),
            on_table("SELECT", "app", true),
            on_table("INSERT", "PUBLIC", false),
        ]);
        let on_id = |privilege: &str| Grant {
            privilege: privilege.into(),
            column: Some("id".into()),
            grantee: "\"Writer\"".into(),
            grantor: "app".into(),
            grantable: false,
        };
        top.column_privileges = vec![on_id("UPDATE"), on_id("SELECT")];
        top.comment = Some("'the top'".into());
        top.column_comments = vec![("id".into(), "'the key'".into())];
        let f = Facts {
            views: vec![
                top,
                view("public.mid", &["public.base"]),
                view("public.base", &[]),
            ],
            ..serial()
        };
        let sql = plan(&f).unwrap();
        let drops: Vec<&String> = sql.iter().filter(|s| s.starts_with("DROP VIEW")).collect();
        assert_eq!(
            drops,
            [
                "DROP VIEW public.top;",
                "DROP VIEW public.mid;",
                "DROP VIEW public.base;"
            ]
        );
        let creates: Vec<&String> = sql
            .iter()
            .filter(|s| s.starts_with("CREATE VIEW"))
            .collect();
        assert!(
            creates[0].starts_with("CREATE VIEW public.base AS  SELECT"),
            "{creates:?}"
        );
        assert!(creates[1].starts_with("CREATE VIEW public.mid AS"));
        assert!(
            creates[2].starts_with("CREATE VIEW public.top WITH (security_barrier = 'true') AS")
        );
        let alter = sql.iter().position(|s| s.contains("TYPE bigint")).unwrap();
        assert!(
            sql.iter()
                .position(|s| s.starts_with("DROP VIEW public.base"))
                .unwrap()
                < alter
        );
        assert!(
            sql.iter()
                .position(|s| s.starts_with("CREATE VIEW public.base"))
                .unwrap()
                > alter
        );
        let top_end: Vec<&str> = sql
            .iter()
            .skip_while(|s| !s.starts_with("CREATE VIEW public.top"))
            .map(|s| s.as_str())
            .collect();
        assert_eq!(
            top_end[1..],
            [
                "REVOKE ALL ON public.top FROM PUBLIC, app;",
                "GRANT SELECT, INSERT ON public.top TO PUBLIC;",
                "GRANT SELECT ON public.top TO app WITH GRANT OPTION;",
                "GRANT UPDATE (id), SELECT (id) ON public.top TO \"Writer\";",
                "COMMENT ON VIEW public.top IS 'the top';",
                "COMMENT ON COLUMN public.top.id IS 'the key';",
            ]
        );
    }

    #[test]
    fn what_cannot_be_converted_is_refused_with_the_reason() {
        let refused = |f: Facts, class: Class, words: &str| {
            let e = plan(&f).unwrap_err();
            assert_eq!(e.class, class, "{e}");
            assert!(e.message.contains(words), "{e}");
            assert!(e.hint.is_some(), "{e}");
        };
        refused(
            Facts {
                relkind: 'v',
                ..serial()
            },
            Class::WrongObjectType,
            "is a view",
        );
        refused(
            Facts {
                target: col("public.orders", "id", "uuid"),
                ..serial()
            },
            Class::DatatypeMismatch,
            "of type uuid",
        );
        refused(
            Facts {
                default: OldDefault::Other("(random() * 1000)::integer".into()),
                ..serial()
            },
            Class::NotSupported,
            "not a sequence",
        );
        refused(
            Facts {
                references: Some("constraint orders_id_fkey to public.parents".into()),
                ..serial()
            },
            Class::NotSupported,
            "takes its values from another table",
        );
        refused(
            Facts {
                default: OldDefault::Sequence {
                    sequence: "public.shared".into(),
                    owner: "app".into(),
                    shared_with: vec!["public.other.id".into()],
                },
                drop_sequence: true,
                ..serial()
            },
            Class::DependentObjects,
            "public.other.id",
        );
        let mut m = view("public.mv", &[]);
        m.materialized = true;
        refused(
            Facts {
                views: vec![m],
                ..serial()
            },
            Class::NotSupported,
            "materialized view public.mv",
        );
        let mut t = view("public.v", &[]);
        t.attached = vec!["trigger v_insert".into()];
        refused(
            Facts {
                views: vec![t],
                ..serial()
            },
            Class::NotSupported,
            "trigger v_insert",
        );
        // A shared sequence is fine while it stays.
        let shared = Facts {
            default: OldDefault::Sequence {
                sequence: "public.shared".into(),
                owner: "app".into(),
                shared_with: vec!["public.other.id".into()],
            },
            ..serial()
        };
        assert!(plan(&shared).is_ok());
    }

    #[test]
    fn what_default_privileges_give_a_view_made_again_is_taken_back() {
        let mut v = view("public.v", &[]);
        v.default_grantees = vec!["auditor".into(), "app".into()];
        let f = Facts {
            views: vec![v.clone()],
            ..serial()
        };
        assert!(plan(&f)
            .unwrap()
            .contains(&"REVOKE ALL ON public.v FROM auditor;".to_string()));
        v.privileges = Some(vec![]);
        let f = Facts {
            views: vec![v],
            ..serial()
        };
        assert!(plan(&f)
            .unwrap()
            .contains(&"REVOKE ALL ON public.v FROM PUBLIC, app, auditor;".to_string()));
    }

    #[test]
    fn only_a_key_at_the_top_of_its_hierarchy_is_converted() {
        let e = plan(&Facts {
            inherited_from: Some("public.events".into()),
            ..serial()
        })
        .unwrap_err();
        assert_eq!(e.class, Class::NotSupported);
        assert!(e
            .hint
            .unwrap()
            .contains("snowflake_convert('public.events'"));
        let plain = Facts {
            is_key: false,
            default: OldDefault::Nothing,
            ..serial()
        };
        assert!(plan(&plain)
            .unwrap_err()
            .message
            .contains("not a primary key or unique"));
        // A key with no default yet (keys the application chose) is fine.
        assert!(plan(&Facts {
            is_key: true,
            ..plain
        })
        .is_ok());
    }

    #[test]
    fn each_statement_runs_as_the_owner_of_what_it_changes() {
        let mut f = Facts {
            referencing: vec![Referencing {
                column: Column {
                    owner: "\"Lines\"".into(),
                    ..col("public.items", "order_id", "integer")
                },
                depth: 1,
            }],
            drop_sequence: true,
            ..serial()
        };
        f.views = vec![View {
            owner: "reporting".into(),
            ..view("public.v", &[])
        }];
        let roles: Vec<(String, Option<String>, Option<String>)> = steps(&f)
            .unwrap()
            .into_iter()
            .map(|s| {
                (
                    s.sql.split(' ').take(2).collect::<Vec<_>>().join(" "),
                    s.role,
                    s.owner_of,
                )
            })
            .collect();
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            roles,
            [
                ("LOCK TABLE".into(), None, None),
                ("DROP VIEW".into(), some("reporting"), some("view public.v")),
                (
                    "ALTER TABLE".into(),
                    some("app"),
                    some("table public.orders")
                ),
                (
                    "ALTER TABLE".into(),
                    some("\"Lines\""),
                    some("table public.items")
                ),
                (
                    "ALTER TABLE".into(),
                    some("app"),
                    some("table public.orders")
                ),
                (
                    "DROP SEQUENCE".into(),
                    some("seq_owner"),
                    some("sequence public.orders_id_seq")
                ),
                (
                    "CREATE VIEW".into(),
                    some("reporting"),
                    some("view public.v")
                ),
            ]
        );
    }

    #[test]
    fn privileges_come_back_from_their_grantors_chains_in_order() {
        let g = |grantee: &str, grantor: &str, grantable: bool| Grant {
            privilege: "SELECT".into(),
            column: None,
            grantee: grantee.into(),
            grantor: grantor.into(),
            grantable,
        };
        let mut v = view("public.v", &[]);
        // As aclexplode may list them: c's grant from b before b's from a.
        v.privileges = Some(vec![
            g("app", "app", true),
            g("c", "b", false),
            g("b", "a", true),
            g("a", "app", true),
            g("d", "gone", false),
        ]);
        let f = Facts {
            views: vec![v],
            ..serial()
        };
        let grants: Vec<(String, Option<String>)> = steps(&f)
            .unwrap()
            .into_iter()
            .filter(|s| s.sql.starts_with("GRANT"))
            .map(|s| (s.sql, s.role))
            .collect();
        let by = |sql: &str, role: &str| (sql.to_string(), Some(role.to_string()));
        assert_eq!(
            grants,
            [
                by("GRANT SELECT ON public.v TO app WITH GRANT OPTION;", "app"),
                by("GRANT SELECT ON public.v TO a WITH GRANT OPTION;", "app"),
                by("GRANT SELECT ON public.v TO b WITH GRANT OPTION;", "a"),
                by("GRANT SELECT ON public.v TO c;", "b"),
                // A grantor who holds the option from no one here: the owner.
                by("GRANT SELECT ON public.v TO d;", "app"),
            ]
        );
    }

    #[test]
    fn a_column_privilege_given_through_an_option_on_the_view_comes_from_its_grantor() {
        let mut v = view("public.v", &[]);
        v.privileges = Some(vec![Grant {
            privilege: "SELECT".into(),
            column: None,
            grantee: "a".into(),
            grantor: "app".into(),
            grantable: true,
        }]);
        v.column_privileges = vec![Grant {
            privilege: "SELECT".into(),
            column: Some("id".into()),
            grantee: "b".into(),
            grantor: "a".into(),
            grantable: false,
        }];
        let f = Facts {
            views: vec![v],
            ..serial()
        };
        let last = steps(&f)
            .unwrap()
            .into_iter()
            .find(|s| s.sql.contains("(id)"))
            .unwrap();
        assert_eq!(last.sql, "GRANT SELECT (id) ON public.v TO b;");
        assert_eq!(last.role.as_deref(), Some("a"));
    }

    #[test]
    fn a_sequence_an_earlier_run_kept_is_dropped_when_asked() {
        let done = Facts {
            target: col("public.orders", "id", "bigint"),
            default: OldDefault::Snowflake,
            leftover: Some(Leftover {
                sequence: "public.orders_id_seq".into(),
                owner: "app".into(),
                shared_with: vec![],
            }),
            ..serial()
        };
        assert_eq!(plan(&done).unwrap(), Vec::<String>::new());
        let drop = Facts {
            drop_sequence: true,
            ..done.clone()
        };
        assert_eq!(
            plan(&drop).unwrap()[1..],
            ["DROP SEQUENCE public.orders_id_seq;"]
        );
        let shared = Facts {
            leftover: Some(Leftover {
                shared_with: vec!["public.other.id".into()],
                ..done.leftover.clone().unwrap()
            }),
            ..drop
        };
        assert_eq!(plan(&shared).unwrap_err().class, Class::DependentObjects);
    }

    #[test]
    fn a_published_table_is_widened_only_once_its_subscribers_are() {
        let f = Facts {
            publications: vec![("public.orders".into(), "app".into())],
            ..serial()
        };
        let e = plan(&f).unwrap_err();
        assert_eq!(e.class, Class::NotReady);
        assert!(e.message.contains("publication app"), "{e}");
        assert!(e
            .hint
            .unwrap()
            .contains("snowflake_convert('public.orders', subscribers_widened => true)"));
        assert!(plan(&Facts {
            subscribers_widened: true,
            ..f
        })
        .is_ok());
    }

    #[test]
    fn hints_quote_names_as_string_literals() {
        assert_eq!(literal(r#"public."it's""#), r#"'public."it''s"'"#);
        let e = plan(&Facts {
            inherited_from: Some(r#"public."o'brien""#.into()),
            ..serial()
        })
        .unwrap_err();
        assert!(e
            .hint
            .unwrap()
            .contains(r#"snowflake_convert('public."o''brien"', ...)"#));
    }

    #[test]
    fn temporary_views_are_refused_naming_whose_they_are() {
        let mut v = view("pg_temp_3.recent", &[]);
        v.temporary_of = Some("another session".into());
        let e = plan(&Facts {
            views: vec![v.clone()],
            ..serial()
        })
        .unwrap_err();
        assert_eq!(e.class, Class::NotSupported);
        assert!(
            e.message
                .starts_with("temporary view pg_temp_3.recent of another session"),
            "{e}"
        );
        v.temporary_of = Some("this session".into());
        let e = plan(&Facts {
            views: vec![v],
            ..serial()
        })
        .unwrap_err();
        assert!(e.hint.unwrap().starts_with("DROP VIEW pg_temp_3.recent;"));
    }

    #[test]
    fn a_view_made_again_calls_nothing_it_did_not_call_before() {
        let v = View {
            calls: vec!["public.label(integer)".into()],
            ..view("public.v", &[])
        };
        let what = format!("view {}", v.name);
        assert!(check_calls(&what, &v.calls, &["public.label(integer)".into()]).is_ok());
        assert!(check_calls(&what, &v.calls, &[]).is_ok());
        let e = check_calls(&what, &v.calls, &["public.label(bigint)".into()]).unwrap_err();
        assert_eq!(e.class, Class::NotSupported);
        assert!(e.message.starts_with("view public.v, made again"), "{e}");
        assert!(e.message.contains("would call public.label(bigint)"), "{e}");
        assert!(e.detail.unwrap().contains("public.label(integer)"));
    }

    #[test]
    fn a_partition_owned_by_another_role_is_refused() {
        let f = Facts {
            owned_apart: vec![(
                "public.events_1".into(),
                "eve".into(),
                "public.events".into(),
                "app".into(),
            )],
            ..serial()
        };
        let e = plan(&f).unwrap_err();
        assert_eq!(e.class, Class::Privilege);
        assert!(e
            .hint
            .unwrap()
            .contains("ALTER TABLE public.events_1 OWNER TO app"));
    }

    #[test]
    fn new_ids_must_sort_after_the_existing_keys() {
        let c = col("public.orders", "id", "bigint");
        assert!(check_above(&c, None, 5).is_ok());
        assert!(check_above(&c, Some(4), 5).is_ok());
        let e = check_above(&c, Some(5), 5).unwrap_err();
        assert_eq!(e.class, Class::NotReady);
        assert!(e.message.contains("the largest is 5"), "{e}");
        assert!(e.hint.unwrap().contains("snowflake_resume_above(5)"));
    }

    #[test]
    fn a_citus_table_is_refused_before_anything_changes_with_the_way_that_works() {
        let mut f = serial();
        f.citus = vec![CitusTable {
            table: "public.orders".into(),
            kind: "distributed table".into(),
            distribution_column: Some("id".into()),
        }];
        let e = plan(&f).unwrap_err();
        assert_eq!(e.class, Class::NotSupported);
        assert_eq!(
            e.message,
            "public.orders is a Citus distributed table: snowflake_convert does not change Citus tables"
        );
        let hint = e.hint.unwrap();
        assert!(hint.contains("SELECT undistribute_table('public.orders', cascade_via_foreign_keys => true); SELECT snowflake_convert('public.orders'); SELECT create_distributed_table('public.orders', 'id');"), "{hint}");
        f.citus[0].kind = "reference table".into();
        f.citus[0].distribution_column = None;
        assert!(plan(&f)
            .unwrap_err()
            .hint
            .unwrap()
            .contains("create_reference_table('public.orders')"));
    }
}
