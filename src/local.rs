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
