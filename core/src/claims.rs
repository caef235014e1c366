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
/// The `last_seen` a claims worker writes when its server shuts down:
/// 1970, stale to any server that first sees it.
pub const ENDED_MS: UnixMs = 0;

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
    /// A claim on a backfill worker id: a collision with it refuses the
    /// claiming server's backfills, and nobody's live IDs.
    pub backfill: bool,
}

/// The most of a server's name a report shows: names come from other
/// servers' rows, and one long name must not push the rest of a refusal
/// out of the space shared memory gives it.
const NAME_SHOWN: usize = 64;

/// A name from a row as reports show it: control characters replaced, cut
/// to `NAME_SHOWN` characters.
pub fn shown(name: &str) -> String {
    let mut out: String = name
        .chars()
        .take(NAME_SHOWN)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if name.chars().nth(NAME_SHOWN).is_some() {
        out.push('…');
    }
    out
}

/// One row of the claims table as read, before it is believed: any column
/// may be missing or out of range (rows arrive from other servers, and a
/// table is only as tidy as whoever could write it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    pub worker_id: Option<i32>,
    pub system_identifier: Option<i64>,
    pub timeline: Option<i64>,
    pub instance: Option<i64>,
    pub name: Option<String>,
    /// Seconds since 1970, as `date_part('epoch', ...)` gives them: infinite
    /// for the timestamps `infinity` and `-infinity`.
    pub claimed_at_s: Option<f64>,
    pub last_seen_s: Option<f64>,
    /// NULL (a row from a version before the column) is a live claim.
    pub backfill: Option<bool>,
}

/// Instants further than this from 1970 (about 3,000 years) are no time a
/// live server wrote.
const LATEST_S: f64 = 1e11;

impl Row {
    /// The claim this row makes, or why it cannot be judged (for the log
    /// and `problem`): it is then skipped, and the other rows still count.
    pub fn claim(&self) -> Result<Claim, String> {
        let missing = |what: &str| format!("{what} is NULL");
        let worker_id = self.worker_id.ok_or_else(|| missing("worker_id"))?;
        let worker_id =
            u32::try_from(worker_id).map_err(|_| format!("worker_id {worker_id} is negative"))?;
        let system_identifier = self
            .system_identifier
            .ok_or_else(|| missing("system_identifier"))? as u64;
        let timeline = self.timeline.ok_or_else(|| missing("timeline"))?;
        let timeline = u32::try_from(timeline)
            .ok()
            .filter(|t| *t > 0)
            .ok_or_else(|| format!("timeline {timeline} is not a timeline"))?;
        let instance = self.instance.ok_or_else(|| missing("instance"))? as u64;
        let name = self.name.clone().ok_or_else(|| missing("name"))?;
        let ms = |what: &str, s: Option<f64>| -> Result<UnixMs, String> {
            match s {
                None => Err(missing(what)),
                Some(s) if s.is_finite() && s.abs() < LATEST_S => {
                    Ok((s * 1000.0).floor() as UnixMs)
                }
                Some(s) if s.is_infinite() => Err(format!(
                    "{what} is {}infinity",
                    if s < 0.0 { "-" } else { "" }
                )),
                Some(_) => Err(format!("{what} is out of range")),
            }
        };
        Ok(Claim {
            who: Claimant {
                system_identifier,
                timeline,
                worker_id,
                instance,
            },
            name,
            claimed_at_ms: ms("claimed_at", self.claimed_at_s)?,
            last_seen_ms: ms("last_seen", self.last_seen_s)?,
            backfill: self.backfill.unwrap_or(false),
        })
    }

    /// The row, for a report that it was skipped because of `why`.
    pub fn describe_skipped(&self, why: &str) -> String {
        let or_null = |v: Option<String>| v.unwrap_or_else(|| "NULL".into());
        format!(
            "a row of snowflake_claims is skipped, it cannot be judged ({why}): worker_id {}, system_identifier {}, timeline {}, name \"{}\"",
            or_null(self.worker_id.map(|v| v.to_string())),
            or_null(self.system_identifier.map(|v| v.to_string())),
            or_null(self.timeline.map(|v| v.to_string())),
            or_null(self.name.as_deref().map(shown)),
        )
    }
}

impl Claim {
    fn describe(&self, now_ms: UnixMs) -> String {
        if self.last_seen_ms == UnixMs::MIN {
            // Known from this server's memory of its last run alone.
            return format!(
                "with system identifier {}, timeline {} (as this server last saw it before it restarted)",
                self.who.system_identifier, self.who.timeline
            );
        }
        if self.last_seen_ms == ENDED_MS {
            return format!(
                "\"{}\" (system identifier {}, timeline {}, claimed {}, stopped with its server)",
                shown(&self.name),
                self.who.system_identifier,
                self.who.timeline,
                format_instant(self.claimed_at_ms),
            );
        }
        let ago = (now_ms - self.last_seen_ms).max(0) as u64;
        format!(
            "\"{}\" (system identifier {}, timeline {}, claimed {}, last seen {} ago)",
            shown(&self.name),
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
                    "worker id {} is also claimed by the live server {}; that server stops issuing IDs when it reads this server's claim (replicated to it, or asked of this node as one of its Citus cluster's active primaries), and until then both issue the same IDs",
                    other.who.worker_id,
                    other.describe(now_ms)
                ),
            )
            .hint("Give one of the two servers another worker id and restart it; IDs both issued may already repeat."),
            Finding::Between(a, b) => Failure::new(
                Class::Warning,
                format!(
                    "worker id {} is claimed by two live servers: {}{} and {}{}",
                    a.who.worker_id,
                    a.describe(now_ms),
                    if a.backfill { " (as its backfill worker id)" } else { "" },
                    b.describe(now_ms),
                    if b.backfill { " (as its backfill worker id)" } else { "" },
                ),
            )
            .hint("Their IDs can repeat wherever their data meet: give one of them another worker id and restart it."),
        }
    }
}

fn refusal_reason(other: &Claim) -> String {
    format!(
        "This server claimed the worker id after \"{0}\" did, or is the old primary of \"{0}\", a standby promoted since; it issues no IDs while that claim is live.",
        shown(&other.name)
    )
}

/// One row per claimant, the most recently refreshed: a table can hold an
/// older copy of a claim beside the current one (a subscriber keeps what a
/// publisher removed without telling it), and a claim seen at two
/// `last_seen`s in turn would look alive forever.
pub fn newest_per_claimant(claims: &[Claim]) -> Vec<&Claim> {
    let mut newest: Vec<&Claim> = Vec::with_capacity(claims.len());
    for c in claims {
        match newest.iter_mut().find(|n| n.who == c.who) {
            Some(n) if n.last_seen_ms < c.last_seen_ms => *n = c,
            Some(_) => {}
            None => newest.push(c),
        }
    }
    newest
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
    /// The last row seen of each claim: a claim whose row goes away (its
    /// table emptied here, a row deleted) counts until it goes stale, as if
    /// it had stopped changing; deleting a row is not how a claim ends.
    last: HashMap<Claimant, Claim>,
    /// The claims whose `last_seen` this server has seen change: a claim
    /// that only ever showed one `last_seen` may be a copy of a row (a
    /// clone's table serves its origin's) or a start that has ended.
    seen_changing: std::collections::HashSet<Claimant>,
}

/// How long a claim whose row is gone is remembered after it went stale.
const FORGET_AFTER_MS: u64 = 6 * STALE_AFTER_MS;

impl Observer {
    /// Whether `claim` is live at `now_ms` (this server's clock); records
    /// what was seen. `inherited`: the claim may have come with this
    /// server's own data (a standby's copy of its old primary's claim), so
    /// only a change seen here makes it live.
    fn live(&mut self, claim: &Claim, now_ms: UnixMs, inherited: bool) -> bool {
        // First sighting: only the other server's clock can say how long ago
        // it last refreshed the claim.
        let first = || {
            if inherited {
                UnixMs::MIN / 2
            } else {
                now_ms.saturating_sub(now_ms.saturating_sub(claim.last_seen_ms).saturating_abs())
            }
        };
        let entry = self
            .changed_at
            .entry(claim.who.clone())
            .or_insert_with(|| (claim.last_seen_ms, first()));
        if entry.0 != claim.last_seen_ms {
            // A remembered claim's first sighting is not a change.
            let changed = if entry.0 == UnixMs::MIN {
                entry.1
            } else {
                self.seen_changing.insert(claim.who.clone());
                now_ms
            };
            *entry = (claim.last_seen_ms, changed);
        }
        ((now_ms - entry.1).max(0) as u64) < STALE_AFTER_MS
    }

    /// Forgets the claims in `absent` that went stale long ago.
    fn forget_long_gone(&mut self, absent: &[Claim], now_ms: UnixMs) {
        for c in absent {
            let gone = self
                .changed_at
                .get(&c.who)
                .is_none_or(|(_, changed)| ((now_ms - changed).max(0) as u64) >= FORGET_AFTER_MS);
            if gone {
                self.changed_at.remove(&c.who);
                self.last.remove(&c.who);
                self.seen_changing.remove(&c.who);
            }
        }
    }

    /// Counts `who` as live from `now_ms` on, whatever its `last_seen`
    /// says: a claim that made this server refuse before a restart keeps
    /// it refusing until the claim is seen not to change.
    pub fn remember(&mut self, who: Claimant, now_ms: UnixMs) {
        self.changed_at.insert(who.clone(), (UnixMs::MIN, now_ms));
        let claim = Claim {
            who: who.clone(),
            name: String::new(),
            // Earlier than any claim: the one this server refused on.
            claimed_at_ms: UnixMs::MIN / 2,
            last_seen_ms: UnixMs::MIN,
            backfill: false,
        };
        self.last.insert(who, claim);
    }

    /// Whether two claims of one system and timeline are one data
    /// directory's starts in turn rather than two copies running at once:
    /// one of them is gone from the rows (the next start deleted its
    /// predecessor's), or has never been seen to change here (a frozen copy
    /// of it, such as a promoted clone's table serves). Two copies running
    /// at once both refresh their rows: seen changing, both reported.
    fn one_data_directory_in_turn(&self, c: &Claim, d: &Claim, absent: &[Claim]) -> bool {
        let same =
            (c.who.system_identifier, c.who.timeline) == (d.who.system_identifier, d.who.timeline);
        same && [c, d]
            .iter()
            .any(|x| absent.iter().any(|a| a.who == x.who) || !self.seen_changing.contains(&x.who))
    }

    /// Judges every claim this server holds, `me` being its own claim.
    pub fn judge(&mut self, me: &Claim, claims: &[Claim], now_ms: UnixMs) -> Vec<Finding> {
        let mine = |c: &Claim| c.who.system_identifier == me.who.system_identifier;
        let present = newest_per_claimant(claims);
        for c in &present {
            self.last.insert(c.who.clone(), (*c).clone());
        }
        let absent: Vec<Claim> = self
            .last
            .values()
            .filter(|l| !present.iter().any(|c| c.who == l.who))
            .cloned()
            .collect();
        self.forget_long_gone(&absent, now_ms);
        let absent: Vec<Claim> = absent
            .into_iter()
            .filter(|c| self.last.contains_key(&c.who))
            .collect();
        let live: Vec<&Claim> = present
            .into_iter()
            .chain(absent.iter())
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
                // Another server's backfill claim on this live worker id
                // refuses that server's backfills, there: nothing to do or
                // say here.
                if !c.backfill || me.backfill {
                    findings.push(if std::ptr::eq(must_stop(me, c), me) {
                        Finding::Refuse((*c).clone())
                    } else {
                        Finding::Warn((*c).clone())
                    });
                }
                continue;
            }
            for d in &live[i + 1..] {
                // Where two other servers' claims meet (a fan-in), a backfill
                // one counts too: its server may never see the other's.
                if d.who.worker_id == c.who.worker_id
                    && !self.one_data_directory_in_turn(c, d, &absent)
                {
                    findings.push(Finding::Between((*c).clone(), (*d).clone()));
                }
            }
        }
        // A refusal first: it is what callers are told.
        findings.sort_by_key(|f| !matches!(f, Finding::Refuse(_)));
        findings
    }
}

/// The refusal while this server's worker id, or the database its claims
/// are judged in, changes: `what` changed, and `unread` says why the other
/// nodes' claims could not be read the last time they were asked.
pub fn moving(what: &str, unread: Option<&str>) -> Failure {
    let state = match unread {
        None => "the other nodes' claims on it are being read".to_string(),
        Some(why) => format!("the other nodes' claims on it could not be read: {why}"),
    };
    Failure::new(Class::NotReady, format!("{what}: {state}"))
        .hint("IDs are issued again once the other nodes' claims on this server's worker id have been read.")
}

/// How long a Citus node waits before it issues under a group id new to
/// its data directory: as long as a claim takes to go stale. Citus hands a
/// removed node's group id to a new node when asked to
/// (`citus_add_node(..., groupid => N)`) and tells the removed node nothing;
/// that node, if it still runs, stops once its claims worker reads the
/// coordinator's metadata, at its next refresh. The new node is the one that
/// can wait: until every refresh of such a node has had time to end.
pub const HANDOVER_MS: u64 = STALE_AFTER_MS;

/// The refusal of a Citus node that began to hold `worker` (the group
/// `group`) at `since`, while the handover lasts.
pub fn handover(worker: u32, group: i64, since: UnixMs, now: UnixMs) -> Option<Failure> {
    let until = since + HANDOVER_MS as UnixMs;
    (now < until && since <= now).then(|| {
        Failure::new(
            Class::NotReady,
            format!(
                "this node's worker id {worker} (Citus group {group}) is new to it: it issues IDs from {}, once any node that held group {group} before and still runs has read that the group was given away",
                format_instant(until)
            ),
        )
        .detail(format!(
            "A group id given again by hand (citus_add_node(..., groupid => {group})) is not told to the node that had it; that node stops at its next refresh, within {} s.",
            HANDOVER_MS / 1000
        ))
        .hint("Nothing to do: IDs are issued from then on. Never give a group id by hand while the node that had it may run cut off from the coordinator.")
    })
}

/// The claim a server holds, as it remembers it across restarts: when it
/// first claimed this worker id on this system and timeline. The table is
/// not where this lives: a row can be deleted, truncated or made again with
/// the extension, and a claim whose time restarted would turn the earlier
/// claimant into the later one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub system_identifier: u64,
    pub timeline: u32,
    pub worker_id: u32,
    pub claimed_at_ms: UnixMs,
}

/// What a server keeps of its claims in its data directory (the file
/// `snowflake_id.claims`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    /// The instance number of the start that wrote it.
    pub instance: u64,
    /// The claim this server was refusing on, if any.
    pub refused_by: Option<Claimant>,
    pub held: Option<Held>,
    /// Why the cluster this server belongs to refused it IDs (on Citus: its
    /// group given to another node), if it did: kept over a restart, so that
    /// a server cut off from the one who said so goes on refusing.
    pub place: Option<Failure>,
    /// Since when this data directory (its system identifier) holds its
    /// worker id: a standby promoted, a restart keep it; a new node, a group
    /// moved, an upgraded cluster begin anew.
    pub holding: Option<Holding>,
}

/// A worker id held by a data directory since an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holding {
    pub system_identifier: u64,
    pub worker_id: u32,
    pub since_ms: UnixMs,
}

impl Memory {
    /// Reads the file's text. Lines it does not know are skipped (a newer
    /// version's, or damage): the worst a lost line costs is a claim's time
    /// taken afresh, or a refusal not carried over a restart.
    pub fn parse(text: &str) -> Memory {
        let mut m = Memory::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("place ") {
                // Only a refusal is kept: anything else read here is damage.
                m.place = Failure::from_text(rest).filter(|f| f.class == Class::NotReady);
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["instance", i] => m.instance = i.parse().unwrap_or(0),
                ["holding", s, w, at] => {
                    m.holding = (|| {
                        Some(Holding {
                            system_identifier: s.parse().ok()?,
                            worker_id: w.parse().ok()?,
                            since_ms: at.parse().ok().filter(|ms: &UnixMs| {
                                (ms.unsigned_abs() as f64) < LATEST_S * 1000.0
                            })?,
                        })
                    })()
                }
                ["refused_by", s, t, w, i] => {
                    m.refused_by = (|| {
                        Some(Claimant {
                            system_identifier: s.parse().ok()?,
                            timeline: t.parse().ok()?,
                            worker_id: w.parse().ok()?,
                            instance: i.parse().ok()?,
                        })
                    })()
                }
                ["held", s, t, w, at] => {
                    m.held = (|| {
                        Some(Held {
                            system_identifier: s.parse().ok()?,
                            timeline: t.parse().ok()?,
                            worker_id: w.parse().ok()?,
                            // A time no server wrote is damage: taken afresh.
                            claimed_at_ms: at.parse().ok().filter(|ms: &UnixMs| {
                                (ms.unsigned_abs() as f64) < LATEST_S * 1000.0
                            })?,
                        })
                    })()
                }
                _ => {}
            }
        }
        m
    }

    pub fn text(&self) -> String {
        let mut text = format!("instance {}\n", self.instance);
        if let Some(c) = &self.refused_by {
            text.push_str(&format!(
                "refused_by {} {} {} {}\n",
                c.system_identifier, c.timeline, c.worker_id, c.instance
            ));
        }
        if let Some(h) = &self.held {
            text.push_str(&format!(
                "held {} {} {} {}\n",
                h.system_identifier, h.timeline, h.worker_id, h.claimed_at_ms
            ));
        }
        if let Some(h) = &self.holding {
            text.push_str(&format!(
                "holding {} {} {}\n",
                h.system_identifier, h.worker_id, h.since_ms
            ));
        }
        if let Some(p) = &self.place {
            text.push_str(&format!(
                "place {}\n",
                p.to_text().replace(['\n', '\r'], " ")
            ));
        }
        text
    }

    /// Since when this data directory holds `worker_id`, noted as `now`
    /// if it is new to it (a claim remembered from before holdings were
    /// kept counts from its time); and whether that was noted now.
    pub fn holding_since(
        &mut self,
        system_identifier: u64,
        worker_id: u32,
        now: UnixMs,
    ) -> (UnixMs, bool) {
        let mine = |s: u64, w: u32| (s, w) == (system_identifier, worker_id);
        if let Some(h) = self
            .holding
            .filter(|h| mine(h.system_identifier, h.worker_id))
        {
            return (h.since_ms, false);
        }
        let since = match &self.held {
            Some(h) if self.holding.is_none() && mine(h.system_identifier, h.worker_id) => {
                h.claimed_at_ms
            }
            _ => now,
        };
        self.holding = Some(Holding {
            system_identifier,
            worker_id,
            since_ms: since,
        });
        (since, true)
    }

    /// When this server claimed `who`'s worker id, if it remembers: only
    /// for the same system, timeline and worker id.
    pub fn claimed_at(&self, who: &Claimant) -> Option<UnixMs> {
        self.held
            .as_ref()
            .filter(|h| {
                (h.system_identifier, h.timeline, h.worker_id)
                    == (who.system_identifier, who.timeline, who.worker_id)
            })
            .map(|h| h.claimed_at_ms)
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
            backfill: false,
        }
    }

    fn row(worker_id: i32, claimed_at_s: f64, last_seen_s: f64) -> Row {
        Row {
            worker_id: Some(worker_id),
            system_identifier: Some(7),
            timeline: Some(1),
            instance: Some(3),
            name: Some("db7".into()),
            claimed_at_s: Some(claimed_at_s),
            last_seen_s: Some(last_seen_s),
            backfill: None,
        }
    }

    #[test]
    fn a_row_in_range_is_a_claim() {
        let c = row(5, 1_790_000_000.5, 1_790_000_002.25).claim().unwrap();
        assert_eq!(c.who.worker_id, 5);
        assert_eq!(
            (c.claimed_at_ms, c.last_seen_ms),
            (1_790_000_000_500, 1_790_000_002_250)
        );
    }

    #[test]
    fn rows_that_cannot_be_judged_say_why() {
        let why = |r: Row| r.claim().unwrap_err();
        assert_eq!(why(row(-1, 1.0, 1.0)), "worker_id -1 is negative");
        assert_eq!(
            why(row(5, f64::NEG_INFINITY, 1.0)),
            "claimed_at is -infinity"
        );
        assert_eq!(why(row(5, 1.0, f64::INFINITY)), "last_seen is infinity");
        assert_eq!(why(row(5, 1.0, 9.2e15)), "last_seen is out of range");
        assert_eq!(
            why(Row {
                timeline: Some(0),
                ..row(5, 1.0, 1.0)
            }),
            "timeline 0 is not a timeline"
        );
        assert_eq!(
            why(Row {
                timeline: Some(1 << 40),
                ..row(5, 1.0, 1.0)
            }),
            "timeline 1099511627776 is not a timeline"
        );
        assert_eq!(
            why(Row {
                name: None,
                ..row(5, 1.0, 1.0)
            }),
            "name is NULL"
        );
        assert_eq!(why(Row::default()), "worker_id is NULL");
        let text = Row {
            name: Some("x".repeat(5_000)),
            ..row(-1, 1.0, 1.0)
        }
        .describe_skipped("worker_id -1 is negative");
        assert!(text.len() < 300, "{text}");
        assert!(
            text.contains("worker_id -1,") && text.ends_with(&format!("\"{}…\"", "x".repeat(64))),
            "{text}"
        );
    }

    #[test]
    fn names_are_shown_short_and_printable() {
        assert_eq!(shown("db1"), "db1");
        assert_eq!(shown("a\nb\u{7}c"), "a?b?c");
        assert_eq!(shown(&"é".repeat(70)), format!("{}…", "é".repeat(64)));
    }

    #[test]
    fn an_older_copy_of_a_claim_beside_the_current_one_does_not_keep_it_alive() {
        let me = claim(2, 1, 5, T0 + 1_000, T0);
        let current = claim(1, 1, 5, T0, T0);
        let older = Claim {
            last_seen_ms: T0 - 60_000,
            ..current.clone()
        };
        let mut obs = Observer::default();
        assert_eq!(
            obs.judge(&me, &[older.clone(), current.clone()], T0).len(),
            1
        );
        // Read in either order, the current copy counts: unchanged, it goes stale.
        assert_eq!(
            obs.judge(&me, &[current.clone(), older.clone()], T0 + 2_000)
                .len(),
            1
        );
        assert_eq!(
            obs.judge(&me, &[older, current], T0 + STALE_AFTER_MS as i64),
            vec![]
        );
    }

    #[test]
    fn the_memory_file_round_trips_and_skips_what_it_does_not_know() {
        let m = Memory {
            instance: 42,
            refused_by: Some(claim(9, 2, 5, T0, T0).who),
            held: Some(Held {
                system_identifier: 1,
                timeline: 3,
                worker_id: 5,
                claimed_at_ms: T0,
            }),
            place: Some(
                Failure::new(Class::NotReady, "group 3 given to w9:5432")
                    .detail("both would issue")
                    .hint("stop it"),
            ),
            holding: Some(Holding {
                system_identifier: 1,
                worker_id: 5,
                since_ms: T0,
            }),
        };
        assert_eq!(Memory::parse(&m.text()), m);
        // A place that is not a refusal, or not a failure at all, is damage.
        let warning = Failure::new(Class::Warning, "not synced").to_text();
        let damaged = format!(
            "garbage\n{}held 1 x 5 7\nfuture line 1 2 3\nplace {warning}\nplace nonsense\n",
            "instance 42\n"
        );
        assert_eq!(
            Memory::parse(&damaged),
            Memory {
                instance: 42,
                ..Memory::default()
            }
        );
        assert_eq!(Memory::parse(""), Memory::default());
    }

    #[test]
    fn a_group_new_to_a_data_directory_waits_out_the_handover_and_a_copy_does_not() {
        let mut m = Memory::default();
        assert_eq!(m.holding_since(1, 5, T0), (T0, true));
        assert_eq!(m.holding_since(1, 5, T0 + 60_000), (T0, false));
        let during = handover(5, 5, T0, T0 + 1_000).unwrap();
        assert_eq!(during.class, Class::NotReady);
        assert!(
            during.message.contains("Citus group 5) is new to it"),
            "{}",
            during.message
        );
        assert_eq!(handover(5, 5, T0, T0 + HANDOVER_MS as UnixMs), None);
        // Another group (re-added): anew. The same data directory under a
        // promoted standby's timeline is the same holding.
        assert_eq!(m.holding_since(1, 7, T0 + 60_000), (T0 + 60_000, true));
        // A claim remembered from before holdings were kept counts from its time.
        let mut older = Memory {
            held: Some(Held {
                system_identifier: 1,
                timeline: 2,
                worker_id: 5,
                claimed_at_ms: T0 - 86_400_000,
            }),
            ..Memory::default()
        };
        assert_eq!(older.holding_since(1, 5, T0), (T0 - 86_400_000, true));
        let mut other = older.clone();
        other.holding = None;
        assert_eq!(other.holding_since(2, 5, T0), (T0, true));
    }

    #[test]
    fn a_remembered_claim_counts_for_its_own_system_timeline_and_worker_id_only() {
        let m = Memory {
            held: Some(Held {
                system_identifier: 1,
                timeline: 3,
                worker_id: 5,
                claimed_at_ms: T0,
            }),
            ..Memory::default()
        };
        let who = |s, t, w| Claimant {
            system_identifier: s,
            timeline: t,
            worker_id: w,
            instance: 99,
        };
        assert_eq!(m.claimed_at(&who(1, 3, 5)), Some(T0));
        assert_eq!(m.claimed_at(&who(1, 4, 5)), None);
        assert_eq!(m.claimed_at(&who(1, 3, 6)), None);
        assert_eq!(m.claimed_at(&who(2, 3, 5)), None);
    }

    #[test]
    fn a_claim_whose_row_is_removed_counts_until_it_goes_stale() {
        let me = claim(2, 1, 5, T0 + 1_000, T0);
        let other = claim(1, 1, 5, T0, T0);
        let mut obs = Observer::default();
        assert_eq!(
            obs.judge(&me, std::slice::from_ref(&other), T0),
            vec![Finding::Refuse(other.clone())]
        );
        // The table here was emptied: still refused, until stale.
        assert_eq!(
            obs.judge(&me, &[], T0 + 2_000),
            vec![Finding::Refuse(other.clone())]
        );
        assert_eq!(obs.judge(&me, &[], T0 + STALE_AFTER_MS as i64 - 1).len(), 1);
        assert_eq!(obs.judge(&me, &[], T0 + STALE_AFTER_MS as i64), vec![]);
        // Long gone, it is forgotten.
        obs.judge(&me, &[], T0 + FORGET_AFTER_MS as i64);
        assert!(obs.last.is_empty() && obs.changed_at.is_empty());
    }

    #[test]
    fn a_remembered_refusal_holds_with_no_row_at_all() {
        let me = claim(2, 1, 5, T0 + 1_000, T0 + 100_000);
        let other = claim(1, 1, 5, T0, T0);
        let mut obs = Observer::default();
        let start = T0 + 100_000;
        obs.remember(other.who.clone(), start);
        let f = obs.judge(&me, &[], start);
        assert!(
            matches!(&f[..], [Finding::Refuse(c)] if c.who == other.who),
            "{f:?}"
        );
        assert!(
            f[0].failure(start).message.contains("before it restarted"),
            "{}",
            f[0].failure(start).message
        );
        assert_eq!(obs.judge(&me, &[], start + STALE_AFTER_MS as i64), vec![]);
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
            Observer::default().judge(&b, std::slice::from_ref(&a), T0)[0],
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
            Observer::default().judge(&old, std::slice::from_ref(&promoted), now),
            vec![Finding::Refuse(promoted.clone())]
        );
        // The promoted side believes a copy of its own history only once it
        // changes (see the test below).
        let mut obs = Observer::default();
        assert_eq!(
            obs.judge(&promoted, std::slice::from_ref(&old), now),
            vec![]
        );
        let refreshed = Claim {
            last_seen_ms: now + 2_000,
            ..old
        };
        assert_eq!(
            obs.judge(&promoted, std::slice::from_ref(&refreshed), now + 2_000),
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
        assert_eq!(
            obs.judge(&promoted, std::slice::from_ref(&old), T0 + 1_000),
            vec![]
        );
        assert_eq!(
            obs.judge(&promoted, std::slice::from_ref(&old), T0 + 3_000),
            vec![]
        );
        // A split brain: the old primary still refreshes it.
        old.last_seen_ms = T0 + 3_000;
        assert_eq!(
            obs.judge(&promoted, std::slice::from_ref(&old), T0 + 3_100),
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
        assert_eq!(
            obs.judge(&me, std::slice::from_ref(&other), start),
            vec![Finding::Refuse(other.clone())]
        );
        assert_eq!(
            obs.judge(
                &me,
                std::slice::from_ref(&other),
                start + STALE_AFTER_MS as i64 - 1
            )
            .len(),
            1
        );
        assert_eq!(
            obs.judge(
                &me,
                std::slice::from_ref(&other),
                start + STALE_AFTER_MS as i64
            ),
            vec![]
        );
        // Without the memory it would have been stale at once.
        assert_eq!(Observer::default().judge(&me, &[other], start), vec![]);
    }

    #[test]
    fn this_runs_own_rows_under_another_worker_id_are_not_a_collision() {
        let me = claim(1, 1, 6, T0, T0);
        let earlier_id = claim(1, 1, 5, T0 - 60_000, T0 - 1_000);
        let other = claim(2, 1, 5, T0, T0);
        assert_eq!(
            Observer::default().judge(&me, &[earlier_id, other], T0),
            vec![]
        );
    }

    #[test]
    fn a_claim_that_stops_changing_goes_stale_by_this_servers_clock() {
        let me = claim(2, 1, 5, T0 + 1_000, T0);
        let mut obs = Observer::default();
        let mut other = claim(1, 1, 5, T0, T0);
        assert_eq!(obs.judge(&me, std::slice::from_ref(&other), T0).len(), 1);
        // Refreshed: live however far its clock is from ours.
        other.last_seen_ms = T0 - 3_600_000;
        assert_eq!(
            obs.judge(&me, std::slice::from_ref(&other), T0 + 2_000)
                .len(),
            1
        );
        // Not refreshed for STALE_AFTER_MS of our time: stale, nothing refused.
        assert_eq!(
            obs.judge(
                &me,
                std::slice::from_ref(&other),
                T0 + 2_000 + STALE_AFTER_MS as i64 - 1
            )
            .len(),
            1
        );
        assert_eq!(
            obs.judge(
                &me,
                std::slice::from_ref(&other),
                T0 + 2_000 + STALE_AFTER_MS as i64
            ),
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
            Observer::default().judge(&me, std::slice::from_ref(&recent), T0),
            vec![Finding::Refuse(recent)]
        );
    }

    #[test]
    fn a_claim_ended_at_shutdown_is_stale_to_a_newcomer_and_counts_on_for_a_watcher() {
        // The upgraded cluster after pg_upgrade sees its old cluster's
        // ended claim for the first time: nothing to refuse.
        let me = claim(2, 1, 5, T0 + 60_000, T0 + 60_000);
        let ended = claim(1, 1, 5, T0, ENDED_MS);
        assert_eq!(
            Observer::default().judge(&me, std::slice::from_ref(&ended), T0 + 60_000),
            vec![]
        );
        // A server that watched the claim live sees it change: still
        // counted for STALE_AFTER_MS, as after any refresh, then stale.
        let mut watcher = Observer::default();
        let live = claim(1, 1, 5, T0, T0 + 50_000);
        assert_eq!(watcher.judge(&me, &[live], T0 + 50_000).len(), 1);
        let seen = watcher.judge(&me, std::slice::from_ref(&ended), T0 + 51_000);
        assert_eq!(seen, vec![Finding::Refuse(ended.clone())]);
        assert!(seen[0]
            .failure(T0 + 51_000)
            .message
            .contains("stopped with its server"));
        assert_eq!(
            watcher
                .judge(
                    &me,
                    std::slice::from_ref(&ended),
                    T0 + 51_000 + STALE_AFTER_MS as i64
                )
                .len(),
            0
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

    #[test]
    fn a_restart_or_a_frozen_copy_of_its_row_is_no_pair_of_live_servers_but_two_copies_running_are()
    {
        let me = claim(3, 1, 7, T0, T0);
        let instance = |c: &Claim, i: u64| Claim {
            who: Claimant {
                instance: i,
                ..c.who.clone()
            },
            ..c.clone()
        };
        let before = instance(&claim(1, 1, 5, T0, T0), 1);
        let after = instance(&claim(1, 1, 5, T0, T0 + 1_000), 2);
        let mut obs = Observer::default();
        assert_eq!(obs.judge(&me, std::slice::from_ref(&before), T0), vec![]);
        let moved = |c: &Claim, at: UnixMs| Claim {
            last_seen_ms: at,
            ..c.clone()
        };
        assert_eq!(
            obs.judge(&me, &[moved(&before, T0 + 2_000)], T0 + 2_000),
            vec![]
        );
        // Restarted: the new start deleted its predecessor's row; the old
        // claim, remembered until stale, is no second live server.
        for t in [3_000, 5_000, 7_000] {
            assert_eq!(obs.judge(&me, &[moved(&after, T0 + t)], T0 + t), vec![]);
        }
        // A frozen copy of the old row beside the new (a promoted clone's
        // table serves it): never seen changing, no pair either.
        let mut obs = Observer::default();
        for t in [0, 2_000, 4_000] {
            let rows = [before.clone(), moved(&after, T0 + t)];
            assert_eq!(obs.judge(&me, &rows, T0 + t), vec![]);
        }
        // Two copies of one data directory running at once, both
        // refreshing: reported once each has been seen to change.
        let mut obs = Observer::default();
        assert_eq!(obs.judge(&me, &[before.clone(), after.clone()], T0), vec![]);
        let f = obs.judge(
            &me,
            &[moved(&before, T0 + 2_000), moved(&after, T0 + 2_000)],
            T0 + 2_000,
        );
        assert!(matches!(f.as_slice(), [Finding::Between(..)]), "{f:?}");
    }

    #[test]
    fn a_backfill_claim_on_a_live_worker_id_refuses_nothing_live_and_its_own_server_judges_it() {
        let me = claim(3, 1, 5, T0 + 1_000, T0);
        let their_backfill = Claim {
            backfill: true,
            ..claim(1, 1, 5, T0, T0)
        };
        // Claimed earlier, yet no refusal of this live server, no warning.
        let mut obs = Observer::default();
        assert_eq!(
            obs.judge(&me, std::slice::from_ref(&their_backfill), T0),
            vec![]
        );
        // Where a live claim and another server's backfill claim meet
        // elsewhere (a fan-in, whose publishers may never see each other),
        // the pair is reported: the backfilling server may not know.
        let onlooker = claim(9, 1, 99, T0, T0);
        let live = claim(3, 1, 5, T0, T0);
        let f = Observer::default().judge(&onlooker, &[live.clone(), their_backfill.clone()], T0);
        assert!(matches!(f.as_slice(), [Finding::Between(..)]), "{f:?}");
        assert!(
            f[0].failure(T0)
                .message
                .contains("as its backfill worker id"),
            "{:?}",
            f[0].failure(T0).message
        );
        // The backfilling server's own judging (its backfill claim as `me`)
        // still meets the live claim on that id, and another's backfill one.
        let mine = Claim {
            backfill: true,
            ..claim(1, 1, 5, T0, T0)
        };
        let f = Observer::default().judge(&mine, std::slice::from_ref(&live), T0);
        assert_eq!(f.len(), 1, "{f:?}");
        let other_backfill = Claim {
            backfill: true,
            ..claim(4, 1, 5, T0, T0)
        };
        assert_eq!(
            Observer::default()
                .judge(&mine, &[other_backfill], T0)
                .len(),
            1
        );
    }
}
