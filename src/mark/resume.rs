//! Where generation resumes at a start (the core's `resume` decides): the
//! mark read from the state file where shared memory is made (the
//! postmaster, at start and after a crash), and floored once recovery is
//! over, when a copy of another server's data shows.

use super::file::{file, io_failure};
use crate::pg::error;
use crate::pg::xlog;
use crate::settings;
use crate::shmem::mark::MarkSource;
use crate::shmem::Shmem;
use pgrx::PgLogLevel;
use snowflake_id_core::config::Config;
use snowflake_id_core::generator::Limits;
use snowflake_id_core::layout::Layout;
use snowflake_id_core::mark::Ceiling;
use snowflake_id_core::resume::{self, Origin, Resume};

/// The recovery files a server can start with, one bit each.
const RECOVERY_FILES: [&str; 3] = ["standby.signal", "recovery.signal", "backup_label"];

/// What the state file holds, decided against the settings.
pub(super) fn decide(cfg: &Config) -> Resume {
    let file = file();
    match file.read() {
        Ok(stored) => resume::decide(
            &stored,
            &cfg.layout,
            cfg.worker.fixed(),
            &file.path().to_string_lossy(),
        ),
        Err(e) => Resume::Refused(io_failure("read", e)),
    }
}

/// Sets up the generator from the state file. Runs where shared memory is
/// made: in the postmaster at start and after a crash of any backend.
pub fn at_start(shm: &Shmem) {
    // Read before the startup process renames backup_label or removes the
    // signal files: they are how a copy of another server's data shows.
    let dir = crate::pg::datadir::data_dir();
    let files = RECOVERY_FILES
        .iter()
        .enumerate()
        .filter(|(_, f)| dir.join(f).exists())
        .fold(0u8, |bits, (i, _)| bits | 1 << i);
    shm.mark.set_recovery_files(files);
    let cfg = match settings::config() {
        Ok(cfg) => cfg,
        Err(f) => {
            // Settings problems are raised on use; the log hears of them now.
            error::log(
                f.detail("snowflake_id will not issue IDs until this is fixed."),
                PgLogLevel::WARNING,
            );
            return;
        }
    };
    let s = cfg.layout.sequence_bits();
    match decide(cfg) {
        Resume::Fresh => shm.gen.reset(None, s),
        Resume::Continue { rec, worker_was } => {
            shm.gen.reset(Some(rec.mark_tick), s);
            // Settings that changed refuse in decide(): the term is of these.
            shm.gen.continue_with(rec.continue_term);
            restore_ceiling(shm, &cfg.layout, rec.ceiling);
            shm.mark.note(&rec, MarkSource::StateFile);
            if let (Some(was), Some(now)) = (worker_was, cfg.worker.fixed()) {
                server_log!("snowflake_id: worker id changed from {was} to {now}; new IDs continue above every ID issued before");
            }
        }
        Resume::Refused(f) => {
            shm.gen.reset(None, s);
            shm.refusal.refuse_at_start(&f);
            error::log(f, PgLogLevel::WARNING);
        }
    }
}

/// Whether this start is of a copy of another server's data directory (a
/// restored base backup, a standby), as its recovery files said at start.
pub fn started_as_copy(shm: &Shmem) -> bool {
    shm.mark.recovery_files() != 0
}

/// Runs once per server start, before the first mark is written: if the
/// data is a copy of another server's, puts the generator above what the
/// copy may hold and says so in the log. Call holding the mark's lock,
/// after recovery.
pub(super) fn floor_if_copied(shm: &Shmem, cfg: &Config, lim: &Limits) {
    if shm.mark.copy_checked() {
        return;
    }
    let (system_id, timeline) = xlog::origin();
    let bits = shm.mark.recovery_files();
    let files: Vec<&str> = RECOVERY_FILES
        .iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, f)| *f)
        .collect();
    let origin = Origin {
        system_id,
        timeline,
        recovery_files: &files,
        mark: shm.mark.tick().map(|_| shm.mark.origin()),
        replayed_marks: shm
            .counters
            .marks_replayed
            .load(std::sync::atomic::Ordering::Relaxed),
        latest_xtime_ms: xlog::latest_replayed_commit_ms(),
    };
    let floor = resume::after_copy(&cfg.layout, lim.lead_ticks, &origin);
    if let Some(tick) = floor.floor_tick {
        shm.gen.raise_floor(tick, lim.sequence_bits);
    }
    if let Some(note) = floor.note {
        server_log!("snowflake_id: {note}");
    }
    shm.mark.set_copy_checked();
}

/// The ceiling of set-aside copied IDs a durable mark carries (none lifts
/// it): call under the mark's lock, or where nothing else runs yet.
pub fn restore_ceiling(shm: &Shmem, layout: &Layout, c: Ceiling) {
    let why = snowflake_id_core::copies::unsettled(layout, c.tick, c.database);
    shm.refusal.restore_ceiling(c, &why);
}
