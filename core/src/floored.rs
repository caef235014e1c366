//! Which databases a server has checked for copied data since it started,
//! kept in shared memory so that a new session's first ID reads no table.
//!
//! One number, the generation, moves whenever what decides a database's
//! floor may have changed: rows written into a record of floors, a
//! subscription's tables changing state (a database dropped is forgotten
//! alone: a later one may take its OID). A
//! database checked at the current generation needs no check; any other
//! is checked by its next session, which reads the generation before it
//! reads anything, so that a change during its check leaves the database
//! to be checked again. A backend that has taken IDs keeps the generation
//! it last saw and compares it at each ID (one load of a line that moves
//! only on such changes).
//!
//! A slot belongs to one database until it is dropped (its check cleared
//! before the slot is freed), so a reader never mistakes one database's
//! check for another's; a server with more databases than slots
//! checks the others at each session's first ID, as if nothing were kept.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Databases whose checks are kept.
pub const SLOTS: usize = 1024;

/// The generation, on a cache line of its own: every ID loads it.
#[repr(C, align(64))]
struct Line(AtomicU64);

#[repr(C)]
pub struct Checked {
    generation: Line,
    /// (database, the generation it was last checked at).
    slots: [(AtomicU32, AtomicU64); SLOTS],
}

impl Default for Checked {
    fn default() -> Self {
        Checked {
            // 0 is no backend's: a backend starts having seen none.
            generation: Line(AtomicU64::new(1)),
            slots: [const { (AtomicU32::new(0), AtomicU64::new(0)) }; SLOTS],
        }
    }
}

impl Checked {
    /// The current generation.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.0.load(Ordering::Acquire)
    }

    /// Every database is to be checked again.
    pub fn changed(&self) {
        self.generation.0.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether database `db` was checked at generation `generation`.
    pub fn is_checked(&self, db: u32, generation: u64) -> bool {
        self.slots_of(db)
            .next()
            .is_some_and(|(_, at)| at.load(Ordering::Acquire) == generation)
    }

    /// The slots database `db` holds (none for 0, which no database is).
    fn slots_of(&self, db: u32) -> impl Iterator<Item = &(AtomicU32, AtomicU64)> {
        self.slots
            .iter()
            .filter(move |(d, _)| db != 0 && d.load(Ordering::Acquire) == db)
    }

    /// Clears database `db`'s check, keeping its slot (a floor whose
    /// transaction aborted: its row of the record is gone).
    pub fn uncheck(&self, db: u32) {
        for (_, at) in self.slots_of(db) {
            at.store(0, Ordering::Release);
        }
    }

    /// Forgets database `db` and frees its slot: a database dropped (no
    /// session of it is left to note it again; a later one may take its
    /// OID).
    pub fn forget(&self, db: u32) {
        // Every slot of it (a note racing a drop of another database can
        // give one database two).
        for (d, at) in self.slots_of(db) {
            // The check first: a database that takes the slot next never
            // finds one that was not its own.
            at.store(0, Ordering::Release);
            d.store(0, Ordering::Release);
        }
    }

    /// Notes that database `db` was checked (and floored if it needed to
    /// be) by a check that began at `generation`. A later check's note is
    /// never overwritten by an earlier one's.
    pub fn note(&self, db: u32, generation: u64) {
        if db == 0 {
            return;
        }
        // Its own slot wherever it is, before a free one (freed slots lie
        // anywhere).
        let slot = self.slots_of(db).next().or_else(|| {
            // Another process may take a free slot for the same
            // database meanwhile: that one is its own.
            self.slots.iter().find(|(d, _)| {
                let now = d.load(Ordering::Acquire);
                now == db
                    || (now == 0
                        && d.compare_exchange(0, db, Ordering::AcqRel, Ordering::Acquire)
                            .map_or_else(|other| other == db, |_| true))
            })
        });
        if let Some((_, at)) = slot {
            at.fetch_max(generation, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_database_is_checked_until_the_generation_moves() {
        let c = Checked::default();
        let g = c.generation();
        assert!(!c.is_checked(5, g));
        c.note(5, g);
        assert!(c.is_checked(5, g));
        assert!(!c.is_checked(6, g));
        c.changed();
        assert!(!c.is_checked(5, c.generation()));
        c.note(5, c.generation());
        assert!(c.is_checked(5, c.generation()));
    }

    #[test]
    fn a_dropped_database_is_forgotten_alone() {
        let c = Checked::default();
        let g = c.generation();
        c.note(5, g);
        c.note(6, g);
        c.forget(5);
        assert!(!c.is_checked(5, g) && c.is_checked(6, g));
        // Its slot is free again: another database takes it, and 6 keeps one.
        c.note(7, g);
        c.note(6, g);
        let held = |db: u32| {
            c.slots
                .iter()
                .filter(|(d, _)| d.load(Ordering::Relaxed) == db)
                .count()
        };
        assert_eq!((held(5), held(6), held(7)), (0, 1, 1));
        c.note(5, g);
        assert!(c.is_checked(5, g));
    }

    #[test]
    fn a_check_that_began_before_a_change_does_not_count_after_it() {
        let c = Checked::default();
        let began = c.generation();
        c.changed();
        c.note(5, began);
        assert!(!c.is_checked(5, c.generation()));
        // Nor does it undo a later check's note.
        c.note(5, c.generation());
        c.note(5, began);
        assert!(c.is_checked(5, c.generation()));
    }

    #[test]
    fn databases_beyond_the_slots_are_never_taken_for_checked() {
        let c = Checked::default();
        let g = c.generation();
        for db in 1..=(SLOTS as u32 + 10) {
            c.note(db, g);
        }
        assert!(c.is_checked(1, g) && c.is_checked(SLOTS as u32, g));
        assert!(!c.is_checked(SLOTS as u32 + 1, g));
        assert!(!c.is_checked(0, g));
    }

    #[test]
    fn concurrent_notes_give_each_database_one_slot() {
        let c = Arc::new(Checked::default());
        let g = c.generation();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    for db in 1..=200u32 {
                        c.note(db, g);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for db in 1..=200u32 {
            let held = c
                .slots
                .iter()
                .filter(|(d, _)| d.load(Ordering::Relaxed) == db)
                .count();
            assert_eq!(held, 1, "database {db}");
            assert!(c.is_checked(db, g));
        }
    }
}
