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

/// Databases whose set-aside copied IDs are kept at once; a further one
/// still refuses, by flooring again at each of its calls.
const SET_ASIDE_DATABASES: usize = 8;

/// One database's set-aside copied IDs.
#[repr(C)]
struct SetAside {
    /// The database (0: the entry is free).
    db: AtomicU32,
    /// The largest of them (0 when unknown: restored from a durable mark).
    id: AtomicI64,
    /// The first tick no database's ID may carry meanwhile: the smallest's.
    tick: AtomicU64,
    /// The failure its calls meet.
    failure: SharedText,
}

impl SetAside {
    const fn new() -> SetAside {
        SetAside {
            db: AtomicU32::new(0),
            id: AtomicI64::new(0),
            tick: AtomicU64::new(0),
            failure: SharedText::new(),
        }
    }

    fn clear(&self) {
        self.db.store(0, Ordering::SeqCst);
        self.id.store(0, Ordering::SeqCst);
        self.tick.store(0, Ordering::SeqCst);
    }
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
    /// Databases where a floor found copied IDs ahead of the clock and
    /// above the mark: each refuses until a floor is above them or an
    /// operator has said what they are, and every database's status says
    /// so. Written under the mark's lock.
    set_aside: [SetAside; SET_ASIDE_DATABASES],
    /// Floors that failed because a table stayed locked against reading:
    /// how many so far, the last one's database and failure. A session
    /// that waited for such a floor fails with it at once, rather than
    /// each waiter trying (and waiting `max_wait`) in turn.
    floors_busy: AtomicU64,
    floor_busy_db: AtomicU32,
    floor_busy: SharedText,
}

impl Refusal {
    pub const fn new() -> Refusal {
        Refusal {
            mark: AtomicU8::new(0),
            claim: AtomicBool::new(false),
            at_start: SharedText::new(),
            set_aside: [const { SetAside::new() }; SET_ASIDE_DATABASES],
            floors_busy: AtomicU64::new(0),
            floor_busy_db: AtomicU32::new(0),
            floor_busy: SharedText::new(),
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
        self.set_aside
            .iter()
            .any(|e| e.db.load(Ordering::SeqCst) != 0)
    }

    fn entry(&self, db: u32) -> Option<&SetAside> {
        self.set_aside
            .iter()
            .find(|e| db != 0 && e.db.load(Ordering::SeqCst) == db)
    }

    /// The failure copied IDs ahead of the clock in database `db` stand
    /// for, and the largest of them (0: unknown), while they refuse.
    pub fn copies_failure_in(&self, db: u32) -> Option<(Failure, i64)> {
        let e = self.entry(db)?;
        Some((e.failure.failure()?, e.id.load(Ordering::SeqCst)))
    }

    /// Refuses for copied IDs up to `id` in database `db`, every
    /// database's IDs stopping below `ceiling` (call under the mark's
    /// lock). A database's floor replaces what its last one found. With
    /// every entry taken, the one whose IDs stop others latest gives way to
    /// an earlier one; otherwise this one is not kept (its calls floor
    /// again, and refuse again).
    pub fn refuse_for_copies(&self, why: &Failure, id: i64, db: u32, ceiling: u64) {
        let ceiling = ceiling.max(1);
        let slot = self.entry(db).or_else(|| {
            self.set_aside
                .iter()
                .find(|e| e.db.load(Ordering::SeqCst) == 0)
                .or_else(|| {
                    self.set_aside
                        .iter()
                        .max_by_key(|e| e.tick.load(Ordering::SeqCst))
                        .filter(|e| e.tick.load(Ordering::SeqCst) > ceiling)
                })
        });
        let Some(e) = slot else { return };
        e.failure.set_failure(why);
        e.id.store(id, Ordering::SeqCst);
        e.tick.store(ceiling, Ordering::SeqCst);
        e.db.store(db, Ordering::SeqCst);
    }

    /// Where IDs stop while set-aside copied IDs are unsettled: the lowest
    /// of the databases' bounds, and its database.
    pub fn ceiling(&self) -> Option<Ceiling> {
        self.set_aside
            .iter()
            .filter_map(|e| {
                let database = e.db.load(Ordering::SeqCst);
                (database != 0).then(|| Ceiling {
                    tick: e.tick.load(Ordering::SeqCst),
                    database,
                })
            })
            .min_by_key(|c| c.tick)
    }

    /// The ceiling a durable mark carried (at start, or replayed): the
    /// refusal stands again, its IDs unknown until its database floors
    /// again; a mark without one lifts every refusal (call under the
    /// mark's lock).
    pub fn restore_ceiling(&self, ceiling: Ceiling, why: &Failure) {
        if ceiling.tick == 0 {
            return self.lift_all();
        }
        if self.ceiling() == Some(ceiling) {
            return;
        }
        self.lift_all();
        self.refuse_for_copies(why, 0, ceiling.database, ceiling.tick);
    }

    /// Lifts the refusals for which `settled` says so (call under the
    /// mark's lock); whether any was.
    pub fn lift_copies_where(&self, settled: impl Fn(u32, i64) -> bool) -> bool {
        let mut lifted = false;
        for e in &self.set_aside {
            let db = e.db.load(Ordering::SeqCst);
            if db != 0 && settled(db, e.id.load(Ordering::SeqCst)) {
                e.clear();
                lifted = true;
            }
        }
        lifted
    }

    fn lift_all(&self) {
        self.set_aside.iter().for_each(SetAside::clear);
    }

    /// How many floors failed for a locked table so far.
    pub fn floors_busy(&self) -> u64 {
        self.floors_busy.load(Ordering::SeqCst)
    }

    /// Notes that a floor of database `db` failed with `why` because a
    /// table stayed locked (one floor of a database at a time).
    pub fn note_floor_busy(&self, db: u32, why: &Failure) {
        self.floor_busy.set_failure(why);
        self.floor_busy_db.store(db, Ordering::SeqCst);
        self.floors_busy.fetch_add(1, Ordering::SeqCst);
    }

    /// The failure of database `db`'s floor that failed for a locked table
    /// after `seen` such failures were counted, if one did.
    pub fn floor_busy_since(&self, db: u32, seen: u64) -> Option<Failure> {
        (self.floors_busy() != seen && self.floor_busy_db.load(Ordering::SeqCst) == db)
            .then(|| self.floor_busy.failure())
            .flatten()
    }
}
