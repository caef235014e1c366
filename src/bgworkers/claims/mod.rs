//! Worker-id claims ("snowflake_id claims" background worker): where
//! `snowflake_id.claims_database` names a database, this server keeps a row
//! there in `snowflake_claims` saying which worker id it issues IDs under,
//! refreshes it every two seconds, and judges the rows other servers' data
//! brought along (logical replication, pglogical). What it concludes is
//! published here in shared memory: a refusal (generation stops until the
//! other claim goes stale), or a warning, both shown in `problem` and the
//! server log.
//!
//! A separate worker, not the reserver: it runs SQL in a database, which
//! can wait on locks or a full disk, and the durable mark must never wait
//! for that. Generation itself pays nothing: a refusal revokes the
//! published durable window, which sends callers down the slow path that
//! checks for refusals anyway.

pub mod away;
mod table;

use super::skeleton::{enter, Worker};
use crate::citus;
use crate::mark;
use crate::pg::clock::{now_ms, sleep_on_latch};
use crate::pg::datadir::data_dir;
use crate::pg::text::ident;
use crate::pg::{error, process, signals, xlog};
use crate::settings;
use crate::shmem::Shmem;
use pgrx::bgworkers::BackgroundWorkerBuilder;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgLogLevel};
use snowflake_id_core::claims::{
    self, Claim, Claimant, Finding, Held, Memory, Observer, REFRESH_MS, STALE_AFTER_MS,
};
use snowflake_id_core::config::{self, Config};
use snowflake_id_core::failure::literal;
use snowflake_id_core::mark::replace_file;
use snowflake_id_core::shared_text::SharedText;
use snowflake_id_core::{Class, Failure};
use std::time::Duration;

/// How often the server log is reminded of a collision that persists.
const REMIND_EVERY_MS: i64 = 60_000;
/// The longest a claims transaction waits for a lock before it gives up
/// until the next refresh (`lock_timeout`: a background worker's SPI never
/// arms `statement_timeout`).
const LOCK_TIMEOUT_MS: u64 = 1_500;
/// How long the worker stays out of a database it found to be a template.
const TEMPLATE_RECHECK_MS: i64 = 10_000;
/// This server's claims memory across restarts, in the data directory.
const CLAIMS_FILE: &str = "snowflake_id.claims";

/// The worker id an onlooker judges claims as: more than any layout's
/// worker bits can hold, so it collides with no one.
const NO_WORKER_ID: u32 = u32::MAX;

/// What the claims say short of a refusal: a collision this server goes on
/// through, or why claims are not being kept. For `problem`.
pub fn warning(shm: &Shmem) -> Option<String> {
    if !settings::claims_kept() {
        return None;
    }
    let text = |t: &SharedText| t.failure().map(|f| f.message);
    // Trouble first: while claims cannot be read, a finding is dated; so
    // it is while the worker is down.
    text(shm.claims.trouble())
        .or_else(|| {
            shm.claims.pid.get().is_none().then(|| {
                "the claims worker (snowflake_id claims) is not running: this server's worker-id claim is not refreshed".to_string()
            })
        })
        .or_else(|| text(shm.claims.finding()))
        .or_else(|| two_citus_databases(shm))
        .or_else(|| text(shm.claims.skipped()))
}

/// Where a second database lists this node in its Citus metadata (a copy of
/// the Citus database, made with CREATE DATABASE ... TEMPLATE), which of the
/// two the claims and the worker id follow. Citus keeps only its cluster's
/// database up to date, and nothing on this server tells which that is.
fn two_citus_databases(shm: &Shmem) -> Option<String> {
    let (kept, other) = (shm.claims.offered_database()?, shm.claims.other_member()?);
    if kept == other {
        return None;
    }
    let name = crate::pg::database::name;
    let (kept, other) = (name(kept)?, name(other)?);
    let (kept_id, other_id) = (ident(&kept), ident(&other));
    Some(format!(
        "databases {kept_id} and {other_id} both hold Citus metadata that lists this node: the worker-id claim is kept, and the worker id follows Citus's group id, in {kept_id} (the first one a session used); if {other_id} is the cluster's database, set snowflake_id.claims_database = {} and restart, or drop the copy that is not the cluster's",
        literal(&other)
    ))
}

/// The database claims are kept in: the one set, or on a Citus node
/// without one, the Citus database once the worker is connected to it.
pub fn database_name(shm: &Shmem) -> Option<String> {
    settings::claims_database().or_else(|| shm.claims.database().get().filter(|n| !n.is_empty()))
}

/// Registers the claims worker when claims are kept (`settings::claims_kept`;
/// never in binary-upgrade mode: pg_upgrade starts both clusters so to read
/// and write their catalogs, neither issues IDs then, and a claim refreshed
/// by the old one would reach the upgraded cluster as another live server's
/// claim on its worker id). It starts once recovery has ended: a standby
/// issues no IDs and claims nothing, a promoted one claims under its new
/// timeline.
pub(super) fn register() {
    if !settings::claims_kept() {
        return;
    }
    BackgroundWorkerBuilder::new("snowflake_id claims")
        .set_type("snowflake_id claims")
        .set_library("snowflake_id")
        .set_function("snowflake_claims_main")
        .enable_spi_access()
        .set_restart_time(Some(Duration::from_secs(5)))
        .load();
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_claims_main(_arg: pg_sys::Datum) {
    let Some(shm) = enter(Worker::Claims) else {
        return;
    };
    let db = match settings::claims_database() {
        Some(db) => Database::Named(db),
        // A Citus node without a claims database: the database whose Citus
        // metadata this node belongs to, once a backend has read it there
        // (the first ID, or the status, drawn or read there).
        None => loop {
            if signals::terminating() {
                process::exit(1);
            }
            if let Some(oid) = shm.claims.offered_database() {
                break Database::Citus(oid);
            }
            // IDs go on meanwhile only where the worker id was settled
            // without the Citus database: from the settings, or before that
            // database was dropped.
            if shm.worker.get().is_some() {
                let why = if shm.claims.forgotten() {
                    "the Citus database it was kept in was dropped"
                } else {
                    "no session has drawn an ID or read the status in this node's Citus database since the server started"
                };
                shm.claims.trouble().set(
                    &Failure::new(
                        Class::Warning,
                        format!("this server's worker-id claim is not kept: {why}"),
                    )
                    .hint("The first ID drawn, or status read, in this node's Citus database tells the claims worker where to keep it.")
                    .to_text(),
                );
            }
            sleep_on_latch(100);
        },
    };
    // Stays if the connection fails (FATAL ends this process; the
    // postmaster starts it again in 5 s), so the status says why.
    shm.claims.trouble().set(
        &Failure::new(
            Class::NotReady,
            format!(
                "this server's worker-id claim is not kept: the claims worker cannot connect to {}",
                db.words()
            ),
        )
        .to_text(),
    );
    // Out of the database while a command that needs it free runs.
    while shm.claims.kept_out(now_ms()) {
        if signals::terminating() {
            process::exit(1);
        }
        sleep_on_latch(100);
    }
    // Connecting waits for the database's lock without end (a RENAME of it
    // in an open or prepared transaction holds it): until connected and
    // pinned (lock_timeout), SIGTERM ends the wait, as it ends a backend's.
    let db = connect(&db);
    shm.claims.database().set(&db);
    pin_session();
    // From here every wait is bounded by the pinned timeouts, and SIGTERM
    // only asks the loop to end, so that a shutdown's last transaction
    // (`release`) runs.
    signals::sigterm_ends_loop_only();
    shm.claims.trouble().set("");
    // Calls that wait for this worker's first judging (on Citus) wait from now.
    if shm.worker.get().is_none() {
        shm.worker
            .wait_until(now_ms() + crate::issue::FIRST_CLAIMS_WAIT_MS);
    }
    let mut keeper = Keeper::new(shm, db);
    loop {
        if signals::terminating() {
            if signals::server_shutting_down() {
                keeper.release(shm);
            }
            // Status 1: the postmaster starts it again (after a shutdown
            // it does not); 0 would unregister it until the next restart.
            process::exit(1);
        }
        if let Some(f) = in_transaction(is_template).ok().flatten() {
            leave_template(shm, f);
        }
        signals::reload_if_asked();
        let group = follow_group(shm);
        if matches!(group, Group::Moved) {
            keeper.moving_unread = None;
        }
        keeper.group_read = !matches!(group, Group::Unread);
        keeper.refresh(shm);
        sleep_on_latch(REFRESH_MS);
    }
}

/// This server's claimant identity and name.
/// The worker id this server claims: the one it issues with, or, before
/// that is settled, the one it will (on a Citus node, read here when this
/// is the Citus database). A failure is the status's `problem` already.
fn worker_id(shm: &Shmem, cfg: &Config) -> Option<u32> {
    match (shm.worker.get(), cfg.worker) {
        (Some(w), _) => Some(w),
        (None, config::Worker::CitusGroup { offset }) => {
            in_transaction(|| citus::read_worker_id(shm, offset, &cfg.layout, citus::Ask::Nodes))
                .ok()
                .and_then(Result::ok)
                .map(|(w, _)| w)
        }
        (None, config::Worker::Fixed(w)) => Some(w),
    }
}

/// What `follow_group` found of the node's group.
enum Group {
    /// Nothing to follow (the worker id is not a group id, or not settled
    /// yet), or the group it follows.
    Same,
    /// The worker id moved (`ClaimsState::moving` says from what to what).
    Moved,
    /// The group could not be read.
    Unread,
}

/// On a Citus node, the worker id follows the node's group id while the
/// server runs: Citus gives a node a new group id when it is added again
/// (and a promoted clone its own, which it waits for: see
/// `citus::read_worker_id`). Read at every refresh, so IDs carry the new
/// group within one refresh of Citus writing it.
fn follow_group(shm: &Shmem) -> Group {
    let Ok(cfg) = settings::config() else {
        return Group::Unread;
    };
    let config::Worker::CitusGroup { offset } = cfg.worker else {
        return Group::Same;
    };
    let Some(old) = shm.worker.get() else {
        return Group::Same;
    };
    let Ok(Ok((new, origin))) =
        in_transaction(|| citus::read_worker_id(shm, offset, &cfg.layout, citus::Ask::Nodes))
    else {
        return Group::Unread;
    };
    if new == old {
        return Group::Same;
    }
    // Refused from before the move until a refresh has read the other
    // nodes' claims on the new id and judged them (it lifts the refusal
    // when none collides): a group id given by hand, or metadata edited,
    // must not issue a row under an id another node holds. Kept in shared
    // memory, so that a restart of this worker alone keeps refusing.
    hold_for_move(
        shm,
        &format!("this node's worker id moves from {old} to {new} ({origin})"),
    );
    if shm.worker.follow(old, new) {
        log!(
            "snowflake_id: worker id {old} -> {new}: Citus gave this node another group ({origin})"
        );
    }
    Group::Moved
}

/// Refuses IDs for a change of the worker id, or of the database claims are
/// judged in (`what`), until a refresh has read the other nodes' claims:
/// kept in shared memory, so that a restart of this worker alone keeps it.
fn hold_for_move(shm: &Shmem, what: &str) {
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

/// Whether the worker id is a Citus group id (`worker_id_source = 'citus'`),
/// which the cluster's metadata can give to another node.
fn follows_citus() -> bool {
    settings::config().is_ok_and(|c| matches!(c.worker, config::Worker::CitusGroup { .. }))
}

/// Lets IDs be issued under `worker`, the id claims were judged with.
fn settle(shm: &Shmem, worker: u32) {
    if shm.worker.get().is_none() && shm.worker.settle(worker).is_ok() {
        if let Ok(config::Worker::CitusGroup { offset }) = settings::config().map(|c| c.worker) {
            log!(
                "snowflake_id: worker id {worker}, from Citus group id {}",
                i64::from(worker) - i64::from(offset)
            );
        }
    }
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

fn memory_path() -> std::path::PathBuf {
    data_dir().join(CLAIMS_FILE)
}

/// The memory file as it is: a file damaged past reading as UTF-8 keeps
/// the lines that still parse (a refusal among them), and says so.
fn read_memory() -> Memory {
    let bytes = match std::fs::read(memory_path()) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Memory::default(),
        Err(e) => {
            log!(
                "snowflake_id: could not read {}: {e}",
                memory_path().display()
            );
            return Memory::default();
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    if let std::borrow::Cow::Owned(_) = text {
        log!(
            "snowflake_id: {} is damaged (not UTF-8): the lines that still read are kept",
            memory_path().display()
        );
    }
    Memory::parse(&text)
}

/// A refusal of the cluster's, as remembered from the server's last run.
fn remembered(p: Failure) -> Failure {
    Failure {
        message: format!(
            "{} (when this server last ran; the coordinator has not answered since)",
            p.message
        ),
        ..p
    }
}

/// Replaced whole (see `replace_file`): a crash leaves the old memory or
/// the new one.
fn save_memory(m: &Memory) {
    if let Err(e) = replace_file(&data_dir(), CLAIMS_FILE, m.text().as_bytes()) {
        log!(
            "snowflake_id: could not write {}: {e}",
            memory_path().display()
        );
    }
}

/// Where shared memory is set up (the postmaster, at start and after a
/// crash): a server that was refusing because of a claim goes on refusing
/// until its claims worker has seen that claim go stale, so a restart does
/// not open a window for repeats.
pub fn start(shm: &Shmem) {
    if !settings::claims_kept() {
        return;
    }
    let memory = read_memory();
    // The cluster's word comes first, as in `Keeper::publish`; it stands
    // only where the worker id is still Citus's group id.
    if let Some(p) = memory.place.filter(|_| follows_citus()) {
        shm.claims.finding().set(&remembered(p).to_text());
        shm.refusal.set_claim(true);
        return;
    }
    if let Some(c) = memory.refused_by {
        let f = Failure::new(
            Class::NotReady,
            format!(
                "worker id {} was claimed by another live server (system identifier {}, timeline {}) when this server last ran",
                c.worker_id, c.system_identifier, c.timeline
            ),
        )
        .detail("This server issues no IDs until its claims worker sees that claim go stale.")
        .hint("Give one of the two servers another worker id and restart it.");
        shm.claims.finding().set(&f.to_text());
        shm.refusal.set_claim(true);
    }
}

/// The claims worker's memory between refreshes.
struct Keeper {
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
    moving_unread: Option<String>,
    /// Whether this loop's `follow_group` read the node's group.
    group_read: bool,
}

impl Keeper {
    fn new(shm: &Shmem, db: String) -> Keeper {
        let mut memory = read_memory();
        // A copy of another server's data directory (a restored base
        // backup, a standby) has the original's memory file: what it says
        // of instances and claims belongs to the original.
        if mark::start::started_as_copy(shm) {
            // The original's rows and claim are the original's: a copy
            // deletes none of them and claims afresh (a promoted standby
            // still inherits its old primary's claim time from the table).
            memory = Memory {
                refused_by: memory.refused_by,
                place: memory.place,
                ..Memory::default()
            };
        }
        let mut observer = Observer::default();
        // One instance number per life of shared memory: a restart of this
        // worker alone keeps it.
        let mut instance = shm.claims.instance();
        while instance == 0 {
            let mut b = [0u8; 8];
            // SAFETY: fills the buffer it is given.
            unsafe { pg_sys::pg_strong_random(b.as_mut_ptr().cast(), b.len()) };
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
            .filter(|_| follows_citus())
            .map(remembered);
        // A database offered anew while IDs were issued (see
        // `citus::judge_again`), taken up here with its name. A move from
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

    fn refresh(&mut self, shm: &Shmem) {
        // A server without a usable worker id issues nothing and claims
        // nothing (the status says why), but still sees other servers
        // collide: a fan-in subscriber that only reads, say.
        let worker_id = settings::config().ok().and_then(|c| worker_id(shm, c));
        let (who, name) = me(shm, worker_id.unwrap_or(NO_WORKER_ID));
        let claimed_at = self.memory.claimed_at(&who);
        let (mine, previous) = (who.clone(), self.previous);
        let claiming = worker_id.is_some();
        let read = match in_transaction(move || {
            table::write_and_read(&mine, claiming, previous, claimed_at, &name)
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
                return self.trouble(shm, Some(f));
            }
            Ok(Err(f)) | Err(f) => {
                self.still_moving(shm, &f.message);
                return self.trouble(shm, Some(f));
            }
        };
        self.previous = None;
        // On Citus, the other nodes' own claims too: a worker id given twice
        // in one cluster meets here, no publication needed. Nodes that do not
        // answer are said; the claims that did arrive are judged all the same.
        let mut read = read;
        let unread = match in_transaction(table::read_cluster) {
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
        };
        self.trouble(shm, unread);
        if let Some(at) = read.claimed_at_ms.filter(|at| Some(*at) != claimed_at) {
            self.memory.held = Some(Held {
                system_identifier: who.system_identifier,
                timeline: who.timeline,
                worker_id: who.worker_id,
                claimed_at_ms: at,
            });
            save_memory(&self.memory);
        }
        self.report_skipped(shm, &read.skipped);
        let now = now_ms();
        let onlooker = Claim {
            who: who.clone(),
            name: String::new(),
            claimed_at_ms: now,
            last_seen_ms: now,
        };
        let mine = read
            .claims
            .iter()
            .find(|c| c.who == who)
            .unwrap_or(&onlooker);
        let findings = self.observer.judge(mine, &read.claims, now);
        // On a Citus worker, where the coordinator's metadata puts it. A
        // coordinator out of reach changes nothing: a refusal stands, over
        // restarts too (a removed node is often cut off from its old
        // cluster). Nor does a worker id not read this time.
        // Only the coordinator's answer changes the remembered refusal; it
        // is not applied while the worker id is not Citus's group id (a
        // setting changed, or failing to load), and not forgotten either.
        if !follows_citus() {
            self.place = None;
        } else if let Some(w) = worker_id {
            if let Ok(Some(verdict)) = in_transaction(move || citus::membership_problem(w)) {
                let refusal = verdict.clone().filter(|f| f.class == Class::NotReady);
                if refusal != self.memory.place {
                    self.memory.place = refusal;
                    save_memory(&self.memory);
                }
                self.place = verdict;
            }
        }
        self.report_place();
        let place = self.place.clone().filter(|f| f.class == Class::NotReady);
        let moving = self.moving(shm);
        self.publish(
            shm,
            &findings,
            place.or(moving).or_else(|| self.place.clone()),
            now,
        );
        // Judged once: where the first ID waited for this (on Citus), the
        // worker id is now this server's to issue with, or refused above.
        if let Some(w) = worker_id {
            settle(shm, w);
        }
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
    fn release(&self, shm: &Shmem) {
        // The SIGTERM set a flag only (`sigterm_ends_loop_only`): this
        // last transaction runs; the lock timeout bounds its wait, and its
        // commit waits for no standby.
        let (system_identifier, timeline) = xlog::origin();
        let instance = shm.claims.instance();
        let released =
            in_transaction(move || table::end_claims(system_identifier, timeline, instance));
        if !matches!(released, Ok(Some(()))) {
            log!(
                "snowflake_id: this server's worker-id claim in database \"{}\" could not be marked as ended at shutdown; it goes stale in {} s",
                self.db,
                STALE_AFTER_MS / 1000
            );
        }
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
                log!("snowflake_id: the coordinator's metadata lists this node in its group again")
            }
        }
        self.place_logged = now;
    }

    /// Rows that cannot be judged are skipped; each is told to the log
    /// once, and the first is shown in `problem` while it lasts.
    fn report_skipped(&mut self, shm: &Shmem, skipped: &[String]) {
        for s in skipped {
            if !self.skipped_logged.contains(s) {
                log!("snowflake_id: {s}");
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
                log!(
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
            log!(
                "snowflake_id: no other live server claims this server's worker id any more{}",
                if was { "; issuing IDs again" } else { "" }
            );
        } else if key.is_empty() {
            log!("snowflake_id: no two live servers claim one worker id any more");
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

/// Connects to the claims database as the bootstrap superuser, the one
/// role every cluster has and no database owner can change. A database
/// whose owner set `ALLOW_CONNECTIONS false` is connected to all the same:
/// an owner alone cannot turn claims off.
/// The database the worker keeps claims in, before it is connected.
enum Database {
    /// `snowflake_id.claims_database`.
    Named(String),
    /// The Citus database a backend offered.
    Citus(pg_sys::Oid),
}

impl Database {
    fn words(&self) -> String {
        match self {
            Database::Named(db) => format!("database \"{db}\" (snowflake_id.claims_database)"),
            Database::Citus(oid) => format!("the Citus database (oid {})", oid.to_u32()),
        }
    }
}

/// Connects to the claims database; its name.
fn connect(db: &Database) -> String {
    match db {
        Database::Named(db) => {
            if ["template0", "template1"].contains(&db.as_str()) {
                // Before connecting: a connection to a template makes every
                // CREATE DATABASE fail while it lasts.
                raise_template(db);
            }
            let name = std::ffi::CString::new(db.as_str()).unwrap_or_default();
            // SAFETY: called once, from a registered background worker
            // with database access, before any transaction.
            unsafe {
                pg_sys::BackgroundWorkerInitializeConnection(
                    name.as_ptr(),
                    std::ptr::null(),
                    pg_sys::BGWORKER_BYPASS_ALLOWCONN,
                )
            };
            db.clone()
        }
        Database::Citus(oid) => {
            // SAFETY: as above.
            unsafe {
                pg_sys::BackgroundWorkerInitializeConnectionByOid(
                    *oid,
                    pg_sys::InvalidOid,
                    pg_sys::BGWORKER_BYPASS_ALLOWCONN,
                )
            };
            in_transaction(|| {
                Spi::get_one::<String>("SELECT pg_catalog.current_database()::pg_catalog.text")
            })
            .ok()
            .and_then(Result::ok)
            .flatten()
            .unwrap_or_default()
        }
    }
}

fn template_failure(db: &str) -> Failure {
    Failure::new(
        Class::InvalidParameter,
        format!("snowflake_id.claims_database names the template database \"{db}\": claims are not kept"),
    )
    .detail("A template cannot be copied while a session is connected to it, and the claims worker stays connected; it looks again every 10 seconds.")
    .hint("Set snowflake_id.claims_database to a database that is not a template (one per server, where the extension is installed) and restart PostgreSQL, or make this one an ordinary database again (ALTER DATABASE ... IS_TEMPLATE false).")
}

fn raise_template(db: &str) -> ! {
    let f = template_failure(db);
    if let Some(shm) = crate::shmem::get() {
        shm.claims.trouble().set(&f.to_text());
    }
    error::log(f, PgLogLevel::WARNING);
    // Status 0: the postmaster does not start it again.
    process::exit(0)
}

/// Leaves a database that is (or became) a template: a template cannot be
/// copied while anyone is connected to it, and a claims worker there would
/// make every CREATE DATABASE from it fail. Looks again in 10 seconds (its
/// owner may make it an ordinary database again).
fn leave_template(shm: &Shmem, f: Failure) -> ! {
    shm.claims.trouble().set(&f.to_text());
    error::log(f, PgLogLevel::WARNING);
    shm.claims.stay_out_until(now_ms() + TEMPLATE_RECHECK_MS);
    // Status 1: the postmaster starts it again, and it waits first.
    process::exit(1)
}

/// Whether the database connected to is a template, as the failure to say so.
fn is_template() -> Option<Failure> {
    let template: Option<bool> = Spi::get_one_with_args(
        "SELECT d.datistemplate FROM pg_catalog.pg_database d WHERE d.oid OPERATOR(pg_catalog.=) $1",
        // SAFETY: set once the connection is made, never changed.
        &[unsafe { pg_sys::MyDatabaseId }.into()],
    )
    .unwrap_or(None);
    (template == Some(true)).then(|| {
        template_failure(
            &crate::shmem::get()
                .and_then(database_name)
                .unwrap_or_default(),
        )
    })
}

/// The settings every statement of this worker runs under, whatever the
/// database's or role's defaults say (`ALTER DATABASE ... SET` is the
/// database owner's to change; it reaches this worker at connection): no
/// schema but pg_catalog is searched, so no function, operator or type a
/// user created can stand in for a built-in one (the way Postgres's own
/// logical replication workers run); transactions are read-write at read
/// committed; no timeout a user set applies but the lock wait's own.
fn pin_session() {
    let lock_timeout = LOCK_TIMEOUT_MS.to_string();
    #[cfg_attr(not(any(feature = "pg17", feature = "pg18")), allow(unused_mut))]
    let mut pins: Vec<(&str, &str)> = vec![
        ("search_path", ""),
        ("default_transaction_read_only", "off"),
        ("default_transaction_isolation", "read committed"),
        ("default_transaction_deferrable", "off"),
        ("statement_timeout", "0"),
        ("lock_timeout", &lock_timeout),
        ("idle_in_transaction_session_timeout", "0"),
        ("synchronous_commit", "local"),
        ("standard_conforming_strings", "on"),
        ("transform_null_equals", "off"),
        ("row_security", "on"),
        // An error is the worker's to catch and report, never its end.
        ("exit_on_error", "off"),
    ];
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    pins.push(("transaction_timeout", "0"));
    for (name, value) in pins {
        crate::pg::guc::pin(name, value);
    }
}

/// Runs `f` in a transaction of its own, as the bootstrap superuser
/// whatever role or session authorization a database default set, in a
/// security-restricted operation (no SET ROLE, no temporary objects: what
/// Postgres does while it runs maintenance on a table); an error rolls it
/// back and comes back as a failure instead of ending the worker.
fn in_transaction<R>(
    f: impl FnOnce() -> R + std::panic::UnwindSafe + std::panic::RefUnwindSafe,
) -> Result<R, Failure> {
    let (mut user, mut context) = (pg_sys::InvalidOid, 0);
    // SAFETY: the transaction calls of every background worker's loop. The
    // user id and security context are put back below on success; an
    // aborted transaction puts back what it began with itself.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        pg_sys::SetUserIdAndSecContext(
            pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID),
            context | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
        );
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let result = PgTryBuilder::new(|| Ok(f()))
        .catch_others(|e| {
            let (message, code) = match &e {
                pg_sys::panic::CaughtError::PostgresError(r)
                | pg_sys::panic::CaughtError::ErrorReport(r)
                | pg_sys::panic::CaughtError::RustPanic { ereport: r, .. } => {
                    (r.message().to_string(), r.sql_error_code())
                }
            };
            Err((message, code))
        })
        .execute();
    // SAFETY: ends the transaction begun above, whichever way it went.
    unsafe {
        match result {
            Ok(_) => {
                pg_sys::PopActiveSnapshot();
                pg_sys::SetUserIdAndSecContext(user, context);
                pg_sys::CommitTransactionCommand();
            }
            Err(_) => pg_sys::AbortCurrentTransaction(),
        }
    }
    result.map_err(|(why, code)| {
        let class = if code == PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE {
            Class::LockNotAvailable
        } else {
            Class::Warning
        };
        Failure::new(class, format!("could not keep this server's worker-id claim in snowflake_id.snowflake_claims: {why}"))
            .hint("The claim is tried again every 2 seconds; until it is kept, collisions with other servers' worker ids go unnoticed.")
    })
}
