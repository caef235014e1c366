//! A `bigint[]` result made in one allocation: pgrx's own conversion of a
//! `Vec<i64>` adds the elements one by one through Postgres's array
//! builder, which costs more per element than making the IDs did.

use pgrx::callconv::{BoxRet, FcInfo};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// A one-dimensional `bigint[]` without NULLs, lower bound 1.
pub struct Int8Array(pub Vec<i64>);

/// Bytes before the elements of a one-dimensional array without a NULL
/// bitmap: the header, one dimension and one lower bound, MAXALIGNed (as
/// `ARR_OVERHEAD_NONULLS(1)` in Postgres's array.h).
const OVERHEAD: usize = (std::mem::size_of::<pg_sys::ArrayType>() + 2 * 4).next_multiple_of(8);

impl IntoDatum for Int8Array {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        let n = self.0.len();
        if n == 0 {
            // SAFETY: Postgres's own empty array of the type.
            return Some(pg_sys::Datum::from(unsafe {
                pg_sys::construct_empty_array(pg_sys::INT8OID)
            }));
        }
        let total = OVERHEAD + n * 8;
        // SAFETY: a zeroed allocation of `total` bytes in the current memory
        // context, filled as array.h lays an array out: the varlena length,
        // ndim 1, no NULL bitmap (dataoffset 0), the element type, then the
        // dimension and lower bound, then the 8-byte elements at OVERHEAD
        // (which is MAXALIGNed, as int8's alignment needs).
        unsafe {
            let a = pg_sys::palloc0(total) as *mut pg_sys::ArrayType;
            pgrx::varlena::set_varsize_4b(a.cast(), i32::try_from(total).ok()?);
            (*a).ndim = 1;
            (*a).dataoffset = 0;
            (*a).elemtype = pg_sys::INT8OID;
            let dims = (a as *mut u8).add(std::mem::size_of::<pg_sys::ArrayType>()) as *mut i32;
            *dims = i32::try_from(n).ok()?;
            *dims.add(1) = 1;
            let data = (a as *mut u8).add(OVERHEAD) as *mut i64;
            std::ptr::copy_nonoverlapping(self.0.as_ptr(), data, n);
            Some(pg_sys::Datum::from(a))
        }
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::INT8ARRAYOID
    }
}

// SAFETY: returned the way pgrx returns its own values, through IntoDatum.
unsafe impl BoxRet for Int8Array {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> pgrx::datum::Datum<'fcx> {
        match self.into_datum() {
            // SAFETY: an array datum, made in the call's memory context.
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}

pgrx::impl_sql_translatable!(Int8Array, "bigint[]");
