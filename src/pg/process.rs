//! Values private to one Postgres process.
//!
//! Postgres runs every backend and worker as its own process, and calls into
//! this library from that process's one thread. A `static` is therefore
//! already private to one caller; `thread_local!` would add a TLS lookup
//! (a function call in a shared library) to every ID for nothing.

/// A value private to the calling process; see the module documentation.
pub struct ProcessLocal<T>(pub T);

// SAFETY: Postgres calls into the library from one thread per process
// (pgrx's own guards assume the same), so the value is never shared
// between threads.
unsafe impl<T> Sync for ProcessLocal<T> {}

/// Ends this process the way a background worker ends: status 1 has the
/// postmaster start it again after its restart time, 0 does not.
// proc_exit returns `!` from PostgreSQL 18 on, `()` before.
#[allow(unreachable_code)]
pub fn exit(status: i32) -> ! {
    // SAFETY: the normal way out of a background worker: runs the exit
    // callbacks and never returns.
    unsafe { pgrx::pg_sys::proc_exit(status) };
    unreachable!("proc_exit returns not")
}

/// This process's id.
pub fn pid() -> i32 {
    // SAFETY: set once when the process starts.
    unsafe { pgrx::pg_sys::MyProcPid }
}
