//! The keys of opaque IDs, as this process holds them: read from the file
//! `snowflake_id.opaque_keys_file` names when first needed, and again after
//! a reload of the configuration (how keys are rotated) or a change of the
//! setting. A file that is there but cannot be used at a reload (a typo in
//! a rotation, a mode too open, bytes that are no UTF-8, an owner the server
//! cannot read) leaves this process with the keys it had, so that a mistake
//! does not break every link; a file that is gone, or the setting cleared,
//! takes them away (how every key is revoked at once). One that could not
//! be used is read again as soon as it changes.
//!
//! The keys never leave this module but as the ciphers that use them: no
//! function returns them, the setting holds a path (superuser-only, as
//! PostgreSQL's own key file settings), and what is wrong with the file goes
//! to the server log alone, by line number, never by content.

use crate::pg::datadir::data_dir;
use crate::pg::error::log;
use crate::pg::process::{self, ProcessLocal};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::{pg_sys, PgLogLevel};
use snowflake_id_core::opaque::{check_file_mode, key_file_text, Keys};
use snowflake_id_core::{Class, Failure};
use std::cell::RefCell;
use std::ffi::CString;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::rc::Rc;

static KEYS_FILE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// A key file holds 64 keys of one line each; anything far larger is not one.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Defines `snowflake_id.opaque_keys_file`: read at every reload, so that
/// it can be set (and keys rotated) without a restart, whether or not the
/// library is preloaded.
pub fn define() {
    GucRegistry::define_string_guc(
        c"snowflake_id.opaque_keys_file",
        c"The file of the secret keys of opaque IDs (snowflake_to_opaque, snowflake_from_opaque).",
        c"Lines of '<key number 0-63> <64 hex digits> [decode-only]', readable by the server's user alone. Keep it outside the data directory: base backups copy that whole. Reload the configuration after changing the file.",
        &KEYS_FILE,
        GucContext::Sighup,
        GucFlags::SUPERUSER_ONLY,
    );
}

/// The keys as loaded at one reload of the configuration.
struct Loaded {
    path: String,
    reloaded_at: pg_sys::TimestampTz,
    /// The file as it was when read, to notice a fix of a broken one.
    stamp: Option<Stamp>,
    keys: Result<Rc<Keys>, Failure>,
}

/// What tells one version of a file from another: device, inode, size,
/// modification and change times (to the nanosecond: a `chmod` or `chown`
/// changes only the latter), mode and owner.
type Stamp = (u64, u64, u64, i64, i64, i64, i64, u32, u32);

fn stamp(path: &str) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some((
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
        m.mode(),
        m.uid(),
    ))
}

static LOADED: ProcessLocal<RefCell<Option<Loaded>>> = ProcessLocal(RefCell::new(None));

/// The keys of opaque IDs, or the error that tells the caller there are
/// none usable (the reason is in the server log).
pub fn keys() -> Result<Rc<Keys>, Failure> {
    let reloaded_at = process::reload_time();
    // Nearly every call: keys read since the last reload. The setting
    // changes only at a reload (it is SIGHUP), so its path is not fetched
    // (a copy of the string each time) to compare.
    if let Some(Loaded {
        keys: Ok(keys),
        reloaded_at: at,
        ..
    }) = LOADED.0.borrow().as_ref()
    {
        if *at == reloaded_at {
            return Ok(Rc::clone(keys));
        }
    }
    let path = KEYS_FILE
        .get()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut loaded = LOADED.0.borrow_mut();
    let due = match loaded.as_ref() {
        None => true,
        Some(l) if l.path != path || l.reloaded_at != reloaded_at => true,
        Some(l) => l.keys.is_err() && stamp(&path) != l.stamp,
    };
    if due {
        let before = loaded.take();
        let file = stamp(&path);
        let keys = match load(&path) {
            Ok(keys) => Ok(Rc::new(keys)),
            Err(Unusable { why, gone }) => {
                // Gone (or no setting): revoked. There but unusable (wrong
                // bytes, a BOM, an owner or mode the server cannot read):
                // a mistake, which must not break every link at once.
                log(why, PgLogLevel::LOG_SERVER_ONLY);
                match before {
                    Some(Loaded {
                        path: p,
                        keys: Ok(kept),
                        ..
                    }) if p == path && !path.is_empty() && !gone => {
                        log(
                            Failure::new(
                                Class::Warning,
                                "this session keeps the opaque ID keys it read before the file became unusable (only a file that is gone, or the setting cleared, revokes them)",
                            )
                            .hint("Fix the file and reload the configuration: sessions that start before then have no keys."),
                            PgLogLevel::LOG_SERVER_ONLY,
                        );
                        Ok(kept)
                    }
                    _ => Err(unusable(&path)),
                }
            }
        };
        *loaded = Some(Loaded {
            path,
            reloaded_at,
            stamp: file,
            keys,
        });
    }
    loaded.as_ref().expect("just loaded").keys.clone()
}

/// What a caller is told: that there is no key, and where its DBA looks.
fn unusable(path: &str) -> Failure {
    let (message, hint) = if path.is_empty() {
        (
            "no key for opaque IDs is set",
            "A superuser sets snowflake_id.opaque_keys_file to a key file and reloads the configuration; see \"Keys of opaque IDs\" in docs/operators.md.",
        )
    } else {
        (
            "the key file for opaque IDs cannot be used",
            "The server log says what is wrong with the file snowflake_id.opaque_keys_file names; fix it and reload the configuration.",
        )
    };
    Failure::new(Class::NotReady, message).hint(hint)
}

/// Why the key file gave no keys, and whether that revokes them: only a
/// file that is not there (or no file named).
struct Unusable {
    why: Failure,
    gone: bool,
}

impl From<Failure> for Unusable {
    fn from(why: Failure) -> Unusable {
        Unusable { why, gone: false }
    }
}

/// Reads and checks the key file. Its errors name the file, never its
/// contents.
fn load(path: &str) -> Result<Keys, Unusable> {
    if path.is_empty() {
        return Err(Unusable {
            why: unusable(path),
            gone: true,
        });
    }
    let io = |what: &str, e: std::io::Error| Unusable {
        gone: matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)),
        why: Failure::new(
            Class::Io,
            format!("could not {what} the opaque ID key file \"{path}\": {e}"),
        ),
    };
    // Non-blocking: a FIFO named here must not hang the session.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| io("open", e))?;
    let meta = file.metadata().map_err(|e| io("stat", e))?;
    // A failure of the file's, its message naming the file.
    let of_file = |f: Failure| Failure {
        message: format!("{} (\"{path}\")", f.message),
        ..f
    };
    check_file_mode(meta.mode(), meta.uid(), process::effective_uid()).map_err(of_file)?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return Err(Failure::new(
            Class::InvalidParameter,
            format!("\"{path}\" is not an opaque ID key file: not a regular file of at most {MAX_FILE_BYTES} bytes"),
        )
        .into());
    }
    warn_if_inside_data_directory(path);
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| io("read", e))?;
    let text = key_file_text(&bytes).map_err(of_file)?;
    Keys::parse(text).map_err(|f| of_file(f).into())
}

/// A key file inside the data directory is copied by every base backup,
/// which any role with REPLICATION may take: said in the server log (not
/// to the client: the path is the operator's business).
fn warn_if_inside_data_directory(path: &str) {
    let (Ok(file), Ok(data)) = (
        std::fs::canonicalize(path),
        std::fs::canonicalize(data_dir()),
    ) else {
        return;
    };
    if file.starts_with(&data) {
        log(
            Failure::new(
                Class::Warning,
                format!("the opaque ID key file \"{path}\" is inside the data directory: every base backup copies it, and any role with REPLICATION can take one"),
            )
            .hint("Move it outside the data directory (next to the SSL key, say), point snowflake_id.opaque_keys_file at it and reload the configuration."),
            PgLogLevel::LOG_SERVER_ONLY,
        );
    }
}
