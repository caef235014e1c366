//! Which worker ids this server issued live IDs under before its current
//! one, and at which ticks: what keeps a backfill (IDs for past times, see
//! `backfill`) from taking a worker id that was live here and repeating the
//! IDs it issued then.
//!
//! A live worker id issues at ticks from the mark it started above to the
//! mark that covered its last ID; both are known when the worker id changes
//! (a restart with another `worker_id`, a Citus group moved), so the history
//! is kept in every durable mark (state file and WAL), and a restart, a
//! crash and a promoted standby keep it. Ticks are those of the layout the
//! mark is written under: a change of layout (`snowflake_adopt_settings()`)
//! replaces the history with one bound, the first tick above every ID of the
//! old settings, below which no backfill may go under any worker id.
//!
//! Everything here errs towards refusing: a `since` too early or an `until`
//! too late refuses backfills that were safe, never the other way round;
//! when more worker ids were live than the record holds, the oldest one's
//! ticks become a bound for every worker id.

use crate::layout::Layout;
use crate::timefmt::format_instant;
use crate::worker_id::WORKER_UNKNOWN;
use crate::{Class, Failure};

/// How many past live worker ids a record holds one by one.
pub const PAST_CAP: usize = 8;
/// How many worker ids an operator can vouch for at once (see
/// [`LiveHistory::vouch`]).
pub const VOUCH_CAP: usize = 4;
/// Bytes before the past worker ids; the count is the last of them.
pub const HEAD: usize = 4 + 8 + 8 + 8 + 1 + 4 * VOUCH_CAP + 1;
const PAST_BYTES: usize = 4 + 8 + 8;
/// The most bytes [`LiveHistory::encode`] writes.
pub const MAX_ENCODED: usize = HEAD + PAST_CAP * PAST_BYTES;

/// A worker id that was live here, and the ticks its IDs may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Past {
    pub worker: u32,
    pub since: u64,
    pub until: u64,
}

/// The live worker ids of this server, current and past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveHistory {
    /// The live worker id and the first tick it may have issued at
    /// ([`WORKER_UNKNOWN`] before any is known).
    pub current: u32,
    pub current_since: u64,
    /// No backfill at a tick below this, under any worker id (0: none).
    pub backfill_from: u64,
    /// Ticks below this may hold IDs of servers whose data arrived here (a
    /// `pg_upgrade`, a restored dump, a logical copy, IDs an operator resumed
    /// above): their live worker ids are not known, so no backfill goes
    /// there under a worker id an operator has not vouched for (0: none).
    pub copied_below: u64,
    vouched_len: u8,
    vouched: [u32; VOUCH_CAP],
    len: u8,
    past: [Past; PAST_CAP],
}

impl Default for LiveHistory {
    fn default() -> Self {
        LiveHistory {
            current: WORKER_UNKNOWN,
            current_since: 0,
            backfill_from: 0,
            copied_below: 0,
            vouched_len: 0,
            vouched: [0; VOUCH_CAP],
            len: 0,
            past: [Past::default(); PAST_CAP],
        }
    }
}

/// Why a backfill at a tick under a worker id could repeat an ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// The worker id was live here at these ticks.
    WasLive(Past),
    /// Ticks below this may hold IDs of other settings (or of worker ids
    /// too many to keep one by one).
    Below(u64),
    /// Ticks below this may hold copied IDs of servers whose worker ids are
    /// not known here, and no operator vouched for this one.
    Copied(u64),
}

impl Conflict {
    /// The refusal of a backfill at `tick` under `worker`, in `layout`'s
    /// ticks, with the worker ids that were live here for the HINT.
    pub fn failure(&self, layout: &Layout, worker: u32, tick: u64, h: &LiveHistory) -> Failure {
        let at = format_instant(layout.tick_start_ms(tick));
        match *self {
            Conflict::WasLive(p) => {
                let from = format_instant(layout.tick_start_ms(p.since));
                let to = format_instant(layout.tick_start_ms(p.until.min(layout.last_tick())));
                let live: Vec<String> = h.past().iter().map(|p| p.worker.to_string()).collect();
                Failure::new(
                    Class::NotReady,
                    format!(
                        "snowflake_id.backfill_worker_id = {worker} issued live IDs on this server from {from} to {to}: a backfilled ID at {at} could equal one of them"
                    ),
                )
                .detail("The state file keeps which worker ids this server issued live IDs under, and when; a backfill at those times under one of them is refused.")
                .hint(format!(
                    "Set snowflake_id.backfill_worker_id to a worker id no server ever issued live IDs under (live here before: {}; now: {}) and reload, or give these rows times before {from} or after {to}.",
                    live.join(", "),
                    h.current
                ))
            }
            Conflict::Copied(below) => {
                let below = format_instant(layout.tick_start_ms(below));
                Failure::new(
                    Class::NotReady,
                    format!(
                        "snowflake_nextval_at cannot give an ID at {at} under worker id {worker}: data of another server with IDs up to {below} arrived here, and which worker ids that server issued live IDs under is not known"
                    ),
                )
                .detail("A pg_upgrade, a restored dump, a logical copy or snowflake_resume_above() brought IDs this server did not issue; a backfilled ID at their times under one of their servers' live worker ids could equal one of them.")
                .hint(format!(
                    "If worker id {worker} never issued live IDs on any server whose data this one holds, say so as a superuser: SELECT snowflake_vouch_backfill_worker_id({worker}); otherwise set snowflake_id.backfill_worker_id to one that never did, or give these rows times from {below} on."
                ))
            }
            Conflict::Below(from) => {
                let from = format_instant(layout.tick_start_ms(from));
                Failure::new(
                    Class::NotReady,
                    format!(
                        "snowflake_nextval_at cannot give an ID at {at}: this server may have issued IDs before {from} under other settings or worker ids it no longer tells apart"
                    ),
                )
                .detail("snowflake_adopt_settings() moved this server to another layout or epoch, or more worker ids were live here than the state file keeps one by one: a backfilled ID before then could equal one of those IDs.")
                .hint(format!(
                    "Give these rows times from {from} on, or draw their IDs on a server that issued none under other settings."
                ))
            }
        }
    }
}

impl LiveHistory {
    /// The history of a record that had none (written before format 4):
    /// its worker id live since the epoch, as far as anyone knows.
    pub fn unknown_since(worker: u32) -> LiveHistory {
        LiveHistory {
            current: worker,
            ..LiveHistory::default()
        }
    }

    /// The history after settings were adopted, `worker` live: nothing
    /// below `from` may be backfilled (the first tick above every ID of the
    /// old settings).
    pub fn adopted(from: u64, worker: u32) -> LiveHistory {
        LiveHistory {
            current: worker,
            backfill_from: from,
            current_since: from,
            ..LiveHistory::default()
        }
    }

    /// The worker ids an operator vouched for since the last copy arrived.
    pub fn vouched(&self) -> &[u32] {
        &self.vouched[..usize::from(self.vouched_len)]
    }

    /// The history once data of other servers with IDs below `below` (a
    /// tick) arrived: a vouch given before covered other data, and is void,
    /// however old the new data's IDs (its server may have issued under a
    /// vouched worker id at times below the bound already there).
    pub fn with_copied_below(&self, below: u64) -> LiveHistory {
        let mut next = *self;
        next.copied_below = self.copied_below.max(below);
        next.vouched_len = 0;
        next
    }

    /// The history once an operator vouched that `worker` never issued
    /// live IDs on any server whose data this one holds; the oldest vouch
    /// makes room when the list is full.
    pub fn vouch(&self, worker: u32) -> LiveHistory {
        let mut next = *self;
        if next.vouched().contains(&worker) {
            return next;
        }
        if usize::from(next.vouched_len) == VOUCH_CAP {
            next.vouched.copy_within(1.., 0);
            next.vouched_len -= 1;
        }
        next.vouched[usize::from(next.vouched_len)] = worker;
        next.vouched_len += 1;
        next
    }

    pub fn past(&self) -> &[Past] {
        &self.past[..usize::from(self.len)]
    }

    /// The history once `worker` issues live IDs: the one before it issued
    /// at ticks up to `until` (the newest mark, which covers every ID so
    /// far), `worker` from `since` (the first tick it may take).
    pub fn with_live(&self, worker: u32, until: u64, since: u64) -> LiveHistory {
        let mut next = *self;
        if worker == WORKER_UNKNOWN || worker == self.current {
            return next;
        }
        if self.current != WORKER_UNKNOWN {
            next.push(Past {
                worker: self.current,
                since: self.current_since,
                until,
            });
        }
        next.current = worker;
        next.current_since = since.max(self.backfill_from);
        next
    }

    fn push(&mut self, p: Past) {
        if let Some(e) = self.past[..usize::from(self.len)]
            .iter_mut()
            .find(|e| e.worker == p.worker)
        {
            // Its two spans as one: the ticks between them too, which only
            // refuses more.
            e.since = e.since.min(p.since);
            e.until = e.until.max(p.until);
            return;
        }
        if usize::from(self.len) == PAST_CAP {
            let (i, oldest) = self
                .past()
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.until)
                .map(|(i, e)| (i, *e))
                .expect("a full history has entries");
            self.backfill_from = self.backfill_from.max(oldest.until.saturating_add(1));
            self.past[i] = p;
            return;
        }
        self.past[usize::from(self.len)] = p;
        self.len += 1;
    }

    /// Why a backfilled ID at `tick` under `worker` could equal an ID
    /// issued here before, if it could.
    pub fn conflict(&self, worker: u32, tick: u64) -> Option<Conflict> {
        if tick < self.backfill_from {
            return Some(Conflict::Below(self.backfill_from));
        }
        if let Some(p) = self
            .past()
            .iter()
            .find(|p| p.worker == worker && p.since <= tick && tick <= p.until)
        {
            // Live here: no vouch lifts that.
            return Some(Conflict::WasLive(*p));
        }
        if tick < self.copied_below && !self.vouched().contains(&worker) {
            return Some(Conflict::Copied(self.copied_below));
        }
        None
    }

    /// Bytes [`LiveHistory::encode`] writes: only the past worker ids
    /// there are, so that the usual mark (none) costs WAL 46 bytes more.
    pub fn encoded_len(&self) -> usize {
        HEAD + usize::from(self.len) * PAST_BYTES
    }

    /// How long the history at the start of `b` is, read from its count.
    pub fn len_at(b: &[u8]) -> Option<usize> {
        let n = usize::from(*b.get(HEAD - 1)?);
        (n <= PAST_CAP).then_some(HEAD + n * PAST_BYTES)
    }

    pub fn encode(&self, b: &mut Vec<u8>) {
        b.extend_from_slice(&self.current.to_le_bytes());
        b.extend_from_slice(&self.current_since.to_le_bytes());
        b.extend_from_slice(&self.backfill_from.to_le_bytes());
        b.extend_from_slice(&self.copied_below.to_le_bytes());
        b.push(self.vouched_len);
        for v in self.vouched {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.push(self.len);
        for p in self.past() {
            b.extend_from_slice(&p.worker.to_le_bytes());
            b.extend_from_slice(&p.since.to_le_bytes());
            b.extend_from_slice(&p.until.to_le_bytes());
        }
    }

    /// The history at the start of `b`, or `None` if it cannot be one (a
    /// count past the cap, bytes missing, a span that ends before it
    /// starts).
    pub fn decode(b: &[u8]) -> Option<LiveHistory> {
        let b = b.get(..Self::len_at(b)?)?;
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let vouched_len = b[28];
        if usize::from(vouched_len) > VOUCH_CAP {
            return None;
        }
        let mut h = LiveHistory {
            current: u32_at(0),
            current_since: u64_at(4),
            backfill_from: u64_at(12),
            copied_below: u64_at(20),
            vouched_len,
            vouched: std::array::from_fn(|i| u32_at(29 + 4 * i)),
            len: b[HEAD - 1],
            past: [Past::default(); PAST_CAP],
        };
        for i in 0..usize::from(h.len) {
            let at = HEAD + i * PAST_BYTES;
            h.past[i] = Past {
                worker: u32_at(at),
                since: u64_at(at + 4),
                until: u64_at(at + 12),
            };
        }
        h.past().iter().all(|p| p.since <= p.until).then_some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_id_that_was_live_conflicts_at_its_ticks_only() {
        let h = LiveHistory::default().with_live(1, 0, 1_000);
        assert_eq!(
            h.conflict(1, 5_000),
            None,
            "the live one is refused elsewhere"
        );
        let h = h.with_live(2, 4_000, 4_001);
        let was = Past {
            worker: 1,
            since: 1_000,
            until: 4_000,
        };
        assert_eq!(h.past(), &[was]);
        assert_eq!(h.current_since, 4_001);
        for tick in [1_000, 2_500, 4_000] {
            assert_eq!(h.conflict(1, tick), Some(Conflict::WasLive(was)));
        }
        for tick in [0, 999, 4_001] {
            assert_eq!(h.conflict(1, tick), None);
        }
        assert_eq!(h.conflict(3, 2_500), None);
        // The same worker id again changes nothing; an unknown one neither.
        assert_eq!(h.with_live(2, 6_000, 6_001), h);
        assert_eq!(h.with_live(WORKER_UNKNOWN, 6_000, 6_001), h);
    }

    #[test]
    fn a_worker_id_live_twice_covers_both_spans_and_what_lies_between() {
        let h = LiveHistory::default()
            .with_live(1, 0, 100)
            .with_live(2, 200, 200)
            .with_live(1, 300, 300)
            .with_live(3, 400, 400);
        assert_eq!(
            h.past(),
            &[
                Past {
                    worker: 1,
                    since: 100,
                    until: 400
                },
                Past {
                    worker: 2,
                    since: 200,
                    until: 300
                }
            ]
        );
    }

    #[test]
    fn more_worker_ids_than_kept_turn_the_oldest_into_a_bound_for_all() {
        let mut h = LiveHistory::default().with_live(0, 0, 10);
        for w in 1..=PAST_CAP as u32 + 1 {
            h = h.with_live(w, u64::from(w) * 100, u64::from(w) * 100);
        }
        assert_eq!(h.past().len(), PAST_CAP);
        // Worker 0 (ticks 10..=100) dropped out: nothing at or below 100.
        assert_eq!(h.backfill_from, 101);
        assert_eq!(h.conflict(42, 100), Some(Conflict::Below(101)));
        assert_eq!(h.conflict(42, 101), None);
        assert!(matches!(h.conflict(1, 150), Some(Conflict::WasLive(_))));
    }

    #[test]
    fn adopted_settings_bound_every_worker_id() {
        let h = LiveHistory::adopted(7_000, 4).with_live(4, 8_000, 8_001);
        assert_eq!(h.current_since, 7_000);
        assert_eq!(h.conflict(9, 6_999), Some(Conflict::Below(7_000)));
        assert_eq!(h.conflict(9, 7_000), None);
    }

    #[test]
    fn a_record_without_history_counts_its_worker_id_live_since_the_epoch() {
        let h = LiveHistory::unknown_since(5).with_live(6, 800, 801);
        assert_eq!(
            h.conflict(5, 0),
            Some(Conflict::WasLive(Past {
                worker: 5,
                since: 0,
                until: 800
            }))
        );
    }

    #[test]
    fn refusals_say_when_the_worker_id_was_live_and_what_to_do() {
        let layout = Layout::by_name("snowflake_id").unwrap();
        let h = LiveHistory::default()
            .with_live(1, 0, 1_000)
            .with_live(2, 4_000, 4_001);
        let c = h.conflict(1, 2_000).unwrap();
        let f = c.failure(&layout, 1, 2_000, &h);
        assert_eq!(f.class.sqlstate(), "55000");
        assert!(
            f.message.contains("backfill_worker_id = 1 issued live IDs"),
            "{}",
            f.message
        );
        let hint = f.hint.unwrap();
        assert!(hint.contains("live here before: 1; now: 2"), "{hint}");
        let f = Conflict::Below(5_000).failure(&layout, 3, 10, &h);
        assert!(f.hint.unwrap().contains("times from"));
    }

    #[test]
    fn histories_round_trip_and_impossible_ones_are_refused() {
        let h = LiveHistory::default()
            .with_live(1, 0, 100)
            .with_live(2, 200, 201)
            .with_live(3, 300, 301);
        let mut b = Vec::new();
        h.encode(&mut b);
        assert_eq!(b.len(), h.encoded_len());
        assert_eq!(LiveHistory::decode(&b), Some(h));
        assert_eq!(LiveHistory::decode(&b[..b.len() - 1]), None);
        let mut bad = b.clone();
        bad[HEAD - 1] = PAST_CAP as u8 + 1;
        assert_eq!(LiveHistory::decode(&bad), None);
        let mut bad = b.clone();
        // The first past span's `until` below its `since`.
        bad[HEAD + 12..HEAD + 20].copy_from_slice(&50u64.to_le_bytes());
        assert_eq!(LiveHistory::decode(&bad), None);
    }

    #[test]
    fn copied_ids_refuse_every_worker_id_below_them_until_one_is_vouched_for() {
        let h = LiveHistory::default()
            .with_live(1, 0, 100)
            .with_live(2, 500, 501)
            .with_copied_below(9_000);
        assert_eq!(h.conflict(7, 8_999), Some(Conflict::Copied(9_000)));
        assert_eq!(h.conflict(7, 9_000), None);
        let vouched = h.vouch(7);
        assert_eq!(vouched.conflict(7, 50), None);
        assert_eq!(vouched.conflict(8, 50), Some(Conflict::Copied(9_000)));
        // A worker id live here stays refused at its times, vouched or not.
        assert!(matches!(
            h.vouch(1).conflict(1, 200),
            Some(Conflict::WasLive(_))
        ));
        // More data arriving voids the vouch, its IDs older or newer.
        assert_eq!(
            vouched.with_copied_below(5_000).conflict(7, 50),
            Some(Conflict::Copied(9_000))
        );
        assert_eq!(
            vouched.with_copied_below(9_500).conflict(7, 50),
            Some(Conflict::Copied(9_500))
        );
        // Room for the newest vouches, the oldest going first.
        let many = (10..10 + VOUCH_CAP as u32 + 1).fold(h, |h, w| h.vouch(w));
        assert_eq!(many.vouched().len(), VOUCH_CAP);
        assert!(!many.vouched().contains(&10) && many.vouched().contains(&14));
        let mut b = Vec::new();
        many.encode(&mut b);
        assert_eq!(LiveHistory::decode(&b), Some(many));
        let f =
            Conflict::Copied(9_000).failure(&Layout::by_name("snowflake_id").unwrap(), 7, 50, &h);
        assert!(f
            .hint
            .unwrap()
            .contains("SELECT snowflake_vouch_backfill_worker_id(7);"));
    }
}
