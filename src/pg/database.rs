//! Databases by OID and by name, as the catalog has them.

use pgrx::pg_sys;
use std::ffi::CStr;

/// The name of database `oid`, `None` where there is none (dropped
/// meanwhile). A catalog lookup: in a backend, within a transaction.
pub fn name(oid: pg_sys::Oid) -> Option<String> {
    // SAFETY: a syscache lookup, NULL for an OID no database has.
    let p = unsafe { pg_sys::get_database_name(oid) };
    if p.is_null() {
        return None;
    }
    // SAFETY: a palloc'd NUL-terminated name, not NULL (above).
    let name = unsafe { CStr::from_ptr(p) };
    Some(name.to_string_lossy().into_owned())
}

/// The OID of the database named `name` (in the server's encoding), if
/// there is one.
pub fn oid_by_name(name: &std::ffi::CStr) -> Option<pg_sys::Oid> {
    // SAFETY: a NUL-terminated name; missing_ok, so a name not found is
    // InvalidOid rather than an error.
    let oid = unsafe { pg_sys::get_database_oid(name.as_ptr(), true) };
    (oid != pg_sys::InvalidOid).then_some(oid)
}

/// The name of this backend's database, for messages (empty if it was
/// dropped meanwhile).
pub fn current_name() -> String {
    name(crate::pg::process::database_id()).unwrap_or_default()
}
