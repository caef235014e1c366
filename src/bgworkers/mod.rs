//! The library's background workers, on one skeleton: the reserver, which
//! keeps the durable mark ahead (`reserver`), and the claims worker, which
//! keeps this server's worker-id claim where other servers see it
//! (`claims`). Each enters the same way: signals handled, its process id in
//! shared memory until it exits.

pub mod claims;
pub mod reserver;

use crate::pg::{process, signals};
use crate::shmem::pid::Pid;
use crate::shmem::{self, Shmem};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Registers the workers. Call from `_PG_init` while
/// `shared_preload_libraries` is being processed.
pub fn register() {
    reserver::register();
    claims::register();
}

/// Which worker a process is.
#[derive(Clone, Copy)]
enum Worker {
    Reserver = 0,
    Claims = 1,
}

impl Worker {
    fn pid(self, shm: &Shmem) -> &Pid {
        match self {
            Worker::Reserver => &shm.reserver_pid,
            Worker::Claims => &shm.claims.pid,
        }
    }
}

/// The start of each worker's main: SIGTERM and SIGHUP handled (see
/// `pg::signals`), and its process id published until it exits. `None`
/// where the library has no shared memory (it was not preloaded).
fn enter(worker: Worker) -> Option<&'static Shmem> {
    signals::handle_signals();
    let shm = shmem::get()?;
    // SAFETY: registering an exit callback in this process; the argument
    // is which worker it is.
    unsafe { pg_sys::before_shmem_exit(Some(forget_pid), pg_sys::Datum::from(worker as usize)) };
    worker.pid(shm).set(process::pid());
    Some(shm)
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_pid(_code: i32, arg: pg_sys::Datum) {
    let worker = if arg.value() == Worker::Claims as usize {
        Worker::Claims
    } else {
        Worker::Reserver
    };
    if let Some(shm) = shmem::get() {
        worker.pid(shm).clear();
    }
}
