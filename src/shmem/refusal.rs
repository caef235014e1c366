//! Whether generation is refused, and why: the one place a refusal is kept.
//! The mark sets and lifts its own reasons (`mark`); the claims worker sets
//! and lifts a claim's through the mark too (`mark::refuse_for_claim`,
//! which also revokes the durable window, and `refuse_for_claim_at_start`).

use snowflake_id_core::mark::Ceiling;
use snowflake_id_core::shared_text::SharedText;
use snowflake_id_core::Failure;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Why the mark refuses generation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum MarkRefusal {
    /// The state file did not fit the settings, or could not be read, at
    /// start: the failure found then is kept here (`at_start`).
    AtStart = 1,
    /// A mark replayed from WAL was made under other settings: the state
    /// file, which the replay wrote, says why whenever asked.
    ReplayedOtherSettings = 2,
    /// A mark record in WAL could not be read.
    UnreadableRecord = 3,
}

#[repr(C)]
pub struct Refusal {
    /// A `MarkRefusal`, 0 while none.
    mark: AtomicU8,
    /// Another live server claims this server's worker id, and this one is
    /// the one to stop. Sequentially consistent with the revocation of the
    /// durable window (see `mark::publish`).
    claim: AtomicBool,
    /// The failure of `MarkRefusal::AtStart`.
    at_start: SharedText,
    /// A floor found copied IDs ahead of the clock and above the mark: their
    /// database refuses until a floor is above them or an operator has said
    /// what they are, and every database's status says so.
    copies: AtomicBool,
    /// The failure said meanwhile (written under the mark's lock: one
    /// writer at a time).
    copies_failure: SharedText,
    /// The largest of those IDs (0 when unknown: the refusal came from a
    /// durable mark), and the database that holds it.
    copies_id: AtomicI64,
    copies_db: AtomicU32,
    /// The first tick no database's ID may carry meanwhile (0: none): the
    /// set-aside IDs lie above it. Kept in every durable mark.
    ceiling: AtomicU64,
}

impl Refusal {
    pub const fn new() -> Refusal {
        Refusal {
            mark: AtomicU8::new(0),
            claim: AtomicBool::new(false),
            at_start: SharedText::new(),
            copies: AtomicBool::new(false),
            copies_failure: SharedText::new(),
            copies_id: AtomicI64::new(0),
            copies_db: AtomicU32::new(0),
            ceiling: AtomicU64::new(0),
        }
    }

    pub fn mark(&self) -> Option<MarkRefusal> {
        match self.mark.load(Ordering::Acquire) {
            1 => Some(MarkRefusal::AtStart),
            2 => Some(MarkRefusal::ReplayedOtherSettings),
            3 => Some(MarkRefusal::UnreadableRecord),
            _ => None,
        }
    }

    /// Refuses for what the state file said at start, keeping `why`.
    pub fn refuse_at_start(&self, why: &Failure) {
        self.at_start.set_failure(why);
        self.mark
            .store(MarkRefusal::AtStart as u8, Ordering::Release);
    }

    /// What the state file said at start, while refused for it.
    pub fn at_start(&self) -> Option<Failure> {
        self.at_start.failure()
    }

    /// Refuses for a reason found after the start.
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

    /// Whether copied IDs ahead of the clock refuse generation in a database.
    pub fn copies(&self) -> bool {
        self.copies.load(Ordering::SeqCst)
    }

    /// The failure copied IDs ahead of the clock stand for, the largest of
    /// them and its database, while they refuse.
    pub fn copies_failure(&self) -> Option<(Failure, i64, u32)> {
        if !self.copies() {
            return None;
        }
        Some((
            self.copies_failure.failure()?,
            self.copies_id.load(Ordering::SeqCst),
            self.copies_db.load(Ordering::SeqCst),
        ))
    }

    /// Refuses for copied IDs up to `id` in database `db`, every
    /// database's IDs stopping below `ceiling` (call under the mark's lock).
    pub fn refuse_for_copies(&self, why: &Failure, id: i64, db: u32, ceiling: u64) {
        self.copies_failure.set_failure(why);
        if self.copies_id.fetch_max(id, Ordering::SeqCst) <= id {
            self.copies_db.store(db, Ordering::SeqCst);
        }
        self.lower_ceiling(ceiling.max(1));
        self.copies.store(true, Ordering::SeqCst);
    }

    /// The lower of the ceiling kept and `tick` (several databases' set-aside
    /// IDs: the lowest bound holds for all).
    fn lower_ceiling(&self, tick: u64) {
        let _ = self
            .ceiling
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
                Some(if c == 0 { tick } else { c.min(tick) })
            });
    }

    /// Where IDs stop while set-aside copied IDs are unsettled.
    pub fn ceiling(&self) -> Option<Ceiling> {
        match self.ceiling.load(Ordering::SeqCst) {
            0 => None,
            tick => Some(Ceiling {
                tick,
                database: self.copies_db.load(Ordering::SeqCst),
            }),
        }
    }

    /// The ceiling a durable mark carried (at start, or replayed): the
    /// refusal stands again, its IDs unknown until its database floors
    /// again; a mark without one lifts it (call under the mark's lock).
    pub fn restore_ceiling(&self, ceiling: Ceiling, why: &Failure) {
        if ceiling.tick == 0 {
            return self.lift_copies();
        }
        self.copies_failure.set_failure(why);
        self.copies_id.store(0, Ordering::SeqCst);
        self.copies_db.store(ceiling.database, Ordering::SeqCst);
        self.ceiling.store(ceiling.tick, Ordering::SeqCst);
        self.copies.store(true, Ordering::SeqCst);
    }

    /// Lifts that refusal (call under the mark's lock).
    pub fn lift_copies(&self) {
        self.copies.store(false, Ordering::SeqCst);
        self.copies_id.store(0, Ordering::SeqCst);
        self.ceiling.store(0, Ordering::SeqCst);
    }
}
