//! A table's values read at the storage level: no statement, so no
//! planner, no privilege check, no row-level security policy, and no code
//! any role wrote (an index's predicate or expression, a statistics
//! object) runs. What reads a table on the server's own behalf uses it
//! where the table's owner could otherwise make the read fail or wait.

use pgrx::pg_sys;

/// A column's value in one row, as the heap holds it (valid only while
/// the row is handed over: copy out what is kept).
pub enum Value {
    Int8(i64),
    Uuid([u8; 16]),
    /// A number's text, as `numeric_out` writes it (`NaN`, `Infinity`
    /// included).
    Numeric(String),
}

/// The type of a column to read, at bottom (a domain's base).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Int8,
    Uuid,
    Numeric,
}

/// Hands `each` the value of column `attnum` of table `rel` in every row
/// the newest committed data holds (never a NULL). The table is locked
/// ACCESS SHARE for the read, as every reader locks it.
pub fn each_value(rel: pg_sys::Oid, attnum: i16, ty: Type, mut each: impl FnMut(Value)) {
    // SAFETY: the table is opened and locked, and the scan, the slot and
    // the snapshot are released in the order they were taken; an error
    // (from `each` or the scan) aborts the transaction, whose resource
    // owner releases them. Each value is read from the slot's current row
    // before the next is fetched, in a memory context reset per row.
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let relation = pg_sys::table_open(rel, lock);
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
        // 19 takes ScanOptions beyond a plain sequential scan's: none here.
        #[cfg(not(feature = "pg19"))]
        let scan = pg_sys::table_beginscan(relation, snapshot, 0, std::ptr::null_mut());
        #[cfg(feature = "pg19")]
        let scan = pg_sys::table_beginscan(relation, snapshot, 0, std::ptr::null_mut(), 0);
        let slot = pg_sys::table_slot_create(relation, std::ptr::null_mut());
        let per_row = pg_sys::AllocSetContextCreateExtended(
            pg_sys::CurrentMemoryContext,
            c"snowflake_id scan".as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        while pg_sys::table_scan_getnextslot(
            scan,
            pg_sys::ScanDirection::ForwardScanDirection,
            slot,
        ) {
            pgrx::check_for_interrupts!();
            let mut null = false;
            let d = pg_sys::slot_getattr(slot, i32::from(attnum), &mut null);
            if null {
                continue;
            }
            let outer = pg_sys::MemoryContextSwitchTo(per_row);
            let value = match ty {
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
            };
            pg_sys::MemoryContextSwitchTo(outer);
            pg_sys::MemoryContextReset(per_row);
            each(value);
        }
        pg_sys::MemoryContextDelete(per_row);
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::table_endscan(scan);
        pg_sys::UnregisterSnapshot(snapshot);
        pg_sys::table_close(relation, lock);
    }
}
