//! Returning one row from a C function declared with OUT parameters, so a
//! function can be used both as `(f(x)).col` and as `SELECT * FROM f(x)`.
//! Each value comes with the name of its OUT parameter, and the names are
//! checked against the declaration the first time a call site builds its
//! row: Rust's list and the SQL's cannot drift apart unnoticed.

use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CStr;

/// The declared OUT parameters' names, in order.
///
/// # Safety
/// `desc` must be a valid tuple descriptor.
unsafe fn names(desc: pg_sys::TupleDesc) -> Vec<String> {
    // SAFETY: a valid descriptor Postgres owns (see above); not released here.
    let desc = unsafe { pgrx::tupdesc::PgTupleDesc::from_pg_unchecked(desc) };
    desc.iter()
        .map(|a| {
            // SAFETY: an attribute's name is a NUL-terminated NameData.
            unsafe { CStr::from_ptr(a.attname.data.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// Builds the function's result row from `values`, each with the name of
/// its OUT parameter (`None` is NULL). Raises an internal error if the
/// names are not the declared ones, in order.
///
/// # Safety
/// `fcinfo` must be the call of a function whose result is a composite
/// whose columns have the types of `values`, in order; the names are
/// checked here, the types are the caller's promise.
pub unsafe fn row(
    fcinfo: pg_sys::FunctionCallInfo,
    values: &[(&str, Option<pg_sys::Datum>)],
) -> pg_sys::Datum {
    // SAFETY: `fcinfo` is the call in progress (see above); the descriptor
    // is kept in the call site's memory context, as Postgres's own
    // functions keep theirs in fn_extra.
    unsafe {
        let flinfo = (*fcinfo).flinfo;
        let mut desc = (*flinfo).fn_extra as pg_sys::TupleDesc;
        if desc.is_null() {
            let mut found: pg_sys::TupleDesc = std::ptr::null_mut();
            if pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut found)
                != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE
            {
                error!("snowflake_id: function must be declared with OUT parameters");
            }
            let declared = names(found);
            let given: Vec<&str> = values.iter().map(|(n, _)| *n).collect();
            if declared != given {
                error!("snowflake_id: the function declares the columns {declared:?}, but its code returns {given:?}");
            }
            let old = pg_sys::MemoryContextSwitchTo((*flinfo).fn_mcxt);
            desc = pg_sys::BlessTupleDesc(pg_sys::CreateTupleDescCopy(found));
            pg_sys::MemoryContextSwitchTo(old);
            (*flinfo).fn_extra = desc.cast();
        }
        let mut datums: Vec<pg_sys::Datum> = values
            .iter()
            .map(|(_, v)| v.unwrap_or(pg_sys::Datum::from(0)))
            .collect();
        let mut nulls: Vec<bool> = values.iter().map(|(_, v)| v.is_none()).collect();
        let tuple = pg_sys::heap_form_tuple(desc, datums.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::HeapTupleHeaderGetDatum((*tuple).t_data)
    }
}

/// Declares a hand-written function as using the version-1 calling
/// convention, as `PG_FUNCTION_INFO_V1` does in C.
macro_rules! finfo_v1 {
    ($finfo:ident) => {
        #[unsafe(no_mangle)]
        #[doc(hidden)]
        pub extern "C" fn $finfo() -> &'static ::pgrx::pg_sys::Pg_finfo_record {
            const V1: ::pgrx::pg_sys::Pg_finfo_record =
                ::pgrx::pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }
    };
}
pub(crate) use finfo_v1;
