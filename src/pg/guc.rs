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

/// Runs one of Postgres's setting parsers (`parse_int`, `parse_real`) on
/// `text`, or says why it failed, with Postgres's own hint about units.
fn parse_with(
    text: &str,
    kind: &str,
    parse: impl FnOnce(*const std::os::raw::c_char, *mut *const std::os::raw::c_char) -> bool,
) -> Result<(), String> {
    let c = std::ffi::CString::new(text).map_err(|_| "it contains a NUL byte".to_string())?;
    let mut hint: *const std::os::raw::c_char = std::ptr::null();
    if parse(c.as_ptr(), &mut hint) {
        return Ok(());
    }
    let unit_hint = if hint.is_null() {
        String::new()
    } else {
        // SAFETY: the parser set it to a static string.
        format!(" ({})", unsafe { CStr::from_ptr(hint) }.to_string_lossy())
    };
    Err(format!("it is not a valid {kind}{unit_hint}"))
}

/// `text` read as Postgres reads an integer setting with `flags` (its
/// units), or why it is not one.
pub fn parse_int(text: &str, flags: i32) -> Result<i32, String> {
    let mut value = 0;
    // SAFETY: parse_int only reads the string and writes the two outputs.
    parse_with(text, "integer", |t, hint| unsafe {
        pg_sys::parse_int(t, &mut value, flags, hint)
    })?;
    Ok(value)
}

/// `text` read as Postgres reads a real setting with `flags` (its units),
/// or why it is not one.
pub fn parse_real(text: &str, flags: i32) -> Result<f64, String> {
    let mut value = 0.0;
    // SAFETY: parse_real only reads the string and writes the two outputs.
    parse_with(text, "number", |t, hint| unsafe {
        pg_sys::parse_real(t, &mut value, flags, hint)
    })?;
    Ok(value)
}

/// The last value the configuration files (postgresql.conf, its includes,
/// then postgresql.auto.conf) give `name`, read the way a reload reads
/// them; `None` where they do not set it, or do not parse.
pub fn configured_in_files(name: &CStr) -> Option<String> {
    // SAFETY: DataDir is set before any library loads.
    let data_dir = unsafe { CStr::from_ptr(pg_sys::DataDir) }
        .to_string_lossy()
        .into_owned();
    let auto_conf = std::ffi::CString::new(format!("{data_dir}/postgresql.auto.conf")).ok()?;
    let mut list = ConfigList::default();
    // SAFETY: ConfigFileName is set before any library loads.
    let main = unsafe { pg_sys::ConfigFileName };
    let main_ok = !main.is_null() && list.parse(main, true);
    let auto_ok = list.parse(auto_conf.as_ptr(), false);
    if !(main_ok && auto_ok) {
        // The files do not parse: a reload applied nothing from them.
        return None;
    }
    list.last_value(name)
}

/// The settings ParseConfigFile read, freed when dropped.
struct ConfigList {
    head: *mut pg_sys::ConfigVariable,
    tail: *mut pg_sys::ConfigVariable,
}

impl Default for ConfigList {
    fn default() -> Self {
        ConfigList {
            head: std::ptr::null_mut(),
            tail: std::ptr::null_mut(),
        }
    }
}

impl ConfigList {
    /// Appends what the file `path` (a NUL-terminated string) sets;
    /// whether it parsed. Problems are reported at DEBUG2, below ERROR, so
    /// that it returns.
    fn parse(&mut self, path: *const std::os::raw::c_char, strict: bool) -> bool {
        // SAFETY: `path` is NUL-terminated; the list is this one's own.
        unsafe {
            pg_sys::ParseConfigFile(
                path,
                strict,
                std::ptr::null(),
                0,
                0,
                pg_sys::DEBUG2 as i32,
                &mut self.head,
                &mut self.tail,
            )
        }
    }

    /// The last value given `name`, compared as Postgres compares setting
    /// names (case-insensitive).
    fn last_value(&self, name: &CStr) -> Option<String> {
        let mut found = None;
        let mut item = self.head;
        while !item.is_null() {
            // SAFETY: an entry of the list ParseConfigFile built; its
            // strings are NUL-terminated or NULL.
            unsafe {
                let v = &*item;
                if !v.ignore
                    && !v.name.is_null()
                    && CStr::from_ptr(v.name)
                        .to_bytes()
                        .eq_ignore_ascii_case(name.to_bytes())
                {
                    found = (!v.value.is_null())
                        .then(|| CStr::from_ptr(v.value).to_string_lossy().into_owned());
                }
                item = v.next;
            }
        }
        found
    }
}

impl Drop for ConfigList {
    fn drop(&mut self) {
        // SAFETY: the list ParseConfigFile built (NULL if empty), freed once.
        unsafe { pg_sys::FreeConfigVariables(self.head) };
    }
}

/// The names of the placeholders Postgres keeps (settings it read with no
/// library defining them), as written. For _PG_init.
pub fn placeholder_names() -> Vec<String> {
    let mut names = Vec::new();
    // SAFETY: Postgres's own array of its settings (from 16 on, a copy in
    // the current memory context), read and copied out here at once,
    // before anything can add a setting or free the copy; each entry's
    // name is NUL-terminated or NULL.
    unsafe {
        // 16 changed the signature: the count comes back through a pointer.
        #[cfg(any(feature = "pg13", feature = "pg14", feature = "pg15"))]
        let (vars, n) = (pg_sys::get_guc_variables(), pg_sys::GetNumConfigOptions());
        #[cfg(not(any(feature = "pg13", feature = "pg14", feature = "pg15")))]
        let (vars, n) = {
            let mut n = 0;
            (pg_sys::get_guc_variables(&mut n), n)
        };
        if vars.is_null() {
            return names;
        }
        for &var in std::slice::from_raw_parts(vars, n.max(0) as usize) {
            let (name, flags) = ((*var).name, (*var).flags);
            if name.is_null() || flags as u32 & pg_sys::GUC_CUSTOM_PLACEHOLDER == 0 {
                continue;
            }
            names.push(CStr::from_ptr(name).to_string_lossy().into_owned());
        }
    }
    names
}

/// Makes Postgres warn about (in the server log, at start) and drop every
/// other setting of `prefix`: a misspelt setting must not leave a default
/// quietly in force. Called in _PG_init after every setting of the prefix
/// is defined.
pub fn reserve_prefix(prefix: &CStr) {
    // SAFETY: a NUL-terminated prefix; Postgres copies it.
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    unsafe {
        pg_sys::MarkGUCPrefixReserved(prefix.as_ptr());
    }
    // Before 15 Postgres can only warn; the names stay as placeholders.
    // SAFETY: as above.
    #[cfg(any(feature = "pg13", feature = "pg14"))]
    unsafe {
        pg_sys::EmitWarningsOnPlaceholders(prefix.as_ptr());
    }
}

/// Says why a setting's check hook refused a value: its message and hint,
/// reported by Postgres with SQLSTATE 22023 (as `GUC_check_errmsg` does).
pub fn check_failed(f: &snowflake_id_core::Failure) {
    let message = std::ffi::CString::new(f.message.as_str()).unwrap_or_default();
    let hint = std::ffi::CString::new(f.hint.clone().unwrap_or_default()).unwrap_or_default();
    // SAFETY: the check-hook error strings Postgres reads after the hook
    // returns false, set to copies in the current memory context.
    unsafe {
        pg_sys::GUC_check_errcode(pgrx::PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE as i32);
        pg_sys::GUC_check_errmsg_string = pg_sys::pstrdup(message.as_ptr());
        if f.hint.is_some() {
            pg_sys::GUC_check_errhint_string = pg_sys::pstrdup(hint.as_ptr());
        }
    }
}
