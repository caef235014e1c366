//! The pure-Rust core of snowflake_id: no Postgres in here, so `cargo test`
//! checks it in milliseconds.
//!
//! - [`layout`]: the bit layouts, named and custom, and all their range checks.
//! - [`claims`]: worker-id claims from other servers, judged.
//! - [`config`]: the identity settings, validated.
//! - [`worker_id`]: where the worker id comes from (the setting, the host name, or a Citus
//!   group id), and what a Citus node's metadata says of it.
//! - [`citus`]: what the extension refuses on Citus tables, and the ways that work.
//! - [`generator`]: the lock-free generator over one shared 64-bit word.
//! - [`timefmt`]: instants and durations as text.
//! - [`text_form`]: IDs as fixed-width, order-keeping text (base62, base32, hex).
//! - [`uuid`]: IDs as version 7 UUIDs, and back.
//! - [`opaque`]: IDs enciphered under a secret key, for public URLs.
//! - [`ff1`]: FF1 (NIST SP 800-38G) with word arithmetic, under opaque IDs.
//! - [`convert`]: the DDL that moves a table's key column to snowflake IDs.
//! - [`failure`]: errors as Postgres reports them.
//! - [`mark`]: the durable high-water mark file.
//! - [`backfill`]: IDs for past times: what was handed out at which ticks, and leases of it.
//! - [`copies`]: data from another cluster: when a database is floored, and how IDs continue.
//! - [`floored`]: which databases a server checked for copies, in shared memory.
//! - [`judged`]: what one process found in the configuration files at a reload, for all.
//! - [`registry`]: worker ids leased from a registry database: the lease file and the answers believed.
//! - [`resume`]: where generation may resume after a start or a crash.
//! - [`shared_text`]: text one process writes and others read, without a lock.

// Nothing here needs unsafe code; the compiler holds us to it.
#![forbid(unsafe_code)]

pub mod backfill;
pub mod citus;
pub mod claims;
pub mod config;
pub mod convert;
pub mod copies;
pub mod failure;
pub mod ff1;
pub mod floored;
pub mod generator;
pub mod judged;
pub mod layout;
pub mod live_history;
pub mod mark;
pub mod opaque;
pub mod registry;
pub mod resume;
pub mod shared_text;
pub mod text_form;
pub mod timefmt;
pub mod uuid;
pub mod worker_id;

pub use failure::{Class, Failure};
