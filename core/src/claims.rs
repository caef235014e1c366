//! Worker-id claims: every server keeps a row saying "I issue IDs as worker
//! id W" in a table that can travel with the data (logical replication,
//! pglogical), and judges the rows that reach it. Two live claims on one
//! worker id from two servers mean their IDs can collide.
//!
//! Whether a claim is live is judged by this server's own clock only: a
//! claim is live while its `last_seen` keeps changing, seen from here, so
//! skew between the servers' clocks cannot make a stopped server look alive
//! (or a live one stale) for longer than the first sighting.

use crate::failure::{Class, Failure};
use crate::timefmt::{format_duration, format_instant, UnixMs};
use std::collections::HashMap;

/// How often a server refreshes its own claim's `last_seen`.
pub const REFRESH_MS: u64 = 2_000;
/// A claim whose `last_seen` has not changed for this long, seen from here,
/// is stale: its server stopped, or stopped claiming that id, or the
/// replication that brought it stopped. Five refreshes: a busy apply worker
/// or a short network stall does not make a live server look gone.
pub const STALE_AFTER_MS: u64 = 5 * REFRESH_MS;

/// One server's identity as a claim names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Claimant {
    pub system_identifier: u64,
    pub timeline: u32,
    pub worker_id: u32,
    /// Random for each start of the server: two copies of one data
    /// directory running at once (a base backup started beside its
    /// original) share system identifier and timeline, but not this.
    pub instance: u64,
}

/// One row of the claims table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub who: Claimant,
    /// The server's name for people (`cluster_name`, else the host name).
    pub name: String,
    pub claimed_at_ms: UnixMs,
    pub last_seen_ms: UnixMs,
}

impl Claim {
    fn describe(&self, now_ms: UnixMs) -> String {
        let ago = (now_ms - self.last_seen_ms).max(0) as u64;
        format!(
            "\"{}\" (system identifier {}, timeline {}, claimed {}, last seen {} ago)",
            self.name,
            self.who.system_identifier,
            self.who.timeline,
            format_instant(self.claimed_at_ms),
            format_duration(ago)
        )
    }
}

/// What this server concludes from the claims it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Another live server claims this server's worker id, and this server
    /// must stop issuing IDs: it is the later claimant, or the old primary
    /// of a promoted standby.
    Refuse(Claim),
    /// Another live server claims this server's worker id, and that server
    /// is the one to stop; this one goes on, and says so.
    Warn(Claim),
    /// Two other live servers claim one worker id (seen where their data
    /// meet, e.g. on a fan-in subscriber).
    Between(Claim, Claim),
}

impl Finding {
    /// The error (for `Refuse`) or warning this finding is reported with.
    pub fn failure(&self, now_ms: UnixMs) -> Failure {
        match self {
            Finding::Refuse(other) => Failure::new(
                Class::NotReady,
                format!(
                    "worker id {} is also claimed by the live server {}",
                    other.who.worker_id,
                    other.describe(now_ms)
                ),
            )
            .detail(refusal_reason(other))
            .hint("Give one of the two servers another worker id (snowflake_id.worker_id in its own configuration file, not ALTER SYSTEM, which base backups copy) and restart it; IDs both issued may already repeat: check the tables whose data meet."),
            Finding::Warn(other) => Failure::new(
                Class::Warning,
                format!(
                    "worker id {} is also claimed by the live server {}; that server stops issuing IDs once it receives this server's claim",
                    other.who.worker_id,
                    other.describe(now_ms)
                ),
            )
            .hint("Give one of the two servers another worker id and restart it; IDs both issued may already repeat."),
            Finding::Between(a, b) => Failure::new(
                Class::Warning,
                format!(
                    "worker id {} is claimed by two live servers: {} and {}",
                    a.who.worker_id,
                    a.describe(now_ms),
                    b.describe(now_ms)
                ),
            )
            .hint("Their IDs can repeat wherever their data meet: give one of them another worker id and restart it."),
        }
    }
}

fn refusal_reason(other: &Claim) -> String {
    format!(
        "This server claimed the worker id after \"{0}\" did, or is the old primary of \"{0}\", a standby promoted since; it issues no IDs while that claim is live.",
        other.name
    )
}

/// Which of two live claimants of one worker id must stop: the old primary
/// when one is a promoted copy of the other (same system, a later timeline:
/// the one the failover chose); otherwise the later claimant, and on a tie
/// the larger system identifier (then instance), so that both sides agree.
fn must_stop<'a>(a: &'a Claim, b: &'a Claim) -> &'a Claim {
    if a.who.system_identifier == b.who.system_identifier && a.who.timeline != b.who.timeline {
        return if a.who.timeline < b.who.timeline {
            a
        } else {
            b
        };
    }
    let key = |c: &Claim| (c.claimed_at_ms, c.who.system_identifier, c.who.instance);
    if key(a) > key(b) {
        a
    } else {
        b
    }
}

/// Remembers, per claim, when this server last saw its `last_seen` change.
#[derive(Debug, Default)]
pub struct Observer {
    changed_at: HashMap<Claimant, (UnixMs, UnixMs)>,
}

impl Observer {
    /// Whether `claim` is live at `now_ms` (this server's clock); records
    /// what was seen. `inherited`: the claim may have come with this
    /// server's own data (a standby's copy of its old primary's claim), so
    /// only a change seen here makes it live.
    fn live(&mut self, claim: &Claim, now_ms: UnixMs, inherited: bool) -> bool {
        // First sighting: only the other server's clock can say how long ago
        // it last refreshed the claim.
        let first = if inherited {
            UnixMs::MIN / 2
        } else {
            now_ms - (now_ms - claim.last_seen_ms).abs()
        };
        let entry = self
            .changed_at
            .entry(claim.who.clone())
            .or_insert((claim.last_seen_ms, first));
        if entry.0 != claim.last_seen_ms {
            // A remembered claim's first sighting is not a change.
            let changed = if entry.0 == UnixMs::MIN { entry.1 } else { now_ms };
            *entry = (claim.last_seen_ms, changed);
        }
        ((now_ms - entry.1).max(0) as u64) < STALE_AFTER_MS
    }

    /// Counts `who` as live from `now_ms` on, whatever its `last_seen`
    /// says: a claim that made this server refuse before a restart keeps
    /// it refusing until the claim is seen not to change.
    pub fn remember(&mut self, who: Claimant, now_ms: UnixMs) {
        self.changed_at.insert(who, (UnixMs::MIN, now_ms));
    }

    /// Judges every claim this server holds, `me` being its own claim.
    pub fn judge(&mut self, me: &Claim, claims: &[Claim], now_ms: UnixMs) -> Vec<Finding> {
        let mine = |c: &Claim| c.who.system_identifier == me.who.system_identifier;
        let live: Vec<&Claim> = claims
            .iter()
            // This server's own rows, under this worker id or another it
            // had earlier in this run.
            .filter(|c| {
                !(mine(c) && c.who.timeline == me.who.timeline && c.who.instance == me.who.instance)
            })
            .filter(|c| {
                let inherited = mine(c) && c.who.timeline < me.who.timeline;
                self.live(c, now_ms, inherited)
            })
            .collect();
        let mut findings = Vec::new();
        for (i, c) in live.iter().enumerate() {
            if c.who.worker_id == me.who.worker_id {
                findings.push(if std::ptr::eq(must_stop(me, c), me) {
                    Finding::Refuse((*c).clone())
                } else {
                    Finding::Warn((*c).clone())
                });
                continue;
            }
            for d in &live[i + 1..] {
                if d.who.worker_id == c.who.worker_id {
                    findings.push(Finding::Between((*c).clone(), (*d).clone()));
                }
            }
        }
        // A refusal first: it is what callers are told.
        findings.sort_by_key(|f| !matches!(f, Finding::Refuse(_)));
        findings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: UnixMs = 1_790_000_000_000;

    fn claim(
        sysid: u64,
        timeline: u32,
        worker_id: u32,
        claimed_at_ms: UnixMs,
        last_seen_ms: UnixMs,
    ) -> Claim {
        Claim {
            who: Claimant {
                system_identifier: sysid,
                timeline,
                worker_id,
                instance: sysid * 1000 + u64::from(timeline),
            },
            name: format!("db{sysid}-{timeline}"),
            claimed_at_ms,
            last_seen_ms,
        }
    }

    #[test]
    fn distinct_worker_ids_are_clear() {
        let me = claim(1, 1, 5, T0, T0);
        let others = [claim(2, 1, 6, T0, T0), claim(3, 1, 7, T0, T0)];
        assert_eq!(Observer::default().judge(&me, &others, T0), vec![]);
    }

    #[test]
    fn the_later_claimant_refuses_and_the_earlier_warns() {
        let early = claim(1, 1, 5, T0, T0 + 5_000);
        let late = claim(2, 1, 5, T0 + 1_000, T0 + 5_000);
        let now = T0 + 5_000;
        let f = Observer::default().judge(&late, &[early.clone(), late.clone()], now);
        assert_eq!(f, vec![Finding::Refuse(early.clone())]);
        let e = f[0].failure(now);
        assert_eq!(e.class, Class::NotReady);
        assert!(
            e.message
                .starts_with("worker id 5 is also claimed by the live server \"db1-1\""),
            "{}",
            e.message
        );
        assert!(e.hint.unwrap().contains("not ALTER SYSTEM"));
        let f = Observer::default().judge(&early, &[early.clone(), late.clone()], now);
        assert_eq!(f, vec![Finding::Warn(late)]);
    }

    #[test]
    fn a_tie_is_broken_the_same_way_on_both_sides() {
        let a = claim(1, 1, 5, T0, T0);
        let b = claim(2, 1, 5, T0, T0);
        assert!(matches!(
            Observer::default().judge(&b, &[a.clone()], T0)[0],
            Finding::Refuse(_)
        ));
        assert!(matches!(
            Observer::default().judge(&a, &[b], T0)[0],
            Finding::Warn(_)
        ));
    }

    #[test]
    fn the_old_primary_of_a_promoted_standby_refuses_whoever_claimed_first() {
        // The standby's copy of the primary's claim names the same system;
        // after promotion the standby claims on a new timeline.
        let old = claim(9, 1, 5, T0 + 60_000, T0 + 70_000);
        let promoted = claim(9, 2, 5, T0 + 50_000, T0 + 70_000);
        let now = T0 + 70_000;
        assert_eq!(
            Observer::default().judge(&old, &[promoted.clone()], now),
            vec![Finding::Refuse(promoted.clone())]
        );
        // The promoted side believes a copy of its own history only once it
        // changes (see the test below).
        let mut obs = Observer::default();
        assert_eq!(obs.judge(&promoted, &[old.clone()], now), vec![]);
        let refreshed = Claim {
            last_seen_ms: now + 2_000,
            ..old
        };
        assert_eq!(
            obs.judge(&promoted, &[refreshed.clone()], now + 2_000),
            vec![Finding::Warn(refreshed)]
        );
    }

    #[test]
    fn a_promoted_standby_ignores_its_old_primarys_claim_until_it_changes() {
        // Promoted a second after the primary's last refresh: the copied row
        // looks recent, but a dead primary never refreshes it again.
        let promoted = claim(9, 2, 5, T0 + 1_000, T0 + 1_000);
        let mut old = claim(9, 1, 5, T0 - 60_000, T0);
        let mut obs = Observer::default();
        assert_eq!(obs.judge(&promoted, &[old.clone()], T0 + 1_000), vec![]);
        assert_eq!(obs.judge(&promoted, &[old.clone()], T0 + 3_000), vec![]);
        // A split brain: the old primary still refreshes it.
        old.last_seen_ms = T0 + 3_000;
        assert_eq!(
            obs.judge(&promoted, &[old.clone()], T0 + 3_100),
            vec![Finding::Warn(old)]
        );
    }

    #[test]
    fn two_running_copies_of_one_data_directory_collide() {
        // A base backup started beside its original: same system, same
        // timeline, another start.
        let original = claim(9, 1, 5, T0, T0 + 60_000);
        let copy = Claim {
            who: Claimant {
                instance: 77,
                ..original.who.clone()
            },
            claimed_at_ms: T0 + 60_000,
            ..original.clone()
        };
        let now = T0 + 60_000;
        assert_eq!(
            Observer::default().judge(&copy, &[original.clone(), copy.clone()], now),
            vec![Finding::Refuse(original.clone())]
        );
        assert_eq!(
            Observer::default().judge(&original, &[original.clone(), copy.clone()], now),
            vec![Finding::Warn(copy)]
        );
    }

    #[test]
    fn a_remembered_refusal_holds_until_the_claim_is_seen_not_to_change() {
        let me = claim(2, 1, 5, T0 + 1_000, T0 + 100_000);
        // Last refreshed long ago, as the table holds it after a restart.
        let other = claim(1, 1, 5, T0, T0 + 50_000);
        let mut obs = Observer::default();
        let start = T0 + 100_000;
        obs.remember(other.who.clone(), start);
        assert_eq!(obs.judge(&me, &[other.clone()], start), vec![Finding::Refuse(other.clone())]);
        assert_eq!(obs.judge(&me, &[other.clone()], start + STALE_AFTER_MS as i64 - 1).len(), 1);
        assert_eq!(obs.judge(&me, &[other.clone()], start + STALE_AFTER_MS as i64), vec![]);
        // Without the memory it would have been stale at once.
        assert_eq!(Observer::default().judge(&me, &[other], start), vec![]);
    }

    #[test]
    fn this_runs_own_rows_under_another_worker_id_are_not_a_collision() {
        let me = claim(1, 1, 6, T0, T0);
        let earlier_id = claim(1, 1, 5, T0 - 60_000, T0 - 1_000);
        let other = claim(2, 1, 5, T0, T0);
        assert_eq!(Observer::default().judge(&me, &[earlier_id, other], T0), vec![]);
    }

    #[test]
    fn a_claim_that_stops_changing_goes_stale_by_this_servers_clock() {
        let me = claim(2, 1, 5, T0 + 1_000, T0);
        let mut obs = Observer::default();
        let mut other = claim(1, 1, 5, T0, T0);
        assert_eq!(obs.judge(&me, &[other.clone()], T0).len(), 1);
        // Refreshed: live however far its clock is from ours.
        other.last_seen_ms = T0 - 3_600_000;
        assert_eq!(obs.judge(&me, &[other.clone()], T0 + 2_000).len(), 1);
        // Not refreshed for STALE_AFTER_MS of our time: stale, nothing refused.
        assert_eq!(
            obs.judge(
                &me,
                &[other.clone()],
                T0 + 2_000 + STALE_AFTER_MS as i64 - 1
            )
            .len(),
            1
        );
        assert_eq!(
            obs.judge(&me, &[other.clone()], T0 + 2_000 + STALE_AFTER_MS as i64),
            vec![]
        );
        // Refreshed again: live again.
        other.last_seen_ms += 1;
        assert_eq!(obs.judge(&me, &[other], T0 + 30_000).len(), 1);
    }

    #[test]
    fn a_first_sighting_is_judged_by_its_last_seen() {
        let me = claim(2, 1, 5, T0, T0);
        let old = claim(1, 1, 5, T0 - 1_000, T0 - STALE_AFTER_MS as i64 - 1);
        assert_eq!(Observer::default().judge(&me, &[old], T0), vec![]);
        let recent = claim(1, 1, 5, T0 - 1_000, T0 - 3_000);
        assert_eq!(
            Observer::default().judge(&me, &[recent.clone()], T0),
            vec![Finding::Refuse(recent)]
        );
    }

    #[test]
    fn two_other_servers_on_one_worker_id_are_reported_here() {
        let me = claim(3, 1, 7, T0, T0);
        let a = claim(1, 1, 5, T0, T0);
        let b = claim(2, 1, 5, T0, T0);
        let c = claim(4, 1, 6, T0, T0);
        let f = Observer::default().judge(&me, &[a.clone(), c, b.clone(), me.clone()], T0);
        assert_eq!(f, vec![Finding::Between(a, b)]);
        assert!(f[0]
            .failure(T0)
            .message
            .starts_with("worker id 5 is claimed by two live servers"));
    }
}
