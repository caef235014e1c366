//! What every background worker of this library does first: SIGTERM and
//! SIGHUP handled (see `pg::signals`), and its process id in shared memory
//! until it exits, cleared by one exit callback.

use crate::pg::{process, signals};
use crate::shmem::pid::Pid;
use crate::shmem::{self, Shmem};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Which worker a process is.
#[derive(Clone, Copy)]
pub(super) enum BgWorker {
    Reserver = 0,
    Claims = 1,
    Registry = 2,
}

impl BgWorker {
    fn pid(self, shm: &Shmem) -> &Pid {
        match self {
            BgWorker::Reserver => &shm.reserver_pid,
            BgWorker::Claims => &shm.claims.pid,
            BgWorker::Registry => &shm.registry.pid,
        }
    }
}

/// The start of each worker's main: SIGTERM and SIGHUP handled (see
/// `pg::signals`), and its process id published until it exits. `None`
/// where the library has no shared memory (it was not preloaded).
pub(super) fn enter(worker: BgWorker) -> Option<&'static Shmem> {
    signals::handle_signals();
    let shm = shmem::get()?;
    // The argument is which worker it is.
    process::at_exit(forget_pid, worker as usize);
    worker.pid(shm).set(process::pid());
    Some(shm)
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_pid(_code: i32, arg: pg_sys::Datum) {
    let worker = match arg.value() {
        v if v == BgWorker::Claims as usize => BgWorker::Claims,
        v if v == BgWorker::Registry as usize => BgWorker::Registry,
        _ => BgWorker::Reserver,
    };
    if let Some(shm) = shmem::get() {
        worker.pid(shm).clear();
    }
}
