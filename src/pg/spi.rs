//! SPI, the way every statement this library runs uses it: an SPI error is
//! a Postgres error, raised where it happened.

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::{SpiError, SpiResult};

/// The value of an SPI call, or its error raised.
#[track_caller]
pub fn ok<T>(r: SpiResult<T>) -> T {
    r.unwrap_or_else(|e: SpiError| pgrx::error!("{e}"))
}

/// Runs `statement` (which may modify data) and returns the first column
/// of its first row, if any row and not NULL; an error is raised.
pub fn first_value<T: FromDatum + IntoDatum>(
    statement: &str,
    args: &[DatumWithOid<'_>],
) -> Option<T> {
    ok(Spi::connect_mut(|c| {
        let rows = c.update(statement, Some(1), args)?;
        if rows.is_empty() {
            return Ok(None);
        }
        rows.first().get_one::<T>()
    }))
}

/// Runs `statement` for its effect; an error is raised.
#[track_caller]
pub fn run(statement: &str, args: &[DatumWithOid<'_>]) {
    ok(Spi::run_with_args(statement, args))
}

/// Runs `statement`, written in the database's encoding (names in it may
/// come from the catalog, which can hold any), as SPI_execute does; its
/// result code (negative: it failed). An error in the statement is raised
/// by Postgres itself.
pub fn execute(statement: &str) -> i32 {
    let sql = std::ffi::CString::new(super::charset::to_server(statement)).unwrap_or_default();
    ok(Spi::connect_mut(|_| {
        // SAFETY: SPI is connected; the statement is NUL-terminated.
        Ok::<_, SpiError>(unsafe { pgrx::pg_sys::SPI_execute(sql.as_ptr(), false, 0) })
    }))
}

/// Runs `f` with the newest committed data as its active snapshot, for
/// read-only statements that must see what committed after the caller's
/// statement (or repeatable-read transaction) began.
pub fn with_latest_snapshot<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: a snapshot pushed and popped around `f`; an error inside
    // unwinds to an abort, which clears the stack of active snapshots.
    unsafe { pgrx::pg_sys::PushActiveSnapshot(pgrx::pg_sys::GetLatestSnapshot()) };
    let r = f();
    // SAFETY: pops the snapshot pushed above.
    unsafe { pgrx::pg_sys::PopActiveSnapshot() };
    r
}

/// Runs the read-only `query` (which may hold any name) with `args`
/// against the newest committed data, not the transaction's snapshot, and
/// hands `row` each of at most `limit` rows (0: all) until it returns
/// false. pgrx's SPI reads with the transaction's snapshot once the
/// transaction has an XID (a repeatable-read one's from its start),
/// whatever snapshot is active: data committed since would be missed. An
/// error in the statement is raised by Postgres itself.
pub fn each_of_latest_data(
    query: &str,
    args: &[DatumWithOid<'_>],
    limit: i64,
    mut row: impl FnMut(&pgrx::spi::SpiHeapTupleData<'_>) -> SpiResult<bool>,
) {
    use pgrx::pg_sys;
    let sql = std::ffi::CString::new(super::charset::to_server(query)).unwrap_or_default();
    let mut types: Vec<pg_sys::Oid> = args.iter().map(|a| a.oid()).collect();
    let mut values: Vec<pg_sys::Datum> = args
        .iter()
        .map(|a| {
            a.datum()
                .map_or(pg_sys::Datum::from(0), |d| d.sans_lifetime())
        })
        .collect();
    let nulls: Vec<std::ffi::c_char> = args
        .iter()
        .map(|a| if a.datum().is_some() { b' ' } else { b'n' } as std::ffi::c_char)
        .collect();
    ok(Spi::connect(|_| {
        // SAFETY: SPI is connected; the plan, the snapshot and the rows
        // live in SPI's memory until it disconnects, after `row` has read
        // what it keeps (copied out by FromDatum). The arrays hold one
        // entry per argument, as SPI_prepare was told.
        unsafe {
            let plan = pg_sys::SPI_prepare(sql.as_ptr(), types.len() as i32, types.as_mut_ptr());
            if plan.is_null() {
                return Err(SpiError::NoTupleTable);
            }
            let rc = pg_sys::SPI_execute_snapshot(
                plan,
                values.as_mut_ptr(),
                nulls.as_ptr(),
                pg_sys::GetLatestSnapshot(),
                std::ptr::null_mut(),
                true,
                false,
                limit,
            );
            let table = pg_sys::SPI_tuptable;
            if rc != pg_sys::SPI_OK_SELECT as i32 || table.is_null() {
                return Err(SpiError::NoTupleTable);
            }
            for i in 0..pg_sys::SPI_processed as usize {
                let tuple = *(*table).vals.add(i);
                if let Some(data) = pgrx::spi::SpiHeapTupleData::new((*table).tupdesc, tuple)? {
                    if !row(&data)? {
                        break;
                    }
                }
            }
            Ok(())
        }
    }))
}

/// The `int8` in the first column of the first row of `query` (in the
/// database's encoding), read from the newest committed data, not the
/// transaction's snapshot; `Some(None)` where there is no row or it is
/// NULL, `None` where the query cannot be planned. The query's first column
/// must be an `int8` (another type's datum would be read as one: a wrong
/// number, not a crash, as it is passed by value).
pub fn int8_of_latest_data(query: &std::ffi::CStr) -> Option<Option<i64>> {
    use pgrx::pg_sys;
    Spi::connect(|_| {
        // SAFETY: SPI is connected; the plan, the snapshot and the result
        // live in SPI's memory until it disconnects, after the value is
        // copied out (an int8 is passed by value).
        unsafe {
            let plan = pg_sys::SPI_prepare(query.as_ptr(), 0, std::ptr::null_mut());
            if plan.is_null() {
                return None;
            }
            let rc = pg_sys::SPI_execute_snapshot(
                plan,
                std::ptr::null_mut(),
                std::ptr::null(),
                pg_sys::GetLatestSnapshot(),
                std::ptr::null_mut(),
                true,
                false,
                1,
            );
            let table = pg_sys::SPI_tuptable;
            if rc != pg_sys::SPI_OK_SELECT as i32 || table.is_null() || pg_sys::SPI_processed == 0 {
                return Some(None);
            }
            let mut null = false;
            let d = pg_sys::SPI_getbinval(*(*table).vals, (*table).tupdesc, 1, &mut null);
            Some((!null).then(|| d.value() as i64))
        }
    })
}
