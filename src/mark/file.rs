//! The state file, `snowflake_id.state` in the data directory: where the
//! mark outlives shared memory (see `snowflake_id_core::mark`).

use snowflake_id_core::mark::MarkFile;
use snowflake_id_core::{Class, Failure};

pub(super) fn file() -> MarkFile {
    MarkFile::in_dir(crate::pg::datadir::data_dir())
}

pub(super) fn io_failure(what: &str, e: std::io::Error) -> Failure {
    Failure::new(Class::Io, format!("could not {what} the durable state file \"{}\": {e}", file().path().display()))
        .hint("Check the data directory's disk space and permissions; no ID is issued until the state can be written.")
}
