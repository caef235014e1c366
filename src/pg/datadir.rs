//! The data directory, where the library keeps its files beside Postgres's.

use pgrx::pg_sys;
use std::path::PathBuf;

pub fn data_dir() -> PathBuf {
    // SAFETY: DataDir is set before shared memory exists and never changes.
    let dir = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) };
    PathBuf::from(dir.to_string_lossy().into_owned())
}
