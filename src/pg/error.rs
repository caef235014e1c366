//! Raising core failures as Postgres errors, with the SQLSTATE each class means.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};
use snowflake_id_core::{Class, Failure};

fn code(class: Class) -> PgSqlErrorCode {
    use PgSqlErrorCode::*;
    match class {
        Class::NotReady => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        Class::InvalidParameter => ERRCODE_INVALID_PARAMETER_VALUE,
        Class::IdOutOfRange => ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        Class::TimeOutOfRange => ERRCODE_DATETIME_FIELD_OVERFLOW,
        Class::LayoutExhausted => ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
        Class::ReadOnly => ERRCODE_READ_ONLY_SQL_TRANSACTION,
        Class::Corrupted => ERRCODE_DATA_CORRUPTED,
        Class::Io => ERRCODE_IO_ERROR,
        Class::Privilege => ERRCODE_INSUFFICIENT_PRIVILEGE,
        Class::InvalidText => ERRCODE_INVALID_TEXT_REPRESENTATION,
        Class::UndefinedColumn => ERRCODE_UNDEFINED_COLUMN,
        Class::UndefinedTable => ERRCODE_UNDEFINED_TABLE,
        Class::DatatypeMismatch => ERRCODE_DATATYPE_MISMATCH,
        Class::WrongObjectType => ERRCODE_WRONG_OBJECT_TYPE,
        Class::NotSupported => ERRCODE_FEATURE_NOT_SUPPORTED,
        Class::DependentObjects => ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST,
        Class::LockNotAvailable => ERRCODE_LOCK_NOT_AVAILABLE,
        Class::Warning => ERRCODE_WARNING,
    }
}

#[track_caller]
fn report(failure: Failure, level: PgLogLevel) {
    // Postgres sends a message in the database's encoding.
    let text = |t: String| super::charset::for_messages(&t).into_owned();
    let mut r = ErrorReport::new(code(failure.class), text(failure.message), "snowflake_id");
    if let Some(d) = failure.detail {
        r = r.set_detail(text(d));
    }
    if let Some(h) = failure.hint {
        r = r.set_hint(text(h));
    }
    r.report(level);
}

/// Writes `message` to the server log at LOG (use `server_log!`). Postgres
/// decides in `errstart` whether its log wants it; pgrx's `log!` decides
/// first, and on 13 (no `message_level_is_interesting`) by comparing level
/// numbers, where LOG (15) is below the default `log_min_messages`, WARNING
/// (19): every note of the extension was dropped there.
#[track_caller]
pub fn server_log(message: String) {
    let text = super::charset::for_messages(&message).into_owned();
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
        text,
        "snowflake_id",
    )
    .report(PgLogLevel::LOG);
}

/// Raises `failure` as an ERROR.
#[track_caller]
pub fn raise(failure: Failure) -> ! {
    report(failure, PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Writes `failure` to the server log (and client, if any) at `level`.
#[track_caller]
pub fn log(failure: Failure, level: PgLogLevel) {
    report(failure, level);
}

/// Raises the failure of a `Result`, or returns its value.
pub trait OrRaise<T> {
    #[track_caller]
    fn or_raise(self) -> T;
}

impl<T> OrRaise<T> for Result<T, Failure> {
    #[track_caller]
    fn or_raise(self) -> T {
        match self {
            Ok(v) => v,
            Err(f) => raise(f),
        }
    }
}

/// Keeps Rust backtraces out of what clients see. pgrx's panic hook captures
/// a backtrace for every Postgres error that passes through Rust frames and
/// appends it to the error's DETAIL when `RUST_BACKTRACE` (or
/// `RUST_LIB_BACKTRACE`) is set in the server's environment. The standard
/// library reads those variables once per process and keeps the answer, so
/// one capture with backtraces switched off, before any other, settles it
/// for this process and every backend forked from it; the environment is
/// then put back as it was.
pub fn quiet_backtraces() {
    const KEY: &str = "RUST_LIB_BACKTRACE";
    let before = std::env::var_os(KEY);
    // Called from _PG_init, while the process has one thread.
    std::env::set_var(KEY, "0");
    drop(std::backtrace::Backtrace::capture());
    match before {
        Some(v) => std::env::set_var(KEY, v),
        None => std::env::remove_var(KEY),
    }
}
