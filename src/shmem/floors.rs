//! Which databases this server floored since it started, and against which
//! state of their record of floors: a session whose database's record is
//! still in that state (the floor's own transaction not yet ended) takes
//! neither the record's lock nor a read of the data. Lock-free: a slot is
//! written `print` cleared, then the database, then `print`, so a reader
//! that races a writer misses (and takes the slow way), never matches
//! another database's state.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const SLOTS: usize = 64;

pub struct Floored {
    slots: [(AtomicU32, AtomicU64); SLOTS],
}

impl Floored {
    pub fn new() -> Floored {
        Floored {
            slots: [const { (AtomicU32::new(0), AtomicU64::new(0)) }; SLOTS],
        }
    }

    /// Whether database `db` was floored with its record in state `print`.
    pub fn holds(&self, db: u32, print: u64) -> bool {
        print != 0
            && self
                .slots
                .iter()
                .any(|(d, p)| d.load(Ordering::Acquire) == db && p.load(Ordering::Acquire) == print)
    }

    /// Notes that database `db` was floored with its record in state
    /// `print`: in its own slot, a free one, or (all taken) one by its
    /// number, whose database then takes the slow way again.
    pub fn note(&self, db: u32, print: u64) {
        let slot = self
            .slots
            .iter()
            .find(|(d, _)| d.load(Ordering::Acquire) == db)
            .or_else(|| {
                self.slots.iter().find(|(d, _)| {
                    d.compare_exchange(0, db, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                })
            })
            .unwrap_or(&self.slots[db as usize % SLOTS]);
        slot.1.store(0, Ordering::Release);
        slot.0.store(db, Ordering::Release);
        slot.1.store(print, Ordering::Release);
    }
}
