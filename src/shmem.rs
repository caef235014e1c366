//! The generator's shared memory: one cache line for the generator word and
//! the durable bound, a few counters of rare events, and one cache line per
//! process for the count of IDs it issued (so the hot path never writes a
//! line another process writes).

use crate::local::ProcessLocal;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowflake_id_core::generator::Shared;
use std::cell::Cell;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering,
};

/// Counters of events that are rare by nature (each at most once per tick,
/// per wait, per write or per error), so a shared atomic costs nothing.
#[repr(C)]
#[derive(Default)]
pub struct Counters {
    pub borrowed_ticks: AtomicU64,
    /// The furthest the time inside an issued ID ran ahead of the clock, ms.
    pub largest_lead_ms: AtomicU64,
    pub clock_steps_back: AtomicU64,
    pub largest_step_back_ms: AtomicU64,
    pub waits: AtomicU64,
    pub wait_us: AtomicU64,
    pub errors: AtomicU64,
    pub background_writes: AtomicU64,
    pub caller_writes: AtomicU64,
    /// Mark records replayed from WAL since start (crash recovery, standby,
    /// archive recovery).
    pub marks_replayed: AtomicU64,
    /// Waits for a synchronous standby to confirm a mark, and their time.
    pub standby_waits: AtomicU64,
    pub standby_wait_us: AtomicU64,
    /// Issued by a process with no slot of its own (should stay 0).
    pub unslotted_issued: AtomicU64,
}

#[repr(C)]
pub struct State {
    pub gen: Shared,
    pub refused: AtomicBool,
    pub reserver_pid: AtomicI32,
    pub started_at_ms: AtomicI64,
    /// Generation number of the newest durable mark written.
    pub mark_generation: AtomicU64,
    /// The newest durable mark (a tick), `NO_MARK` before the first.
    pub mark_tick: AtomicU64,
    pub mark_written_at_ms: AtomicI64,
    /// Since when (Unix ms) a written mark has been waiting for a
    /// synchronous standby's confirmation; 0 when none is.
    pub standby_wait_since_ms: AtomicI64,
    /// The server the newest mark belongs to (0 when unknown) and where this
    /// generator learnt it.
    pub mark_system_id: AtomicU64,
    pub mark_timeline: AtomicU32,
    pub mark_source: AtomicU8,
    /// End of the last mark record this server wrote to WAL (0: none yet).
    pub logged_lsn: AtomicU64,
    /// Recovery files found in the data directory at start (`RECOVERY_FILES` bits).
    pub recovery_files: AtomicU8,
    /// Whether the check for copied data has run since start.
    pub settled: AtomicBool,
    /// Why generation is refused (`Refusal`), when `refused` is set.
    pub refusal: AtomicU8,
    pub counters: Counters,
    /// What the claims worker concluded (see `claims`).
    pub claims: crate::claims::Shared,
    lock: AtomicPtr<pg_sys::LWLock>,
    slot_count: u64,
}

pub const NO_MARK: u64 = u64::MAX;

/// Where the newest mark came from.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MarkSource {
    None = 0,
    StateFile = 1,
    WalReplay = 2,
    WrittenHere = 3,
}

impl MarkSource {
    pub fn of(v: u8) -> MarkSource {
        match v {
            1 => MarkSource::StateFile,
            2 => MarkSource::WalReplay,
            3 => MarkSource::WrittenHere,
            _ => MarkSource::None,
        }
    }

    pub fn label(self) -> Option<&'static str> {
        match self {
            MarkSource::None => None,
            MarkSource::StateFile => Some("state file"),
            MarkSource::WalReplay => Some("WAL replay"),
            MarkSource::WrittenHere => Some("written here"),
        }
    }
}

/// Why generation is refused.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Refusal {
    /// Decided at start from the state file (the postmaster keeps the text).
    AtStart = 1,
    /// A replayed mark was made under other settings.
    ReplayedOtherSettings = 2,
    /// A mark record in WAL could not be read.
    UnreadableRecord = 3,
}

/// The recovery files a server can start with, one bit each.
pub const RECOVERY_FILES: [&str; 3] = ["standby.signal", "recovery.signal", "backup_label"];

/// IDs issued by the process owning this slot.
#[repr(C, align(64))]
#[derive(Default)]
pub struct Slot {
    pub issued: AtomicU64,
}

const NAME: &std::ffi::CStr = c"snowflake_id";

static STATE: AtomicPtr<State> = AtomicPtr::new(std::ptr::null_mut());
static mut PREV_SHMEM_STARTUP: pg_sys::shmem_startup_hook_type = None;
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
static mut PREV_SHMEM_REQUEST: pg_sys::shmem_request_hook_type = None;

/// Processes that can own a slot: every backend, worker and auxiliary process.
fn slot_count() -> u64 {
    // Before 15 the library asks for shared memory before Postgres has
    // worked out MaxBackends: add it up from the settings it is made of
    // (read by name: pgrx does not bind all of their variables there).
    #[cfg(any(feature = "pg13", feature = "pg14"))]
    let backends = [
        "max_connections",
        "autovacuum_max_workers",
        "max_worker_processes",
        "max_wal_senders",
    ]
    .iter()
    .map(|name| crate::settings::int_setting(name))
    .sum::<i32>()
        + 1;
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    // SAFETY: MaxBackends is final by the time shared memory is requested.
    let backends = unsafe { pg_sys::MaxBackends };
    (backends as u64) + u64::from(pg_sys::NUM_AUXILIARY_PROCS)
}

/// Bytes asked for: the state, the slots, and room to align them to a cache line.
fn size() -> usize {
    std::mem::size_of::<State>() + slot_count() as usize * std::mem::size_of::<Slot>() + 64
}

/// Installs the shared-memory hooks. Call from `_PG_init` while
/// `shared_preload_libraries` is being processed.
pub fn install() {
    // SAFETY: hook chaining in _PG_init, single-threaded postmaster.
    unsafe {
        #[cfg(any(feature = "pg13", feature = "pg14"))]
        request();
        #[cfg(not(any(feature = "pg13", feature = "pg14")))]
        {
            PREV_SHMEM_REQUEST = pg_sys::shmem_request_hook;
            pg_sys::shmem_request_hook = Some(shmem_request);
        }
        PREV_SHMEM_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(shmem_startup);
    }
}

unsafe fn request() {
    unsafe {
        pg_sys::RequestAddinShmemSpace(size());
        pg_sys::RequestNamedLWLockTranche(NAME.as_ptr(), 1);
    }
}

#[cfg(not(any(feature = "pg13", feature = "pg14")))]
#[pg_guard]
unsafe extern "C-unwind" fn shmem_request() {
    unsafe {
        if let Some(prev) = PREV_SHMEM_REQUEST {
            prev();
        }
        request();
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP {
            prev();
        }
        // AddinShmemInitLock: the 22nd of the main LWLock array in every supported release.
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let raw = pg_sys::ShmemInitStruct(NAME.as_ptr(), size(), &mut found) as *mut u8;
        let state = raw.add(raw.align_offset(64)) as *mut State;
        if !found {
            std::ptr::write_bytes(raw, 0, size());
            let lock = &raw mut (*pg_sys::GetNamedLWLockTranche(NAME.as_ptr())).lock;
            std::ptr::write(state, State::fresh(lock, slot_count()));
        }
        STATE.store(state, Ordering::Release);
        if !found {
            crate::durable::resume(&*state);
        }
        pg_sys::LWLockRelease(init_lock);
    }
}

/// The shared state, or `None` when the library was not preloaded.
#[inline]
pub fn state() -> Option<&'static State> {
    // SAFETY: set once per shared-memory lifetime before any backend starts;
    // the memory lives as long as the server.
    unsafe { STATE.load(Ordering::Acquire).as_ref() }
}

impl State {
    fn fresh(lock: *mut pg_sys::LWLock, slot_count: u64) -> State {
        State {
            gen: Shared::default(),
            refused: AtomicBool::new(false),
            reserver_pid: AtomicI32::new(0),
            started_at_ms: AtomicI64::new(crate::clock::now_ms()),
            mark_generation: AtomicU64::new(0),
            mark_tick: AtomicU64::new(NO_MARK),
            mark_written_at_ms: AtomicI64::new(0),
            standby_wait_since_ms: AtomicI64::new(0),
            mark_system_id: AtomicU64::new(0),
            mark_timeline: AtomicU32::new(0),
            mark_source: AtomicU8::new(MarkSource::None as u8),
            logged_lsn: AtomicU64::new(0),
            recovery_files: AtomicU8::new(0),
            settled: AtomicBool::new(false),
            refusal: AtomicU8::new(0),
            counters: Counters::default(),
            claims: crate::claims::Shared::new(),
            lock: AtomicPtr::new(lock),
            slot_count,
        }
    }

    /// The slot of the calling process, found once and remembered.
    #[inline]
    pub fn my_slot(&self) -> Option<&Slot> {
        static MINE: ProcessLocal<Cell<*const Slot>> = ProcessLocal(Cell::new(std::ptr::null()));
        let cached = MINE.0.get();
        if !cached.is_null() {
            // SAFETY: points into this state's slot array, which never moves.
            return Some(unsafe { &*cached });
        }
        // SAFETY: MyProc is an element of ProcGlobal->allProcs in every process with a PGPROC.
        let index = unsafe {
            let me = pg_sys::MyProc;
            if me.is_null() {
                return None;
            }
            let base = (*pg_sys::ProcGlobal).allProcs;
            (me as usize - base as usize) / std::mem::size_of::<pg_sys::PGPROC>()
        };
        if index as u64 >= self.slot_count {
            return None;
        }
        let slot = self.slots().get(index)? as *const Slot;
        MINE.0.set(slot);
        // SAFETY: as above.
        Some(unsafe { &*slot })
    }

    pub fn slots(&self) -> &[Slot] {
        // SAFETY: the slots follow the state, which is a multiple of 64 bytes long.
        unsafe {
            let first = (self as *const State).add(1) as *const Slot;
            std::slice::from_raw_parts(first, self.slot_count as usize)
        }
    }

    /// IDs issued since shared memory was last initialised.
    pub fn issued(&self) -> u64 {
        self.slots()
            .iter()
            .map(|s| s.issued.load(Ordering::Relaxed))
            .sum::<u64>()
            + self.counters.unslotted_issued.load(Ordering::Relaxed)
    }

    /// Counts `n` IDs issued by the calling process.
    #[inline]
    pub fn count_issued(&self, n: u64) {
        match self.my_slot() {
            // Only this process writes its slot: no atomic read-modify-write needed.
            Some(s) => s
                .issued
                .store(s.issued.load(Ordering::Relaxed) + n, Ordering::Relaxed),
            None => {
                self.counters
                    .unslotted_issued
                    .fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Runs `f` holding the lock that serialises durable-mark writes.
    pub fn with_lock<R>(&self, f: impl FnOnce() -> R) -> R {
        let lock = self.lock.load(Ordering::Relaxed);
        // SAFETY: the tranche lock lives in shared memory for the server's lifetime.
        unsafe { pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE) };
        struct Release(*mut pg_sys::LWLock);
        impl Drop for Release {
            fn drop(&mut self) {
                // SAFETY: acquired above, by this process.
                unsafe { pg_sys::LWLockRelease(self.0) };
            }
        }
        let _release = Release(lock);
        f()
    }
}

// Keep the layout promise the slot array relies on.
const _: () = assert!(std::mem::size_of::<State>() % 64 == 0);
const _: () = assert!(std::mem::size_of::<Slot>() == 64);
