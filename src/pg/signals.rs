//! Signals of this library's background workers: SIGTERM ends them (and
//! interrupts a wait inside Postgres, as `die` does, until a worker asks
//! for its loop alone to end), SIGHUP asks for a reload. Here too: whether
//! the SIGTERM came from the postmaster, i.e. the server is shutting down.

use pgrx::pg_sys;
use std::sync::atomic::{AtomicBool, Ordering};

// Postgres's reload handler as the C function it is: pgrx's bindings wrap
// it into a Rust function, which cannot be handed to pqsignal. Since 19 a
// handler is also given what Postgres knows of the sender (SIGNAL_ARGS).
#[cfg(not(feature = "pg19"))]
unsafe extern "C-unwind" {
    fn SignalHandlerForConfigReload(signal: std::ffi::c_int);
}
#[cfg(feature = "pg19")]
unsafe extern "C-unwind" {
    fn SignalHandlerForConfigReload(signal: std::ffi::c_int, info: *const pg_sys::pg_signal_info);
}
#[cfg(not(feature = "pg19"))]
type Handler = unsafe extern "C-unwind" fn(std::ffi::c_int);
#[cfg(feature = "pg19")]
type Handler = unsafe extern "C-unwind" fn(std::ffi::c_int, *const pg_sys::pg_signal_info);

/// Set by SIGTERM (a shutdown, or an administrator's kill).
static TERMINATE: AtomicBool = AtomicBool::new(false);

/// Set when that SIGTERM came from the postmaster: the server is shutting
/// down (smart or fast), not this process alone being ended by a role's
/// `pg_terminate_backend` or this extension's own hook.
static BY_POSTMASTER: AtomicBool = AtomicBool::new(false);

/// Whether SIGTERM also interrupts what Postgres is doing in this process,
/// as `die` does (the reserver's waits for a synchronous standby have no
/// other end). The claims worker's waits are bounded by its own timeouts,
/// and it has one last transaction to run at a shutdown: it only sets the
/// flag, which its loop reads at every turn.
static INTERRUPT_ON_TERM: AtomicBool = AtomicBool::new(true);

/// Called by a worker whose loop ends itself on SIGTERM (see above). A
/// SIGTERM that came before the switch still ends the loop (the flag), not
/// with a FATAL at the next interrupt check.
pub fn sigterm_ends_loop_only() {
    INTERRUPT_ON_TERM.store(false, Ordering::Relaxed);
    if terminating() {
        // SAFETY: this process's own interrupt flag, which only its signal
        // handlers set, and `on_sigterm` no longer does.
        unsafe { pg_sys::ProcDiePending = 0 };
    }
}

/// Whether this process (a background worker of this library) was told
/// to stop.
pub fn terminating() -> bool {
    TERMINATE.load(Ordering::Relaxed)
}

/// Whether the SIGTERM that ends this worker is the server's shutdown.
pub fn server_shutting_down() -> bool {
    BY_POSTMASTER.load(Ordering::Relaxed)
}

/// SIGTERM: what Postgres's `die` does to end waits inside Postgres (a
/// synchronous standby's, say), plus a flag of our own so the loop can
/// exit quietly instead of with a FATAL at every shutdown.
///
/// # Safety
/// Only from a signal handler of this process.
unsafe fn on_sigterm() {
    // SAFETY: only async-signal-safe stores and SetLatch, errno preserved.
    unsafe {
        let saved = *libc::__errno_location();
        TERMINATE.store(true, Ordering::Relaxed);
        if INTERRUPT_ON_TERM.load(Ordering::Relaxed) {
            pg_sys::ProcDiePending = 1;
            pg_sys::InterruptPending = 1;
        }
        pg_sys::SetLatch(pg_sys::MyLatch);
        *libc::__errno_location() = saved;
    }
}

/// `on_sigterm` as `pqsignal` installs it, where the kernel's siginfo
/// cannot be had.
#[cfg(not(feature = "pg19"))]
unsafe extern "C-unwind" fn on_sigterm_signal(_signal: std::ffi::c_int) {
    // SAFETY: a signal handler.
    unsafe { on_sigterm() }
}
#[cfg(feature = "pg19")]
unsafe extern "C-unwind" fn on_sigterm_signal(
    _signal: std::ffi::c_int,
    _info: *const pg_sys::pg_signal_info,
) {
    // SAFETY: a signal handler.
    unsafe { on_sigterm() }
}

/// SIGTERM with the sender's process id: before 19, `pqsignal` hands a
/// handler the signal number alone.
extern "C" fn on_sigterm_from(
    _signal: std::ffi::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut std::ffi::c_void,
) {
    // SAFETY: the kernel's siginfo for this delivery; an atomic store.
    unsafe {
        if !info.is_null() && (*info).si_pid() == pg_sys::PostmasterPid {
            BY_POSTMASTER.store(true, Ordering::Relaxed);
        }
        on_sigterm();
    }
}

/// Installs a Postgres signal handler (the function was renamed in 18).
///
/// # Safety
/// `handler` must be async-signal-safe.
unsafe fn handle(signal: u32, handler: Handler) {
    // SAFETY: installs the handler the caller vouches for.
    unsafe {
        #[cfg(not(any(feature = "pg18", feature = "pg19")))]
        pg_sys::pqsignal(signal as i32, Some(handler));
        #[cfg(any(feature = "pg18", feature = "pg19"))]
        pg_sys::pqsignal_be(signal as i32, Some(handler));
    }
}

/// The signal handling of this extension's background workers: SIGTERM
/// ends them (see `on_sigterm`), SIGHUP asks for a reload.
pub fn handle_signals() {
    // SAFETY: the documented start of a background worker.
    unsafe {
        handle(pg_sys::SIGHUP, SignalHandlerForConfigReload);
        // As pqsignal installs a handler (restarting system calls, nothing
        // else blocked), asking the kernel for the sender too.
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigterm_from as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut()) != 0 {
            handle(pg_sys::SIGTERM, on_sigterm_signal);
        }
        pg_sys::BackgroundWorkerUnblockSignals();
    }
}

/// Takes in a changed configuration, if a reload was asked for.
pub fn reload_if_asked() {
    // SAFETY: the flag and reload of every Postgres auxiliary loop.
    unsafe {
        if pg_sys::ConfigReloadPending != 0 {
            pg_sys::ConfigReloadPending = 0;
            pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP);
        }
    }
}

/// Sends SIGTERM to `pid`, a process of this server (a background worker
/// of this library, which ends on it).
pub fn terminate(pid: i32) {
    // SAFETY: kill(2) with a process id and a signal number; a process
    // gone meanwhile is ESRCH, harmless.
    unsafe { libc::kill(pid, libc::SIGTERM) };
}
