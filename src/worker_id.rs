//! This server's worker id, with one owner: where it comes from and when it
//! is fixed. The settings name it (`snowflake_id.worker_id`, or a number in
//! the host name), or, with `worker_id_source = 'citus'`, this node's Citus
//! group id gives it, or, with `worker_id_source = 'registry'`, a lease
//! from the registry database (`bgworkers::registry` takes it; the lease
//! file keeps it across restarts: `kept_lease`, `settle_leased`).
//!
//! - `start`: where shared memory is made, an id the settings name is in
//!   force at once, unless the first ID waits for the claims worker's first
//!   judging of the other nodes' claims (a Citus node).
//! - `resolve`: the id a caller works with, before it is settled: a call
//!   about to issue waits for that judging where it is awaited and settles
//!   the id; the status only peeks; the claims worker reads what it claims.
//! - `settle_judged` and `follow`: the claims worker settles the id once it
//!   judged the claims, and follows Citus when it gives this node another
//!   group while the server runs (added again, a clone promoted).
//! - `origin`: where the id came from, in words, for the status.
//! - `backfill`: the worker id IDs for past times carry beside the live one
//!   (`snowflake_id.backfill_worker_id`), by the core's rule; the claims
//!   worker claims it, a backfill carries it. Which worker ids were live
//!   here before, and when, is the state file's history (`mark`).
//!
//! The value itself lives in shared memory (`shmem::worker`), which keeps
//! the rule that a settled id never changes but by `follow`.

use crate::citus;
use crate::mark;
use crate::pg::clock;
use crate::settings;
use crate::shmem::Shmem;
use snowflake_id_core::config::{Config, WorkerSource};
use snowflake_id_core::registry::{Lease, Policy};
use snowflake_id_core::timefmt::format_instant;
use snowflake_id_core::worker_id as rule;
use snowflake_id_core::{Class, Failure};

/// How long calls wait, at most, for the claims worker's first judging of
/// the other nodes' claims on a Citus cluster: from the worker's start
/// (once recovery is over), or from the call if the worker has not started.
pub const FIRST_CLAIMS_WAIT_MS: i64 = 5_000;

/// Where shared memory is made (the postmaster, at start and after a crash
/// of any process), before any backend can use it.
pub fn start(shm: &Shmem) {
    // Where the claims worker checks the other nodes first, the id is
    // settled by it (or by a call that waited long enough).
    let fixed = settings::config().ok().and_then(|c| c.worker.fixed());
    shm.worker
        .set_at_start(fixed.filter(|_| !settings::first_id_waits_for_claims()));
}

/// The worker id IDs are issued with, once settled.
#[inline]
pub fn in_force(shm: &Shmem) -> Option<u32> {
    shm.worker.get()
}

/// The worker id known without reading anything: the one in force, or the
/// one the settings name.
pub fn known(shm: &Shmem, cfg: &Config) -> Option<u32> {
    in_force(shm).or(cfg.worker.fixed())
}

/// Who resolves a worker id that is not settled yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolve {
    /// A call about to issue: waits for the claims worker's first judging
    /// where that is awaited, then settles the id.
    Issue,
    /// The status's `problem`: says why the id is not known, and neither
    /// waits nor settles it.
    Peek,
    /// The claims worker, in a transaction of its own, once `known` found
    /// none: the id it will claim, read by asking the listed nodes; settles
    /// nothing.
    Claim,
}

/// The worker id a caller works with: the one in force, or else the one
/// the settings or the Citus metadata give, as `how` says.
pub fn resolve(shm: &Shmem, cfg: &Config, how: Resolve) -> Result<u32, Failure> {
    // The claims worker looked already (`known`), before its transaction.
    if how != Resolve::Claim {
        if let Some(w) = in_force(shm) {
            return Ok(w);
        }
    }
    match (how, cfg.worker) {
        (Resolve::Issue, _) => unsettled(shm, cfg),
        (_, WorkerSource::Fixed(w)) => Ok(w),
        (Resolve::Peek, WorkerSource::CitusGroup { offset }) => {
            Ok(citus::read_worker_id(shm, offset, &cfg.layout, citus::Ask::Findings)?.0)
        }
        (Resolve::Claim, WorkerSource::CitusGroup { offset }) => {
            Ok(citus::read_worker_id(shm, offset, &cfg.layout, citus::Ask::Nodes)?.0)
        }
        (Resolve::Claim, WorkerSource::Registry { policy }) => kept_lease(cfg, policy)?
            .map(|l| l.worker_id)
            .ok_or_else(|| not_leased(shm, None)),
        (Resolve::Peek, WorkerSource::Registry { policy }) => Err(not_leased(
            shm,
            kept_lease(cfg, policy)?.map(|l| l.worker_id),
        )),
    }
}

/// The worker id of a call that found none settled: after the claims
/// worker's first judging, where that is awaited (until 5 s after the
/// worker started at most, so that no call waits long: a worker that cannot
/// finish in time is the status's `problem`, and IDs go on), then from the
/// settings or the Citus metadata.
#[cold]
fn unsettled(shm: &Shmem, cfg: &Config) -> Result<u32, Failure> {
    // Where no claims database is set, the claims worker waits to be told
    // the Citus database: the first call there tells it. A call in another
    // database before that has no judging to wait for.
    let awaited = settings::first_id_waits_for_claims()
        && (!citus::claims_await_database(shm) || citus::offer_this_database(shm));
    if awaited {
        let deadline = shm
            .worker
            .waits_until()
            .unwrap_or_else(|| clock::now_ms() + FIRST_CLAIMS_WAIT_MS);
        if let Some(w) = settled_by(shm, deadline, || false)? {
            return Ok(w);
        }
    }
    match cfg.worker {
        WorkerSource::CitusGroup { offset } => settle_from_citus(shm, offset, cfg),
        WorkerSource::Fixed(w) => {
            let _ = shm.worker.settle(w);
            Ok(w)
        }
        WorkerSource::Registry { policy } => match kept_lease(cfg, policy)? {
            Some(lease) => awaited_lease(shm, lease.worker_id),
            None => Err(not_leased(shm, None)),
        },
    }
}

/// The worker id of a lease kept in the lease file, once the registry
/// worker has asked the registry whether it still is this server's (a copy
/// made before it was released or given away is not): calls wait for that
/// answer, `FIRST_CLAIMS_WAIT_MS` at most, and are refused after (a
/// registry that cannot be reached stops nothing: the worker settles the
/// lease as soon as it knows). A first try over with nothing settled
/// released the kept lease, and leasing another failed.
fn awaited_lease(shm: &Shmem, kept: u32) -> Result<u32, Failure> {
    let tried = || shm.registry.answer_given();
    let deadline = clock::now_ms() + FIRST_CLAIMS_WAIT_MS;
    settled_by(shm, deadline, tried)?.ok_or_else(|| not_leased(shm, (!tried()).then_some(kept)))
}

/// The worker id a worker settles by `deadline`, or before `over` says it
/// will not: waited for on the latch, interruptibly. A refusal the worker
/// published meanwhile (a promoted copy's, a group moved, a claim that
/// collides, a lease gone) answers the call at once: waiting out the
/// deadline would only delay the same error.
fn settled_by(shm: &Shmem, deadline: i64, over: impl Fn() -> bool) -> Result<Option<u32>, Failure> {
    loop {
        // `over` first: a worker settles before it says it is done.
        let done = over() || clock::now_ms() >= deadline;
        if let Some(w) = in_force(shm) {
            return Ok(Some(w));
        }
        mark::may_issue(shm)?;
        if done {
            return Ok(None);
        }
        clock::sleep_on_latch(10);
        pgrx::check_for_interrupts!();
    }
}

/// The lease this server issues under at start without asking the
/// registry: its file's, for this cluster, held, under the 'keep' policy.
/// A standby promoted, a base backup or a point-in-time restore of this
/// server has the same file (copied, or written by the replayed record).
/// A lease past the worker bits of a layout changed since is not kept: the
/// registry gives one that fits (the old one stays leased until released).
pub fn kept_lease(cfg: &Config, policy: Policy) -> Result<Option<Lease>, Failure> {
    let sysid = crate::pg::xlog::system_identifier();
    let max = cfg.layout.max_worker();
    Ok(mark::worker_lease::read()?
        .filter(|l| l.kept_by(sysid, policy) && u64::from(l.worker_id) <= max))
}

/// The registry worker, or a call that read the lease file: IDs may be
/// issued under the leased `worker` from now on.
pub fn settle_leased(shm: &Shmem, worker: u32, how: &str) {
    if in_force(shm).is_none() && shm.worker.settle(worker).is_ok() {
        server_log!("snowflake_id: worker id {worker}, leased from the registry ({how})");
        note_settled(shm, worker);
    }
}

/// Why a server that leases its worker id issues nothing yet: it has no
/// lease, or the one `kept` in its file waits for the registry's word.
fn not_leased(shm: &Shmem, kept: Option<u32>) -> Failure {
    // The answer can name the registry's host and role, which are a
    // superuser's to see (the setting is superuser-only).
    let answer = match shm.registry.answer() {
        _ if !crate::pg::role::is_superuser() => {
            "shown to superusers, and in snowflake_id.snowflake_status".to_string()
        }
        None => "none yet (the registry worker has not asked)".to_string(),
        Some((text, _)) => Failure::from_text(&text).map_or(text, |f| f.message),
    };
    let message = match kept {
        None => "this server has no worker id yet: it leases one from the registry (snowflake_id.worker_id_source = 'registry') and has not got one".to_string(),
        Some(w) => format!("this server has no worker id yet: its lease file holds worker id {w}, which is issued under once the registry says it is still this server's, or cannot be reached"),
    };
    Failure::new(Class::NotReady, message)
        .detail(format!("The registry's last answer: {answer}"))
    .hint("Check that the server snowflake_id.registry names is up, that SELECT snowflake_registry_init() ran in its database and granted the role the connection uses, and that the password is in the password file; the server asks again every few seconds, and nothing needs a restart.")
}

/// Settles the worker id from the Citus metadata of the caller's database,
/// or says why it cannot yet.
fn settle_from_citus(shm: &Shmem, offset: i32, cfg: &Config) -> Result<u32, Failure> {
    let (worker, origin) = citus::read_worker_id(shm, offset, &cfg.layout, citus::Ask::Findings)?;
    match shm.worker.settle(worker) {
        Ok(()) => {
            server_log!("snowflake_id: worker id {worker}, from {origin}");
            note_settled(shm, worker);
            Ok(worker)
        }
        Err(in_force) => Err(Failure::new(
            Class::NotReady,
            format!(
                "this database's Citus metadata gives worker id {worker} ({origin}), but this server already issues IDs as worker {in_force}, read from another database's"
            ),
        )
        .hint("Keep Citus in one database per server, or restart PostgreSQL and take the first ID in the database that holds this node's cluster.")),
    }
}

/// The claims worker, as it starts (after recovery): calls that wait for
/// its first judging wait from now.
pub fn claims_worker_started(shm: &Shmem) {
    if in_force(shm).is_none() {
        shm.worker
            .wait_until(clock::now_ms() + FIRST_CLAIMS_WAIT_MS);
    }
}

/// The claims worker, once it judged the claims with `worker`: IDs may be
/// issued under it.
pub fn settle_judged(shm: &Shmem, worker: u32) {
    if in_force(shm).is_none() && shm.worker.settle(worker).is_ok() {
        if let Ok(WorkerSource::CitusGroup { offset }) = settings::config().map(|c| c.worker) {
            server_log!(
                "snowflake_id: worker id {worker}, from Citus group id {}",
                i64::from(worker) - i64::from(offset)
            );
        }
        note_settled(shm, worker);
    }
}

/// A worker id settled after start (from Citus) goes into the history of
/// live worker ids before its first ID: the marks written meanwhile, under
/// no known worker id, may cover the ticks its first IDs take.
fn note_settled(shm: &Shmem, worker: u32) {
    if shm.mark.history().current != worker {
        if let Err(f) = crate::mark::live_worker_moved(shm, worker) {
            crate::pg::error::log(f, pgrx::PgLogLevel::WARNING);
        }
    }
}

/// Whether the worker id is a Citus group id (`worker_id_source = 'citus'`),
/// which the cluster's metadata can give to another node.
pub fn follows_citus() -> bool {
    settings::config().is_ok_and(|c| matches!(c.worker, WorkerSource::CitusGroup { .. }))
}

/// This node's group id as the worker id it gives, read afresh by the
/// claims worker (asking the listed nodes), with its origin in words; None
/// where the worker id is no group id.
pub fn citus_group_now(shm: &Shmem, cfg: &Config) -> Option<Result<(u32, String), Failure>> {
    match cfg.worker {
        WorkerSource::CitusGroup { offset } => Some(citus::read_worker_id(
            shm,
            offset,
            &cfg.layout,
            citus::Ask::Nodes,
        )),
        WorkerSource::Fixed(_) | WorkerSource::Registry { .. } => None,
    }
}

/// Moves the settled worker id from `old` to `new` (Citus gave the node
/// another group, `origin`); whether it moved. The caller refused IDs
/// before (`mark::refuse_for_claim`), until the claims on `new` are judged.
pub fn follow(shm: &Shmem, old: u32, new: u32, origin: &str) -> bool {
    let moved = shm.worker.follow(old, new);
    if moved {
        server_log!(
            "snowflake_id: worker id {old} -> {new}: Citus gave this node another group ({origin})"
        );
        // So that no backfill ever takes `old` for the times it was live.
        if let Err(f) = crate::mark::live_worker_moved(shm, new) {
            crate::pg::error::log(f, pgrx::PgLogLevel::WARNING);
        }
    }
    moved
}

/// Where the worker id came from, in words; for a Citus node, with the
/// group id once it was read.
pub fn origin(shm: &Shmem, cfg: &Config) -> String {
    match (cfg.worker, in_force(shm)) {
        (WorkerSource::CitusGroup { offset }, Some(w)) => citus::origin(w, offset, &cfg.layout),
        (WorkerSource::Registry { policy }, in_force) => lease_words(policy, in_force),
        _ => cfg.worker_id_origin.clone(),
    }
}

/// "the registry: worker id 3 leased at 2026-12-07 05:01:02 UTC, policy
/// keep, issuing above ...", from the lease file.
fn lease_words(policy: Policy, in_force: Option<u32>) -> String {
    let lease = mark::worker_lease::read().ok().flatten();
    match (lease, in_force) {
        (Some(l), Some(w)) if l.worker_id == w => {
            let mut words = format!(
                "the registry: worker id {w} leased at {} (policy {}{})",
                format_instant(l.leased_at_ms),
                l.policy.name(),
                if l.released { ", released since" } else { "" }
            );
            if let Some(f) = l.floor_ms {
                words.push_str(&format!(
                    ", issuing above {}, its previous holder's last ID time",
                    format_instant(f)
                ));
            }
            words
        }
        _ => format!("the registry (policy {}; no lease yet)", policy.name()),
    }
}

/// The backfill worker id beside the live worker id `live`, or why there
/// is none to use (unset, outside the layout, the live one).
pub fn backfill(cfg: &Config, live: u32) -> Result<u32, Failure> {
    let leased = matches!(cfg.worker, WorkerSource::Registry { .. });
    if leased && crate::shmem::get().is_some_and(|shm| shm.registry.backfill_taken()) {
        return Err(snowflake_id_core::registry::backfill_taken());
    }
    rule::backfill(settings::backfill_worker_id()?, live, &cfg.layout)
}

/// The backfill worker id as set, usable or not: what the status shows.
pub fn backfill_as_set() -> Option<u32> {
    settings::backfill_worker_id().ok().flatten()
}
