//! What the claims worker publishes (`bgworkers::claims`), and the hold
//! the commands that need its database free put on it (`api::utility::away`).
//! Whether a claim refuses generation is kept with the other refusals.

use super::pid::Pid;
use snowflake_id_core::shared_text::SharedText;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// What the claims worker publishes.
#[repr(C, align(64))]
pub struct ClaimsState {
    pub pid: Pid,
    /// This start's instance number (0 until the claims worker first runs).
    instance: AtomicU64,
    /// The first finding, as `Failure::to_text`; empty when there is none.
    finding: SharedText,
    /// Why claims are not being written or read, as `Failure::to_text`.
    trouble: SharedText,
    /// The first row of the table that could not be judged, if any.
    skipped: SharedText,
    /// Commands under way that need the worker out of its database (see
    /// `api::utility::away`), and until when (Unix ms) at the latest.
    away_commands: AtomicU32,
    away_until_ms: AtomicI64,
    /// When a command last sent the worker away.
    last_away_ms: AtomicI64,
    /// Until when the worker stays out of a database it found a template.
    template_until_ms: AtomicI64,
    /// Where no claims database is set on a Citus node: the database whose
    /// Citus metadata this node belongs to, as the first backend to read it
    /// offered it (0 until then).
    offered_database: AtomicU32,
    /// Another database whose Citus metadata lists this node too (a copy of
    /// the Citus database), as a backend there found it (0: none found).
    other_member: AtomicU32,
    /// Whether a Citus database offered since the start was dropped.
    forgotten: AtomicBool,
    /// A change of this server's worker id, or of the database it is judged
    /// in, whose claims are still to be read (empty: none). Here rather than
    /// in the worker, so that a restart of the worker alone keeps it. The
    /// worker writes it.
    moving: SharedText,
    /// Set by the backend that offered a Citus database while IDs were
    /// issued already, until the worker has taken it into `moving`.
    rejudge: AtomicBool,
    /// The name of the database the worker keeps claims in, once connected.
    database: SharedText,
    /// What the claims worker found this server listed as, while its worker
    /// id is not settled (see `citus/group.rs`, `promoted_as`): 0 not asked yet, 1
    /// nothing, 2 its group's clone, 3 its group's secondary.
    promoted: AtomicU8,
}

impl ClaimsState {
    pub const fn new() -> ClaimsState {
        ClaimsState {
            pid: Pid::new(),
            instance: AtomicU64::new(0),
            finding: SharedText::new(),
            trouble: SharedText::new(),
            skipped: SharedText::new(),
            away_commands: AtomicU32::new(0),
            away_until_ms: AtomicI64::new(0),
            last_away_ms: AtomicI64::new(0),
            template_until_ms: AtomicI64::new(0),
            offered_database: AtomicU32::new(0),
            other_member: AtomicU32::new(0),
            forgotten: AtomicBool::new(false),
            moving: SharedText::new(),
            rejudge: AtomicBool::new(false),
            database: SharedText::new(),
            promoted: AtomicU8::new(0),
        }
    }

    /// Forgets database `oid` (it was dropped): if it was the Citus
    /// database offered, the next backend to read Citus's metadata offers
    /// one again.
    pub fn forget_database(&self, oid: pgrx::pg_sys::Oid) {
        let oid = oid.to_u32();
        let _ = self
            .other_member
            .compare_exchange(oid, 0, Ordering::SeqCst, Ordering::SeqCst);
        if self
            .offered_database
            .compare_exchange(oid, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.database.set("");
            self.forgotten.store(true, Ordering::SeqCst);
        }
    }

    /// Whether a Citus database offered since the start was dropped.
    pub fn forgotten(&self) -> bool {
        self.forgotten.load(Ordering::SeqCst)
    }

    /// See the field.
    pub fn moving(&self) -> &SharedText {
        &self.moving
    }

    /// See the field `rejudge`.
    pub fn set_rejudge(&self, on: bool) {
        self.rejudge.store(on, Ordering::SeqCst);
    }

    pub fn rejudging(&self) -> bool {
        self.rejudge.load(Ordering::SeqCst)
    }

    /// Records `oid` as a second database whose Citus metadata lists this
    /// node; the first found stands.
    pub fn note_other_member(&self, oid: pgrx::pg_sys::Oid) {
        let _ =
            self.other_member
                .compare_exchange(0, oid.to_u32(), Ordering::SeqCst, Ordering::SeqCst);
    }

    /// See `note_other_member`.
    pub fn other_member(&self) -> Option<pgrx::pg_sys::Oid> {
        match self.other_member.load(Ordering::SeqCst) {
            0 => None,
            oid => Some(pgrx::pg_sys::Oid::from(oid)),
        }
    }

    /// What the claims worker last found this server listed as (see
    /// `promoted`), 0 if it has not asked.
    pub fn promoted(&self) -> u8 {
        self.promoted.load(Ordering::SeqCst)
    }

    pub fn set_promoted(&self, found: u8) {
        self.promoted.store(found, Ordering::SeqCst);
    }

    /// Offers `oid` as the Citus database; the first offer stands. Whether
    /// this offer is the one that stands now.
    pub fn offer_database(&self, oid: pgrx::pg_sys::Oid) -> bool {
        let oid = oid.to_u32();
        let made = self
            .offered_database
            .compare_exchange(0, oid, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if made {
            // A database renamed by way of a copy (CREATE DATABASE ...
            // TEMPLATE, then DROP DATABASE of the first) is no second one.
            let _ = self
                .other_member
                .compare_exchange(oid, 0, Ordering::SeqCst, Ordering::SeqCst);
        }
        made
    }

    /// The Citus database offered, if any.
    pub fn offered_database(&self) -> Option<pgrx::pg_sys::Oid> {
        match self.offered_database.load(Ordering::SeqCst) {
            0 => None,
            oid => Some(pgrx::pg_sys::Oid::from(oid)),
        }
    }

    /// The name of the database the worker keeps claims in, empty until it
    /// connected.
    pub fn database(&self) -> &SharedText {
        &self.database
    }

    /// Holds the worker out of its database for one more command, until
    /// `release_away` or `until_ms` (Unix ms) at the latest; for a role
    /// other than a superuser, only if none did so in the last `every_ms`.
    pub fn hold_away(&self, now_ms: i64, until_ms: i64, superuser: bool, every_ms: i64) -> bool {
        let last = self.last_away_ms.load(Ordering::SeqCst);
        if superuser {
            self.last_away_ms.store(now_ms, Ordering::SeqCst);
        } else if now_ms - last < every_ms
            // Two commands at once: one of them only.
            || self
                .last_away_ms
                .compare_exchange(last, now_ms, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            return false;
        }
        self.away_until_ms.fetch_max(until_ms, Ordering::SeqCst);
        self.away_commands.fetch_add(1, Ordering::SeqCst);
        true
    }

    /// Ends one command's hold.
    pub fn release_away(&self) {
        let _ = self
            .away_commands
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }

    /// Whether the worker must stay out of its database now.
    pub fn kept_out(&self, now_ms: i64) -> bool {
        self.away_commands.load(Ordering::SeqCst) > 0
            && self.away_until_ms.load(Ordering::SeqCst) > now_ms
            || self.template_until_ms.load(Ordering::SeqCst) > now_ms
    }

    /// This start's instance number, 0 until the worker first ran.
    pub fn instance(&self) -> u64 {
        self.instance.load(Ordering::Relaxed)
    }

    pub fn set_instance(&self, instance: u64) {
        self.instance.store(instance, Ordering::Relaxed);
    }

    /// Keeps the worker out of a database it found to be a template until
    /// `until_ms`.
    pub fn stay_out_until(&self, until_ms: i64) {
        self.template_until_ms.store(until_ms, Ordering::SeqCst);
    }

    /// The first finding of the last refresh, empty when there is none.
    pub fn finding(&self) -> &SharedText {
        &self.finding
    }

    /// Why claims are not being written or read, empty while they are.
    pub fn trouble(&self) -> &SharedText {
        &self.trouble
    }

    /// The first row of the table that could not be judged, if any.
    pub fn skipped(&self) -> &SharedText {
        &self.skipped
    }
}
