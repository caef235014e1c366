//! The backfill map's state file, `snowflake_id.backfill` in the data
//! directory: written whole (see `snowflake_id_core::mark::replace_file`)
//! by every lease and every replayed one.

use snowflake_id_core::backfill::{Depths, FILE_NAME};
use snowflake_id_core::mark::replace_file;
use snowflake_id_core::{Class, Failure};
use std::io;
use std::path::PathBuf;

/// Where the file is.
pub(super) fn path() -> PathBuf {
    crate::pg::datadir::data_dir().join(FILE_NAME)
}

pub(super) fn io_failure(what: &str, e: io::Error) -> Failure {
    Failure::new(
        Class::Io,
        format!("could not {what} the backfill state file \"{}\": {e}", path().display()),
    )
    .hint("Check the data directory's disk space and permissions; no backfilled ID is handed out until the file can be written.")
}

/// The map the file holds; `None` where there is none (a server that never
/// backfilled), or why it cannot be read.
pub(super) fn read() -> Result<Option<Depths>, String> {
    match std::fs::read(path()) {
        Ok(bytes) => Depths::decode(&bytes).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Writes the map, durably, over the file.
pub(super) fn write(map: &Depths) -> io::Result<()> {
    replace_file(&crate::pg::datadir::data_dir(), FILE_NAME, &map.encode())
}
