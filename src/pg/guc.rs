//! Postgres's own settings, read by name: the ones this library has no
//! variable for (pgrx does not bind every setting's variable, and some are
//! read before they are final).

use pgrx::pg_sys;
use std::ffi::CStr;

/// The current value of setting `name` as text; `None` if Postgres knows
/// no such setting (a placeholder counts: it has the configured text).
pub fn text(name: &CStr) -> Option<String> {
    // SAFETY: GetConfigOption returns NULL (missing_ok) or the setting's
    // current value, a string Postgres owns; copied out at once, on the
    // process's one thread.
    unsafe {
        let p = pg_sys::GetConfigOption(name.as_ptr(), true, false);
        (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

/// The current value of integer setting `name` (0 if unreadable: for
/// sizing, where such a setting always has a value).
#[cfg_attr(not(any(feature = "pg13", feature = "pg14")), allow(dead_code))]
pub fn int(name: &CStr) -> i32 {
    text(name).and_then(|t| t.parse().ok()).unwrap_or(0)
}

/// Sets setting `name` of this process to `value`, above anything a
/// database's, role's or session's default says, as the postmaster's own
/// `-c` options are set.
pub fn pin(name: &str, value: &str) {
    let (name, value) = (
        std::ffi::CString::new(name).unwrap_or_default(),
        std::ffi::CString::new(value).unwrap_or_default(),
    );
    // SAFETY: sets a setting of this process by name; an unknown name or a
    // bad value is an ERROR of Postgres's own.
    unsafe {
        pg_sys::SetConfigOption(
            name.as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        )
    };
}

/// Runs `f` with setting `name` at `value`, as a function's `SET` clause
/// does: on a settings level of its own, on which every setting changed
/// meanwhile (even with a plain SET) is put back afterwards (an error puts
/// it back with the (sub)transaction it aborts).
pub fn with<R>(name: &CStr, value: &CStr, f: impl FnOnce() -> R) -> R {
    // SAFETY: opens a settings level and sets one setting on it, as
    // Postgres does for a function's SET clause; an unknown name or a bad
    // value is an ERROR of Postgres's own.
    let level = unsafe {
        let level = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            name.as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        level
    };
    let r = f();
    // SAFETY: ends the level opened above.
    unsafe { pg_sys::AtEOXact_GUC(false, level) };
    r
}
