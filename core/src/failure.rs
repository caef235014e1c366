//! What went wrong, said the way Postgres says it: a class that maps to one
//! SQLSTATE, a message, and where we can, a detail and a hint.
//!
//! The core decides the words so that plain `cargo test` can check them; the
//! Postgres shell only maps [`Class`] to its SQLSTATE and raises.

use std::fmt;

/// The SQLSTATE a failure is reported with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// 55000 object_not_in_prerequisite_state: the server is not set up for this yet.
    NotReady,
    /// 22023 invalid_parameter_value: a setting or argument has a value we cannot use.
    InvalidParameter,
    /// 22003 numeric_value_out_of_range: an ID outside what the layout can hold.
    IdOutOfRange,
    /// 22008 datetime_field_overflow: a time outside what the layout can hold.
    TimeOutOfRange,
    /// 2200H sequence_generator_limit_exceeded: the layout's time range is used up.
    LayoutExhausted,
    /// 25006 read_only_sql_transaction: generation asked for on a standby.
    ReadOnly,
    /// XX001 data_corrupted: the durable state cannot be read back.
    Corrupted,
    /// 58030 io_error: the durable state cannot be written.
    Io,
    /// 42501 insufficient_privilege.
    Privilege,
    /// 22P02 invalid_text_representation: text that is not what it claims to be.
    InvalidText,
    /// 42703 undefined_column.
    UndefinedColumn,
    /// 42P01 undefined_table.
    UndefinedTable,
    /// 42804 datatype_mismatch: a column of a type that cannot hold IDs.
    DatatypeMismatch,
    /// 42809 wrong_object_type: a relation of a kind the function does not take.
    WrongObjectType,
    /// 0A000 feature_not_supported: a case we refuse rather than half-handle.
    NotSupported,
    /// 2BP01 dependent_objects_still_exist.
    DependentObjects,
    /// 55P03 lock_not_available.
    LockNotAvailable,
    /// 01000 warning: not a failure yet, reported at WARNING level.
    Warning,
}

impl Class {
    /// The five-character SQLSTATE, for messages and tests.
    pub fn sqlstate(self) -> &'static str {
        match self {
            Class::NotReady => "55000",
            Class::InvalidParameter => "22023",
            Class::IdOutOfRange => "22003",
            Class::TimeOutOfRange => "22008",
            Class::LayoutExhausted => "2200H",
            Class::ReadOnly => "25006",
            Class::Corrupted => "XX001",
            Class::Io => "58030",
            Class::Privilege => "42501",
            Class::InvalidText => "22P02",
            Class::UndefinedColumn => "42703",
            Class::UndefinedTable => "42P01",
            Class::DatatypeMismatch => "42804",
            Class::WrongObjectType => "42809",
            Class::NotSupported => "0A000",
            Class::DependentObjects => "2BP01",
            Class::LockNotAvailable => "55P03",
            Class::Warning => "01000",
        }
    }

    const ALL: [Class; 18] = [
        Class::NotReady,
        Class::InvalidParameter,
        Class::IdOutOfRange,
        Class::TimeOutOfRange,
        Class::LayoutExhausted,
        Class::ReadOnly,
        Class::Corrupted,
        Class::Io,
        Class::Privilege,
        Class::InvalidText,
        Class::UndefinedColumn,
        Class::UndefinedTable,
        Class::DatatypeMismatch,
        Class::WrongObjectType,
        Class::NotSupported,
        Class::DependentObjects,
        Class::LockNotAvailable,
        Class::Warning,
    ];

    pub fn from_sqlstate(code: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.sqlstate() == code)
    }
}

/// Separates the parts of a failure in its text form; never in a message.
const UNIT_SEPARATOR: char = '\u{1f}';

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub class: Class,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl Failure {
    pub fn new(class: Class, message: impl Into<String>) -> Self {
        Failure {
            class,
            message: message.into(),
            detail: None,
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

impl Failure {
    /// One string holding the whole failure, for a process that raises what
    /// another one decided (through shared memory).
    pub fn to_text(&self) -> String {
        let parts = [
            self.class.sqlstate(),
            &self.message,
            self.detail.as_deref().unwrap_or(""),
            self.hint.as_deref().unwrap_or(""),
        ];
        parts
            .map(|p| p.replace(UNIT_SEPARATOR, " "))
            .join(&UNIT_SEPARATOR.to_string())
    }

    /// The failure [`Failure::to_text`] made, `None` for any other text.
    pub fn from_text(text: &str) -> Option<Failure> {
        let mut parts = text.split(UNIT_SEPARATOR);
        let (code, message, detail, hint) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Some(Failure {
            class: Class::from_sqlstate(code)?,
            message: message.to_string(),
            detail: some(detail),
            hint: some(hint),
        })
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.class.sqlstate())?;
        if let Some(d) = &self.detail {
            write!(f, "\nDETAIL: {d}")?;
        }
        if let Some(h) = &self.hint {
            write!(f, "\nHINT: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Failure {}

/// `text` as an SQL string literal, for a HINT that can be pasted.
pub fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_survives_its_text_form() {
        for class in Class::ALL {
            let f = Failure::new(class, "worker id 5 is also claimed").hint("Give one another id.");
            assert_eq!(Failure::from_text(&f.to_text()), Some(f.clone()));
            let f = f.detail("both \u{1f} live");
            let back = Failure::from_text(&f.to_text()).unwrap();
            assert_eq!(back.detail.as_deref(), Some("both   live"));
        }
        assert_eq!(Failure::from_text(""), None);
        assert_eq!(Failure::from_text("99999\u{1f}m\u{1f}\u{1f}"), None);
        assert_eq!(Failure::from_text("01000\u{1f}m\u{1f}\u{1f}\u{1f}x"), None);
    }
}
