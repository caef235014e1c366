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

/// The database this backend is connected to (InvalidOid in a process that
/// is connected to none).
pub fn database_id() -> pgrx::pg_sys::Oid {
    // SAFETY: set once the backend is connected, never changed.
    unsafe { pgrx::pg_sys::MyDatabaseId }
}

/// When this process last read the configuration files (at its start, then
/// at each reload it took up), in Postgres's microseconds.
pub fn reload_time() -> i64 {
    // SAFETY: a process global, written by this process alone as it
    // reloads.
    unsafe { pgrx::pg_sys::PgReloadTime }
}

/// Fills `buf` from the operating system's strong random source; false if
/// that source failed.
pub fn strong_random(buf: &mut [u8]) -> bool {
    // SAFETY: writes exactly `buf.len()` bytes into `buf`.
    unsafe { pgrx::pg_sys::pg_strong_random(buf.as_mut_ptr().cast(), buf.len()) }
}

/// Whether this server runs in `pg_upgrade`'s binary-upgrade mode.
pub fn binary_upgrade() -> bool {
    // SAFETY: set from the command line at start, never changed.
    unsafe { pgrx::pg_sys::IsBinaryUpgrade }
}

/// The port this server listens on.
pub fn server_port() -> i32 {
    // SAFETY: set from the settings at start; `port` takes effect only at a
    // restart.
    unsafe { pgrx::pg_sys::PostPortNumber }
}

/// Whether shared_preload_libraries is being loaded (the postmaster, at
/// start).
pub fn loading_preloaded_libraries() -> bool {
    // SAFETY: a flag Postgres sets while it loads shared_preload_libraries.
    unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress }
}

/// Whether this transaction may write nothing: read-only, or in parallel
/// mode (as a parallel worker, or a leader while its workers run).
pub fn read_only_transaction() -> bool {
    // SAFETY: a backend global of the current transaction.
    let read_only = unsafe { pgrx::pg_sys::XactReadOnly };
    read_only || in_parallel_mode()
}

/// Whether this transaction is in parallel mode.
pub fn in_parallel_mode() -> bool {
    // SAFETY: a backend global of the current transaction.
    unsafe { pgrx::pg_sys::IsInParallelMode() }
}

/// The effective user id of the server's processes.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid(2) cannot fail.
    unsafe { libc::geteuid() }
}

/// This host's name as gethostname(2) gives it, `None` if unreadable (or
/// cut short: a name that fills the buffer has no terminator).
pub fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer outlives the call and its length is passed.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Runs `callback(arg)` when this process exits, however it ends short of a
/// crash: the end of the session, a FATAL error, `pg_terminate_backend`
/// (Postgres's `before_shmem_exit`). A crash makes shared memory anew, so
/// what the callback would undo there is gone with it.
pub fn at_exit(callback: unsafe extern "C-unwind" fn(i32, pgrx::pg_sys::Datum), arg: usize) {
    // SAFETY: registers an exit callback of this process; Postgres calls it
    // once, with `arg`, as the process exits.
    unsafe { pgrx::pg_sys::before_shmem_exit(Some(callback), pgrx::pg_sys::Datum::from(arg)) };
}
