//! The library's background workers, on one skeleton: the reserver, which
//! keeps the durable mark ahead (`reserver`), and the claims worker, which
//! keeps this server's worker-id claim where other servers see it
//! (`claims`), and the registry worker, which leases this server's worker
//! id where `worker_id_source = 'registry'` (`registry`). Each enters the same way: signals handled, its process id in
//! shared memory until it exits.

pub mod claims;
pub mod registry;
pub mod reserver;
mod skeleton;

/// Registers the workers. Call from `_PG_init` while
/// `shared_preload_libraries` is being processed.
pub fn register() {
    reserver::register();
    claims::register();
    registry::register();
}
