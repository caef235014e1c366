//! The Citus database, offered to the claims worker by the backends that
//! meet it (the claims live where Citus's metadata does), and the judging
//! asked for again when the offer changes.
//!
//! Calls `metadata`.

use super::metadata::has_citus;
use crate::pg::process;
use crate::pg::spi;
use crate::settings;
use crate::shmem::Shmem;
use pgrx::prelude::*;

/// Whether the claims worker is told the Citus database by backends: on a
/// Citus node without a claims database.
pub fn claims_follow_database() -> bool {
    settings::first_id_waits_for_claims() && settings::claims_database().is_none()
}

/// Whether the claims worker waits to be told the Citus database: on a
/// Citus node without a claims database, until a backend offered one.
pub fn claims_await_database(shm: &Shmem) -> bool {
    claims_follow_database() && shm.claims.offered_database().is_none()
}

/// Offers the caller's database to the claims worker as the one whose
/// Citus metadata this node belongs to, if that metadata lists a node of
/// this node's group (a Citus database where no cluster was made is not
/// it); the first offer stands until the next start, or until that
/// database is dropped. A second database found listing this node too
/// (made from the first as its template) is recorded, for the status to say. Whether a
/// database is offered now.
pub fn offer_this_database(shm: &Shmem) -> bool {
    if !offer_may_change(shm) {
        return shm.claims.offered_database().is_some();
    }
    spi::ok(Spi::connect(|c| {
        if has_citus(c)? {
            offer_if_member(shm, c)?;
        }
        Ok(shm.claims.offered_database().is_some())
    }))
}

/// Whether reading this database's Citus metadata can tell the claims
/// worker anything: not where the offer is this database already, or where
/// a second one was found already.
fn offer_may_change(shm: &Shmem) -> bool {
    let here = process::database_id();
    match shm.claims.offered_database() {
        None => true,
        Some(offered) => offered != here && shm.claims.other_member().is_none(),
    }
}

/// See `offer_this_database`; the caller's database holds Citus's metadata.
/// Asked by every backend's first call: a caller who may not read that
/// metadata offers nothing, and is not refused for it.
pub(super) fn offer_if_member(
    shm: &Shmem,
    c: &pgrx::spi::SpiClient<'_>,
) -> pgrx::spi::SpiResult<()> {
    if !offer_may_change(shm) {
        return Ok(());
    }
    let readable = c
        .select(
            "SELECT pg_catalog.has_table_privilege('pg_catalog.pg_dist_node', 'SELECT') \
                    AND pg_catalog.has_table_privilege('pg_catalog.pg_dist_local_group', 'SELECT')",
            None,
            &[],
        )?
        .first()
        .get_one::<bool>()?;
    if readable != Some(true) {
        return Ok(());
    }
    let member = c
        .select(
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_node n, pg_catalog.pg_dist_local_group g \
                            WHERE n.groupid OPERATOR(pg_catalog.=) g.groupid)",
            None,
            &[],
        )?
        .first()
        .get_one::<bool>()?;
    if member == Some(true) {
        let here = process::database_id();
        if shm.claims.offer_database(here) {
            judge_again(shm);
        } else if shm.claims.offered_database() != Some(here) {
            shm.claims.note_other_member(here);
        }
    }
    Ok(())
}

/// A Citus database offered while IDs are issued already (the one offered
/// before was dropped): the group id there may be another, and no node's
/// claims have been read there. Refused, as a move of the worker id is,
/// until the claims worker has read both (`bgworkers::claims`).
fn judge_again(shm: &Shmem) {
    if shm.worker.get().is_none() {
        return;
    }
    shm.claims.set_rejudge(true);
    crate::mark::refuse_for_claim(shm, true);
}
