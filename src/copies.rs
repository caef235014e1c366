//! Data that came from another cluster (a `pg_upgrade`, a restored dump, a
//! logical initial copy), floored before this server issues an ID in it.
//!
//! A database is checked once per change, not once per session: shared
//! memory keeps which databases were checked since the last change (the
//! core's `floored`), and a session whose database is among them reads no
//! table at its first ID. What counts as a change: rows written into a
//! record of floors (the record's guard tells, at commit), a
//! subscription's tables changing state (every process hears it from the
//! catalog's invalidations, at commit); a database dropped is forgotten. A
//! backend that has taken IDs compares the generation of changes at each
//! ID, so a dump restored into a database in use is checked before the
//! next ID of every session.
//!
//! The check reads the database's record of floors
//! (`snowflake_id.snowflake_floors`, see the core's `copies`) and the state
//! of its subscriptions' finished initial copies: two reads of small
//! tables, never a scan of the data. Only where a floor is needed is the
//! data read: the largest value of every column whose default calls a
//! generating function, through its index where it has one, and every
//! later ID goes above it (the mark, WAL-logged, as
//! `snowflake_resume_above` moves it). One session floors a database at a
//! time; the others wait for its result. Only superusers and the
//! database's owner may write the record (the guard), so no other role can
//! make a database floor. `DROP SUBSCRIPTION` and `ALTER SUBSCRIPTION` can
//! remove the catalog's account of copies no floor covered yet: before
//! they run, the record is told (a row of `COPIED_UNFLOORED`).
//!
//! The extension acts on its own behalf here: the record (only the
//! extension's own table of that name) and the catalog are read as the
//! bootstrap superuser, from the newest committed data (never the caller's
//! snapshot). Every column is read at the storage level, by its table's
//! OID (`pg::scan`): no name lookup, planner, cast, policy or privilege
//! check, so nothing a table's owner writes or revokes runs in or fails a
//! floor. Tables alone are read (never views, foreign tables, nor other
//! sessions' temporary tables), under the caller's statement timeout; a
//! table's lock is waited for at most `max_wait`, then the ID fails
//! (55000): a transaction a role leaves open stalls nobody. Values more than an hour ahead of the clock are not taken for
//! IDs (one row would otherwise move the whole server's IDs that far):
//! their database refuses IDs until an operator settles them.

use crate::catalog;
use crate::mark;
use crate::pg::process::{self, ProcessLocal};
use crate::pg::{clock, lock, role, scan, spi, xlog};
use crate::shmem::Shmem;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowflake_id_core::backfill::Raise;
use snowflake_id_core::config::Config;
use snowflake_id_core::copies::{self, FloorRow};
use snowflake_id_core::generator::Limits;
use snowflake_id_core::layout::Layout;
use snowflake_id_core::timefmt::{format_duration, format_instant};
use snowflake_id_core::{uuid, Class, Failure};
use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

/// The generation of changes at which this backend last found its
/// database checked (0: never).
static SEEN: ProcessLocal<Cell<u64>> = ProcessLocal(Cell::new(0));
/// Whether this process's transaction changed what decides a floor (the
/// generation moves at its commit).
static CHANGING: ProcessLocal<Cell<bool>> = ProcessLocal(Cell::new(false));
/// Whether this process is writing the extension's own row of the record
/// (a floor's, which changes no decision).
static WRITING_OWN: ProcessLocal<Cell<bool>> = ProcessLocal(Cell::new(false));
/// Whether this process's transaction added rows to a record of floors
/// (which two-phase commit would make visible after the change is heard).
static RECORD_WRITTEN: ProcessLocal<Cell<bool>> = ProcessLocal(Cell::new(false));
/// The database this process's transaction floored (0: none).
static FLOORED_HERE: ProcessLocal<Cell<u32>> = ProcessLocal(Cell::new(0));

/// Whether this backend's database needs no check before its next ID (one
/// load: the quick path asks).
#[inline]
pub fn checked(shm: &Shmem) -> bool {
    SEEN.0.get() == shm.floored.generation()
}

/// How a column holds IDs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bigint,
    /// `numeric`: an ID stored as a number (values outside bigint's range
    /// and fractions are no IDs; NaN and infinities neither).
    Numeric,
    Uuid,
}

/// A column that may hold IDs: its name for messages, and where it is.
struct Column {
    schema: String,
    table: String,
    column: String,
    kind: Kind,
    rel: pg_sys::Oid,
    attnum: i16,
}

impl Column {
    fn name(&self) -> String {
        format!("{}.{}.{}", self.schema, self.table, self.column)
    }
}

/// What the columns hold.
struct Found {
    /// The largest ID at or below the bound, and where it was.
    highest: Option<(i64, String)>,
    /// The largest value of the layout above the bound, and where it was.
    ahead: Option<(i64, String)>,
    /// The smallest value above the bound: no database's ID may reach its
    /// time while the values above the bound are unsettled.
    ahead_lowest: Option<i64>,
    columns: usize,
}

/// A number read as text (a bigint, or a numeric's integer part).
fn parse_number(text: &str) -> Option<i64> {
    text.split('.').next()?.parse().ok()
}

/// Reads the largest ID of each column (of `layout`; UUIDs that hold none
/// are passed over); IDs above `upper` are not taken but kept apart
/// (`ahead`): the caller decides what they mean.
/// A table's lock is waited for at most `wait` each.
fn highest(
    columns: &[Column],
    layout: &Layout,
    upper: i64,
    wait: Duration,
) -> Result<Found, Failure> {
    let mut found = Found {
        highest: None,
        ahead: None,
        ahead_lowest: None,
        columns: columns.len(),
    };
    fn keep(slot: &mut Option<(i64, String)>, v: i64, at: &Column) {
        if slot.as_ref().is_none_or(|(h, _)| v > *h) {
            *slot = Some((v, at.name()));
        }
    }
    for c in columns {
        let read = largest(c, layout, upper, wait)?;
        if let Some(v) = read.below {
            keep(&mut found.highest, v, c);
        }
        if let Some(v) = read.above {
            keep(&mut found.ahead, v, c);
        }
        if let Some(v) = read.lowest_above {
            found.ahead_lowest = Some(found.ahead_lowest.map_or(v, |l| l.min(v)));
        }
    }
    Ok(found)
}

/// What one column holds about `upper`.
struct Read {
    /// Its largest ID at or below.
    below: Option<i64>,
    /// Its largest and smallest above.
    above: Option<i64>,
    lowest_above: Option<i64>,
}

/// The largest ID of a column at or below `upper`, and the largest and
/// smallest above it, read at the storage level by the table's OID (`scan`): nothing its
/// owner wrote runs, nothing its owner revokes or locks in a policy fails
/// it. Through the column's index, the read stops at the first ID at or
/// below the bound. A table locked against readers for all of `wait`
/// fails it: its IDs are unknown, so no ID may be issued yet.
fn largest(c: &Column, layout: &Layout, upper: i64, wait: Duration) -> Result<Read, Failure> {
    let (mut below, mut above, mut lowest_above) = (None::<i64>, None::<i64>, None::<i64>);
    let ty = match c.kind {
        Kind::Bigint => scan::Type::Int8,
        Kind::Numeric => scan::Type::Numeric,
        Kind::Uuid => scan::Type::Uuid,
    };
    let read = scan::read_column(c.rel, c.attnum, ty, wait, |value, order| {
        let id = match value {
            scan::Value::Int8(v) => Some(v),
            scan::Value::Numeric(text) => parse_number(&text),
            // Only version 7 UUIDs can hold IDs.
            scan::Value::Uuid(b) => (b[6] >> 4 == 7)
                .then(|| uuid::to_id(layout, &b).ok())
                .flatten(),
        };
        match id {
            Some(id) if (0..=upper).contains(&id) => below = below.max(Some(id)),
            Some(id) if id > upper => {
                above = above.max(Some(id));
                lowest_above = Some(lowest_above.map_or(id, |l| l.min(id)));
            }
            _ => {}
        }
        order == scan::Order::Stored || below.is_none()
    });
    match read {
        Ok(_) => Ok(Read {
            below,
            above,
            lowest_above,
        }),
        Err(scan::Busy) => Err(locked_against_reads(c, wait)),
    }
}

fn locked_against_reads(c: &Column, wait: Duration) -> Failure {
    Failure::new(
        Class::NotReady,
        format!(
            "snowflake_id cannot read {}: the table stayed locked against reading for {} ms",
            c.name(),
            wait.as_millis()
        ),
    )
    .detail(format!(
        "Database \"{}\" must be floored before its next ID, and the largest ID of this column is unknown until it is read. A transaction holds a lock on the table that conflicts with reading it (LOCK TABLE, ALTER TABLE, VACUUM FULL), or waits for one while others read.",
        database_name()
    ))
    .hint(format!(
        "Find it: SELECT pid, mode, granted FROM pg_catalog.pg_locks WHERE database = {} AND relation = {}; then COMMIT or ROLLBACK it, or SELECT pg_terminate_backend(pid); (a NULL pid is a prepared transaction: SELECT gid FROM pg_catalog.pg_prepared_xacts; then ROLLBACK PREPARED or COMMIT PREPARED it). The next ID floors again.",
        process::database_id().to_u32(),
        c.rel.to_u32()
    ))
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
fn id_columns() -> Vec<Column> {
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
fn all_columns() -> Vec<Column> {
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

fn columns(query: &str) -> Vec<Column> {
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

/// The record's OID, if this database's extension has one (0.1.0 had none):
/// the extension's own table of that name, never an object another role
/// made under it (it is read as the bootstrap superuser: a view there
/// would run its maker's functions so). Catalog lookups, no statement.
fn record() -> Option<pg_sys::Oid> {
    // SAFETY: catalog lookups by name and OID inside a transaction; what is
    // missing is InvalidOid (missing_ok).
    unsafe {
        let extension = pg_sys::get_extension_oid(c"snowflake_id".as_ptr(), true);
        let schema = pg_sys::get_namespace_oid(c"snowflake_id".as_ptr(), true);
        if extension == pg_sys::InvalidOid || schema == pg_sys::InvalidOid {
            return None;
        }
        let oid = pg_sys::get_relname_relid(c"snowflake_floors".as_ptr(), schema);
        let ours = oid != pg_sys::InvalidOid
            && pg_sys::get_rel_relkind(oid) == pg_sys::RELKIND_RELATION as std::ffi::c_char
            && pg_sys::getExtensionOfObject(pg_sys::RelationRelationId, oid) == extension;
        ours.then_some(oid)
    }
}

/// The tables of this database's subscriptions, as SQL from `FROM` on
/// (`r`: `pg_subscription_rel`). Citus's own subscriptions move shards
/// between the nodes of one cluster, whose IDs are its own (their names:
/// Citus's multi_logical_replication.c). Only subscriptions owned by a
/// superuser or a member of the database's owner count (from 16 on, a
/// member of pg_create_subscription may subscribe): no other role makes a
/// database floor.
const SUBSCRIBED: &str = "FROM pg_catalog.pg_subscription_rel r
     JOIN pg_catalog.pg_subscription s ON s.oid OPERATOR(pg_catalog.=) r.srsubid
     JOIN pg_catalog.pg_database d ON d.oid OPERATOR(pg_catalog.=) s.subdbid
     WHERE NOT pg_catalog.starts_with(s.subname::pg_catalog.text, 'citus_shard_move_subscription_')
       AND NOT pg_catalog.starts_with(s.subname::pg_catalog.text, 'citus_shard_split_subscription_')
       AND pg_catalog.pg_has_role(s.subowner, d.datdba, 'MEMBER')";

/// Whether a table of this database's subscriptions is being copied (or
/// waits to be), as the newest committed data says.
fn copies_under_way() -> bool {
    let mut any = false;
    spi::each_of_latest_data(
        &format!("SELECT 1 {SUBSCRIBED} AND r.srsubstate IN ('i', 'd') LIMIT 1"),
        &[],
        1,
        |_| {
            any = true;
            Ok(false)
        },
    );
    any
}

/// The record's rows, and the state of this database's subscriptions'
/// finished initial copies, as the newest committed data has them (a
/// restore that committed after the caller's transaction began is what the
/// check is for, whether or not that transaction wrote). Read-only
/// statements (a write would give the caller's transaction an XID, and its
/// commit a wait for a synchronous standby that may never answer), as
/// plain as they can be: they run in every session's first ID, where a
/// cold backend pays for each operator and aggregate it looks up.
fn read_record() -> (Vec<FloorRow>, Option<u64>) {
    let mut finished = Vec::new();
    spi::each_of_latest_data(
        &format!(
            "SELECT r.srsubid, r.srrelid, r.srsublsn::pg_catalog.text {SUBSCRIBED} AND r.srsubstate IN ('f', 's', 'r')"
        ),
        &[],
        0,
        |row| {
            finished.push(copies::FinishedCopy {
                subscription: row.get::<pg_sys::Oid>(1)?.map_or(0, |o| o.to_u32()),
                table: row.get::<pg_sys::Oid>(2)?.map_or(0, |o| o.to_u32()),
                lsn: row
                    .get::<String>(3)?
                    .as_deref()
                    .and_then(parse_lsn)
                    .unwrap_or(0),
            });
            Ok(true)
        },
    );
    let mut rows = Vec::new();
    spi::each_of_latest_data(
        "SELECT system_identifier, arrival, covers, subscription_copies, floor,
                (pg_catalog.date_part('epoch', at) * 1000)::pg_catalog.int8
         FROM snowflake_id.snowflake_floors WHERE backfilled IS NULL",
        &[],
        0,
        |row| {
            rows.push(FloorRow {
                system_identifier: row.get::<i64>(1)?.unwrap_or(0),
                arrival: row.get::<pgrx::Uuid>(2)?.map_or(0, arrival),
                // A superuser's row may hold NULLs: they name no row.
                covers: row
                    .get::<Vec<Option<pgrx::Uuid>>>(3)?
                    .unwrap_or_default()
                    .into_iter()
                    .flatten()
                    .map(arrival)
                    .collect(),
                subscription_copies: row.get::<i64>(4)?.map(|v| v as u64),
                floor: row.get::<i64>(5)?,
                written_ms: row.get::<i64>(6)?.unwrap_or(0),
            });
            Ok(true)
        },
    );
    (rows, copies::copies_state(&finished))
}

/// A row's arrival as the core counts it.
fn arrival(u: pgrx::Uuid) -> u128 {
    u128::from_be_bytes(*u.as_bytes())
}

/// An LSN as `pg_lsn` prints it (`16/B374D848`).
fn parse_lsn(text: &str) -> Option<u64> {
    let (hi, lo) = text.split_once('/')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

/// Adds this server's row: it floored, covering `covers`, with the
/// subscriptions' finished copies in the state `copies`, above `floor`.
/// Not where the transaction cannot write (the floor holds all the same,
/// in the mark: the next start floors again).
fn write_record(me: i64, covers: &[u128], copies: Option<u64>, floor: Option<i64>) -> bool {
    if process::read_only_transaction() {
        return false;
    }
    own_write(|| {
        spi::run(
            "INSERT INTO snowflake_id.snowflake_floors (system_identifier, covers, subscription_copies, floor, at)
             VALUES ($1, $2, $3, $4, pg_catalog.to_timestamp($5::pg_catalog.float8 / 1000))",
            &[
                DatumWithOid::from(me),
                DatumWithOid::from(
                    covers
                        .iter()
                        .map(|a| pgrx::Uuid::from_bytes(a.to_be_bytes()))
                        .collect::<Vec<_>>(),
                ),
                DatumWithOid::from(copies.map(|v| v as i64)),
                DatumWithOid::from(floor),
                // The clock the floor was made at: a restart continues
                // from it exactly (`continue_term`).
                DatumWithOid::from(clock::now_ms()),
            ],
        )
    });
    true
}

/// Runs `write`, a write of the extension's own row, which the guard does
/// not count as a change (an error leaves the flag as it found it: the
/// next write sets it again, and a change counted too often costs one
/// read of the record, never a floor missed).
fn own_write<R>(write: impl FnOnce() -> R) -> R {
    /// Cleared however the write ends (an error caught by a PL/pgSQL
    /// block around the caller included).
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            WRITING_OWN.0.set(false);
        }
    }
    WRITING_OWN.0.set(true);
    let _clear = Clear;
    write()
}

/// Floors this database before this backend's next ID, if its data came
/// from another cluster and no session of this server floored it since
/// the last change (see the module's documentation).
pub fn floor_if_copied(
    shm: &Shmem,
    cfg: &Config,
    lim: &Limits,
    max_wait_ms: u64,
) -> Result<(), Failure> {
    // Read before anything else: a change while this check runs leaves the
    // database to be checked again.
    let generation = shm.floored.generation();
    let db = process::database_id().to_u32();
    if shm.floored.is_checked(db, generation) {
        SEEN.0.set(generation);
        return Ok(());
    }
    // Copied IDs ahead of the clock this database holds refuse, without a
    // read, until the clock brings them within the hour (then the floor
    // runs again) or an operator settles them. Restored from a durable mark
    // (their IDs unknown), a floor finds out whether they still are.
    let me = xlog::origin().0 as i64;
    let mut set_aside = false;
    if let Some((f, id)) = shm.refusal.copies_failure_in(db) {
        if id > copies::plausible_upper(&cfg.layout, clock::now_ms()) {
            return Err(f);
        }
        set_aside = id == 0;
    }
    let needed = |rows: &[FloorRow], copies_now| {
        copies::floor_needed(me, rows, copies_now).or(set_aside.then_some(copies::Why::SetAside))
    };
    role::acting_as(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID), || {
        let Some(oid) = record() else {
            return Err(not_updated());
        };
        // The newest data, not the caller's snapshot: a restore that
        // committed after the caller's statement (or repeatable-read
        // transaction) began is what the check is for. (Once the
        // transaction has written, SPI reads with its snapshot whatever is
        // active: a repeatable-read writer's check can miss such a restore;
        // the next session's does not.)
        let (rows, copies_now) = spi::with_latest_snapshot(read_record);
        if needed(&rows, copies_now).is_none() {
            continue_from_record(shm, cfg, me, &rows);
            return Ok(());
        }
        // One floor at a time in a database; the others wait for it alone
        // (a session lock, released when the floor ends, not when its
        // caller's transaction does), then find the database checked, or
        // fail as it did for a locked table (each waiter would otherwise
        // wait for the lock in turn).
        let busy_seen = shm.refusal.floors_busy();
        lock::relation_during(
            oid,
            lock::Mode::ShareUpdateExclusive,
            AssertUnwindSafe(|| {
                if shm.floored.is_checked(db, generation) {
                    return Ok(());
                }
                if let Some(f) = shm.refusal.floor_busy_since(db, busy_seen) {
                    return Err(f);
                }
                let (rows, copies_now) = spi::with_latest_snapshot(read_record);
                let Some(why) = needed(&rows, copies_now) else {
                    continue_from_record(shm, cfg, me, &rows);
                    return Ok(());
                };
                spi::with_latest_snapshot(|| {
                    floor(shm, cfg, lim, max_wait_ms, me, &rows, copies_now, &why)
                })?;
                shm.floored.note(db, generation);
                // Its row of the record goes with this transaction: an
                // abort makes the next ID floor again.
                FLOORED_HERE.0.set(db);
                Ok(())
            }),
        )
    })?;
    shm.floored.note(db, generation);
    SEEN.0.set(generation);
    Ok(())
}

/// Reads every ID column of this database and raises the mark above the
/// largest; writes this server's row of the record.
#[allow(clippy::too_many_arguments)]
fn floor(
    shm: &Shmem,
    cfg: &Config,
    lim: &Limits,
    max_wait_ms: u64,
    me: i64,
    rows: &[FloorRow],
    copies_now: Option<u64>,
    why: &copies::Why,
) -> Result<(), Failure> {
    if process::in_parallel_mode() {
        // A floor writes WAL, which a parallel query cannot.
        return Err(Failure::new(
            Class::NotReady,
            format!(
                "snowflake_id cannot floor database \"{}\" inside a parallel query",
                database_name()
            ),
        )
        .detail(format!(
            "Before its next ID, this database must be floored: {}.",
            why.describe()
        ))
        .hint("Take one ID outside a parallel query first: SELECT snowflake_nextval();"));
    }
    let started = Instant::now();
    let columns = id_columns();
    // Said first: a read cut short (a cancel, a timeout) is then not a mystery.
    server_log!(
        "snowflake_id: flooring database \"{}\" because {}: reading {} column(s)",
        database_name(),
        why.describe(),
        columns.len()
    );
    let now_ms = clock::now_ms();
    let found = highest(
        &columns,
        &cfg.layout,
        copies::plausible_upper(&cfg.layout, now_ms),
        Duration::from_millis(max_wait_ms),
    )
    .inspect_err(|f| {
        shm.refusal
            .note_floor_busy(process::database_id().to_u32(), f)
    })?;
    let said = match &found.highest {
        Some((id, _)) => mark::admin::floor_above(shm, cfg, lim, *id, max_wait_ms)?,
        None => "no column holds an ID".to_string(),
    };
    if let Some((id, at)) = &found.ahead {
        if !mark::covers(shm, &cfg.layout, *id) {
            let f = ahead_of_clock(&cfg.layout, *id, at);
            server_log!(
                "snowflake_id: {} (the database refuses IDs until then)",
                f.message
            );
            let ceiling = copies::ceiling_tick(&cfg.layout, found.ahead_lowest.unwrap_or(*id));
            mark::refuse_for_copies(shm, cfg, &f, *id, process::database_id().to_u32(), ceiling);
            return Err(f);
        }
    }
    // Nothing so far ahead here (any more).
    mark::lift_copies(shm, cfg, Some(process::database_id().to_u32()));
    // What backfills leased at past times, wherever the data was made.
    let backfilled = mark::leases::raise_copied(shm, &read_leases())?;
    let said = match backfilled {
        0 => said,
        n => format!("{said}; {n} backfill lease(s) of the record raised this server's"),
    };
    let recorded = write_record(
        me,
        &copies::covered(me, rows),
        copies_now,
        found.highest.as_ref().map(|h| h.0),
    );
    server_log!(
        "snowflake_id: database \"{}\" was floored because {}: {} column(s) read in {} ms{}; {said}{}",
        database_name(),
        why.describe(),
        found.columns,
        started.elapsed().as_millis(),
        found
            .highest
            .as_ref()
            .map(|(id, at)| format!(", the highest ID {id} in {at}"))
            .unwrap_or_default(),
        if recorded { "" } else { " (not recorded: the transaction cannot write; the next start floors again)" }
    );
    Ok(())
}

/// The refusal for an ID a floor found more than an hour ahead of the
/// clock: below it, IDs could repeat copied ones; above it, IDs would
/// carry a time the clock may never have been meant to reach.
fn ahead_of_clock(layout: &Layout, id: i64, at: &str) -> Failure {
    let made = layout.decode(id).map(|d| d.unix_ms).unwrap_or(0);
    let db = database_name();
    let resume = format!("{}snowflake_resume_above", crate::catalog::qualifier());
    Failure::new(
        Class::NotReady,
        format!(
            "database \"{db}\" holds an ID made {} ahead of this server's clock: {at} holds {id} (made at {})",
            format_duration(made.saturating_sub(clock::now_ms()).max(0) as u64),
            format_instant(made)
        ),
    )
    .detail("The data came from another cluster; IDs issued below this one could repeat it. A server whose clock ran ahead made it, or this server's clock is behind. This database refuses IDs until it is settled (the others issue on; every database's status says so).")
    .hint(format!(
        "If this server's clock is behind, correct it: the next ID in database \"{db}\" floors again. If {id} is an ID to stay above: SELECT {resume}({id}); (IDs then wait for the clock while they run more than snowflake_id.max_lead ahead of it). If it is no ID (a sentinel, a typo): SELECT {resume}(); in database \"{db}\" floors below it and sets it aside."
    ))
}

/// Notes a backfill lease in this database's record, in the caller's
/// transaction (as the bootstrap superuser, as the floors' rows are
/// written): a copy of the data (`pg_upgrade`, a dump, a logical copy)
/// carries it with the IDs, and the server that floors the copy raises its
/// backfill map over it. An aborted transaction takes the row with the
/// rows that hold its IDs; the caller then forgets the lease.
pub fn record_lease(raise: &Raise) -> Result<(), Failure> {
    if record().is_none() {
        return Err(not_updated());
    }
    let me = xlog::origin().0 as i64;
    role::acting_as(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID), || {
        own_write(|| {
            spi::run(
                "INSERT INTO snowflake_id.snowflake_floors (system_identifier, backfilled) VALUES ($1, $2)",
                &[
                    DatumWithOid::from(me),
                    DatumWithOid::from(raise.to_row().to_vec()),
                ],
            )
        })
    });
    Ok(())
}

/// Every backfill lease this database's record holds (whichever server
/// took it), read as the bootstrap superuser.
pub fn recorded_leases() -> Result<Vec<Raise>, Failure> {
    if record().is_none() {
        return Err(not_updated());
    }
    Ok(role::acting_as(
        pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID),
        read_leases,
    ))
}

/// The leases of the record's rows: three numbers each, as the extension
/// writes them (only its own rows and a superuser's keep the column, see
/// floors.sql); any other shape is passed over, never raised on.
fn read_leases() -> Vec<Raise> {
    let mut out = Vec::new();
    spi::each_of_latest_data(
        "SELECT backfilled[1], backfilled[2], backfilled[3] FROM snowflake_id.snowflake_floors \
         WHERE pg_catalog.cardinality(backfilled) OPERATOR(pg_catalog.=) 3",
        &[],
        0,
        |row| {
            if let (Some(lo), Some(hi), Some(depth)) =
                (row.get::<i64>(1)?, row.get::<i64>(2)?, row.get::<i64>(3)?)
            {
                out.extend(Raise::from_row(&[lo, hi, depth]));
            }
            Ok(true)
        },
    );
    out
}

/// Notes in this database's record a floor `snowflake_resume_above(id)`
/// made, so that a restart continues from it as from a copy's floor; it
/// covers no row (a floor by hand may be below what they left).
pub fn note_floor(id: i64) {
    if record().is_some() {
        let me = xlog::origin().0 as i64;
        role::acting_as(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID), || {
            write_record(me, &[], None, Some(id));
        });
    }
}

/// The refusal in a database whose extension is older than its library
/// (0.1.0 kept no record of floors): whether its data came from another
/// cluster cannot be told until the update makes the record.
fn not_updated() -> Failure {
    Failure::new(
        Class::NotReady,
        format!("snowflake_id in database \"{}\" is not updated to its library's version", database_name()),
    )
    .detail("Until it is, whether this database's data came from another cluster (pg_upgrade, a dump) cannot be told, and IDs issued here could repeat copied ones.")
    .hint("Run ALTER EXTENSION snowflake_id UPDATE; in this database.")
}

/// What the next call in this database would meet before its ID: the
/// refusal of copied IDs ahead of the clock it holds, or of a database
/// whose extension is not updated.
pub fn problem(shm: &Shmem) -> Option<Failure> {
    if let Some((f, _)) = shm
        .refusal
        .copies_failure_in(process::database_id().to_u32())
    {
        return Some(f);
    }
    if checked(shm) {
        return None;
    }
    // Catalog-cache lookups, which check no privilege: as the caller.
    record().is_none().then(not_updated)
}

/// IDs go on where they were after a floor this server made above copied
/// IDs ahead of its clock (the lead melting since, at an eighth of the
/// clock's pace). Each durable mark carries the term, so a restart has it
/// before any database's first ID; the record gives it where the mark was
/// written by a library that did not keep it.
fn continue_from_record(shm: &Shmem, cfg: &Config, me: i64, rows: &[FloorRow]) {
    if let Some(term) = rows
        .iter()
        .filter(|r| r.system_identifier == me)
        .filter_map(|r| copies::continue_term(&cfg.layout, r.floor?, r.written_ms))
        .max()
    {
        shm.continue_with(term);
    }
}

pub fn database_name() -> String {
    crate::pg::database::name(process::database_id()).unwrap_or_default()
}

/// `snowflake_resume_above()`: every later ID above every ID this database
/// holds in any bigint or uuid column (IDs an application inserted without
/// the default included): values later than an hour ahead of the clock are
/// other numbers, not IDs. Superuser only.
pub fn resume_above_everything(
    shm: &Shmem,
    cfg: &Config,
    lim: &Limits,
    max_wait_ms: u64,
) -> Result<String, Failure> {
    mark::admin::require_superuser("snowflake_resume_above()")?;
    let me = xlog::origin().0 as i64;
    let upper = copies::plausible_upper(&cfg.layout, clock::now_ms());
    role::acting_as(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID), || {
        let started = Instant::now();
        let columns = all_columns();
        let found = highest(
            &columns,
            &cfg.layout,
            upper,
            Duration::from_millis(max_wait_ms),
        )?;
        let said = match &found.highest {
            Some((id, at)) => format!(
                "{} (the highest of {} column(s), in {at}, read in {} ms)",
                mark::admin::floor_above(shm, cfg, lim, *id, max_wait_ms)?,
                found.columns,
                started.elapsed().as_millis()
            ),
            None => format!(
                "no ID in {} column(s) at or below the largest an ID can be now ({}): nothing to resume above",
                found.columns,
                format_instant(cfg.layout.decode(upper).map(|d| d.unix_ms).unwrap_or(0))
            ),
        };
        // This database's copies are covered now, what was set aside too.
        if record().is_some() {
            let (rows, copies_now) = read_record();
            write_record(
                me,
                &copies::covered(me, &rows),
                copies_now,
                found.highest.as_ref().map(|h| h.0),
            );
        }
        mark::lift_copies(shm, cfg, Some(process::database_id().to_u32()));
        Ok(match found.ahead {
            Some((v, at)) => format!(
                "{said}; set aside as no ID: {at} holds {v} (made at {}, more than an hour ahead of the clock)",
                format_instant(cfg.layout.decode(v).map(|d| d.unix_ms).unwrap_or(0))
            ),
            None => said,
        })
    })
}

/// Before `DROP SUBSCRIPTION` or `ALTER SUBSCRIPTION`: copies of this
/// database's subscriptions that no floor of this server covers, or that
/// are under way, are noted in the record (a row of `COPIED_UNFLOORED`, in
/// the statement's transaction), since the statement may take the
/// catalog's account of them away. A database without the record has no
/// IDs to protect.
pub fn before_subscription_change() {
    if crate::shmem::get().is_none() || process::read_only_transaction() {
        return;
    }
    let me = xlog::origin().0 as i64;
    role::acting_as(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID), || {
        if record().is_none() {
            return;
        }
        let (rows, copies_now) = read_record();
        // A table still being copied counts too: its copy may commit
        // between this check and the statement's removal of its state.
        let uncovered =
            copies_now.is_some() && copies::floor_needed(me, &rows, copies_now).is_some();
        if uncovered || copies_under_way() {
            spi::run(
                "INSERT INTO snowflake_id.snowflake_floors (system_identifier) VALUES ($1)",
                &[DatumWithOid::from(copies::COPIED_UNFLOORED)],
            );
        }
    });
}

/// A database dropped: its OID may be another's later.
pub fn database_dropped(db: pg_sys::Oid) {
    if let Some(shm) = crate::shmem::get() {
        shm.floored.forget(db.to_u32());
    }
}

/// The record's guard, for a row written by anyone but the extension's
/// own floor: the generation moves when the transaction commits (and now,
/// so that a check running meanwhile does not count for after it).
pub fn record_written() {
    // The extension's creation writes its server's row, which changes no
    // decision either.
    // SAFETY: a plain read of this backend's state.
    if WRITING_OWN.0.get() || unsafe { pg_sys::creating_extension } {
        return;
    }
    if let Some(shm) = crate::shmem::get() {
        shm.floored.changed();
        CHANGING.0.set(true);
        RECORD_WRITTEN.0.set(true);
    }
}

/// Whether `rel` is this database's record of floors.
pub fn is_record(rel: pg_sys::Oid) -> bool {
    record() == Some(rel)
}

/// The record's definition changed (`ALTER TABLE`: its triggers disabled
/// or enabled, as `pg_restore --disable-triggers` does around its rows):
/// every database checks again once the transaction commits, as after
/// rows the guard let in.
pub fn record_altered() {
    // SAFETY: a plain read of this backend's state.
    if unsafe { pg_sys::creating_extension } {
        return;
    }
    if let Some(shm) = crate::shmem::get() {
        shm.floored.changed();
        CHANGING.0.set(true);
    }
}

/// Registers, in the postmaster for every process it starts, what hears of
/// changes: the subscriptions' tables changing state (an initial copy
/// ending, a table added or removed), and the end of each transaction.
pub fn listen() {
    // SAFETY: called from _PG_init at preload, single-threaded: the
    // callbacks are inherited by every process the postmaster starts.
    unsafe {
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::SUBSCRIPTIONRELMAP as std::ffi::c_int,
            Some(subscriptions_changed),
            pg_sys::Datum::from(0),
        );
        pg_sys::RegisterXactCallback(Some(at_transaction_end), std::ptr::null_mut());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn subscriptions_changed(
    _arg: pg_sys::Datum,
    _cache: std::ffi::c_int,
    hash: u32,
) {
    // 0 is a reset of every cache (a process that fell behind the queue of
    // invalidations), not a change: the process that made a change hears
    // its own, with the row's hash.
    if hash != 0 {
        if let Some(shm) = crate::shmem::get() {
            shm.floored.changed();
            CHANGING.0.set(true);
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn at_transaction_end(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_PRE_PREPARE if RECORD_WRITTEN.0.get() => {
            // Its rows would become visible at COMMIT PREPARED, which no
            // session of this server hears of: sessions would not check again.
            pgrx::ereport!(
                PgLogLevel::ERROR,
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                "cannot prepare a transaction that added rows to snowflake_id.snowflake_floors",
                "Restore the record of floors in a transaction committed as usual."
            );
        }
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT | XACT_EVENT_PREPARE => {
            FLOORED_HERE.0.set(0);
            RECORD_WRITTEN.0.set(false);
            if CHANGING.0.replace(false) {
                if let Some(shm) = crate::shmem::get() {
                    shm.floored.changed();
                }
            }
        }
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT => {
            CHANGING.0.set(false);
            WRITING_OWN.0.set(false);
            RECORD_WRITTEN.0.set(false);
            let db = FLOORED_HERE.0.replace(0);
            if db != 0 {
                if let Some(shm) = crate::shmem::get() {
                    shm.floored.uncheck(db);
                }
            }
        }
        _ => {}
    }
}
