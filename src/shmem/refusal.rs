//! Whether generation is refused, and why: the one place a refusal is kept.
//! The mark sets and lifts its own reasons (`mark`); the claims worker sets
//! and lifts a claim's (`mark::refuse_for_claim`, which also revokes the
//! durable window). What the error says is worked out where it is raised.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// Why the mark refuses generation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum MarkRefusal {
    /// The state file does not fit the settings, or cannot be read: found
    /// at start, or after a mark made under other settings was replayed.
    /// The state file says why, whenever asked.
    StateFile = 1,
    /// A mark record in WAL could not be read.
    UnreadableRecord = 2,
}

#[repr(C)]
pub struct Refusal {
    /// A `MarkRefusal`, 0 while none.
    mark: AtomicU8,
    /// Another live server claims this server's worker id, and this one is
    /// the one to stop. Sequentially consistent with the revocation of the
    /// durable window (see `mark::publish`).
    claim: AtomicBool,
}

impl Refusal {
    pub const fn new() -> Refusal {
        Refusal {
            mark: AtomicU8::new(0),
            claim: AtomicBool::new(false),
        }
    }

    pub fn mark(&self) -> Option<MarkRefusal> {
        match self.mark.load(Ordering::Acquire) {
            1 => Some(MarkRefusal::StateFile),
            2 => Some(MarkRefusal::UnreadableRecord),
            _ => None,
        }
    }

    pub fn refuse_mark(&self, why: MarkRefusal) {
        self.mark.store(why as u8, Ordering::Release);
    }

    /// Lifts the mark's refusal (a new state was adopted).
    pub fn lift_mark(&self) {
        self.mark.store(0, Ordering::Release);
    }

    pub fn claim(&self) -> bool {
        self.claim.load(Ordering::SeqCst)
    }

    /// Sets or lifts the claim's refusal; returns whether it was set.
    pub fn set_claim(&self, refused: bool) -> bool {
        self.claim.swap(refused, Ordering::SeqCst)
    }
}
