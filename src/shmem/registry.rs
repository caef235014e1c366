//! What the registry worker publishes (`bgworkers::registry`): the
//! registry's last answer, and whether the lease this server issued under
//! is gone (released here, or the registry says so), which refuses
//! generation (`mark::refused`).

use super::pid::Pid;
use snowflake_id_core::shared_text::SharedText;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};

/// Why the lease no longer covers IDs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Gone {
    /// `snowflake_release_worker_id()` ran here.
    ReleasedHere = 1,
    /// The registry says the lease was released (an operator's
    /// `release_gone`).
    ReleasedThere = 2,
    /// The registry has another holder, or no row, for the worker id.
    Lost = 3,
}

impl Gone {
    pub fn words(self) -> &'static str {
        match self {
            Gone::ReleasedHere => "released here",
            Gone::ReleasedThere => "released in the registry",
            Gone::Lost => "held there for another server, or not at all",
        }
    }
}

#[repr(C, align(64))]
pub struct RegistryState {
    pub pid: Pid,
    /// The registry's last answer, in words (the worker alone writes it).
    answer: SharedText,
    answered_at_ms: AtomicI64,
    /// 0, or a `Gone` (set once; a restart clears it).
    gone: AtomicU8,
    /// Whether the registry said the backfill worker id was another
    /// server's live one (backfills are refused while it does).
    backfill_taken: AtomicBool,
    /// This start's token (0 until first asked): the registry gives a
    /// retry of one start the 'disposable' lease it gave that start.
    token: AtomicU64,
}

impl RegistryState {
    pub const fn new() -> RegistryState {
        RegistryState {
            pid: Pid::new(),
            answer: SharedText::new(),
            answered_at_ms: AtomicI64::new(0),
            gone: AtomicU8::new(0),
            token: AtomicU64::new(0),
            backfill_taken: AtomicBool::new(false),
        }
    }

    /// The registry worker: what the registry last answered, and when.
    pub fn answered(&self, text: &str, at_ms: i64) {
        self.answer.set(text);
        self.answered_at_ms.store(at_ms, Ordering::Release);
    }

    pub fn answer(&self) -> Option<(String, i64)> {
        let at = self.answered_at_ms.load(Ordering::Acquire);
        (at != 0).then(|| (self.answer.get().unwrap_or_default(), at))
    }

    /// Marks the lease gone; whether it was gone already.
    pub fn set_gone(&self, why: Gone) -> bool {
        self.gone
            .compare_exchange(0, why as u8, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
    }

    /// This start's token: random, one per life of shared memory (a
    /// restart of the worker alone keeps it).
    pub fn start_token(&self) -> u64 {
        let mut token = self.token.load(Ordering::Acquire);
        while token == 0 {
            let mut b = [0u8; 8];
            crate::pg::process::strong_random(&mut b);
            let drawn = u64::from_le_bytes(b) >> 1;
            token = match self
                .token
                .compare_exchange(0, drawn, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => drawn,
                Err(other) => other,
            };
        }
        token
    }

    /// Sets whether the backfill worker id is taken; what it was before.
    pub fn set_backfill_taken(&self, taken: bool) -> bool {
        self.backfill_taken.swap(taken, Ordering::AcqRel)
    }

    pub fn backfill_taken(&self) -> bool {
        self.backfill_taken.load(Ordering::Acquire)
    }

    /// Whether the worker has published an answer since this start: its
    /// first try at a lease is over (a lease kept or leased is settled
    /// before it answers).
    pub fn answer_given(&self) -> bool {
        self.answered_at_ms.load(Ordering::Acquire) != 0
    }

    pub fn gone(&self) -> Option<Gone> {
        match self.gone.load(Ordering::SeqCst) {
            1 => Some(Gone::ReleasedHere),
            2 => Some(Gone::ReleasedThere),
            3 => Some(Gone::Lost),
            _ => None,
        }
    }
}
