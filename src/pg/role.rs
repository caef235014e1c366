//! Who the session is acting as.

use pgrx::pg_sys;

/// Postgres's functions called without pgrx's guard, which wraps every call
/// in a `sigsetjmp` (for errors that could longjmp across Rust frames): each
/// of these reads a backend global and raises no error, so nothing can
/// cross it, and the guard would cost every ID more than the read.
mod unguarded {
    unsafe extern "C" {
        pub fn GetUserId() -> pgrx::pg_sys::Oid;
    }
}

/// The current role: the session's, or the owner's of the SECURITY DEFINER
/// function running. On the path of every ID (`snowflake_lastval`'s
/// drawer).
#[inline]
pub fn current() -> pg_sys::Oid {
    // SAFETY: reads a backend global, set whenever a backend runs a query;
    // raises nothing (see `unguarded`).
    unsafe { unguarded::GetUserId() }
}

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

/// Runs `f` as `role` the way Postgres runs a table owner's code during
/// maintenance: in a security-restricted operation (no SET ROLE, no
/// temporary objects, no cursor kept past the transaction), with its own
/// level of settings in which the search path is pinned to pg_catalog (and
/// JIT is off), and
/// every setting changed meanwhile (even with a plain SET) rolled back
/// afterwards. An error restores the caller's identity and settings with
/// the (sub)transaction it aborts.
pub fn acting_as<R>(role: pg_sys::Oid, f: impl FnOnce() -> R) -> R {
    let (mut user, mut context) = (pg_sys::InvalidOid, 0);
    // SAFETY: saves and switches this backend's current user and security
    // context, as Postgres's own maintenance commands do.
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        pg_sys::SetUserIdAndSecContext(
            role,
            context
                | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32
                | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
        );
    }
    // The settings level is put back first, then the identity. No JIT: the
    // catalog reads made this way are small, and their estimated costs
    // (recursive CTEs) pass `jit_above_cost`, where compiling each node's
    // expressions took a floor's catalog read from 5 ms to 1.5 s.
    let r = super::guc::with(c"search_path", c"pg_catalog, pg_temp", || {
        super::guc::with(c"jit", c"off", f)
    });
    // SAFETY: puts back what was saved above.
    unsafe { pg_sys::SetUserIdAndSecContext(user, context) };
    r
}
