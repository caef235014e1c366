//! The worker id generation uses. Known where shared memory is made when
//! the settings name it; with `worker_id_source = 'citus'`, settled by the
//! first call that reads this node's group id, and changed only when Citus
//! gives the node another group while it runs (added again, a clone
//! promoted): the claims worker follows it. Written by `worker_id` alone
//! (a source rule checks it); everyone may read it.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Not known yet. Outside every layout's worker ids, which fit 32 bits.
const UNKNOWN: u64 = u64::MAX;

pub struct WorkerId {
    value: AtomicU64,
    /// Until when calls wait for the claims worker to settle it (ms since
    /// 1970), from the worker's own start; 0 before the worker started.
    wait_until_ms: AtomicI64,
}

impl WorkerId {
    pub const fn new() -> WorkerId {
        WorkerId {
            value: AtomicU64::new(UNKNOWN),
            wait_until_ms: AtomicI64::new(0),
        }
    }

    /// The worker id, once known. Acquire, paired with `follow`: a caller
    /// that sees a moved id sees the refusal published before the move.
    #[inline]
    pub fn get(&self) -> Option<u32> {
        match self.value.load(Ordering::Acquire) {
            UNKNOWN => None,
            w => Some(w as u32),
        }
    }

    /// Where shared memory is made: the id the settings name, if they do.
    pub fn set_at_start(&self, worker: Option<u32>) {
        self.value
            .store(worker.map_or(UNKNOWN, u64::from), Ordering::Relaxed);
    }

    /// Settles the id read after start. The first to settle it wins; a
    /// different id read later is handed back as `Err(the id in force)`:
    /// an id never changes under a running generator.
    pub fn settle(&self, worker: u32) -> Result<(), u32> {
        match self.value.compare_exchange(
            UNKNOWN,
            u64::from(worker),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => Ok(()),
            Err(w) if w == u64::from(worker) => Ok(()),
            Err(w) => Err(w as u32),
        }
    }

    /// Moves a settled id from `old` to `new` (Citus gave the node another
    /// group); whether it moved. IDs drawn from then on carry `new`.
    pub fn follow(&self, old: u32, new: u32) -> bool {
        self.value
            .compare_exchange(
                u64::from(old),
                u64::from(new),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// The claims worker, as it starts (after recovery): calls wait for it
    /// to settle the id until `until_ms`.
    pub fn wait_until(&self, until_ms: i64) {
        self.wait_until_ms.store(until_ms, Ordering::Relaxed);
    }

    /// Until when calls wait, if the claims worker has started.
    pub fn waits_until(&self) -> Option<i64> {
        Some(self.wait_until_ms.load(Ordering::Relaxed)).filter(|t| *t > 0)
    }
}
