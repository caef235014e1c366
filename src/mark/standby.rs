//! Whether moves of the mark and leases of the backfill map wait for
//! synchronous standbys, and the error when none confirmed in time.

use super::redo;
use crate::pg::xlog;
use snowflake_id_core::timefmt::format_duration;
use snowflake_id_core::{Class, Failure};

/// Whether moves of the mark wait for synchronous standbys: where marks
/// are WAL-logged and `synchronous_standby_names` names any. A server-wide
/// decision on purpose: a session's own `synchronous_commit` (which any
/// user may turn off) must not publish a mark other sessions' IDs then
/// rely on.
pub(super) fn waits_for_standbys() -> bool {
    redo::enabled() && xlog::sync_standbys_named()
}

/// The error of a call whose mark a synchronous standby did not confirm in
/// time.
pub(super) fn standby_silent(waited_ms: u64) -> Failure {
    Failure::new(
        Class::NotReady,
        format!(
            "no synchronous standby confirmed snowflake_id's durable mark within {}",
            format_duration(waited_ms)
        ),
    )
    .detail("IDs above the mark are issued only once a standby named in synchronous_standby_names has flushed it, so that a failover to that standby cannot repeat them.")
    .hint("Check that the standbys named in synchronous_standby_names are connected (pg_stat_replication). To issue IDs without them, remove them from synchronous_standby_names and reload; commits then stop waiting for them too.")
}
