//! The claims worker's memory across restarts (`snowflake_id.claims` in
//! the data directory): a refusal it must keep through a restart, and the
//! cluster's last word on a Citus node. Restored where shared memory is
//! made, before any backend can issue.

use crate::mark;
use crate::pg::datadir::data_dir;
use crate::settings;
use crate::shmem::Shmem;
use crate::worker_id::{self};
use snowflake_id_core::claims::Memory;
use snowflake_id_core::mark::replace_file;
use snowflake_id_core::{Class, Failure};

/// This server's claims memory across restarts, in the data directory.
const CLAIMS_FILE: &str = "snowflake_id.claims";

fn memory_path() -> std::path::PathBuf {
    data_dir().join(CLAIMS_FILE)
}

/// The memory file as it is: a file damaged past reading as UTF-8 keeps
/// the lines that still parse (a refusal among them), and says so.
pub(super) fn read_memory() -> Memory {
    let bytes = match std::fs::read(memory_path()) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Memory::default(),
        Err(e) => {
            server_log!(
                "snowflake_id: could not read {}: {e}",
                memory_path().display()
            );
            return Memory::default();
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    if let std::borrow::Cow::Owned(_) = text {
        server_log!(
            "snowflake_id: {} is damaged (not UTF-8): the lines that still read are kept",
            memory_path().display()
        );
    }
    Memory::parse(&text)
}

/// A refusal of the cluster's, as remembered from the server's last run.
pub(super) fn remembered(p: Failure) -> Failure {
    Failure {
        message: format!(
            "{} (when this server last ran; the coordinator has not answered since)",
            p.message
        ),
        ..p
    }
}

/// Replaced whole (see `replace_file`): a crash leaves the old memory or
/// the new one.
pub(super) fn save_memory(m: &Memory) {
    if let Err(e) = replace_file(&data_dir(), CLAIMS_FILE, m.text().as_bytes()) {
        server_log!(
            "snowflake_id: could not write {}: {e}",
            memory_path().display()
        );
    }
}

/// Where shared memory is set up (the postmaster, at start and after a
/// crash): a server that was refusing because of a claim goes on refusing
/// until its claims worker has seen that claim go stale, so a restart does
/// not open a window for repeats.
pub fn start(shm: &Shmem) {
    if !settings::claims_kept() {
        return;
    }
    let memory = read_memory();
    // The cluster's word comes first, as in `Keeper::publish`; it stands
    // only where the worker id is still Citus's group id.
    if let Some(p) = memory.place.filter(|_| worker_id::follows_citus()) {
        shm.claims.finding().set(&remembered(p).to_text());
        mark::refuse_for_claim_at_start(shm);
        return;
    }
    if let Some(c) = memory.refused_by {
        let f = Failure::new(
            Class::NotReady,
            format!(
                "worker id {} was claimed by another live server (system identifier {}, timeline {}) when this server last ran",
                c.worker_id, c.system_identifier, c.timeline
            ),
        )
        .detail("This server issues no IDs until its claims worker sees that claim go stale.")
        .hint("Give one of the two servers another worker id and restart it.");
        shm.claims.finding().set(&f.to_text());
        mark::refuse_for_claim_at_start(shm);
    }
}
