//! A column's values read at the storage level, by the table's OID: no
//! statement, so no name lookup, no planner, no cast or operator, no
//! privilege check, no row-level security policy, and no code any role
//! wrote (an index's predicate or expression, a statistics object) runs.
//! What reads a table on the server's own behalf uses it, so that a
//! table's owner can neither make the read run its code nor make it fail.

use crate::pg::lock;
use pgrx::pg_sys;
use std::time::Duration;

/// A column's value in one row, copied out of the heap.
pub enum Value {
    Int8(i64),
    Uuid([u8; 16]),
    /// A number's text, as `numeric_out` writes it (`NaN`, `Infinity`
    /// included).
    Numeric(String),
}

/// The type a column holds at bottom (a domain's base).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Int8,
    Uuid,
    Numeric,
}

impl Type {
    fn oid(self) -> pg_sys::Oid {
        match self {
            Type::Int8 => pg_sys::INT8OID,
            Type::Uuid => pg_sys::UUIDOID,
            Type::Numeric => pg_sys::NUMERICOID,
        }
    }

    /// The btree operator family whose order is the type's own (PostgreSQL's
    /// catalog, pg_opfamily.dat: integer_ops 1976, uuid_ops 2968,
    /// numeric_ops 1988; the same in 13 to 19).
    fn btree_family(self) -> pg_sys::Oid {
        pg_sys::Oid::from(match self {
            Type::Int8 => 1976u32,
            Type::Uuid => 2968,
            Type::Numeric => 1988,
        })
    }
}

/// A table that stayed locked against readers (ACCESS EXCLUSIVE: `LOCK
/// TABLE`, most `ALTER TABLE`s, a `VACUUM FULL`) for the whole wait.
#[derive(Debug)]
pub struct Busy;

/// How a column was read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Order {
    /// Through an index, from the largest value down.
    LargestFirst,
    /// Every row, in storage order.
    Stored,
}

/// Hands `each` the values of column `attnum` of table `rel` that the
/// newest committed data holds (never a NULL), with the order they come
/// in, until it returns false: from the largest down through a valid btree
/// index that leads with the column (no predicate, the type's own order)
/// where the table has one, every row otherwise. `None` where there is nothing to read: the table is gone, or
/// is no plain table, or the column is dropped or holds another type now
/// (checked once the table is locked, ACCESS SHARE as every reader locks
/// it, until the read ends). The table's lock is waited for at most
/// `wait` (`Busy` then); an index someone holds locked is passed over for
/// a read of every row: a transaction a role keeps open bounds no read.
pub fn read_column(
    rel: pg_sys::Oid,
    attnum: i16,
    ty: Type,
    wait: Duration,
    mut each: impl FnMut(Value, Order) -> bool,
) -> Result<Option<Order>, Busy> {
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    if !lock::relation_within(rel, lock::Mode::AccessShare, wait) {
        return Err(Busy);
    }
    // SAFETY: every structure is opened, read and closed while the table
    // is locked, in the order taken; an error (from `each` or the scan)
    // aborts the transaction, whose resource owner releases what is open.
    // A value is copied out of the slot's current row before the next is
    // fetched, in a memory context reset per row.
    unsafe {
        // Locked above: opened without locking again, closed releasing it.
        let relation = pg_sys::try_relation_open(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        if relation.is_null() {
            pg_sys::UnlockRelationOid(rel, lock);
            return Ok(None);
        }
        if !holds(relation, attnum, ty) {
            pg_sys::relation_close(relation, lock);
            return Ok(None);
        }
        // A numeric stored out of line is read through the TOAST table and
        // its index, which Postgres opens waiting for their locks: taken
        // here first, within the same bound.
        let toast = if ty == Type::Numeric {
            match lock_toast(relation, wait) {
                Ok(held) => held,
                Err(busy) => {
                    pg_sys::relation_close(relation, lock);
                    return Err(busy);
                }
            }
        } else {
            Vec::new()
        };
        let index = usable_index(relation, attnum, ty, lock);
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
        let slot = pg_sys::table_slot_create(relation, std::ptr::null_mut());
        let per_row = pg_sys::AllocSetContextCreateExtended(
            pg_sys::CurrentMemoryContext,
            c"snowflake_id column read".as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        let order = if index.is_some() {
            Order::LargestFirst
        } else {
            Order::Stored
        };
        let mut take = || {
            pgrx::check_for_interrupts!();
            let mut null = false;
            let d = pg_sys::slot_getattr(slot, i32::from(attnum), &mut null);
            if null {
                return true;
            }
            let outer = pg_sys::MemoryContextSwitchTo(per_row);
            let value = copy_out(d, ty);
            pg_sys::MemoryContextSwitchTo(outer);
            pg_sys::MemoryContextReset(per_row);
            each(value, order)
        };
        match index {
            Some((index, descending)) => {
                scan_index(relation, index, descending, snapshot, slot, &mut take);
                pg_sys::index_close(index, lock);
            }
            None => scan_table(relation, snapshot, slot, &mut take),
        }
        pg_sys::MemoryContextDelete(per_row);
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::UnregisterSnapshot(snapshot);
        for oid in toast {
            pg_sys::UnlockRelationOid(oid, lock);
        }
        pg_sys::relation_close(relation, lock);
        Ok(Some(order))
    }
}

/// Feeds `take` the rows of `relation` through `index` whose first column
/// is not NULL, largest first, until it returns false.
///
/// # Safety
/// `relation` and `index` open and locked, `snapshot` registered, `slot`
/// made for `relation`; all of them outlive the call.
unsafe fn scan_index(
    relation: pg_sys::Relation,
    index: pg_sys::Relation,
    descending: bool,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
    take: &mut dyn FnMut() -> bool,
) {
    // SAFETY: the caller's promises; the key lives until the scan ends.
    unsafe {
        // IS NOT NULL, as the executor puts a NullTest to a btree.
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyEntryInitialize(
            &mut key,
            (pg_sys::SK_ISNULL | pg_sys::SK_SEARCHNOTNULL) as i32,
            1,
            0,
            pg_sys::InvalidOid,
            pg_sys::InvalidOid,
            pg_sys::InvalidOid,
            pg_sys::Datum::from(0),
        );
        #[cfg(not(any(feature = "pg18", feature = "pg19")))]
        let scan = pg_sys::index_beginscan(relation, index, snapshot, 1, 0);
        #[cfg(feature = "pg18")]
        let scan = pg_sys::index_beginscan(relation, index, snapshot, std::ptr::null_mut(), 1, 0);
        #[cfg(feature = "pg19")]
        let scan =
            pg_sys::index_beginscan(relation, index, snapshot, std::ptr::null_mut(), 1, 0, 0);
        pg_sys::index_rescan(scan, &mut key, 1, std::ptr::null_mut(), 0);
        let direction = if descending {
            pg_sys::ScanDirection::ForwardScanDirection
        } else {
            pg_sys::ScanDirection::BackwardScanDirection
        };
        while pg_sys::index_getnext_slot(scan, direction, slot) {
            if !take() {
                break;
            }
        }
        pg_sys::index_endscan(scan);
    }
}

/// Feeds `take` every row of `relation`, in storage order, until it
/// returns false.
///
/// # Safety
/// As `scan_index`, without the index.
unsafe fn scan_table(
    relation: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
    take: &mut dyn FnMut() -> bool,
) {
    // SAFETY: the caller's promises.
    unsafe {
        // 19 takes ScanOptions beyond a plain sequential scan's: none.
        #[cfg(not(feature = "pg19"))]
        let scan = pg_sys::table_beginscan(relation, snapshot, 0, std::ptr::null_mut());
        #[cfg(feature = "pg19")]
        let scan = pg_sys::table_beginscan(relation, snapshot, 0, std::ptr::null_mut(), 0);
        while pg_sys::table_scan_getnextslot(
            scan,
            pg_sys::ScanDirection::ForwardScanDirection,
            slot,
        ) {
            if !take() {
                break;
            }
        }
        pg_sys::table_endscan(scan);
    }
}

/// Locks the TOAST table of `relation` (open and locked) and its indexes
/// for reading, each waited for at most `wait`; the OIDs locked, to be
/// unlocked after the read (`Busy`: none is held).
unsafe fn lock_toast(relation: pg_sys::Relation, wait: Duration) -> Result<Vec<pg_sys::Oid>, Busy> {
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    // SAFETY: the relation is open and locked; the TOAST table is locked
    // before it is opened (without locking again) and closed keeping the
    // lock; its indexes are locked by OID alone.
    unsafe {
        let toast = (*(*relation).rd_rel).reltoastrelid;
        if toast == pg_sys::InvalidOid {
            return Ok(Vec::new());
        }
        if !lock::relation_within(toast, lock::Mode::AccessShare, wait) {
            return Err(Busy);
        }
        let mut held = vec![toast];
        let rel = pg_sys::try_relation_open(toast, pg_sys::NoLock as pg_sys::LOCKMODE);
        if rel.is_null() {
            return Ok(held);
        }
        let indexes = index_oids(rel);
        pg_sys::relation_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        for oid in indexes {
            if !lock::relation_within(oid, lock::Mode::AccessShare, wait) {
                for oid in held {
                    pg_sys::UnlockRelationOid(oid, lock);
                }
                return Err(Busy);
            }
            held.push(oid);
        }
        Ok(held)
    }
}

/// The OIDs of the indexes of `relation` (open and locked), as the
/// relation cache lists them.
unsafe fn index_oids(relation: pg_sys::Relation) -> Vec<pg_sys::Oid> {
    // SAFETY: the relation is open and locked; the list is a copy this
    // function reads and frees.
    unsafe {
        let list = pg_sys::RelationGetIndexList(relation);
        if list.is_null() {
            return Vec::new();
        }
        let oids = (0..(*list).length as usize)
            .map(|k| (*(*list).elements.add(k)).oid_value)
            .collect();
        pg_sys::list_free(list);
        oids
    }
}

/// Whether `relation` (open and locked) is a plain table whose column
/// `attnum` is there and holds `ty` (or a domain over it).
unsafe fn holds(relation: pg_sys::Relation, attnum: i16, ty: Type) -> bool {
    // SAFETY: the relation is open; its descriptor lives as long.
    unsafe {
        if (*(*relation).rd_rel).relkind != pg_sys::RELKIND_RELATION as std::ffi::c_char
            || (*relation).rd_tableam.is_null()
        {
            return false;
        }
        let desc = pgrx::PgTupleDesc::from_pg_unchecked((*relation).rd_att);
        let Some(attr) = usize::try_from(attnum)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| desc.get(i))
        else {
            return false;
        };
        !attr.attisdropped && pg_sys::getBaseType(attr.atttypid) == ty.oid()
    }
}

/// A valid btree index of `relation` whose first column is `attnum`, in
/// the type's own order, without a predicate (opened and locked), and
/// whether it sorts that column descending. An index locked against
/// readers (a `REINDEX` in a transaction left open) is not waited for.
unsafe fn usable_index(
    relation: pg_sys::Relation,
    attnum: i16,
    ty: Type,
    lock: pg_sys::LOCKMODE,
) -> Option<(pg_sys::Relation, bool)> {
    // SAFETY: the relation is open and locked; each index is locked, then
    // opened, before its fields are read, and closed unless returned.
    unsafe {
        for oid in index_oids(relation) {
            if !lock::relation_if_free(oid, lock::Mode::AccessShare) {
                continue;
            }
            let index = pg_sys::index_open(oid, pg_sys::NoLock as pg_sys::LOCKMODE);
            let form = (*index).rd_index;
            let fits = (*(*index).rd_rel).relam == pg_sys::BTREE_AM_OID
                && (*form).indisvalid
                && (*form).indnkeyatts >= 1
                && *(*form).indkey.values.as_ptr() == attnum
                && pg_sys::heap_attisnull(
                    (*index).rd_indextuple,
                    pg_sys::Anum_pg_index_indpred as i32,
                    std::ptr::null_mut(),
                )
                && *(*index).rd_opfamily == ty.btree_family();
            if fits {
                let descending =
                    i32::from(*(*index).rd_indoption) & pg_sys::INDOPTION_DESC as i32 != 0;
                return Some((index, descending));
            }
            pg_sys::index_close(index, lock);
        }
        None
    }
}

/// A non-NULL datum of `ty`, copied out (the current memory context is a
/// scratch one).
unsafe fn copy_out(d: pg_sys::Datum, ty: Type) -> Value {
    // SAFETY: the datum is of `ty`, as `holds` checked: an int8 by value,
    // a uuid a pointer to 16 bytes, a numeric a varlena.
    unsafe {
        match ty {
            Type::Int8 => Value::Int8(d.value() as i64),
            Type::Uuid => Value::Uuid(*(d.cast_mut_ptr::<[u8; 16]>())),
            Type::Numeric => Value::Numeric(
                <pgrx::AnyNumeric as pgrx::FromDatum>::from_polymorphic_datum(
                    d,
                    false,
                    pg_sys::NUMERICOID,
                )
                .map(|n| n.to_string())
                .unwrap_or_default(),
            ),
        }
    }
}
