//! Whether the caller's database holds Citus's metadata: the one question
//! every other file of `citus` asks first.
//!
//! Calls no sibling.

/// Whether the caller's database holds Citus's metadata.
pub(super) fn has_citus(c: &pgrx::spi::SpiClient<'_>) -> pgrx::spi::SpiResult<bool> {
    Ok(c.select(
        "SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL \
                AND pg_catalog.to_regclass('pg_catalog.pg_dist_node') IS NOT NULL",
        None,
        &[],
    )?
    .first()
    .get_one::<bool>()?
        == Some(true))
}
