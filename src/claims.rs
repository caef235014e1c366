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

use crate::clock::{now_ms, sleep_on_latch};
use crate::errors;
use crate::pg_text::{ident, Text};
use crate::reserver;
use crate::settings;
use crate::shmem::{self, State};
use crate::wal;
use pgrx::bgworkers::BackgroundWorkerBuilder;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgLogLevel};
use snowflake_id_core::claims::{
    Claim, Claimant, Finding, Held, Memory, Observer, Row, REFRESH_MS, STALE_AFTER_MS,
};
use snowflake_id_core::mark::replace_file;
use snowflake_id_core::{Class, Failure};
use std::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering};
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

const TEXT_WORDS: usize = 256;
/// The worker id an onlooker judges claims as: more than any layout's
/// worker bits can hold, so it collides with no one.
const NO_WORKER_ID: u32 = u32::MAX;

/// A string one process writes and others read, without a lock: a sequence
/// number that is odd while a write is under way (a seqlock).
#[repr(C)]
pub struct SharedText {
    seq: AtomicU64,
    len: AtomicU64,
    words: [AtomicU64; TEXT_WORDS],
}

impl SharedText {
    const fn new() -> SharedText {
        SharedText {
            seq: AtomicU64::new(0),
            len: AtomicU64::new(0),
            words: [const { AtomicU64::new(0) }; TEXT_WORDS],
        }
    }

    /// Sets the text (cut at a character boundary to fit). One writer only.
    fn set(&self, text: &str) {
        let mut end = text.len().min(TEXT_WORDS * 8);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let bytes = &text.as_bytes()[..end];
        // A writer that died between the two increments left it odd.
        let s = self.seq.load(Ordering::Relaxed) | 1;
        self.seq.store(s, Ordering::Relaxed);
        fence(Ordering::Release);
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.words[i].store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
        self.len.store(end as u64, Ordering::Relaxed);
        self.seq.store(s + 1, Ordering::Release);
    }

    /// The failure `Failure::to_text` put here, if any.
    fn failure(&self) -> Option<Failure> {
        self.get().and_then(|t| Failure::from_text(&t))
    }

    /// The text, or `None` while it is empty (or being written for long).
    fn get(&self) -> Option<String> {
        for _ in 0..1_000 {
            let s = self.seq.load(Ordering::Acquire);
            if s & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let len = (self.len.load(Ordering::Relaxed) as usize).min(TEXT_WORDS * 8);
            let mut bytes = Vec::with_capacity(len);
            for w in &self.words[..len.div_ceil(8)] {
                bytes.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
            }
            bytes.truncate(len);
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s {
                return String::from_utf8(bytes).ok().filter(|t| !t.is_empty());
            }
        }
        None
    }
}

/// What the claims worker publishes.
#[repr(C, align(64))]
pub struct Shared {
    /// Generation stops while set: another live server claims this
    /// server's worker id and this one is the one to stop.
    refused: AtomicBool,
    pid: AtomicI32,
    /// This start's instance number (0 until the claims worker first runs).
    instance: AtomicU64,
    /// The first finding, as `Failure::to_text`; empty when there is none.
    finding: SharedText,
    /// Why claims are not being written or read, as `Failure::to_text`.
    trouble: SharedText,
    /// The first row of the table that could not be judged, if any.
    skipped: SharedText,
    /// Commands under way that need the worker out of its database (see
    /// `claims_db`), and until when (Unix ms) at the latest.
    away_commands: AtomicU32,
    away_until_ms: AtomicI64,
    /// When a command last sent the worker away.
    last_away_ms: AtomicI64,
    /// Until when the worker stays out of a database it found a template.
    template_until_ms: AtomicI64,
}

impl Shared {
    pub const fn new() -> Shared {
        Shared {
            refused: AtomicBool::new(false),
            pid: AtomicI32::new(0),
            instance: AtomicU64::new(0),
            finding: SharedText::new(),
            trouble: SharedText::new(),
            skipped: SharedText::new(),
            away_commands: AtomicU32::new(0),
            away_until_ms: AtomicI64::new(0),
            last_away_ms: AtomicI64::new(0),
            template_until_ms: AtomicI64::new(0),
        }
    }

    /// The claims worker's process id, 0 while none runs.
    pub fn worker_pid(&self) -> i32 {
        self.pid.load(Ordering::SeqCst)
    }

    /// Holds the worker out of its database for one more command, until
    /// `release_away` or `until_ms` (Unix ms) at the latest; for a role
    /// other than a superuser, only if none did so in the last `every_ms`.
    pub fn hold_away(&self, now_ms: i64, until_ms: i64, superuser: bool, every_ms: i64) -> bool {
        let last = self.last_away_ms.load(Ordering::SeqCst);
        if !superuser && now_ms - last < every_ms {
            return false;
        }
        self.last_away_ms.store(now_ms, Ordering::SeqCst);
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

    fn kept_out(&self, now_ms: i64) -> bool {
        self.away_commands.load(Ordering::SeqCst) > 0
            && self.away_until_ms.load(Ordering::SeqCst) > now_ms
            || self.template_until_ms.load(Ordering::SeqCst) > now_ms
    }

    /// Whether generation is refused because of a claim. Sequentially
    /// consistent with the refusal's revocation of the durable window (see
    /// `durable::publish`).
    pub fn refused(&self) -> bool {
        self.refused.load(Ordering::SeqCst)
    }
}

/// The error generation is refused with because of a claim, if it is.
pub fn refusal(st: &State) -> Option<Failure> {
    if !st.claims.refused() {
        return None;
    }
    Some(st.claims.finding.failure().unwrap_or_else(|| {
        Failure::new(
            Class::NotReady,
            "another live server claims this server's worker id",
        )
    }))
}

/// What the claims say short of a refusal: a collision this server goes on
/// through, or why claims are not being kept. For `problem`.
pub fn warning(st: &State) -> Option<String> {
    settings::claims_database()?;
    let text = |t: &SharedText| t.failure().map(|f| f.message);
    // Trouble first: while claims cannot be read, a finding is dated; so
    // it is while the worker is down.
    text(&st.claims.trouble)
        .or_else(|| {
            (st.claims.pid.load(Ordering::SeqCst) == 0).then(|| {
                "the claims worker (snowflake_id claims) is not running: this server's worker-id claim is not refreshed".to_string()
            })
        })
        .or_else(|| text(&st.claims.finding))
        .or_else(|| text(&st.claims.skipped))
}

/// Registers the claims worker when a claims database is set. It starts
/// once recovery has ended: a standby issues no IDs and claims nothing, a
/// promoted one claims under its new timeline.
pub fn register() {
    // pg_upgrade starts both clusters in binary-upgrade mode to read and
    // write their catalogs: neither issues IDs then, and a claim refreshed
    // by the old one would reach the upgraded cluster as another live
    // server's claim on its worker id.
    // SAFETY: a plain read of a flag the postmaster set from its options.
    if settings::claims_database().is_none() || unsafe { pg_sys::IsBinaryUpgrade } {
        return;
    }
    crate::claims_db::install();
    BackgroundWorkerBuilder::new("snowflake_id claims")
        .set_type("snowflake_id claims")
        .set_library("snowflake_id")
        .set_function("snowflake_claims_main")
        .enable_spi_access()
        .set_restart_time(Some(Duration::from_secs(5)))
        .load();
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_pid(_code: i32, _arg: pg_sys::Datum) {
    if let Some(st) = shmem::state() {
        st.claims.pid.store(0, Ordering::Relaxed);
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_claims_main(_arg: pg_sys::Datum) {
    reserver::handle_signals();
    let Some(st) = shmem::state() else { return };
    let Some(db) = settings::claims_database() else {
        return;
    };
    // SAFETY: registering an exit callback in this process.
    unsafe { pg_sys::before_shmem_exit(Some(forget_pid), pg_sys::Datum::from(0)) };
    st.claims
        .pid
        .store(unsafe { pg_sys::MyProcPid }, Ordering::SeqCst);
    // Stays if the connection fails (FATAL ends this process; the
    // postmaster starts it again in 5 s), so the status says why.
    st.claims.trouble.set(
        &Failure::new(
            Class::NotReady,
            format!("this server's worker-id claim is not kept: the claims worker cannot connect to database \"{db}\" (snowflake_id.claims_database)"),
        )
        .to_text(),
    );
    // Out of the database while a command that needs it free runs.
    while st.claims.kept_out(now_ms()) {
        if reserver::terminating() {
            // SAFETY: the normal way out of a background worker.
            unsafe { pg_sys::proc_exit(1) };
        }
        sleep_on_latch(100);
    }
    // Connecting waits for the database's lock without end (a RENAME of it
    // in an open or prepared transaction holds it): until connected and
    // pinned (lock_timeout), SIGTERM ends the wait, as it ends a backend's.
    connect(&db);
    pin_session();
    // From here every wait is bounded by the pinned timeouts, and SIGTERM
    // only asks the loop to end, so that a shutdown's last transaction
    // (`release`) runs.
    reserver::sigterm_ends_loop_only();
    // SAFETY: this process's own interrupt flags: a SIGTERM that came
    // before the switch still ends the loop (the flag), not a FATAL.
    unsafe {
        if reserver::terminating() {
            pg_sys::ProcDiePending = 0;
        }
    }
    st.claims.trouble.set("");
    let mut keeper = Keeper::new(st, db);
    loop {
        if reserver::terminating() {
            if reserver::server_shutting_down() {
                keeper.release(st);
            }
            // Status 1: the postmaster starts it again (after a shutdown
            // it does not); 0 would unregister it until the next restart.
            // SAFETY: the normal way out of a background worker.
            unsafe { pg_sys::proc_exit(1) };
        }
        if let Some(f) = in_transaction(is_template).ok().flatten() {
            leave_template(st, f);
        }
        reserver::reload_if_asked();
        keeper.refresh(st);
        sleep_on_latch(REFRESH_MS);
    }
}

/// This server's claimant identity and name.
fn me(st: &State, worker_id: u32) -> (Claimant, String) {
    let (system_identifier, timeline) = wal::origin();
    (
        Claimant {
            system_identifier,
            timeline,
            worker_id,
            instance: st.claims.instance.load(Ordering::Relaxed),
        },
        settings::server_name(),
    )
}

fn memory_path() -> std::path::PathBuf {
    crate::durable::data_dir().join(CLAIMS_FILE)
}

fn read_memory() -> Memory {
    Memory::parse(&std::fs::read_to_string(memory_path()).unwrap_or_default())
}

/// Replaced whole (see `replace_file`): a crash leaves the old memory or
/// the new one.
fn save_memory(m: &Memory) {
    if let Err(e) = replace_file(
        &crate::durable::data_dir(),
        CLAIMS_FILE,
        m.text().as_bytes(),
    ) {
        log!(
            "snowflake_id: could not write {}: {e}",
            memory_path().display()
        );
    }
}

/// Whether this start is of a copy of another server's data directory (a
/// restored base backup, a standby): its memory file is the original's,
/// and what it says of instances and claims belongs to the original.
fn started_as_copy(st: &State) -> bool {
    st.recovery_files.load(Ordering::Relaxed) != 0
}

/// Where shared memory is set up (the postmaster, at start and after a
/// crash): a server that was refusing because of a claim goes on refusing
/// until its claims worker has seen that claim go stale, so a restart does
/// not open a window for repeats.
pub fn resume(st: &State) {
    if settings::claims_database().is_none() {
        return;
    }
    if let Some(c) = read_memory().refused_by {
        let f = Failure::new(
            Class::NotReady,
            format!(
                "worker id {} was claimed by another live server (system identifier {}, timeline {}) when this server last ran",
                c.worker_id, c.system_identifier, c.timeline
            ),
        )
        .detail("This server issues no IDs until its claims worker sees that claim go stale.")
        .hint("Give one of the two servers another worker id and restart it.");
        st.claims.finding.set(&f.to_text());
        st.claims.refused.store(true, Ordering::SeqCst);
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
}

impl Keeper {
    fn new(st: &State, db: String) -> Keeper {
        let mut memory = read_memory();
        if started_as_copy(st) {
            // The original's rows and claim are the original's: a copy
            // deletes none of them and claims afresh (a promoted standby
            // still inherits its old primary's claim time from the table).
            memory = Memory {
                refused_by: memory.refused_by,
                ..Memory::default()
            };
        }
        let mut observer = Observer::default();
        // One instance number per life of shared memory: a restart of this
        // worker alone keeps it.
        let mut instance = st.claims.instance.load(Ordering::Relaxed);
        while instance == 0 {
            let mut b = [0u8; 8];
            // SAFETY: fills the buffer it is given.
            unsafe { pg_sys::pg_strong_random(b.as_mut_ptr().cast(), b.len()) };
            // Kept within bigint, as the table stores it.
            instance = u64::from_le_bytes(b) >> 1;
        }
        st.claims.instance.store(instance, Ordering::Relaxed);
        let previous =
            (memory.instance != instance && memory.instance != 0).then_some(memory.instance);
        if let Some(c) = &memory.refused_by {
            observer.remember(c.clone(), now_ms());
        }
        memory.instance = instance;
        save_memory(&memory);
        Keeper {
            db,
            observer,
            memory,
            previous,
            logged: None,
            trouble_logged: None,
            trouble_logged_at: 0,
            skipped_logged: Vec::new(),
        }
    }

    fn refresh(&mut self, st: &State) {
        // A server without a usable worker id issues nothing and claims
        // nothing (the status says why), but still sees other servers
        // collide: a fan-in subscriber that only reads, say.
        let worker_id = settings::config().ok().map(|c| c.worker_id);
        let (who, name) = me(st, worker_id.unwrap_or(NO_WORKER_ID));
        let claimed_at = self.memory.claimed_at(&who);
        let (mine, previous) = (who.clone(), self.previous);
        let claiming = worker_id.is_some();
        let read = match in_transaction(move || {
            write_and_read(&mine, claiming, previous, claimed_at, &name)
        }) {
            Ok(Ok(read)) => read,
            Ok(Err(f)) | Err(f) if f.class == Class::LockNotAvailable => {
                let held = in_transaction(lock_holders).ok().flatten();
                let f = match held {
                    Some(who) => Failure {
                        message: format!("{} (the table is held by {who})", f.message),
                        ..f
                    },
                    None => f,
                };
                return self.trouble(st, Some(f));
            }
            Ok(Err(f)) | Err(f) => return self.trouble(st, Some(f)),
        };
        self.previous = None;
        self.trouble(st, None);
        if let Some(at) = read.claimed_at_ms.filter(|at| Some(*at) != claimed_at) {
            self.memory.held = Some(Held {
                system_identifier: who.system_identifier,
                timeline: who.timeline,
                worker_id: who.worker_id,
                claimed_at_ms: at,
            });
            save_memory(&self.memory);
        }
        self.report_skipped(st, &read.skipped);
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
        self.publish(st, &findings, now);
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
    fn release(&self, st: &State) {
        // The SIGTERM set a flag only (`sigterm_ends_loop_only`): this
        // last transaction runs; the lock timeout bounds its wait, and its
        // commit waits for no standby.
        let (system_identifier, timeline) = wal::origin();
        let instance = st.claims.instance.load(Ordering::Relaxed);
        let released = in_transaction(move || {
            let table = claims_table()?;
            Spi::run_with_args(
                &format!(
                    "UPDATE {table} SET last_seen = pg_catalog.to_timestamp(0) \
                     WHERE system_identifier OPERATOR(pg_catalog.=) $1 \
                       AND timeline OPERATOR(pg_catalog.=) $2 AND instance OPERATOR(pg_catalog.=) $3"
                ),
                &[
                    (system_identifier as i64).into(),
                    i64::from(timeline).into(),
                    (instance as i64).into(),
                ],
            )
            .ok()
        });
        if !matches!(released, Ok(Some(()))) {
            log!(
                "snowflake_id: this server's worker-id claim in database \"{}\" could not be marked as ended at shutdown; it goes stale in {} s",
                self.db,
                STALE_AFTER_MS / 1000
            );
        }
    }

    /// Rows that cannot be judged are skipped; each is told to the log
    /// once, and the first is shown in `problem` while it lasts.
    fn report_skipped(&mut self, st: &State, skipped: &[String]) {
        for s in skipped {
            if !self.skipped_logged.contains(s) {
                log!("snowflake_id: {s}");
            }
        }
        self.skipped_logged = skipped.to_vec();
        st.claims.skipped.set(
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
    fn trouble(&mut self, st: &State, f: Option<Failure>) {
        let Some(f) = f else {
            if self.trouble_logged.take().is_some() {
                st.claims.trouble.set("");
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
        st.claims.trouble.set(&f.to_text());
        let now = now_ms();
        let due = now - self.trouble_logged_at >= REMIND_EVERY_MS;
        if due || self.trouble_logged.as_deref() != Some(f.message.as_str()) {
            self.trouble_logged = Some(f.message.clone());
            self.trouble_logged_at = now;
            errors::log(f, PgLogLevel::WARNING);
        }
    }

    fn publish(&mut self, st: &State, findings: &[Finding], now: i64) {
        let refuse = matches!(findings.first(), Some(Finding::Refuse(_)));
        st.claims.finding.set(
            &findings
                .first()
                .map(|f| f.failure(now).to_text())
                .unwrap_or_default(),
        );
        let was = st.claims.refused.swap(refuse, Ordering::SeqCst);
        if refuse && !was {
            // After the flag: a mark published concurrently sees the flag
            // and revokes it again (durable::publish).
            st.gen.revoke_durable();
        }
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
            errors::log(f.failure(now), PgLogLevel::WARNING);
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
fn connect(db: &str) {
    if ["template0", "template1"].contains(&db) {
        // Before connecting: a connection to a template makes every CREATE
        // DATABASE fail while it lasts.
        raise_template(db);
    }
    let name = std::ffi::CString::new(db).unwrap_or_default();
    // SAFETY: called once, from a registered background worker with
    // database access, before any transaction.
    unsafe {
        pg_sys::BackgroundWorkerInitializeConnection(
            name.as_ptr(),
            std::ptr::null(),
            pg_sys::BGWORKER_BYPASS_ALLOWCONN,
        )
    };
}

fn template_failure(db: &str) -> Failure {
    Failure::new(
        Class::InvalidParameter,
        format!("snowflake_id.claims_database names the template database \"{db}\": claims are not kept"),
    )
    .detail("A template cannot be copied while a session is connected to it, and the claims worker stays connected; it looks again every 10 seconds.")
    .hint("Set snowflake_id.claims_database to a database that is not a template (one per server, where the extension is installed) and restart PostgreSQL, or make this one an ordinary database again (ALTER DATABASE ... IS_TEMPLATE false).")
}

// proc_exit returns `!` from PostgreSQL 18 on, `()` before.
#[allow(unreachable_code)]
fn raise_template(db: &str) -> ! {
    let f = template_failure(db);
    if let Some(st) = shmem::state() {
        st.claims.trouble.set(&f.to_text());
    }
    errors::log(f, PgLogLevel::WARNING);
    // SAFETY: status 0 tells the postmaster not to start it again.
    unsafe { pg_sys::proc_exit(0) };
    unreachable!("proc_exit returns not")
}

/// Leaves a database that is (or became) a template: a template cannot be
/// copied while anyone is connected to it, and a claims worker there would
/// make every CREATE DATABASE from it fail. Looks again in 10 seconds (its
/// owner may make it an ordinary database again).
#[allow(unreachable_code)] // proc_exit returns `!` from PostgreSQL 18 on
fn leave_template(st: &State, f: Failure) -> ! {
    st.claims.trouble.set(&f.to_text());
    errors::log(f, PgLogLevel::WARNING);
    st.claims
        .template_until_ms
        .store(now_ms() + TEMPLATE_RECHECK_MS, Ordering::SeqCst);
    // SAFETY: status 1: the postmaster starts it again, and it waits first.
    unsafe { pg_sys::proc_exit(1) };
    unreachable!("proc_exit returns not")
}

/// Whether the database connected to is a template, as the failure to say so.
fn is_template() -> Option<Failure> {
    let template: Option<bool> = Spi::get_one_with_args(
        "SELECT d.datistemplate FROM pg_catalog.pg_database d WHERE d.oid OPERATOR(pg_catalog.=) $1",
        // SAFETY: set once the connection is made, never changed.
        &[unsafe { pg_sys::MyDatabaseId }.into()],
    )
    .unwrap_or(None);
    (template == Some(true))
        .then(|| template_failure(&settings::claims_database().unwrap_or_default()))
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
        let (name, value) = (
            std::ffi::CString::new(name).unwrap_or_default(),
            std::ffi::CString::new(value).unwrap_or_default(),
        );
        // SAFETY: sets a setting of this process by name, as the
        // postmaster's own -c options are set.
        unsafe {
            pg_sys::SetConfigOption(
                name.as_ptr(),
                value.as_ptr(),
                pg_sys::GucContext::PGC_SUSET,
                pg_sys::GucSource::PGC_S_OVERRIDE,
            )
        };
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

/// Who holds a lock on the claims table (the sessions this worker's last
/// write waited behind), for `problem`: anyone with UPDATE, DELETE or
/// TRUNCATE on it (pg_write_all_data) can LOCK it, and no privilege of its
/// own stops that.
fn lock_holders() -> Option<String> {
    let table = claims_table_oid()?;
    let who: Option<Text> = Spi::get_one_with_args(
        "SELECT pg_catalog.string_agg(pg_catalog.format('process %s (role %s, in a transaction since %s)', \
                a.pid, a.usename, a.xact_start), ', ') \
         FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid \
         WHERE l.locktype OPERATOR(pg_catalog.=) 'relation' AND l.relation OPERATOR(pg_catalog.=) $1 \
           AND l.granted AND l.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()",
        &[table.into()],
    )
    .ok()
    .flatten();
    who.map(|t| t.0)
}

fn claims_table_oid() -> Option<pg_sys::Oid> {
    Spi::get_one::<pg_sys::Oid>(&format!("SELECT c.oid {CLAIMS_TABLE}"))
        .ok()
        .flatten()
}

/// Where the extension's claims table is found: as a member of the
/// extension, not by name in a search path. Being a member is not enough:
/// the extension's owner, who may be any role with CREATE on the database
/// (it is trusted), can add a table of its own to it (ALTER EXTENSION ADD),
/// whose triggers would run as this worker. The install script's table is
/// a plain table in the schema `snowflake_id`, both owned by a superuser,
/// which no other role can create or give away to one.
const CLAIMS_TABLE: &str = "FROM pg_catalog.pg_extension e \
     JOIN pg_catalog.pg_depend d ON d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass \
          AND d.refobjid OPERATOR(pg_catalog.=) e.oid AND d.deptype OPERATOR(pg_catalog.=) 'e' \
          AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
     JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objid AND c.relname OPERATOR(pg_catalog.=) 'snowflake_claims' \
          AND c.relkind OPERATOR(pg_catalog.=) 'r' \
     JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
          AND n.nspname OPERATOR(pg_catalog.=) 'snowflake_id' \
     JOIN pg_catalog.pg_authid t ON t.oid OPERATOR(pg_catalog.=) c.relowner AND t.rolsuper \
     JOIN pg_catalog.pg_authid s ON s.oid OPERATOR(pg_catalog.=) n.nspowner AND s.rolsuper \
     WHERE e.extname OPERATOR(pg_catalog.=) 'snowflake_id'";

/// The extension's own claims table, schema-qualified and quoted: found as
/// a member of the extension, not by name in a search path, so no table a
/// user created elsewhere can stand in for it.
fn claims_table() -> Option<String> {
    let (schema, table) = Spi::get_two::<Text, Text>(&format!(
        "SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text {CLAIMS_TABLE}"
    ))
    .ok()?;
    Some(format!(
        "{}.{}",
        ident(schema?.as_str()),
        ident(table?.as_str())
    ))
}

/// What one refresh found.
struct Read {
    claims: Vec<Claim>,
    /// Each row that could not be judged, described.
    skipped: Vec<String>,
    /// When this server's claim says it claimed its worker id.
    claimed_at_ms: Option<i64>,
}

/// Writes this server's claim (unless it has no worker id to claim) and
/// reads every claim the table holds.
fn write_and_read(
    who: &Claimant,
    claiming: bool,
    previous: Option<u64>,
    claimed_at: Option<i64>,
    name: &str,
) -> Result<Read, Failure> {
    let db = settings::claims_database().unwrap_or_default();
    let Some(table) = claims_table() else {
        let installed: Option<bool> = Spi::get_one(
            "SELECT true FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'snowflake_id'",
        )
        .unwrap_or(None);
        let what = if installed.is_some() {
            "the installed snowflake_id has no snowflake_claims table"
        } else {
            "snowflake_id is not installed"
        };
        return Err(Failure::new(Class::NotReady, format!("this server's worker-id claim is not kept: {what} in database \"{db}\" (snowflake_id.claims_database)"))
            .hint(format!("Run CREATE EXTENSION snowflake_id (or ALTER EXTENSION snowflake_id UPDATE) in database \"{db}\", or point snowflake_id.claims_database at the database that has it.")));
    };
    if let Some(previous) = previous {
        // This server's rows from before its restart: claims no more.
        Spi::run_with_args(
            &format!("DELETE FROM {table} WHERE system_identifier OPERATOR(pg_catalog.=) $1 \
                      AND timeline OPERATOR(pg_catalog.=) $2 AND instance OPERATOR(pg_catalog.=) $3"),
            &[
                (who.system_identifier as i64).into(),
                i64::from(who.timeline).into(),
                (previous as i64).into(),
            ],
        )
        .unwrap_or_else(|e| pgrx::error!("{e}"));
    }
    let claimed_at_ms = if claiming {
        Some(claim(&table, who, name, claimed_at))
    } else {
        None
    };
    let (claims, skipped) = read(&table)?;
    Ok(Read {
        claims,
        skipped,
        claimed_at_ms,
    })
}

/// Writes this server's claim afresh, drops its claims on other worker
/// ids, and says when the claim was made.
fn claim(table: &str, who: &Claimant, name: &str, claimed_at: Option<i64>) -> i64 {
    let (worker, sysid, tli, instance) = (
        who.worker_id as i32,
        who.system_identifier as i64,
        i64::from(who.timeline),
        who.instance as i64,
    );
    let remembered = claimed_at.map(|ms| ms as f64 / 1000.0);
    // Deleted and inserted again, not updated: a subscriber that missed the
    // first insert (a subscription made without copying data, or after the
    // claim was written) would skip every update of a row it does not have,
    // and never see the claim. Two statements: the insert must come after
    // the delete, which a data-modifying WITH does not promise.
    let old: Option<f64> = first_value(
        &format!(
            "DELETE FROM {table} \
             WHERE system_identifier OPERATOR(pg_catalog.=) $2 AND timeline OPERATOR(pg_catalog.=) $3 \
               AND instance OPERATOR(pg_catalog.=) $4 AND worker_id OPERATOR(pg_catalog.=) $1 \
             RETURNING CASE WHEN pg_catalog.isfinite(claimed_at) THEN pg_catalog.date_part('epoch', claimed_at) END"
        ),
        &[worker.into(), sysid.into(), tli.into(), instance.into()],
    );
    let at: Option<f64> = first_value(
        // The claim keeps the time this server remembers claiming the id
        // (rows can be deleted, or made again with the extension; the
        // memory cannot), else the time its row said, else a promoted
        // standby's old primary's (it continues that server's IDs, and must
        // not become the later claimant against a server that collided
        // with it), else now.
        &format!(
            "INSERT INTO {table} (worker_id, system_identifier, timeline, instance, name, claimed_at, last_seen) \
             VALUES ($1, $2, $3, $4, $5, \
                     COALESCE(pg_catalog.to_timestamp($6), pg_catalog.to_timestamp($7), \
                              (SELECT pg_catalog.min(c.claimed_at) FROM {table} c \
                               WHERE c.system_identifier OPERATOR(pg_catalog.=) $2 AND c.timeline OPERATOR(pg_catalog.<) $3 \
                                 AND c.worker_id OPERATOR(pg_catalog.=) $1 AND pg_catalog.isfinite(c.claimed_at)), \
                              pg_catalog.clock_timestamp()), \
                     pg_catalog.clock_timestamp()) \
             RETURNING pg_catalog.date_part('epoch', claimed_at)"
        ),
        &[worker.into(), sysid.into(), tli.into(), instance.into(), name.into(), remembered.into(), old.into()],
    );
    // A worker id this server had earlier in this run is claimed no more.
    Spi::run_with_args(
        &format!(
            "DELETE FROM {table} \
             WHERE system_identifier OPERATOR(pg_catalog.=) $1 AND timeline OPERATOR(pg_catalog.=) $2 \
               AND instance OPERATOR(pg_catalog.=) $3 AND worker_id OPERATOR(pg_catalog.<>) $4"
        ),
        &[sysid.into(), tli.into(), instance.into(), worker.into()],
    )
    .unwrap_or_else(|e| pgrx::error!("{e}"));
    at.map_or_else(now_ms, |s| (s * 1000.0).floor() as i64)
}

/// The first column of the first row `statement` returns, if any row
/// (and not NULL); an error is raised.
fn first_value<T: FromDatum + IntoDatum>(
    statement: &str,
    args: &[pgrx::datum::DatumWithOid<'_>],
) -> Option<T> {
    Spi::connect_mut(|c| {
        let rows = c.update(statement, Some(1), args)?;
        if rows.is_empty() {
            return Ok(None);
        }
        rows.first().get_one::<T>()
    })
    .unwrap_or_else(|e: pgrx::spi::SpiError| pgrx::error!("{e}"))
}

/// Every claim the table holds, and a description of each row that cannot
/// be judged (skipped, so that one bad row cannot stop the judging of the
/// others). Timestamps are read as seconds, which infinite ones survive.
fn read(table: &str) -> Result<(Vec<Claim>, Vec<String>), Failure> {
    Spi::connect(|client| {
        let rows = client.select(
            &format!(
                "SELECT worker_id, system_identifier, timeline, instance, name, \
                 pg_catalog.date_part('epoch', claimed_at), pg_catalog.date_part('epoch', last_seen), \
                 pg_catalog.convert_to(name, 'UTF8') \
                 FROM {table}"
            ),
            None,
            &[],
        )?;
        let (mut claims, mut skipped) = (Vec::new(), Vec::new());
        for r in rows {
            let row = Row {
                worker_id: r.get::<i32>(1)?,
                system_identifier: r.get::<i64>(2)?,
                timeline: r.get::<i64>(3)?,
                instance: r.get::<i64>(4)?,
                // In the database's encoding; read as UTF-8 whatever that is.
                name: r.get::<Vec<u8>>(8)?.map(|b| String::from_utf8_lossy(&b).into_owned()),
                claimed_at_s: r.get::<f64>(6)?,
                last_seen_s: r.get::<f64>(7)?,
            };
            match row.claim() {
                Ok(c) => claims.push(c),
                Err(why) => skipped.push(row.describe_skipped(&why)),
            }
        }
        Ok::<_, pgrx::spi::SpiError>((claims, skipped))
    })
    .map_err(|e| Failure::new(Class::Warning, format!("could not read snowflake_claims: {e}")))
}

/// The guard on `snowflake_claims`: its rows are written by this server's
/// claims worker, and by replication (apply workers run with
/// `session_replication_role = replica`, which only a superuser may set).
/// Any other session is refused, whatever its privileges on the table: a
/// claim a role could forge would stop this server's IDs (a live claim on
/// its worker id) or hide a collision (a deleted one).
///
/// A row replication brings for a claim the table already holds replaces
/// it: a publisher whose table was emptied or made again (TRUNCATE, DROP
/// and CREATE EXTENSION) writes its claim afresh, and that must not stop
/// the subscription on a duplicate key, the application's rows with it.
#[pg_trigger]
fn snowflake_claims_guard<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, PgHeapTupleError> {
    // SAFETY: plain reads of this process's settings and id.
    let (replica, me) = unsafe {
        (
            pg_sys::SessionReplicationRole == pg_sys::SESSION_REPLICATION_ROLE_REPLICA as i32,
            pg_sys::MyProcPid,
        )
    };
    let worker = shmem::state().is_some_and(|st| st.claims.pid.load(Ordering::Relaxed) == me);
    // Replication is trusted as the table's owner (the superuser who
    // created the extension) applying it, as an apply worker does unless
    // its subscription runs as its own owner: a role that may set
    // session_replication_role, or own a subscription, is not enough.
    // SAFETY: the relation the trigger fired on, open for the statement.
    let owner = unsafe { (*(*trigger.trigger_data().tg_relation).rd_rel).relowner };
    // SAFETY: catalog lookups of the current role and its memberships.
    let trusted =
        unsafe { pg_sys::superuser() || pg_sys::has_privs_of_role(pg_sys::GetUserId(), owner) };
    let op = trigger.op().unwrap_or(PgTriggerOperation::Truncate);
    // SAFETY: a plain read of this process's kind.
    let applying = unsafe { pg_sys::MyBackendType } == pg_sys::BackendType::B_BG_WORKER;
    if replica && !trusted && applying && !worker && !matches!(op, PgTriggerOperation::Truncate) {
        // A row replication applies is skipped, not refused: an error would
        // stop the whole subscription, and the application's rows that
        // travel with the claims.
        skipped_untrusted();
        return Ok(None);
    }
    if !((replica && trusted) || worker) {
        errors::raise(
            Failure::new(
                Class::Privilege,
                "snowflake_id.snowflake_claims is written only by the claims worker and by replication",
            )
            .detail("A claim written by hand could stop this server's IDs, or hide two servers issuing under one worker id.")
            .hint("To remove the claims of a server gone for good, a superuser runs SET session_replication_role = replica; DELETE FROM snowflake_id.snowflake_claims WHERE ...; RESET session_replication_role;"),
        );
    }
    match op {
        PgTriggerOperation::Insert => {
            let new = trigger.new();
            if let (true, Some(row)) = (replica && !worker, &new) {
                replace_replicated(trigger, row);
            }
            Ok(new)
        }
        PgTriggerOperation::Update => Ok(trigger.new()),
        PgTriggerOperation::Delete => Ok(trigger.old()),
        PgTriggerOperation::Truncate => Ok(None),
    }
}

/// Tells the log, once per process, that replicated claims are skipped
/// because they are not applied as the table's owner.
fn skipped_untrusted() {
    static TOLD: AtomicBool = AtomicBool::new(false);
    if !TOLD.swap(true, Ordering::Relaxed) {
        errors::log(
            Failure::new(
                Class::Warning,
                "snowflake_id: claims arriving by this replication are skipped: they are not applied as the owner of snowflake_id.snowflake_claims",
            )
            .detail("A subscription that runs as a role other than the table's owner (run_as_owner, or an owner without a superuser's rights) could forge claims.")
            .hint("Let a superuser own the subscription, without run_as_owner, to receive claims by it."),
            PgLogLevel::WARNING,
        );
    }
}

/// Deletes the row holding the same claim as `row`, which replication is
/// about to insert.
fn replace_replicated(trigger: &PgTrigger<'_>, row: &PgHeapTuple<'_, AllocatedByPostgres>) {
    let (schema, name) = Spi::get_two_with_args::<Text, Text>(
        "SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         WHERE c.oid OPERATOR(pg_catalog.=) $1",
        &[trigger.relid().unwrap_or(pg_sys::InvalidOid).into()],
    )
    .unwrap_or_else(|e| pgrx::error!("{e}"));
    let table = format!(
        "{}.{}",
        ident(schema.unwrap_or(Text(String::new())).as_str()),
        ident(name.unwrap_or(Text(String::new())).as_str())
    );
    let get = |name: &str| row.get_by_name::<i64>(name).ok().flatten();
    let worker = row.get_by_name::<i32>("worker_id").ok().flatten();
    Spi::run_with_args(
        &format!(
            "DELETE FROM {table} WHERE system_identifier OPERATOR(pg_catalog.=) $1 \
             AND timeline OPERATOR(pg_catalog.=) $2 AND instance OPERATOR(pg_catalog.=) $3 \
             AND worker_id OPERATOR(pg_catalog.=) $4"
        ),
        &[
            get("system_identifier").into(),
            get("timeline").into(),
            get("instance").into(),
            worker.into(),
        ],
    )
    .unwrap_or_else(|e| pgrx::error!("{e}"));
}

extension_sql_file!(
    "sql/claims.sql",
    name = "snowflake_claims",
    requires = [snowflake_claims_guard]
);
