//! Returning one row from a C function declared with OUT parameters, so a
//! function can be used both as `(f(x)).col` and as `SELECT * FROM f(x)`.

use pgrx::pg_sys;
use pgrx::prelude::*;

/// Builds the function's result row from `values` (`None` is NULL).
///
/// # Safety
/// `fcinfo` must be the call of a function whose result is a composite
/// matching `values` in number and types.
pub unsafe fn row(
    fcinfo: pg_sys::FunctionCallInfo,
    values: &[Option<pg_sys::Datum>],
) -> pg_sys::Datum {
    unsafe {
        let flinfo = (*fcinfo).flinfo;
        // The blessed descriptor is built once per call site and kept with it.
        let mut desc = (*flinfo).fn_extra as pg_sys::TupleDesc;
        if desc.is_null() {
            let mut found: pg_sys::TupleDesc = std::ptr::null_mut();
            if pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut found)
                != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE
            {
                error!("snowflake_id: function must be declared with OUT parameters");
            }
            let old = pg_sys::MemoryContextSwitchTo((*flinfo).fn_mcxt);
            desc = pg_sys::BlessTupleDesc(pg_sys::CreateTupleDescCopy(found));
            pg_sys::MemoryContextSwitchTo(old);
            (*flinfo).fn_extra = desc.cast();
        }
        let mut datums: Vec<pg_sys::Datum> = values
            .iter()
            .map(|v| v.unwrap_or(pg_sys::Datum::from(0)))
            .collect();
        let mut nulls: Vec<bool> = values.iter().map(Option::is_none).collect();
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
