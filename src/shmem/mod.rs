//! The shared memory of the library: one region, set up once per server
//! start (and again after a crash), made of parts that each have one
//! owner and a small protocol of their own:
//!
//! - the generator word and its durable window (`snowflake_id_core::generator::Shared`),
//!   taken by `issue`, published and revoked by `mark`;
//! - [`mark::MarkState`]: what is known of the durable mark, written by `mark`;
//! - [`backfill::BackfillState`]: what was handed out at past times, written by `backfill`;
//! - [`refusal::Refusal`]: whether generation is refused, and why;
//! - [`claims::ClaimsState`]: what the claims worker publishes;
//! - [`registry::RegistryState`]: what the registry worker publishes;
//! - [`counters`]: counts for the status, and the per-process slots;
//! - the reserver's process id ([`pid::Pid`]);
//! - the worker id generation uses ([`worker::WorkerId`]);
//! - the databases checked for copies since start (`snowflake_id_core::floored::Checked`);
//! - what one process judged of the configuration files at a reload (`snowflake_id_core::judged::Judged`).
//!
//! What runs when the region is first made is handed in by `lib.rs`: this
//! layer knows no part's meaning beyond its own fields.

pub mod backfill;
pub mod claims;
pub mod counters;
pub mod mark;
pub mod pid;
pub mod refusal;
pub mod registry;
pub mod worker;

use crate::pg::clock::now_ms;
use crate::pg::lock::SharedLock;
use counters::{Counters, Slot, Slots};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowflake_id_core::generator::Shared;
use std::sync::atomic::{AtomicI64, AtomicPtr, Ordering};

#[repr(C, align(64))]
pub struct Shmem {
    pub gen: Shared,
    pub mark: mark::MarkState,
    pub backfill: backfill::BackfillState,
    pub refusal: refusal::Refusal,
    pub claims: claims::ClaimsState,
    pub registry: registry::RegistryState,
    pub reserver_pid: pid::Pid,
    pub worker: worker::WorkerId,
    pub counters: Counters,
    pub floored: snowflake_id_core::floored::Checked,
    pub judged: snowflake_id_core::judged::Judged,
    started_at_ms: AtomicI64,
    slot_count: u64,
}

// The slots follow the region's head, each on a cache line of its own.
const _: () = assert!(std::mem::size_of::<Shmem>() % 64 == 0);

const NAME: &std::ffi::CStr = c"snowflake_id";

static SHMEM: AtomicPtr<Shmem> = AtomicPtr::new(std::ptr::null_mut());
/// What runs when the region is made (not when a process attaches).
static mut ON_CREATE: Option<fn(&'static Shmem)> = None;
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
        c"max_connections",
        c"autovacuum_max_workers",
        c"max_worker_processes",
        c"max_wal_senders",
    ]
    .iter()
    .map(|name| crate::pg::guc::int(name))
    .sum::<i32>()
        + 1;
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    // SAFETY: MaxBackends is final by the time shared memory is requested.
    let backends = unsafe { pg_sys::MaxBackends };
    (backends as u64) + u64::from(pg_sys::NUM_AUXILIARY_PROCS)
}

/// Bytes asked for: the head, the slots, and room to align them to a cache line.
fn size() -> usize {
    std::mem::size_of::<Shmem>() + slot_count() as usize * std::mem::size_of::<Slot>() + 64
}

/// Installs the shared-memory hooks; `on_create` runs each time the region
/// is made, in the postmaster, before any backend can see it. Call from
/// `_PG_init` while `shared_preload_libraries` is being processed.
pub fn install(on_create: fn(&'static Shmem)) {
    // SAFETY: hook chaining in _PG_init, in the single-threaded postmaster,
    // before any hook can run.
    unsafe {
        ON_CREATE = Some(on_create);
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

/// # Safety
/// Only where Postgres takes requests for shared memory: `_PG_init` before
/// 15, the request hook from 15 on.
unsafe fn request() {
    // SAFETY: see above.
    unsafe {
        pg_sys::RequestAddinShmemSpace(size());
        // The mark's lock, and the backfill map's.
        pg_sys::RequestNamedLWLockTranche(NAME.as_ptr(), 2);
    }
}

#[cfg(not(any(feature = "pg13", feature = "pg14")))]
#[pg_guard]
unsafe extern "C-unwind" fn shmem_request() {
    // SAFETY: called by Postgres as the request hook, the previous hook first.
    unsafe {
        if let Some(prev) = PREV_SHMEM_REQUEST {
            prev();
        }
        request();
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    // SAFETY: called by Postgres as the startup hook, in the postmaster (or
    // a process attaching, where `found`), with the space asked for above;
    // the head is written once, zeroed first, under AddinShmemInitLock.
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP {
            prev();
        }
        // AddinShmemInitLock: the 22nd of the main LWLock array in every supported release.
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let raw = pg_sys::ShmemInitStruct(NAME.as_ptr(), size(), &mut found) as *mut u8;
        let shmem = raw.add(raw.align_offset(64)) as *mut Shmem;
        if !found {
            std::ptr::write_bytes(raw, 0, size());
            let locks = pg_sys::GetNamedLWLockTranche(NAME.as_ptr());
            let mark_lock = SharedLock::new(&raw mut (*locks).lock);
            let backfill_lock = SharedLock::new(&raw mut (*locks.add(1)).lock);
            std::ptr::write(shmem, Shmem::fresh(mark_lock, backfill_lock, slot_count()));
        }
        SHMEM.store(shmem, Ordering::Release);
        if let (false, Some(on_create)) = (found, ON_CREATE) {
            on_create(&*shmem);
        }
        pg_sys::LWLockRelease(init_lock);
    }
}

/// The shared memory, or `None` when the library was not preloaded.
#[inline]
pub fn get() -> Option<&'static Shmem> {
    // SAFETY: set once per shared-memory lifetime before any backend starts;
    // the memory lives as long as the server.
    unsafe { SHMEM.load(Ordering::Acquire).as_ref() }
}

impl Shmem {
    fn fresh(mark_lock: SharedLock, backfill_lock: SharedLock, slot_count: u64) -> Shmem {
        Shmem {
            gen: Shared::default(),
            mark: mark::MarkState::new(mark_lock),
            backfill: backfill::BackfillState::new(backfill_lock),
            refusal: refusal::Refusal::new(),
            claims: claims::ClaimsState::new(),
            registry: registry::RegistryState::new(),
            reserver_pid: pid::Pid::new(),
            worker: worker::WorkerId::new(),
            counters: Counters::default(),
            floored: Default::default(),
            judged: Default::default(),
            started_at_ms: AtomicI64::new(now_ms()),
            slot_count,
        }
    }

    /// When shared memory was last set up (server start or crash restart).
    pub fn started_at_ms(&self) -> i64 {
        self.started_at_ms.load(Ordering::Relaxed)
    }

    /// Makes generation continue from copied IDs ahead of the clock.
    pub fn continue_with(&self, term: i64) {
        self.gen.continue_with(term);
    }

    /// The instant generation works from when the clock reads `clock_ms`:
    /// the clock, or the time of copied IDs ahead of it, catching up.
    #[inline]
    pub fn generation_now(&self, clock_ms: i64) -> i64 {
        self.gen.now_ms(clock_ms)
    }

    /// How long to sleep for generation's time to move on `wait_ms`.
    pub fn real_wait_ms(&self, wait_ms: u64, clock_ms: i64) -> u64 {
        self.gen.real_wait_ms(wait_ms, clock_ms)
    }

    #[inline]
    fn slots(&self) -> Slots<'_> {
        // SAFETY: the slots follow the head, which is a multiple of 64
        // bytes long, in the region sized for `slot_count` of them.
        let slots = unsafe {
            let first = (self as *const Shmem).add(1) as *const Slot;
            std::slice::from_raw_parts(first, self.slot_count as usize)
        };
        Slots { slots }
    }

    /// Counts `n` IDs issued by the calling process.
    #[inline]
    pub fn count_issued(&self, n: u64) {
        self.slots().count_issued(&self.counters, n);
    }

    /// IDs issued since shared memory was last set up.
    pub fn issued(&self) -> u64 {
        self.slots().issued(&self.counters)
    }
}
