//! A background worker's process id, for the status and for signals: set
//! by the worker when it starts, cleared when it exits (`bgworkers`).

use std::sync::atomic::{AtomicI32, Ordering};

#[repr(C)]
pub struct Pid(AtomicI32);

impl Pid {
    pub const fn new() -> Pid {
        Pid(AtomicI32::new(0))
    }

    /// The worker's process id, `None` while it does not run.
    pub fn get(&self) -> Option<i32> {
        Some(self.0.load(Ordering::SeqCst)).filter(|p| *p != 0)
    }

    pub fn set(&self, pid: i32) {
        self.0.store(pid, Ordering::SeqCst);
    }

    pub fn clear(&self) {
        self.0.store(0, Ordering::SeqCst);
    }
}
