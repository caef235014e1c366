//! The depth map of backfilled IDs (see `snowflake_id_core::backfill`),
//! under a lock of its own: a lease is made durable (a file's fsync, a WAL
//! flush) while it is held, and live IDs must never wait for that.
//! Written by `backfill` alone, but for another server's claim on the
//! backfill worker id, which the claims worker publishes.

use crate::pg::lock::SharedLock;
use snowflake_id_core::backfill::Depths;
use snowflake_id_core::shared_text::SharedText;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

#[repr(C)]
pub struct BackfillState {
    lock: SharedLock,
    depths: UnsafeCell<Depths>,
    /// Whether the state file could not be read at start: backfills are
    /// refused, since what was handed out is unknown.
    damaged: AtomicBool,
    /// Leases made durable since start.
    pub leases: AtomicU64,
    /// Another live server's claim on the backfill worker id, as the
    /// claims worker found it (empty: none): backfills are refused while
    /// it stands. Written by the claims worker alone.
    pub claimed_by_another: SharedText,
    /// The backfill worker id the claims worker last judged the claims on
    /// (`NONE`: none): a backfill under another waits for it.
    judged: AtomicU32,
}

const NONE: u32 = u32::MAX;

// SAFETY: `depths` is only touched under `lock` (`with_map`).
unsafe impl Sync for BackfillState {}
// A panic never leaves the map half-raised where it matters: every change
// only raises depths, so any state one leaves is safe to go on from.
impl std::panic::RefUnwindSafe for BackfillState {}

impl BackfillState {
    pub fn new(lock: SharedLock) -> BackfillState {
        BackfillState {
            lock,
            depths: UnsafeCell::new(Depths::default()),
            damaged: AtomicBool::new(false),
            leases: AtomicU64::new(0),
            claimed_by_another: SharedText::new(),
            judged: AtomicU32::new(NONE),
        }
    }

    /// Runs `f` on the map, holding its lock.
    pub fn with_map<R>(&self, f: impl FnOnce(&mut Depths) -> R) -> R {
        self.lock.exclusive(|| {
            // SAFETY: the lock is held, so no other process touches the map.
            f(unsafe { &mut *self.depths.get() })
        })
    }

    pub fn damaged(&self) -> bool {
        self.damaged.load(Ordering::Acquire)
    }

    /// The backfill worker id the claims on it were last judged for.
    pub fn judged(&self) -> Option<u32> {
        Some(self.judged.load(Ordering::Acquire)).filter(|&w| w != NONE)
    }

    pub fn set_judged(&self, worker: Option<u32>) {
        self.judged.store(worker.unwrap_or(NONE), Ordering::Release);
    }

    pub fn set_damaged(&self) {
        self.damaged.store(true, Ordering::Release);
    }
}
