//! snowflake_convert: reads the catalog into the facts the core plans from,
//! checks that new IDs sort after the old keys, and runs the plan (or only
//! shows it).

use std::ffi::CStr;

use pgrx::prelude::*;
use snowflake_id_core::convert::{self, Column, Facts, Step};
use snowflake_id_core::{Class, Failure};

use crate::pg::error::{raise, OrRaise};
use crate::pg::spi::ok as spi;
use crate::pg::text::Text;

mod facts;
mod locking;

use facts::{read_facts, rebuilt_calls, snowflake_nextval, view_calls, Asked};
use locking::{lock_keeping_timeout, Locks};

/// Switches a table's key column (serial, bigserial, identity or a
/// `DEFAULT nextval(...)`) to `DEFAULT snowflake_nextval()` in the calling
/// transaction: integer columns become bigint together with every column
/// that references them, identity is dropped, dependent views are made
/// again, existing rows keep their keys. Returns the statements it ran, or
/// with `dry_run` would run. VOLATILE and PARALLEL UNSAFE: it changes the
/// schema.
///
/// Anyone may call it, and it gives no one more than they have: each
/// statement runs as the owner of what it changes, in a security-restricted
/// operation, and the caller must have the privileges of every such owner
/// (as ALTER TABLE itself asks). The search path is pinned to pg_catalog
/// for the call, so no function or operator a user created is reached by
/// its catalog queries; row security is off, so a policy cannot hide keys
/// from the order check (a table it would filter is an error instead).
#[pg_extern(
    volatile,
    strict,
    parallel_unsafe,
    sql = r#"
CREATE FUNCTION snowflake_convert(
    tbl regclass,
    col name DEFAULT 'id',
    dry_run boolean DEFAULT false,
    drop_sequence boolean DEFAULT false,
    subscribers_widened boolean DEFAULT false
) RETURNS SETOF text
VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
SET row_security = off
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_convert_wrapper';
"#
)]
fn snowflake_convert(
    tbl: pg_sys::Oid,
    col: &CStr,
    dry_run: bool,
    drop_sequence: bool,
    subscribers_widened: bool,
) -> SetOfIterator<'static, Text> {
    let col = crate::pg::charset::from_server(col.to_bytes()).or_raise();
    let col = col.as_str();
    let asked = Asked {
        drop_sequence,
        subscribers_widened,
    };
    let facts = || read_facts(tbl, col, &asked).or_raise();
    let (first, first_sequence, first_oids) = facts();
    let mut steps = convert::steps(&first).or_raise();
    if steps.is_empty() {
        return SetOfIterator::new(Vec::new());
    }
    // Before any lock: who may do what is known from the catalog alone.
    let mut roles = Roles::default();
    roles.check(&steps);
    // By OID: a name could be given to another table in between.
    let locks = |f: &Facts, sequence, oids: &[(String, pg_sys::Oid)]| Locks {
        tables: convert::lock_order(f)
            .into_iter()
            .filter_map(|t| oids.iter().find(|(name, _)| name == t).map(|(_, oid)| *oid))
            .collect(),
        names: convert::lock_order(f).join(", "),
        sequence,
    };
    let (facts, sequence, oids) = if dry_run {
        (first, first_sequence, first_oids)
    } else {
        // Locked before the check and the final reading, so no insert gets
        // in between: the plan is made again from what the lock holds.
        lock_keeping_timeout(&locks(&first, first_sequence, &first_oids));
        let (facts, sequence, oids) = facts();
        steps = convert::steps(&facts).or_raise();
        if steps.is_empty() {
            return SetOfIterator::new(Vec::new());
        }
        roles.check(&steps);
        (facts, sequence, oids)
    };
    if let Some(w) = convert::widening_warning(&facts) {
        crate::pg::error::log(w, pgrx::PgLogLevel::WARNING);
    }
    let owner = roles.oid(&facts.target.owner);
    let largest = as_role(Some(owner), || largest_key(&facts.target));
    let next = crate::issue::next_id_unseen();
    convert::check_above(&facts.target, largest, next).or_raise();
    if !dry_run {
        lock_keeping_timeout(&locks(&facts, sequence, &oids));
        apply(&steps, &mut roles, &oids);
        check_default_calls_own(tbl, col, &facts.target.table);
        check_views(&facts);
    }
    // Returned in the database's encoding, as every text it returns.
    SetOfIterator::new(steps.into_iter().map(|s| Text(s.sql)).collect::<Vec<_>>())
}

/// Runs the plan's statements after the first (its LOCK TABLE, whose locks
/// are held already), each as the role it names, and checks that what
/// was made again from text calls what it called before (else the whole
/// conversion is undone with the error).
fn apply(steps: &[Step], roles: &mut Roles, oids: &[(String, pg_sys::Oid)]) {
    let rebuilt = |oids: &[(String, pg_sys::Oid)]| {
        spi(Spi::connect(|c| {
            Ok::<_, pgrx::spi::SpiError>(
                oids.iter()
                    .flat_map(|(_, relid)| rebuilt_calls(c, *relid))
                    .collect::<Vec<_>>(),
            )
        }))
    };
    let before = rebuilt(oids);
    for s in &steps[1..] {
        let role = s.role.as_deref().map(|r| roles.oid(r));
        as_role(role, || run(&s.sql));
    }
    // What was made again from text calls what it called (else the
    // whole conversion is undone with the error).
    for (what, now) in rebuilt(oids) {
        let was = before
            .iter()
            .find(|(w, _)| *w == what)
            .map(|(_, c)| c.as_slice());
        convert::check_calls(&what, was.unwrap_or_default(), &now).or_raise();
    }
}

/// The default was written as text (schema-qualified) and parsed again by
/// ALTER TABLE: it must call the extension's own function, whatever the
/// owner of that schema renamed or created in between.
fn check_default_calls_own(tbl: pg_sys::Oid, col: &str, table: &str) {
    let own = spi(Spi::connect(|c| {
        Ok::<_, pgrx::spi::SpiError>(snowflake_nextval(c).1)
    }));
    let calls_own: Option<bool> = spi(Spi::get_one_with_args(
        "SELECT EXISTS (SELECT 1 FROM pg_attrdef ad \
             JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum \
             JOIN pg_depend d ON d.classid = 'pg_attrdef'::regclass AND d.objid = ad.oid \
                  AND d.refclassid = 'pg_proc'::regclass AND d.refobjid = $3 \
             WHERE ad.adrelid = $1 AND a.attname = $2::name)",
        // The column's name in the database's encoding, as the catalog has it.
        &[tbl.into(), Text(col.to_string()).into(), own.into()],
    ));
    if own.is_none() || calls_own != Some(true) {
        crate::pg::error::raise(
            Failure::new(
                Class::NotSupported,
                format!("the default written on {} does not call snowflake_id's own snowflake_nextval()", table),
            )
            .detail("The schema of the extension's functions changed while the table was converted (renamed, or another function put in its place).")
            .hint("Nothing was converted. Check who owns that schema and what it holds, then run it again."),
        );
    }
}

/// Each view made again calls what it called before.
fn check_views(facts: &Facts) {
    for v in &facts.views {
        let oid = spi(Spi::get_one_with_args::<pg_sys::Oid>(
            "SELECT $1::pg_catalog.regclass::pg_catalog.oid",
            &[Text(v.name.clone()).into()],
        ));
        if let Some(oid) = oid {
            let now = spi(Spi::connect(|c| {
                Ok::<_, pgrx::spi::SpiError>(view_calls(c, oid))
            }));
            convert::check_calls(&format!("view {}", v.name), &v.calls, &now).or_raise();
        }
    }
}

/// The largest key, read from the newest committed data (not the snapshot
/// of a REPEATABLE READ or SERIALIZABLE transaction, which can miss keys
/// committed since it began; the table is locked by now, so none can come
/// after this reading).
fn largest_key(target: &Column) -> Option<i64> {
    let query = std::ffi::CString::new(crate::pg::charset::to_server(&format!(
        "SELECT pg_catalog.max({})::pg_catalog.int8 FROM {}",
        target.column, target.table
    )))
    .unwrap_or_default();
    crate::pg::spi::int8_of_latest_data(&query).unwrap_or_else(|| {
        pgrx::error!(
            "snowflake_convert could not read the largest key of {}",
            target.table
        )
    })
}

/// Runs `f` as `role` (the table owner, for its code: see
/// `role::acting_as`), or as the caller for `None`.
fn as_role<R>(role: Option<pg_sys::Oid>, f: impl FnOnce() -> R) -> R {
    match role {
        Some(role) => crate::pg::role::acting_as(role, f),
        None => f(),
    }
}

/// The roles steps run as, looked up once each.
#[derive(Default)]
struct Roles {
    oids: Vec<(String, pg_sys::Oid)>,
}

impl Roles {
    /// The OID of a quoted role name, as the catalog wrote it.
    fn oid(&mut self, quoted: &str) -> pg_sys::Oid {
        if let Some((_, oid)) = self.oids.iter().find(|(r, _)| r == quoted) {
            return *oid;
        }
        let oid = spi(Spi::get_one_with_args::<pg_sys::Oid>(
            "SELECT $1::pg_catalog.regrole::pg_catalog.oid",
            &[Text(quoted.to_string()).into()],
        ))
        .unwrap_or(pg_sys::InvalidOid);
        self.oids.push((quoted.to_string(), oid));
        oid
    }

    /// Refuses, before anything changes, a conversion whose statements the
    /// caller could not run as the owners they belong to.
    fn check(&mut self, steps: &[Step]) {
        for s in steps {
            let (Some(role), Some(of)) = (&s.role, &s.owner_of) else {
                continue;
            };
            let oid = self.oid(role);
            if !crate::pg::role::acts_as(oid) {
                raise(
                    Failure::new(
                        Class::Privilege,
                        format!("snowflake_convert must change {of}, owned by role {role}, and role {} has not the privileges of {role}", current_role()),
                    )
                    .detail("Each statement of a conversion runs as the owner of what it changes; its caller must be allowed to act as that owner, as for the statement itself.")
                    .hint(format!("Run it as {role}, as a member of {role}, or as a superuser.")),
                );
            }
        }
    }
}

fn current_role() -> String {
    spi(Spi::get_one::<Text>(
        "SELECT pg_catalog.quote_ident(CURRENT_USER::pg_catalog.text)",
    ))
    .map(|t| t.0)
    .unwrap_or_default()
}

/// Runs one statement, written in the database's encoding (names in it
/// came from the catalog, so it can hold them all).
fn run(statement: &str) {
    if crate::pg::spi::execute(statement) < 0 {
        pgrx::error!("snowflake_convert could not run: {statement}");
    }
}
