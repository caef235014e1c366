//! SPI, the way every statement this library runs uses it: an SPI error is
//! a Postgres error, raised where it happened.

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::{SpiError, SpiResult};

/// The value of an SPI call, or its error raised.
#[track_caller]
pub fn ok<T>(r: SpiResult<T>) -> T {
    r.unwrap_or_else(|e: SpiError| pgrx::error!("{e}"))
}

/// Runs `statement` (which may modify data) and returns the first column
/// of its first row, if any row and not NULL; an error is raised.
pub fn first_value<T: FromDatum + IntoDatum>(
    statement: &str,
    args: &[DatumWithOid<'_>],
) -> Option<T> {
    ok(Spi::connect_mut(|c| {
        let rows = c.update(statement, Some(1), args)?;
        if rows.is_empty() {
            return Ok(None);
        }
        rows.first().get_one::<T>()
    }))
}

/// Runs `statement` for its effect; an error is raised.
#[track_caller]
pub fn run(statement: &str, args: &[DatumWithOid<'_>]) {
    ok(Spi::run_with_args(statement, args))
}
