//! Counts for the status: rare events in shared atomics (each at most once
//! per tick, per wait, per write or per error, so sharing costs nothing),
//! and the IDs issued, one cache line per process (so the hot path never
//! writes a line another process writes).

use crate::pg::process::ProcessLocal;
use pgrx::pg_sys;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Each counter is added to by one place in the shell, named beside it.
#[repr(C)]
#[derive(Default)]
pub struct Counters {
    /// Ticks borrowed from the future (issue).
    pub borrowed_ticks: AtomicU64,
    /// The furthest the time inside an issued ID ran ahead of the clock, ms (issue).
    pub largest_lead_ms: AtomicU64,
    /// Backward steps of the system clock, and the largest (the reserver).
    pub clock_steps_back: AtomicU64,
    pub largest_step_back_ms: AtomicU64,
    /// Waits of callers for the clock, and their time (issue).
    pub waits: AtomicU64,
    pub wait_us: AtomicU64,
    /// Calls that raised an error (issue).
    pub errors: AtomicU64,
    /// Marks written by the reserver, and by callers (mark).
    pub reserver_writes: AtomicU64,
    pub caller_writes: AtomicU64,
    /// Mark records replayed from WAL since start: crash recovery, a
    /// standby, archive recovery (mark::redo).
    pub marks_replayed: AtomicU64,
    /// Waits for a synchronous standby to confirm a mark, and their time (mark).
    pub standby_waits: AtomicU64,
    pub standby_wait_us: AtomicU64,
    /// Issued by a process with no slot of its own; stays 0 (issue).
    pub unslotted_issued: AtomicU64,
}

/// IDs issued by the process owning this slot.
#[repr(C, align(64))]
#[derive(Default)]
pub struct Slot {
    issued: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 64);

/// The per-process slots, which follow the shared state in memory.
pub struct Slots<'a> {
    pub(super) slots: &'a [Slot],
}

impl Slots<'_> {
    /// The slot of the calling process, found once and remembered.
    #[inline]
    fn mine(&self) -> Option<&Slot> {
        static MINE: ProcessLocal<Cell<*const Slot>> = ProcessLocal(Cell::new(std::ptr::null()));
        let cached = MINE.0.get();
        if !cached.is_null() {
            // SAFETY: points into the slot array, which never moves.
            return Some(unsafe { &*cached });
        }
        // SAFETY: MyProc is an element of ProcGlobal->allProcs in every
        // process with a PGPROC; the index is checked below.
        let index = unsafe {
            let me = pg_sys::MyProc;
            if me.is_null() {
                return None;
            }
            let base = (*pg_sys::ProcGlobal).allProcs;
            (me as usize - base as usize) / std::mem::size_of::<pg_sys::PGPROC>()
        };
        let slot = self.slots.get(index)? as *const Slot;
        MINE.0.set(slot);
        // SAFETY: as above.
        Some(unsafe { &*slot })
    }

    /// Counts `n` IDs issued by the calling process.
    #[inline]
    pub fn count_issued(&self, counters: &Counters, n: u64) {
        match self.mine() {
            // Only this process writes its slot: no atomic read-modify-write needed.
            Some(s) => s
                .issued
                .store(s.issued.load(Ordering::Relaxed) + n, Ordering::Relaxed),
            None => {
                counters.unslotted_issued.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// IDs issued since shared memory was last set up.
    pub fn issued(&self, counters: &Counters) -> u64 {
        self.slots
            .iter()
            .map(|s| s.issued.load(Ordering::Relaxed))
            .sum::<u64>()
            + counters.unslotted_issued.load(Ordering::Relaxed)
    }
}
