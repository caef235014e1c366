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
            Class::Warning => "01000",
        }
    }
}

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
