//! One refresh of the claims at a time (`Keeper`): writes this server's
//! claim, reads the others', judges them, and publishes the finding (and a
//! refusal, through the mark) in shared memory and the server log.

use crate::citus;
use crate::mark;
use crate::pg::clock::now_ms;
use crate::pg::text::ident;
use crate::pg::{error, process, xlog};
use crate::settings;
use crate::shmem::Shmem;
use crate::worker_id::{self, Resolve};
use pgrx::PgLogLevel;
use snowflake_id_core::claims::{
    self, Claim, Claimant, Finding, Held, Memory, Observer, STALE_AFTER_MS,
};
use snowflake_id_core::config::{Config, WorkerSource};
use snowflake_id_core::timefmt::UnixMs;
use snowflake_id_core::{Class, Failure};

use super::memory::{read_memory, remembered, save_memory};
use super::session::in_transaction;
use super::table;

/// How often the server log is reminded of a collision that persists.
const REMIND_EVERY_MS: i64 = 60_000;
/// The worker id an onlooker judges claims as: more than any layout's
/// worker bits can hold, so it collides with no one.
const NO_WORKER_ID: u32 = u32::MAX;

/// This server's claimant identity and name.
/// The worker id this server claims: the one it issues with, or, before
/// that is settled, the one it will (on a Citus node, read here when this
/// is the Citus database). A failure is the status's `problem` already.
pub(super) fn claimed_worker_id(shm: &Shmem, cfg: &Config) -> Option<u32> {
    worker_id::known(shm, cfg).or_else(|| {
        in_transaction(|| worker_id::resolve(shm, cfg, Resolve::Claim))
            .ok()
            .and_then(Result::ok)
    })
}

/// Refuses IDs for a change of the worker id, or of the database claims are
/// judged in (`what`), until a refresh has read the other nodes' claims:
/// kept in shared memory, so that a restart of this worker alone keeps it.
pub(super) fn hold_for_move(shm: &Shmem, what: &str) {
    shm.claims.moving().set(what);
    shm.claims
        .finding()
        .set(&claims::moving(what, None).to_text());
    mark::refuse_for_claim(shm, true);
}

/// The move waiting to be judged, if one is (see `hold_for_move`).
fn moving_what(shm: &Shmem) -> Option<String> {
    shm.claims.moving().get().filter(|m| !m.is_empty())
}

fn me(shm: &Shmem, worker_id: u32) -> (Claimant, String) {
    let (system_identifier, timeline) = xlog::origin();
    (
        Claimant {
            system_identifier,
            timeline,
            worker_id,
            instance: shm.claims.instance(),
        },
        settings::server_name(),
    )
}

/// This server's claim as one refresh wrote it, and the table as it read it.
struct OwnClaim {
    who: Claimant,
    /// The live worker id claimed (none: an onlooker).
    claimed: Option<u32>,
    /// When this server claimed it, as its memory had it.
    claimed_at: Option<UnixMs>,
    backfill: Option<u32>,
    read: table::Read,
}

/// The claims worker's memory between refreshes.
pub(super) struct Keeper {
    db: String,
    observer: Observer,
    memory: Memory,
    /// The instance of this server's previous start, whose rows are still
    /// to be deleted.
    previous: Option<u64>,
    /// What the log was last told, and when.
    logged: Option<(Vec<FindingKey>, i64)>,
    trouble_logged: Option<String>,
    trouble_logged_at: i64,
    /// The rows skipped at the last refresh, as told to the log.
    skipped_logged: Vec<String>,
    /// What the coordinator's metadata last said of this node's place in
    /// the cluster (`None`: nothing wrong), and what the log was last told.
    place: Option<Failure>,
    place_logged: Option<String>,
    /// Why the last read of the other nodes' claims failed, while a move
    /// (`ClaimsState::moving`, see `hold_for_move`) waits for one.
    pub(super) moving_unread: Option<String>,
    /// Whether this loop's `follow_group` read the node's group.
    pub(super) group_read: bool,
}

impl Keeper {
    pub(super) fn new(shm: &Shmem, db: String) -> Keeper {
        let mut memory = read_memory();
        // A copy of another server's data directory (a restored base
        // backup, a standby) has the original's memory file: what it says
        // of instances and claims belongs to the original.
        if mark::resume::started_as_copy(shm) {
            // The original's rows and claim are the original's: a copy
            // deletes none of them and claims afresh (a promoted standby
            // still inherits its old primary's claim time from the table).
            // Its holding of the group is the data directory's: a standby
            // promoted in place holds what its primary held, with no
            // handover (a clone promoted gets its own group, held anew).
            memory = Memory {
                refused_by: memory.refused_by,
                place: memory.place,
                holding: memory.holding,
                ..Memory::default()
            };
        }
        let mut observer = Observer::default();
        // One instance number per life of shared memory: a restart of this
        // worker alone keeps it.
        let mut instance = shm.claims.instance();
        while instance == 0 {
            let mut b = [0u8; 8];
            process::strong_random(&mut b);
            // Kept within bigint, as the table stores it.
            instance = u64::from_le_bytes(b) >> 1;
        }
        shm.claims.set_instance(instance);
        let previous =
            (memory.instance != instance && memory.instance != 0).then_some(memory.instance);
        if let Some(c) = &memory.refused_by {
            observer.remember(c.clone(), now_ms());
        }
        memory.instance = instance;
        save_memory(&memory);
        let place = memory
            .place
            .clone()
            .filter(|_| worker_id::follows_citus())
            .map(remembered);
        // A database offered anew while IDs were issued (see
        // `citus/offer.rs`, `judge_again`), taken up here with its name. A move from
        // before this worker started is in shared memory already.
        if shm.claims.rejudging() {
            hold_for_move(
                shm,
                &format!(
                    "this server's worker-id claim moves to database {}, the Citus database now",
                    ident(&db)
                ),
            );
            shm.claims.set_rejudge(false);
        }
        Keeper {
            db,
            observer,
            memory,
            previous,
            logged: None,
            trouble_logged: None,
            trouble_logged_at: 0,
            skipped_logged: Vec::new(),
            place,
            place_logged: None,
            moving_unread: None,
            group_read: false,
        }
    }

    pub(super) fn refresh(&mut self, shm: &Shmem) {
        let Some(mut own) = self.write_own_claim(shm) else {
            return;
        };
        let unread = self.read_other_nodes(shm, &mut own.read);
        self.trouble(shm, unread);
        self.remember_claim_time(&own);
        self.report_skipped(shm, &own.read.skipped);
        let now = now_ms();
        let findings = self.judge(shm, &own, now);
        self.follow_place(own.claimed);
        self.report_place();
        let place = self.place.clone().filter(|f| f.class == Class::NotReady);
        let handover = own.claimed.and_then(|w| self.handover(w, now));
        let moving = self.moving(shm);
        self.publish(
            shm,
            &findings,
            place.or(moving).or(handover).or_else(|| self.place.clone()),
            now,
        );
        // Judged once: where the first ID waited for this (on Citus), the
        // worker id is now this server's to issue with, or refused above.
        if let Some(w) = own.claimed {
            worker_id::settle_judged(shm, w);
        }
    }

    /// Writes this server's claim (and its backfill worker id's) and reads
    /// the table; `None` once a failure to do so was reported.
    fn write_own_claim(&mut self, shm: &Shmem) -> Option<OwnClaim> {
        // A server without a usable worker id issues nothing and claims
        // nothing (the status says why), but still sees other servers
        // collide: a fan-in subscriber that only reads, say.
        let cfg = settings::config().ok();
        let claimed = cfg.and_then(|c| claimed_worker_id(shm, c));
        let (who, name) = me(shm, claimed.unwrap_or(NO_WORKER_ID));
        let claimed_at = self.memory.claimed_at(&who);
        let (mine, previous) = (who.clone(), self.previous);
        let claiming = claimed.is_some();
        // Claimed only where a backfill could use it (the first backfill
        // says what is wrong otherwise).
        let backfill = cfg
            .zip(claimed)
            .and_then(|(c, live)| worker_id::backfill(c, live).ok());
        let read = match in_transaction(move || {
            table::write_and_read(&mine, claiming, backfill, previous, claimed_at, &name)
        }) {
            Ok(Ok(read)) => read,
            Ok(Err(f)) | Err(f) if f.class == Class::LockNotAvailable => {
                let held = in_transaction(table::lock_holders).ok().flatten();
                let f = match held {
                    Some(who) => Failure {
                        message: format!("{} (the table is held by {who})", f.message),
                        ..f
                    },
                    None => f,
                };
                self.still_moving(shm, &f.message);
                self.trouble(shm, Some(f));
                return None;
            }
            Ok(Err(f)) | Err(f) => {
                self.still_moving(shm, &f.message);
                self.trouble(shm, Some(f));
                return None;
            }
        };
        self.previous = None;
        Some(OwnClaim {
            who,
            claimed,
            claimed_at,
            backfill,
            read,
        })
    }

    /// On Citus, adds the other nodes' own claims to `read`: a worker id
    /// given twice in one cluster meets here, no publication needed. Nodes
    /// that do not answer are said (the returned warning); the claims that
    /// did arrive are judged all the same.
    fn read_other_nodes(&mut self, shm: &Shmem, read: &mut table::Read) -> Option<Failure> {
        match in_transaction(table::read_cluster) {
            Ok(Ok(cluster)) => {
                if self.group_read && moving_what(shm).is_some() {
                    shm.claims.moving().set("");
                    self.moving_unread = None;
                }
                read.claims.extend(cluster.claims);
                read.skipped.extend(cluster.skipped);
                (!cluster.unread.is_empty()).then(|| {
                    Failure::new(
                        Class::Warning,
                        format!(
                            "the claims of other nodes of this Citus cluster could not be read: {}",
                            cluster.unread.join("; ")
                        ),
                    )
                    .hint("A node that cannot be asked cannot be checked for this server's worker id; its claim, once it stops arriving, goes stale as any other.")
                })
            }
            // The transaction's own wording is about the local claim, which
            // was kept: said of the other nodes instead.
            Ok(Err(f)) | Err(f) => {
                let why = f
                    .message
                    .rsplit_once(": ")
                    .map_or(f.message.as_str(), |(_, why)| why)
                    .to_string();
                // A worker id that just moved stays refused: no node's claim
                // on it has been judged yet.
                if moving_what(shm).is_some() {
                    self.moving_unread = Some(why.clone());
                }
                Some(Failure::new(
                    Class::Warning,
                    format!(
                        "the claims of other nodes of this Citus cluster could not be read: {why}"
                    ),
                ))
            }
        }
    }

    /// Remembers across restarts when the table says this server claimed
    /// its worker id (a promoted standby inherits its old primary's time).
    fn remember_claim_time(&mut self, own: &OwnClaim) {
        if let Some(at) = own
            .read
            .claimed_at_ms
            .filter(|at| Some(*at) != own.claimed_at)
        {
            self.memory.held = Some(Held {
                system_identifier: own.who.system_identifier,
                timeline: own.who.timeline,
                worker_id: own.who.worker_id,
                claimed_at_ms: at,
            });
            save_memory(&self.memory);
        }
    }

    /// Judges every claim read against this server's (as an onlooker where
    /// it claims nothing), and its backfill worker id's.
    fn judge(&mut self, shm: &Shmem, own: &OwnClaim, now: i64) -> Vec<Finding> {
        let onlooker = Claim {
            who: own.who.clone(),
            name: String::new(),
            claimed_at_ms: now,
            last_seen_ms: now,
            backfill: false,
        };
        let claims = &own.read.claims;
        let mine = claims
            .iter()
            .find(|c| c.who == own.who)
            .unwrap_or(&onlooker);
        let findings = self.observer.judge(mine, claims, now);
        self.judge_backfill(shm, &own.who, own.backfill, claims, now);
        findings
    }

    /// On a Citus worker, where the coordinator's metadata puts it. A
    /// coordinator out of reach changes nothing: a refusal stands, over
    /// restarts too (a removed node is often cut off from its old cluster).
    /// Nor does a worker id not read this time. Only the coordinator's
    /// answer changes the remembered refusal; it is not applied while the
    /// worker id is not Citus's group id (a setting changed, or failing to
    /// load), and not forgotten either.
    fn follow_place(&mut self, claimed: Option<u32>) {
        if !worker_id::follows_citus() {
            self.place = None;
        } else if let Some(w) = claimed {
            if let Ok(Some(verdict)) = in_transaction(move || citus::membership_problem(w)) {
                let refusal = verdict.clone().filter(|f| f.class == Class::NotReady);
                if refusal != self.memory.place {
                    self.memory.place = refusal;
                    save_memory(&self.memory);
                }
                self.place = verdict;
            }
        }
    }

    /// Judges the claims on the backfill worker id (`backfill`, claimed
    /// beside the live one): another live server's refuses backfills here
    /// (published for `backfill`), whichever claimed first, since nothing
    /// orders two servers' backfills; said in the log when it changes.
    fn judge_backfill(
        &mut self,
        shm: &Shmem,
        who: &Claimant,
        backfill: Option<u32>,
        claims: &[Claim],
        now: i64,
    ) {
        let found = backfill.and_then(|b| {
            let me = Claim {
                who: Claimant { worker_id: b, ..who.clone() },
                name: String::new(),
                claimed_at_ms: now,
                last_seen_ms: now,
                backfill: true,
            };
            let mine = claims.iter().find(|c| c.who == me.who).unwrap_or(&me);
            self.observer
                .judge(mine, claims, now)
                .into_iter()
                .find_map(|f| match f {
                    Finding::Refuse(c) | Finding::Warn(c) => Some(c),
                    Finding::Between(..) => None,
                })
                .map(|c| {
                    Failure::new(
                        Class::NotReady,
                        format!(
                            "backfills are refused: the backfill worker id {b} is also claimed by the live server \"{}\" (system identifier {})",
                            claims::shown(&c.name),
                            c.who.system_identifier
                        ),
                    )
                    .detail("Backfilled IDs of two servers under one worker id can be equal.")
                    .hint("Give this server's snowflake_id.backfill_worker_id a worker id no server uses, and reload.")
                })
        });
        let text = found.as_ref().map(Failure::to_text).unwrap_or_default();
        if shm.backfill.claimed_by_another.get().unwrap_or_default() != text {
            match &found {
                Some(f) => error::log(f.clone(), PgLogLevel::WARNING),
                None => server_log!("snowflake_id: no other live server claims this server's backfill worker id any more"),
            }
            shm.backfill.claimed_by_another.set(&text);
        }
        shm.backfill.set_judged(backfill);
    }

    /// At the server's shutdown, marks this server's claim as ended: its
    /// `last_seen` becomes 1970. A server that starts on these files next
    /// (the upgraded cluster after `pg_upgrade`, a copy of a cleanly stopped
    /// data directory) would otherwise take the claim for another live
    /// server's on its worker id and refuse IDs until it went stale. Servers
    /// already watching the claim see it change, and count it as live for
    /// `STALE_AFTER_MS` more, as after any refresh. Only the postmaster's
    /// SIGTERM does this: a worker ended alone comes back in 5 s to a server
    /// that went on issuing IDs, whose claim must stay live meanwhile.
    pub(super) fn release(&self, shm: &Shmem) {
        // The SIGTERM set a flag only (`sigterm_ends_loop_only`): this
        // last transaction runs; the lock timeout bounds its wait, and its
        // commit waits for no standby.
        let (system_identifier, timeline) = xlog::origin();
        let instance = shm.claims.instance();
        let released =
            in_transaction(move || table::end_claims(system_identifier, timeline, instance));
        if !matches!(released, Ok(Some(()))) {
            server_log!(
                "snowflake_id: this server's worker-id claim in database \"{}\" could not be marked as ended at shutdown; it goes stale in {} s",
                self.db,
                STALE_AFTER_MS / 1000
            );
        }
    }

    /// On a Citus worker, the refusal of a group id new to this data
    /// directory while its handover lasts (see `claims::HANDOVER_MS`): a
    /// node that held it before may still issue under it.
    fn handover(&mut self, worker: u32, now: i64) -> Option<Failure> {
        let Ok(WorkerSource::CitusGroup { offset }) = settings::config().map(|c| c.worker) else {
            return None;
        };
        let group = i64::from(worker) - i64::from(offset);
        if group == 0 {
            return None; // the coordinator's, which Citus gives no other node
        }
        let (since, noted) = self.memory.holding_since(xlog::origin().0, worker, now);
        if noted {
            save_memory(&self.memory);
        }
        claims::handover(worker, group, since, now)
    }

    /// A refresh that could not write this server's claim: a move waiting
    /// to be judged says why it still waits.
    fn still_moving(&mut self, shm: &Shmem, why: &str) {
        let place_refuses = self
            .place
            .as_ref()
            .is_some_and(|f| f.class == Class::NotReady);
        if place_refuses || moving_what(shm).is_none() {
            return;
        }
        self.moving_unread = Some(why.to_string());
        if let Some(f) = self.moving(shm) {
            shm.claims.finding().set(&f.to_text());
        }
    }

    /// The refusal of a move waiting to be judged, if one is.
    fn moving(&self, shm: &Shmem) -> Option<Failure> {
        moving_what(shm).map(|what| claims::moving(&what, self.moving_unread.as_deref()))
    }

    /// What the coordinator's metadata says of this node, told to the log
    /// when it changes.
    fn report_place(&mut self) {
        let now = self.place.as_ref().map(|f| f.message.clone());
        if now == self.place_logged {
            return;
        }
        match &self.place {
            Some(f) => error::log(f.clone(), PgLogLevel::WARNING),
            None => {
                server_log!(
                    "snowflake_id: the coordinator's metadata lists this node in its group again"
                )
            }
        }
        self.place_logged = now;
    }

    /// Rows that cannot be judged are skipped; each is told to the log
    /// once, and the first is shown in `problem` while it lasts.
    fn report_skipped(&mut self, shm: &Shmem, skipped: &[String]) {
        for s in skipped {
            if !self.skipped_logged.contains(s) {
                server_log!("snowflake_id: {s}");
            }
        }
        self.skipped_logged = skipped.to_vec();
        shm.claims.skipped().set(
            &skipped
                .first()
                .map(|s| Failure::new(Class::Warning, s.clone()).to_text())
                .unwrap_or_default(),
        );
    }

    /// Records why claims could not be kept (`None`: they are again),
    /// telling the log once per reason. The last findings stand meanwhile:
    /// a refusal ends when the other claim is seen to go stale, not when
    /// claims cannot be read.
    fn trouble(&mut self, shm: &Shmem, f: Option<Failure>) {
        let Some(f) = f else {
            if self.trouble_logged.take().is_some() {
                shm.claims.trouble().set("");
                server_log!(
                    "snowflake_id: this server's worker-id claim in database \"{}\" is kept again",
                    self.db
                );
            }
            return;
        };
        // Whole, or not at all: a text cut by the shared space is unreadable.
        let f = Failure {
            message: cut(&f.message, 1_200),
            ..f
        };
        shm.claims.trouble().set(&f.to_text());
        let now = now_ms();
        let due = now - self.trouble_logged_at >= REMIND_EVERY_MS;
        if due || self.trouble_logged.as_deref() != Some(f.message.as_str()) {
            self.trouble_logged = Some(f.message.clone());
            self.trouble_logged_at = now;
            error::log(f, PgLogLevel::WARNING);
        }
    }

    fn publish(&mut self, shm: &Shmem, findings: &[Finding], place: Option<Failure>, now: i64) {
        // The node's place in the cluster refuses (its group given to
        // another node) before any claim, and is said before them.
        let place_refuses = place.as_ref().is_some_and(|f| f.class == Class::NotReady);
        let refuse = place_refuses || matches!(findings.first(), Some(Finding::Refuse(_)));
        let text = match (place, findings.first()) {
            (Some(p), _) if place_refuses => p.to_text(),
            (_, Some(f)) => f.failure(now).to_text(),
            (Some(p), None) => p.to_text(),
            (None, None) => String::new(),
        };
        shm.claims.finding().set(&text);
        let was = mark::refuse_for_claim(shm, refuse);
        let refused_by = match findings.first() {
            Some(Finding::Refuse(c)) => Some(c.who.clone()),
            _ => None,
        };
        if refused_by != self.memory.refused_by {
            self.memory.refused_by = refused_by;
            save_memory(&self.memory);
        }
        // Told again when who collides changes, and every minute while it lasts.
        let key: Vec<_> = findings.iter().map(key_of).collect();
        let (same, due) = match &self.logged {
            Some((before, at)) => (*before == key, now - at >= REMIND_EVERY_MS),
            None => (key.is_empty(), false),
        };
        if same && !due {
            return;
        }
        for f in findings {
            error::log(f.failure(now), PgLogLevel::WARNING);
        }
        let about_me = was
            || self
                .logged
                .as_ref()
                .is_some_and(|(k, _)| k.iter().any(|(kind, _, _)| *kind < 2));
        if key.is_empty() && about_me {
            server_log!(
                "snowflake_id: no other live server claims this server's worker id any more{}",
                if was { "; issuing IDs again" } else { "" }
            );
        } else if key.is_empty() {
            server_log!("snowflake_id: no two live servers claim one worker id any more");
        }
        self.logged = (!key.is_empty()).then_some((key, now));
    }
}

/// `text` cut to at most `max` bytes, at a character boundary, marked.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Who a finding is about, and what it decided.
type FindingKey = (u8, Claimant, Option<Claimant>);

fn key_of(f: &Finding) -> FindingKey {
    match f {
        Finding::Refuse(c) => (0, c.who.clone(), None),
        Finding::Warn(c) => (1, c.who.clone(), None),
        Finding::Between(a, b) => (2, a.who.clone(), Some(b.who.clone())),
    }
}
