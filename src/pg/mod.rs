//! Safe wrappers over Postgres's C API, and nothing of snowflake_id's own:
//! every `unsafe` call into Postgres the rest of the shell needs lives
//! here or next to the one structure it serves. Imports nothing from the
//! crate above it.

pub mod charset;
pub mod clock;
pub mod database;
pub mod datadir;
pub mod ddl;
pub mod error;
pub mod guc;
pub mod int8_array;
pub mod libpq;
pub mod lock;
pub mod process;
pub mod role;
pub mod row;
pub mod scan;
pub mod signals;
pub mod spi;
pub mod text;
pub mod timeout;
pub mod xact;
pub mod xlog;
