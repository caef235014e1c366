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
use crate::reserver;
use crate::settings;
use crate::shmem::{self, State};
use crate::wal;
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder};
use pgrx::prelude::*;
use pgrx::{pg_sys, PgLogLevel};
use snowflake_id_core::claims::{Claim, Claimant, Finding, Observer, REFRESH_MS};
use snowflake_id_core::mark::replace_file;
use snowflake_id_core::{Class, Failure};
use std::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

/// How often the server log is reminded of a collision that persists.
const REMIND_EVERY_MS: i64 = 60_000;
/// The longest a claims transaction waits for a lock before it gives up
/// until the next refresh (`lock_timeout`: a background worker's SPI never
/// arms `statement_timeout`).
const LOCK_TIMEOUT_MS: u64 = 1_500;
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
}

impl Shared {
    pub const fn new() -> Shared {
        Shared {
            refused: AtomicBool::new(false),
            pid: AtomicI32::new(0),
            instance: AtomicU64::new(0),
            finding: SharedText::new(),
            trouble: SharedText::new(),
        }
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
    if settings::claims_database().is_none() {
        return None;
    }
    let text = |t: &SharedText| t.failure().map(|f| f.message);
    // Trouble first: while claims cannot be read, a finding is dated.
    text(&st.claims.trouble).or_else(|| text(&st.claims.finding)).or_else(|| {
        (st.claims.pid.load(Ordering::Relaxed) == 0).then(|| {
            "the claims worker (snowflake_id claims) is not running: this server's worker-id claim is not refreshed".to_string()
        })
    })
}

/// Registers the claims worker when a claims database is set. It starts
/// once recovery has ended: a standby issues no IDs and claims nothing, a
/// promoted one claims under its new timeline.
pub fn register() {
    if settings::claims_database().is_none() {
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
        .store(unsafe { pg_sys::MyProcPid }, Ordering::Relaxed);
    // Stays if the connection fails (FATAL ends this process; the
    // postmaster starts it again in 5 s), so the status says why.
    st.claims.trouble.set(
        &Failure::new(
            Class::NotReady,
            format!("this server's worker-id claim is not kept: the claims worker cannot connect to database \"{db}\" (snowflake_id.claims_database)"),
        )
        .to_text(),
    );
    BackgroundWorker::connect_worker_to_spi(Some(&db), None);
    st.claims.trouble.set("");
    let mut keeper = Keeper::new(st, db);
    loop {
        if reserver::terminating() {
            // Status 1: the postmaster starts it again (after a shutdown
            // it does not); 0 would unregister it until the next restart.
            // SAFETY: the normal way out of a background worker.
            unsafe { pg_sys::proc_exit(1) };
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

/// What this server remembers of its claims across restarts: the instance
/// number of its last start (whose rows it deletes), and the claim it was
/// refusing on, if any.
#[derive(Default)]
struct Memory {
    instance: u64,
    refused_by: Option<Claimant>,
}

impl Memory {
    fn path() -> std::path::PathBuf {
        crate::durable::data_dir().join(CLAIMS_FILE)
    }

    fn read() -> Memory {
        let text = std::fs::read_to_string(Memory::path()).unwrap_or_default();
        let mut m = Memory::default();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["instance", i] => m.instance = i.parse().unwrap_or(0),
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
                _ => {}
            }
        }
        m
    }

    /// Replaced whole (see `replace_file`): a crash leaves the old
    /// memory or the new one.
    fn write(&self) -> std::io::Result<()> {
        let mut text = format!("instance {}\n", self.instance);
        if let Some(c) = &self.refused_by {
            text.push_str(&format!(
                "refused_by {} {} {} {}\n",
                c.system_identifier, c.timeline, c.worker_id, c.instance
            ));
        }
        replace_file(&crate::durable::data_dir(), CLAIMS_FILE, text.as_bytes())
    }

    fn save(&self) {
        if let Err(e) = self.write() {
            log!(
                "snowflake_id: could not write {}: {e}",
                Memory::path().display()
            );
        }
    }
}

/// Where shared memory is set up (the postmaster, at start and after a
/// crash): a server that was refusing because of a claim goes on refusing
/// until its claims worker has seen that claim go stale, so a restart does
/// not open a window for repeats.
pub fn resume(st: &State) {
    if settings::claims_database().is_none() {
        return;
    }
    if let Some(c) = Memory::read().refused_by {
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
    logged: Option<(Vec<(u8, Claimant, Option<Claimant>)>, i64)>,
    trouble_logged: Option<String>,
}

impl Keeper {
    fn new(st: &State, db: String) -> Keeper {
        let mut memory = Memory::read();
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
        let previous = (memory.instance != instance).then_some(memory.instance);
        if let Some(c) = &memory.refused_by {
            observer.remember(c.clone(), now_ms());
        }
        memory.instance = instance;
        memory.save();
        Keeper {
            db,
            observer,
            memory,
            previous,
            logged: None,
            trouble_logged: None,
        }
    }

    fn refresh(&mut self, st: &State) {
        // A server without a usable worker id issues nothing and claims
        // nothing (the status says why), but still sees other servers
        // collide: a fan-in subscriber that only reads, say.
        let worker_id = settings::config().ok().map(|c| u32::from(c.worker_id));
        let (who, name) = me(st, worker_id.unwrap_or(NO_WORKER_ID));
        let (db, mine, previous) = (self.db.clone(), who.clone(), self.previous);
        let claiming = worker_id.is_some();
        let rows =
            match in_transaction(move || write_and_read(&mine, claiming, previous, &name, &db)) {
                Ok(Ok(rows)) => rows,
                Ok(Err(f)) | Err(f) => return self.trouble(st, Some(f)),
            };
        self.previous = None;
        self.trouble(st, None);
        let now = now_ms();
        let onlooker = Claim {
            who: who.clone(),
            name: String::new(),
            claimed_at_ms: now,
            last_seen_ms: now,
        };
        let mine = rows.iter().find(|c| c.who == who).unwrap_or(&onlooker);
        let findings = self.observer.judge(mine, &rows, now);
        self.publish(st, &findings, now);
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
        st.claims.trouble.set(&f.to_text());
        if self.trouble_logged.as_deref() != Some(f.message.as_str()) {
            self.trouble_logged = Some(f.message.clone());
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
            self.memory.save();
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

/// Who a finding is about, and what it decided.
fn key_of(f: &Finding) -> (u8, Claimant, Option<Claimant>) {
    match f {
        Finding::Refuse(c) => (0, c.who.clone(), None),
        Finding::Warn(c) => (1, c.who.clone(), None),
        Finding::Between(a, b) => (2, a.who.clone(), Some(b.who.clone())),
    }
}

/// Runs `f` in a transaction of its own; an error rolls it back and comes
/// back as a failure instead of ending the worker.
fn in_transaction<R>(
    f: impl FnOnce() -> R + std::panic::UnwindSafe + std::panic::RefUnwindSafe,
) -> Result<R, Failure> {
    // SAFETY: the transaction calls of every background worker's loop.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let result = PgTryBuilder::new(|| Ok(f()))
        .catch_others(|e| {
            let message = match &e {
                pg_sys::panic::CaughtError::PostgresError(r)
                | pg_sys::panic::CaughtError::ErrorReport(r)
                | pg_sys::panic::CaughtError::RustPanic { ereport: r, .. } => {
                    r.message().to_string()
                }
            };
            Err(message)
        })
        .execute();
    // SAFETY: ends the transaction begun above, whichever way it went.
    unsafe {
        match result {
            Ok(_) => {
                pg_sys::PopActiveSnapshot();
                pg_sys::CommitTransactionCommand();
            }
            Err(_) => pg_sys::AbortCurrentTransaction(),
        }
    }
    result.map_err(|why| {
        Failure::new(Class::Warning, format!("could not keep this server's worker-id claim in snowflake_claims: {why}"))
            .hint("The claim is tried again every 2 seconds; until it is kept, collisions with other servers' worker ids go unnoticed.")
    })
}

/// Writes this server's claim (unless it has no worker id to claim) and
/// reads every claim the table holds.
fn write_and_read(
    who: &Claimant,
    claiming: bool,
    previous: Option<u64>,
    name: &str,
    db: &str,
) -> Result<Vec<Claim>, Failure> {
    let not_installed = |what: &str| {
        Failure::new(Class::NotReady, format!("this server's worker-id claim is not kept: {what} in database \"{db}\" (snowflake_id.claims_database)"))
            .hint(format!("Run CREATE EXTENSION snowflake_id (or ALTER EXTENSION snowflake_id UPDATE) in database \"{db}\", or point snowflake_id.claims_database at the database that has it."))
    };
    let table: Option<String> = Spi::get_one(
        "SELECT format('%I.snowflake_claims', n.nspname) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'snowflake_id'",
    )
    .unwrap_or(None);
    let Some(table) = table else {
        return Err(not_installed("snowflake_id is not installed"));
    };
    let exists: Option<bool> = Spi::get_one_with_args(
        "SELECT to_regclass($1) IS NOT NULL",
        &[table.clone().into()],
    )
    .unwrap_or(None);
    if exists != Some(true) {
        return Err(not_installed(
            "the installed snowflake_id has no snowflake_claims table",
        ));
    }
    Spi::run(&format!("SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}"))
        .and_then(|_| Spi::run("SET LOCAL synchronous_commit = local"))
        .unwrap_or_else(|e| pgrx::error!("{e}"));
    if let Some(previous) = previous {
        // This server's rows from before its restart: claims no more.
        Spi::run_with_args(
            &format!("DELETE FROM {table} WHERE system_identifier = $1 AND timeline = $2 AND instance = $3"),
            &[
                (who.system_identifier as i64).into(),
                i64::from(who.timeline).into(),
                (previous as i64).into(),
            ],
        )
        .unwrap_or_else(|e| pgrx::error!("{e}"));
    }
    if claiming {
        claim(&table, who, name);
    }
    read(&table)
}

/// Writes this server's claim afresh, and drops its claims on other worker ids.
fn claim(table: &str, who: &Claimant, name: &str) {
    let (worker, sysid, tli, instance) = (
        who.worker_id as i32,
        who.system_identifier as i64,
        i64::from(who.timeline),
        who.instance as i64,
    );
    Spi::run_with_args(
        // Deleted and inserted again, not updated: a subscriber that missed
        // the first insert (a subscription made without copying data, or
        // after the claim was written) would skip every update of a row it
        // does not have, and never see the claim. A promoted standby keeps
        // the time its old primary claimed the id: it continues that
        // server's IDs, and must not become the later claimant against a
        // server that collided with it.
        &format!(
            "WITH old AS (DELETE FROM {table} \
                          WHERE system_identifier = $2 AND timeline = $3 AND instance = $5 AND worker_id = $1 \
                          RETURNING claimed_at) \
             INSERT INTO {table} (worker_id, system_identifier, timeline, instance, name, claimed_at, last_seen) \
             SELECT $1, $2, $3, $5, $4, \
                    coalesce((SELECT claimed_at FROM old), \
                             (SELECT min(claimed_at) FROM {table} \
                              WHERE system_identifier = $2 AND timeline < $3 AND worker_id = $1), \
                             clock_timestamp()), \
                    clock_timestamp()"
        ),
        &[worker.into(), sysid.into(), tli.into(), name.into(), instance.into()],
    )
    .unwrap_or_else(|e| pgrx::error!("{e}"));
    // A worker id this server had earlier in this run is claimed no more.
    Spi::run_with_args(
        &format!(
            "DELETE FROM {table} \
             WHERE system_identifier = $1 AND timeline = $2 AND instance = $3 AND worker_id <> $4"
        ),
        &[sysid.into(), tli.into(), instance.into(), worker.into()],
    )
    .unwrap_or_else(|e| pgrx::error!("{e}"));
}

/// Every claim the table holds.
fn read(table: &str) -> Result<Vec<Claim>, Failure> {
    Spi::connect(|client| {
        let rows = client.select(
            &format!(
                "SELECT worker_id, system_identifier, timeline, instance, name, \
                 (extract(epoch FROM claimed_at) * 1000)::bigint, (extract(epoch FROM last_seen) * 1000)::bigint \
                 FROM {table}"
            ),
            None,
            &[],
        )?;
        let mut claims = Vec::new();
        for row in rows {
            let (Some(w), Some(s), Some(t), Some(i), Some(c), Some(l)) = (
                row.get::<i32>(1)?,
                row.get::<i64>(2)?,
                row.get::<i64>(3)?,
                row.get::<i64>(4)?,
                row.get::<i64>(6)?,
                row.get::<i64>(7)?,
            ) else {
                continue;
            };
            claims.push(Claim {
                who: Claimant {
                    system_identifier: s as u64,
                    timeline: t as u32,
                    worker_id: w as u32,
                    instance: i as u64,
                },
                name: row.get::<String>(5)?.unwrap_or_default(),
                claimed_at_ms: c,
                last_seen_ms: l,
            });
        }
        Ok::<_, pgrx::spi::SpiError>(claims)
    })
    .map_err(|e| Failure::new(Class::Warning, format!("could not read snowflake_claims: {e}")))
}

extension_sql_file!("sql/claims.sql", name = "snowflake_claims");
