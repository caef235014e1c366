//! Who the session is acting as.

use pgrx::pg_sys;

/// Whether the current role is a superuser.
pub fn is_superuser() -> bool {
    // SAFETY: a catalog lookup of the current role, inside a transaction
    // (every caller is a SQL function or a hook of one).
    unsafe { pg_sys::superuser() }
}

/// Whether the current role has the privileges of `role`: is it, a member
/// of it that inherits, or a superuser (`has_privs_of_role` counts a
/// superuser as a member of every role).
pub fn acts_as(role: pg_sys::Oid) -> bool {
    // SAFETY: catalog lookups of the current role and its memberships.
    unsafe { pg_sys::has_privs_of_role(pg_sys::GetUserId(), role) }
}
