//! The worker id this server leased from the registry, in its file
//! (`snowflake_id.worker_lease` in the data directory) and in WAL: written
//! and flushed before the first ID under it, so that a restart keeps it
//! without asking the registry, and a standby, a base backup or a
//! point-in-time restore of this server keeps it too (their system
//! identifier is this cluster's). A copy into another cluster has another
//! identifier and leases its own. Written through `mark::keep_worker_lease`
//! (WAL, then this file), replayed by `redo`.

use snowflake_id_core::mark::replace_file;
use snowflake_id_core::registry::{Lease, FILE_NAME};
use snowflake_id_core::{Class, Failure};
use std::io;

fn io_failure(what: &str, e: io::Error) -> Failure {
    Failure::new(
        Class::Io,
        format!(
            "could not {what} the worker lease file \"{}\": {e}",
            crate::pg::datadir::data_dir().join(FILE_NAME).display()
        ),
    )
    .hint("Check the data directory's disk space and permissions; no ID is issued under a lease until its file is written.")
}

/// The lease the file holds; `None` where there is none (never leased).
pub fn read() -> Result<Option<Lease>, Failure> {
    match std::fs::read(crate::pg::datadir::data_dir().join(FILE_NAME)) {
        Ok(bytes) => Lease::decode(&bytes).map(Some).map_err(|why| {
            Failure::new(
                Class::Corrupted,
                format!("the worker lease file \"{FILE_NAME}\" cannot be read: {why}"),
            )
            .hint("Move the file aside (the registry still holds this server's lease: with the 'keep' policy it is handed back at the next lease), then restart PostgreSQL.")
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_failure("read", e)),
    }
}

/// Writes the lease's bytes over its file, durably (the caller logged
/// them to WAL first, or replays them).
pub(super) fn write_file(bytes: &[u8]) -> Result<(), Failure> {
    replace_file(&crate::pg::datadir::data_dir(), FILE_NAME, bytes)
        .map_err(|e| io_failure("write", e))
}
