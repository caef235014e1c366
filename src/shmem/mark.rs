//! What shared memory knows of the durable mark. Written only by `mark`
//! (under `with_lock`, but for the standby wait's start), read by the
//! status: the newest mark, where it came from, where it was logged.

use crate::pg::lock::SharedLock;
use snowflake_id_core::live_history::LiveHistory;
use snowflake_id_core::mark::Record;
use std::cell::UnsafeCell;
use std::sync::atomic::{fence, AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};

const NO_MARK: u64 = u64::MAX;

/// Where the newest mark came from.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MarkSource {
    None = 0,
    StateFile = 1,
    WalReplay = 2,
    WrittenHere = 3,
}

impl MarkSource {
    fn of(v: u8) -> MarkSource {
        match v {
            1 => MarkSource::StateFile,
            2 => MarkSource::WalReplay,
            3 => MarkSource::WrittenHere,
            _ => MarkSource::None,
        }
    }

    pub fn label(self) -> Option<&'static str> {
        match self {
            MarkSource::None => None,
            MarkSource::StateFile => Some("state file"),
            MarkSource::WalReplay => Some("WAL replay"),
            MarkSource::WrittenHere => Some("written here"),
        }
    }
}

#[repr(C)]
pub struct MarkState {
    /// Serialises moves of the mark (a tranche lock of this library's own).
    lock: SharedLock,
    /// Generation number of the newest mark (0 before the first).
    generation: AtomicU64,
    /// The newest mark (a tick), `NO_MARK` before the first.
    tick: AtomicU64,
    written_at_ms: AtomicI64,
    /// The server the newest mark belongs to (0 when unknown) and where
    /// this server learnt it.
    system_id: AtomicU64,
    timeline: AtomicU32,
    source: AtomicU8,
    /// End of the last mark record this server wrote to WAL (0: none yet).
    logged_lsn: AtomicU64,
    /// Since when (Unix ms) a written mark has been waiting for a
    /// synchronous standby's confirmation; 0 when none is.
    standby_wait_since_ms: AtomicI64,
    /// Recovery files found in the data directory at start, one bit each.
    recovery_files: AtomicU8,
    /// Whether the check for copied data has run since start.
    copy_checked: AtomicBool,
    /// The live worker ids of the newest mark, which a backfill reads at
    /// each call: written under `lock`, read without it, a sequence lock
    /// (odd `history_seq` while a write is under way) so that a backfill
    /// never waits for a mark's fsync.
    history_seq: AtomicU64,
    history: UnsafeCell<LiveHistory>,
}

// SAFETY: `history` is written only under `lock`, and read through the
// sequence lock (`history`), which retries a copy a write overlapped.
unsafe impl Sync for MarkState {}
// A history is replaced whole; a panic leaves the old one or the new.
impl std::panic::RefUnwindSafe for MarkState {}

impl MarkState {
    pub fn new(lock: SharedLock) -> MarkState {
        MarkState {
            lock,
            generation: AtomicU64::new(0),
            tick: AtomicU64::new(NO_MARK),
            written_at_ms: AtomicI64::new(0),
            system_id: AtomicU64::new(0),
            timeline: AtomicU32::new(0),
            source: AtomicU8::new(MarkSource::None as u8),
            logged_lsn: AtomicU64::new(0),
            standby_wait_since_ms: AtomicI64::new(0),
            recovery_files: AtomicU8::new(0),
            copy_checked: AtomicBool::new(false),
            history_seq: AtomicU64::new(0),
            history: UnsafeCell::new(LiveHistory::default()),
        }
    }

    /// Runs `f` holding the lock that serialises moves of the mark.
    pub fn with_lock<R>(&self, f: impl FnOnce() -> R) -> R {
        self.lock.exclusive(f)
    }

    /// Notes `rec` as the newest mark known, learnt from `source`.
    pub fn note(&self, rec: &Record, source: MarkSource) {
        self.generation.store(rec.generation, Ordering::Relaxed);
        self.tick.store(rec.mark_tick, Ordering::Relaxed);
        self.written_at_ms
            .store(rec.written_at_ms, Ordering::Relaxed);
        self.system_id.store(rec.system_id, Ordering::Relaxed);
        self.timeline.store(rec.timeline, Ordering::Relaxed);
        self.source.store(source as u8, Ordering::Relaxed);
        self.set_history(rec.history);
    }

    /// Sets the live worker ids' history. Only under `with_lock`.
    pub fn set_history(&self, h: LiveHistory) {
        let seq = self.history_seq.load(Ordering::Relaxed);
        self.history_seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        // SAFETY: writers hold the lock; readers retry what this overlaps.
        unsafe { std::ptr::write_volatile(self.history.get(), h) };
        self.history_seq.store(seq + 2, Ordering::Release);
    }

    /// The live worker ids' history of the newest mark.
    pub fn history(&self) -> LiveHistory {
        loop {
            let before = self.history_seq.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            // SAFETY: a plain copy of plain data; a torn one is thrown away.
            let h = unsafe { std::ptr::read_volatile(self.history.get()) };
            fence(Ordering::Acquire);
            if self.history_seq.load(Ordering::Relaxed) == before {
                return h;
            }
        }
    }

    /// The newest mark known, if any.
    pub fn tick(&self) -> Option<u64> {
        Some(self.tick.load(Ordering::Relaxed)).filter(|m| *m != NO_MARK)
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// Sets the generation the next mark follows (a state adopted anew).
    pub fn set_generation(&self, g: u64) {
        self.generation.store(g, Ordering::Relaxed);
    }

    pub fn written_at_ms(&self) -> i64 {
        self.written_at_ms.load(Ordering::Relaxed)
    }

    /// The server and timeline the newest mark belongs to (0s: unknown).
    pub fn origin(&self) -> (u64, u32) {
        (
            self.system_id.load(Ordering::Relaxed),
            self.timeline.load(Ordering::Relaxed),
        )
    }

    pub fn source(&self) -> MarkSource {
        MarkSource::of(self.source.load(Ordering::Relaxed))
    }

    /// End of the last mark record this server logged, if any.
    pub fn logged_lsn(&self) -> Option<u64> {
        Some(self.logged_lsn.load(Ordering::Relaxed)).filter(|l| *l != 0)
    }

    pub fn set_logged_lsn(&self, lsn: u64) {
        self.logged_lsn.store(lsn, Ordering::Relaxed);
    }

    /// Since when a mark waits for a synchronous standby, if one does.
    pub fn standby_wait_since_ms(&self) -> Option<i64> {
        Some(self.standby_wait_since_ms.load(Ordering::Relaxed)).filter(|t| *t != 0)
    }

    /// Notes that a mark waits for a standby from `now_ms` (unless one
    /// already waited: the wait is as old as its oldest waiter).
    pub fn standby_wait_begins(&self, now_ms: i64) {
        let _ = self.standby_wait_since_ms.compare_exchange(
            0,
            now_ms,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    pub fn standby_wait_ends(&self) {
        self.standby_wait_since_ms.store(0, Ordering::Relaxed);
    }

    pub fn recovery_files(&self) -> u8 {
        self.recovery_files.load(Ordering::Relaxed)
    }

    pub fn set_recovery_files(&self, bits: u8) {
        self.recovery_files.store(bits, Ordering::Relaxed);
    }

    pub fn copy_checked(&self) -> bool {
        self.copy_checked.load(Ordering::Acquire)
    }

    pub fn set_copy_checked(&self) {
        self.copy_checked.store(true, Ordering::Release);
    }
}
