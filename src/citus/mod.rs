//! This node in its Citus cluster: its group id, which
//! `snowflake_id.worker_id_source = 'citus'` makes its worker id, its place
//! in the coordinator's metadata, the database it offers the claims worker,
//! and the column changes refused on tables Citus keeps several placements of.
//!
//! Read by the calling backend, as the caller, from the database it is in:
//! Citus keeps its metadata per database, in tables of `pg_catalog` (where
//! only a superuser can create anything) that it lets every role read.
//! Every name, type and operator is qualified, so that no object of the
//! caller's search path can stand in.
//!
//! One concern per file, lowest first (each calls only those before it):
//! `metadata` (whether the database has Citus's), `offer` (the Citus
//! database offered to the claims worker), `group` (this node's group id
//! and kind), `defaults` (the ADD COLUMN guard), `membership` (this node's
//! place in the coordinator's metadata). This file names the surface the
//! rest of the shell calls, and holds nothing.

mod defaults;
mod group;
mod membership;
mod metadata;
mod offer;

pub use defaults::refuse_divergent_default;
pub use group::{origin, read_worker_id, Ask};
pub use membership::membership_problem;
pub use offer::{claims_await_database, claims_follow_database, offer_this_database};
