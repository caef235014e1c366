//! The `snowflake_id.*` settings.
//!
//! Identity settings (worker id, layout, epoch) are fixed at server start
//! and validated once, here; problems are logged at start and raised on use.
//! The wait policy (max_lead, max_wait) can change on reload.
//!
//! Postgres answers a bad value for an extension's setting in
//! `postgresql.conf` with a WARNING and the default. For a generator that
//! would mean quietly issuing IDs under settings nobody chose, so the raw
//! text of every setting is read before the setting is defined and checked
//! here too.

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use snowflake_id_core::config::{self, Config, RawSettings};
use snowflake_id_core::generator::{Policy, MAX_LEAD_LIMIT_MS};
use snowflake_id_core::judged::Judged;
use snowflake_id_core::layout::Layout;
use snowflake_id_core::{Class, Failure};
use std::cell::{Cell, RefCell};
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::pg::guc;
use crate::pg::process::{self, ProcessLocal};

static WORKER_ID: GucSetting<i32> = GucSetting::<i32>::new(-1);
static LAYOUT: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"snowflake_id"));
static EPOCH: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"2025-01-01 00:00:00+00"));
static MAX_LEAD: GucSetting<f64> = GucSetting::<f64>::new(DEFAULT_MAX_LEAD_MS);
static MAX_WAIT: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAX_WAIT_MS);
static WAL_RMGR_ID: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_WAL_RMGR_ID);
static WORKER_ID_SOURCE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"setting"));
static WORKER_ID_OFFSET: GucSetting<i32> = GucSetting::<i32>::new(0);
static CLAIMS_DATABASE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static REGISTRY: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static REGISTRY_POLICY: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"keep"));
static BACKFILL_WORKER_ID: GucSetting<i32> = GucSetting::<i32>::new(-1);

/// The custom WAL resource manager id marks are logged under. 128 is for
/// development only; the ids PostgreSQL's wiki lists (129 to 140, 241) and
/// others seen in extensions' source (144 Spock, 150 credcheck) are avoided.
pub const DEFAULT_WAL_RMGR_ID: i32 = 166;

/// Ten seconds: absorbs NTP step corrections and bursts of ten seconds of
/// the layout's capacity without a wait, while the time in an ID stays
/// within seconds of when it was made.
pub const DEFAULT_MAX_LEAD_MS: f64 = 10_000.0;
/// One second: long enough to wait out one tick of the coarsest named
/// layouts (1 s), short enough that a caller never hangs on a broken clock.
pub const DEFAULT_MAX_WAIT_MS: i32 = 1_000;

static SERVER_LAYOUT: OnceLock<Result<Layout, Failure>> = OnceLock::new();
static CONFIG: OnceLock<Result<Config, Failure>> = OnceLock::new();

/// The wait settings, in the order of `POLICY_PROBLEM`.
const POLICY_NAMES: [&CStr; 2] = [c"snowflake_id.max_lead", c"snowflake_id.max_wait"];

/// Set when a wait setting's value in the configuration was rejected (at
/// start, or by a reload since); cleared when a reload applies a value or
/// finds the setting gone from the configuration files. With it, whether
/// the rejected text came from the files (rather than the command line,
/// which no reload changes).
static POLICY_PROBLEM: ProcessLocal<RefCell<[Option<PolicyProblem>; 2]>> =
    ProcessLocal(RefCell::new([None, None]));
/// A rejected wait setting, and whether its text came from the files.
type PolicyProblem = (Failure, bool);
/// The configuration load (`pg_conf_load_time()`) the problems were last
/// worked out for.
static PROBLEMS_SEEN_AT: ProcessLocal<Cell<pg_sys::TimestampTz>> = ProcessLocal(Cell::new(0));
/// One bit per entry of `POLICY_PROBLEM`, so the hot path checks one word.
static ANY_POLICY_PROBLEM: AtomicU8 = AtomicU8::new(0);

/// The raw text a setting had in the configuration before it was defined.
/// (Called in _PG_init, in the process that read the configuration.)
fn placeholder(name: &CStr) -> Option<String> {
    guc::text(name)
}

/// Parses an integer setting the way Postgres does (with units), or says why not.
fn parse_int_setting(text: &str, flags: i32, min: i32, max: i32) -> Result<i32, String> {
    let value = guc::parse_int(text, flags)?;
    if value < min || value > max {
        return Err(format!("it is outside the range {min} .. {max}"));
    }
    Ok(value)
}

/// Parses a real setting the way Postgres does (with units), or says why not.
fn parse_real_setting(text: &str, flags: i32, min: f64, max: f64) -> Result<f64, String> {
    let value = guc::parse_real(text, flags)?;
    if !(min..=max).contains(&value) {
        return Err(format!("it is outside the range {min} .. {max} ms"));
    }
    Ok(value)
}

fn clear_policy_problem(which: usize) {
    set_policy_problem(which, None, false);
}

fn set_policy_problem(which: usize, problem: Option<Failure>, from_files: bool) {
    let bit = 1 << which;
    match problem {
        Some(_) => ANY_POLICY_PROBLEM.fetch_or(bit, Ordering::Relaxed),
        None => ANY_POLICY_PROBLEM.fetch_and(!bit, Ordering::Relaxed),
    };
    POLICY_PROBLEM.0.borrow_mut()[which] = problem.map(|f| (f, from_files));
}

/// Why `text` cannot be the value of wait setting `which`, if it cannot.
fn policy_text_problem(which: usize, text: &str) -> Option<Failure> {
    let unit = pg_sys::GUC_UNIT_MS as i32;
    let why = match which {
        0 => parse_real_setting(text, unit, 0.0, MAX_LEAD_LIMIT_MS as f64).err(),
        _ => parse_int_setting(text, unit, 0, i32::MAX).err(),
    }?;
    let name = POLICY_NAMES[which].to_string_lossy();
    Some(
        Failure::new(
            Class::InvalidParameter,
            format!("{name} = '{text}' in the configuration is invalid: {why}"),
        )
        .detail("The server did not apply it; no ID is issued until it is fixed.")
        .hint(format!("Write it as milliseconds or with a unit, e.g. ALTER SYSTEM SET {name} = '10s'; SELECT pg_reload_conf();")),
    )
}

/// When this process last loaded the configuration files.
fn reload_stamp() -> pg_sys::TimestampTz {
    process::reload_time()
}

/// After every load of the configuration files, in every process, the wait
/// settings are judged again by what the files now say, as at start: an
/// invalid value refuses generation, naming it (Postgres itself would keep
/// the previous value silently); a value gone or valid lifts the refusal.
/// Every session judges the same files, so all agree. A value rejected from
/// the command line stays rejected: no reload changes it.
#[cold]
fn recheck_policy_problems() {
    let stamp = reload_stamp();
    if PROBLEMS_SEEN_AT.0.get() == stamp {
        return;
    }
    PROBLEMS_SEEN_AT.0.set(stamp);
    let shared = judged();
    let nothing_invalid = shared.is_some_and(|j| j.at(stamp) == Some(0));
    let mut bits = 0;
    for (which, name) in POLICY_NAMES.iter().enumerate() {
        let from_command_line = matches!(POLICY_PROBLEM.0.borrow()[which], Some((_, false)));
        if from_command_line {
            continue;
        }
        let problem = if nothing_invalid {
            None
        } else {
            guc::configured_in_files(name)
                .as_deref()
                .and_then(|t| policy_text_problem(which, t))
        };
        bits |= u32::from(problem.is_some()) << which;
        set_policy_problem(which, problem, true);
    }
    if let (Some(j), false) = (shared, nothing_invalid) {
        j.publish(stamp, bits);
    }
}

/// Where every process finds what one judged of the files at a reload
/// (shared memory; set where it is made).
static JUDGED: AtomicPtr<Judged> = AtomicPtr::new(std::ptr::null_mut());

/// Shares the judgement of the configuration files through `judged`, in
/// shared memory: call where it is made, before any backend starts.
pub fn share_judgement(judged: &'static Judged) {
    JUDGED.store((judged as *const Judged).cast_mut(), Ordering::Release);
}

fn judged() -> Option<&'static Judged> {
    // SAFETY: null or shared memory that lives as long as the server.
    unsafe { JUDGED.load(Ordering::Acquire).as_ref() }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn lead_assigned(_new: f64, _extra: *mut std::ffi::c_void) {
    clear_policy_problem(0);
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn wait_assigned(_new: i32, _extra: *mut std::ffi::c_void) {
    clear_policy_problem(1);
}

/// Settles the layout of a server that did not preload the library. It
/// cannot define settings fixed at server start (Postgres refuses, FATAL),
/// but decoding still needs the layout the configuration names.
pub fn read_without_defining() {
    let layout = placeholder(c"snowflake_id.layout").unwrap_or_else(|| "snowflake_id".into());
    let epoch = placeholder(c"snowflake_id.epoch");
    let raw = RawSettings {
        worker_id: -1,
        layout: &layout,
        epoch: epoch.as_deref().unwrap_or(config::DEFAULT_EPOCH_TEXT),
        epoch_set: epoch.is_some(),
        worker_id_source: "setting",
        worker_id_offset: 0,
        registry_policy: "keep",
        host_name: None,
    };
    let _ = SERVER_LAYOUT.set(config::server_layout(&raw));
}

/// Defines every setting and settles this server's identity. Call only
/// while `shared_preload_libraries` is being loaded.
pub fn define() {
    // The raw texts first: defining a setting replaces its placeholder.
    let raw_worker = placeholder(c"snowflake_id.worker_id");
    let raw_offset = placeholder(c"snowflake_id.worker_id_offset");
    let epoch_set = placeholder(c"snowflake_id.epoch").is_some();
    let raw_rmgr = placeholder(c"snowflake_id.wal_rmgr_id");
    let raw_policy = [
        placeholder(c"snowflake_id.max_lead"),
        placeholder(c"snowflake_id.max_wait"),
    ];
    define_identity();
    define_layout();
    define_wal(raw_rmgr);
    define_policy(raw_policy);
    define_backfill();
    settle_identity(raw_worker, raw_offset, epoch_set);
}

/// Where the worker id comes from, and where it is claimed.
fn define_identity() {
    GucRegistry::define_int_guc(
        c"snowflake_id.worker_id",
        c"This server's worker id, unique among all servers whose IDs meet.",
        c"Must fit the layout's worker bits (0 to 1023 for the default layout). Unset (-1) means no ID can be issued.",
        &WORKER_ID,
        -1,
        i32::MAX,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"snowflake_id.worker_id_source",
        c"Where this server's worker id comes from: 'setting' (snowflake_id.worker_id), 'hostname' or 'citus'.",
        c"'hostname' takes the number that ends the host's name (a StatefulSet ordinal, a CloudNativePG instance serial), 'citus' this node's Citus group id, each plus snowflake_id.worker_id_offset.",
        &WORKER_ID_SOURCE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"snowflake_id.worker_id_offset",
        c"Added to the host name's number or the Citus group id (snowflake_id.worker_id_source = 'hostname' or 'citus').",
        c"Gives each fleet of numbered instances its own range of worker ids.",
        &WORKER_ID_OFFSET,
        i32::MIN,
        i32::MAX,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"snowflake_id.claims_database",
        c"The database where this server claims its worker id in snowflake_claims; empty: no claims, or on a Citus node the database where Citus is.",
        c"Replicate snowflake_claims along with the data, and every server that receives another live server's claim on its own worker id knows.",
        &CLAIMS_DATABASE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    // Superuser-only: a connection string says where and as whom; the
    // password itself is refused there (see `registry_conninfo`).
    // SAFETY: the check hook is guarded, reads only its argument and sets
    // only the check's error strings.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"snowflake_id.registry",
            c"The registry database this server leases its worker id from (snowflake_id.worker_id_source = 'registry'): a libpq connection string.",
            c"Its password belongs in the password file or the service file, never here.",
            &REGISTRY,
            GucContext::Sighup,
            GucFlags::SUPERUSER_ONLY,
            Some(registry_check),
            None,
            None,
        );
    }
    GucRegistry::define_string_guc(
        c"snowflake_id.registry_policy",
        c"'keep': the same leased worker id across restarts; 'disposable': a new one at every start.",
        c"Read where snowflake_id.worker_id_source = 'registry'.",
        &REGISTRY_POLICY,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}

/// Refuses a connection string libpq cannot read, or one that holds a
/// password: before it is written (`ALTER SYSTEM`) or taken in (a reload).
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn registry_check(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pgrx::pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: Postgres hands the new value, a NUL-terminated string or NULL.
    let text = unsafe { (*newval).as_ref() }
        .map(|p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        .unwrap_or_default();
    if text.trim().is_empty() {
        return true;
    }
    let problem = match snowflake_id_core::registry::conninfo_words(&text) {
        Err(why) => Some(
            Failure::new(
                Class::InvalidParameter,
                format!("snowflake_id.registry cannot be read: {why}"),
            )
            .hint("Write it as a libpq connection string (host=... dbname=... user=...) or URI."),
        ),
        Ok(words) => snowflake_id_core::registry::conninfo_problem(&words),
    };
    match problem {
        None => true,
        Some(f) => {
            crate::pg::guc::check_failed(&f);
            false
        }
    }
}

/// `snowflake_id.registry` as set, `None` when empty.
pub fn registry_conninfo() -> Option<String> {
    Some(string_setting(&REGISTRY)).filter(|c| !c.trim().is_empty())
}

/// The worker id of IDs for past times (`snowflake_nextval_at`). A reload
/// may set or change it: the record of what was handed out at past times
/// is the server's, whatever worker id the IDs carry.
fn define_backfill() {
    GucRegistry::define_int_guc(
        c"snowflake_id.backfill_worker_id",
        c"The worker id of this server's IDs for past times (snowflake_nextval_at); unset (-1): none are issued.",
        c"A worker id of this server's own, unique among all servers whose IDs meet, as its live worker id is, and not that one.",
        &BACKFILL_WORKER_ID,
        -1,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::default(),
    );
}

/// How IDs are laid out.
fn define_layout() {
    GucRegistry::define_string_guc(
        c"snowflake_id.layout",
        c"Bit layout of this server's IDs: a named layout or a custom spec.",
        c"Named: snowflake_id, twitter, discord, instagram, pgedge, sonyflake, baidu, js53. Custom: 'time=41,worker=10,sequence=12,unit=1ms'.",
        &LAYOUT,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"snowflake_id.epoch",
        c"Epoch of the snowflake_id layout and of custom layouts.",
        c"A timestamp with an explicit UTC offset, or milliseconds since 1970-01-01 UTC.",
        &EPOCH,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}

/// The WAL resource manager of the mark's records, checked at once: replay
/// needs it before anything else runs.
fn define_wal(raw_rmgr: Option<String>) {
    GucRegistry::define_int_guc(
        c"snowflake_id.wal_rmgr_id",
        c"The custom WAL resource manager id of snowflake_id's durable mark records.",
        c"Change it only if another extension uses the same id, on every server replaying this WAL at once, after a clean shutdown.",
        &WAL_RMGR_ID,
        128,
        255,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    if let Some(Err(why)) = raw_rmgr
        .as_deref()
        .map(|t| parse_int_setting(t, 0, 128, 255))
    {
        // Replay needs the id before anything else runs: no later moment to
        // report it, and no default to fall back on silently.
        crate::pg::error::raise(
            Failure::new(
                Class::InvalidParameter,
                format!(
                    "snowflake_id.wal_rmgr_id = '{}' in the configuration is invalid: {why}",
                    raw_rmgr.unwrap_or_default()
                ),
            )
            .hint(format!("Remove it to use {DEFAULT_WAL_RMGR_ID}, or set a free custom resource manager id from 129 to 255.")),
        );
    }
}

/// How far IDs may lead the clock and how long a call waits, judged again
/// at every reload.
fn define_policy(raw_policy: [Option<String>; 2]) {
    // A real, not an int: in milliseconds an int ends at 24.8 days, and
    // the way out of a forward clock jump must be settable however far
    // the clock went.
    // SAFETY: the assign hook is guarded and touches only this module's state.
    unsafe {
        GucRegistry::define_float_guc_with_hooks(
            c"snowflake_id.max_lead",
            c"How far the time inside IDs may run ahead of the system clock.",
            c"Within it, bursts and backward clock steps are absorbed without waiting; beyond it callers wait for the clock.",
            &MAX_LEAD,
            0.0,
            MAX_LEAD_LIMIT_MS as f64,
            GucContext::Sighup,
            GucFlags::UNIT_MS,
            None,
            Some(lead_assigned),
            None,
        );
    }
    // SAFETY: the assign hook is guarded and touches only this module's state.
    unsafe {
        GucRegistry::define_int_guc_with_hooks(
            c"snowflake_id.max_wait",
            c"The longest one call waits for the clock, all its waits together, before getting an error instead.",
            c"Must be at least one tick of the layout.",
            &MAX_WAIT,
            0,
            i32::MAX,
            GucContext::Sighup,
            GucFlags::UNIT_MS,
            None,
            Some(wait_assigned),
            None,
        );
    }

    for (i, raw) in raw_policy.into_iter().enumerate() {
        let from_files = raw.is_some() && guc::configured_in_files(POLICY_NAMES[i]) == raw;
        set_policy_problem(
            i,
            raw.as_deref().and_then(|t| policy_text_problem(i, t)),
            from_files,
        );
    }
    PROBLEMS_SEEN_AT.0.set(reload_stamp());
}

/// This server's layout and identity, from the settings just defined.
fn settle_identity(raw_worker: Option<String>, raw_offset: Option<String>, epoch_set: bool) {
    let worker_id = int_from_configuration("snowflake_id.worker_id", raw_worker, &WORKER_ID, "1");
    let offset = int_from_configuration(
        "snowflake_id.worker_id_offset",
        raw_offset,
        &WORKER_ID_OFFSET,
        "0",
    );
    let host = process::host_name();
    let source_text = string_setting(&WORKER_ID_SOURCE);
    let policy_text = string_setting(&REGISTRY_POLICY);
    let layout_text = string_setting(&LAYOUT);
    let epoch_text = string_setting(&EPOCH);
    let raw = |worker_id, worker_id_offset| RawSettings {
        worker_id,
        layout: &layout_text,
        epoch: &epoch_text,
        epoch_set,
        worker_id_source: &source_text,
        worker_id_offset,
        registry_policy: &policy_text,
        host_name: host.as_deref(),
    };
    let _ = SERVER_LAYOUT.set(config::server_layout(&raw(-1, 0)));
    let _ = CONFIG.set(worker_id.and_then(|w| offset.and_then(|o| config::configure(&raw(w, o)))));
}

/// Closes the `snowflake_id.` prefix: every other name under it is dropped
/// and said. Call in _PG_init after the last setting of the prefix is
/// defined, whichever module defines it: Postgres drops the value a
/// configuration file gives a name not defined by then, so a setting
/// defined later would be empty from every start until a reload.
pub fn close_prefix() {
    guc::reserve_prefix(c"snowflake_id");
    warn_of_names_in_another_case();
}

/// An integer setting fixed at start, from the text in the configuration
/// when there is one: Postgres would replace a bad one with the default
/// after a mere WARNING.
fn int_from_configuration(
    name: &str,
    raw: Option<String>,
    setting: &GucSetting<i32>,
    example: &str,
) -> Result<i32, Failure> {
    match raw
        .as_deref()
        .map(|t| parse_int_setting(t, 0, i32::MIN, i32::MAX))
    {
        Some(Ok(v)) => Ok(v),
        Some(Err(why)) => Err(Failure::new(
            Class::InvalidParameter,
            format!(
                "{name} = '{}' in the configuration is invalid: {why}",
                raw.unwrap_or_default()
            ),
        )
        .hint(format!(
            "ALTER SYSTEM SET {name} = {example}; then restart PostgreSQL."
        ))),
        None => Ok(setting.get()),
    }
}

/// The database the claims worker keeps this server's claim in, if any.
pub fn claims_database() -> Option<String> {
    Some(string_setting(&CLAIMS_DATABASE)).filter(|d| !d.trim().is_empty())
}

/// Whether Citus is among the preloaded libraries ('citus', or a path to it).
pub fn citus_preloaded() -> bool {
    guc::text(c"shared_preload_libraries").is_some_and(|libs| {
        libs.split(',').any(|l| {
            let l = l.trim().trim_matches('"');
            l.rsplit('/')
                .next()
                .unwrap_or(l)
                .eq_ignore_ascii_case("citus")
        })
    })
}

/// Whether this server keeps a worker-id claim: where a claims database is
/// set, and on every Citus node (Citus preloaded), where the claims then
/// live in the database whose Citus metadata the node belongs to, found by
/// the first backend that reads it. Not in binary-upgrade mode.
pub fn claims_kept() -> bool {
    // Each input is fixed until a restart (settings of postmaster context,
    // binary-upgrade mode): worked out once per process, since a backfill
    // asks at every ID.
    static KEPT: ProcessLocal<Cell<Option<bool>>> = ProcessLocal(Cell::new(None));
    KEPT.0.get().unwrap_or_else(|| {
        let kept = (claims_database().is_some() || citus_preloaded()) && !process::binary_upgrade();
        KEPT.0.set(Some(kept));
        kept
    })
}

/// Whether the first ID after a start waits for the claims worker to have
/// judged claims once: on a Citus node, where the worker reads the other
/// nodes' claims itself, so that a worker id given twice in the cluster is
/// refused before it stores a row.
pub fn first_id_waits_for_claims() -> bool {
    citus_preloaded() && claims_kept()
}

/// This server's name in its claim: `cluster_name`, else host and port.
pub fn server_name() -> String {
    let cluster = guc::text(c"cluster_name");
    let name = cluster.filter(|c| !c.is_empty()).unwrap_or_else(|| {
        format!(
            "{}:{}",
            process::host_name().unwrap_or_default(),
            process::server_port()
        )
    });
    // Printable ASCII, as Postgres keeps cluster_name: the name travels to
    // other servers' tables, whatever their encoding.
    name.chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// Setting names are case-insensitive, but Postgres reserves a prefix as
/// written: `Snowflake_ID.layuot` would pass unnoticed. Such names are
/// reported as Postgres reports the others (it offers no way to remove
/// them, so they stay, unused).
fn warn_of_names_in_another_case() {
    const PREFIX: &str = "snowflake_id.";
    for name in guc::placeholder_names() {
        let lower = name.to_ascii_lowercase();
        if lower.starts_with(PREFIX) && !name.starts_with(PREFIX) {
            crate::pg::error::log(
                Failure::new(
                    Class::InvalidParameter,
                    format!("invalid configuration parameter name \"{name}\": snowflake_id has no such setting"),
                )
                .detail("\"snowflake_id\" is a reserved prefix; setting names are case-insensitive.")
                .hint("Remove it, or correct it to one of snowflake_id.worker_id, worker_id_source, worker_id_offset, layout, epoch, max_lead, max_wait, backfill_worker_id, wal_rmgr_id, claims_database, registry, registry_policy, opaque_keys_file."),
                pgrx::PgLogLevel::WARNING,
            );
        }
    }
}

fn string_setting(s: &GucSetting<Option<CString>>) -> String {
    s.get()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The worker id of IDs for past times, if one is set; checked against
/// the configuration files after every reload, so that a text Postgres
/// rejected (and replaced by the value before, or by none) is an error
/// naming it, never the other value.
pub fn backfill_worker_id() -> Result<Option<u32>, Failure> {
    let stamp = reload_stamp();
    if let Some((at, checked)) = BACKFILL_CHECKED.0.borrow().as_ref() {
        if *at == stamp {
            return checked.clone();
        }
    }
    let value = BACKFILL_WORKER_ID.get();
    let checked = match guc::configured_in_files(c"snowflake_id.backfill_worker_id") {
        // Invalid text, which Postgres replaced by the value before; a valid
        // one not yet loaded (ALTER SYSTEM before the reload) or overridden
        // on the command line is Postgres's to apply, as for any setting.
        Some(text) if guc::parse_int(&text, 0).map_or(true, |n| n < -1) => Err(Failure::new(
            Class::InvalidParameter,
            format!("snowflake_id.backfill_worker_id = '{text}' in the configuration is invalid: it must be a worker id, or -1 for none"),
        )
        .hint("Correct it in postgresql.conf (or ALTER SYSTEM SET snowflake_id.backfill_worker_id = ...) and reload: SELECT pg_reload_conf();")),
        _ => Ok(u32::try_from(value).ok()),
    };
    *BACKFILL_CHECKED.0.borrow_mut() = Some((stamp, checked.clone()));
    checked
}

/// The backfill worker id as checked, and the reload it was read after.
type BackfillChecked = (pg_sys::TimestampTz, Result<Option<u32>, Failure>);
static BACKFILL_CHECKED: ProcessLocal<RefCell<Option<BackfillChecked>>> =
    ProcessLocal(RefCell::new(None));

/// The WAL resource manager id marks are logged under.
pub fn wal_rmgr_id() -> u8 {
    WAL_RMGR_ID.get().clamp(128, 255) as u8
}

/// The layout this server's IDs use: all decoding needs.
pub fn server_layout() -> Result<&'static Layout, Failure> {
    match SERVER_LAYOUT.get() {
        Some(Ok(l)) => Ok(l),
        Some(Err(f)) => Err(f.clone()),
        None => Err(Failure::new(
            Class::NotReady,
            "snowflake_id settings are not loaded",
        )),
    }
}

/// Layout and worker id: all generation needs.
#[inline]
pub fn config() -> Result<&'static Config, Failure> {
    match CONFIG.get() {
        Some(Ok(c)) => Ok(c),
        other => Err(config_problem(other)),
    }
}

#[cold]
#[inline(never)]
fn config_problem(loaded: Option<&Result<Config, Failure>>) -> Failure {
    match loaded {
        Some(Err(f)) => f.clone(),
        _ => Failure::new(Class::NotReady, "snowflake_id settings are not loaded"),
    }
}

/// The wait policy as the settings stand now. Every ID asks, so the checked
/// policy is kept until a setting changes.
#[inline]
pub fn policy(layout: &Layout) -> Result<Policy, Failure> {
    match cached_policy() {
        Some(p) => Ok(p),
        None => policy_fresh(layout, policy_key()),
    }
}

/// The policy checked before, if the settings have not changed since.
#[inline]
pub fn cached_policy() -> Option<Policy> {
    if POLICY_KEY.0.get() != policy_key()
        || ANY_POLICY_PROBLEM.load(Ordering::Relaxed) != 0
        || PROBLEMS_SEEN_AT.0.get() != reload_stamp()
    {
        return None;
    }
    POLICY.0.get()
}

/// The two settings a policy is made from, as one comparable value.
#[inline]
fn policy_key() -> (u64, i32) {
    // SAFETY: Postgres writes these on this process's one thread, between
    // statements; read raw, as GucSetting::get would, minus its per-call
    // thread check (a TLS lookup on the path of every ID).
    let (lead, wait) = unsafe { (*MAX_LEAD.as_ptr(), *MAX_WAIT.as_ptr()) };
    (lead.to_bits(), wait)
}

#[cold]
#[inline(never)]
fn policy_fresh(layout: &Layout, key: (u64, i32)) -> Result<Policy, Failure> {
    recheck_policy_problems();
    if ANY_POLICY_PROBLEM.load(Ordering::Relaxed) != 0 {
        if let Some((f, _)) = POLICY_PROBLEM.0.borrow().iter().flatten().next().cloned() {
            return Err(f);
        }
    }
    let p = Policy::new(
        layout,
        MAX_LEAD.get().round().max(0.0) as u64,
        MAX_WAIT.get().max(0) as u64,
    )?;
    POLICY.0.set(Some(p));
    POLICY_KEY.0.set(key);
    Ok(p)
}

/// The checked policy and the settings it was made from. The layout it was
/// checked against is fixed for the server's life. No pair of settings
/// makes the initial key (max_wait is never negative).
static POLICY: ProcessLocal<Cell<Option<Policy>>> = ProcessLocal(Cell::new(None));
static POLICY_KEY: ProcessLocal<Cell<(u64, i32)>> = ProcessLocal(Cell::new((0, -1)));
