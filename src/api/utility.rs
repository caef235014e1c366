//! The one utility hook of the extension: what it checks or arranges around
//! commands others run. A Citus reference table is kept from diverging
//! (`citus::refuse_divergent_default`), the claims worker leaves the
//! databases that commands need to themselves (`claims::away::around`), and
//! `DISCARD ALL` / `DISCARD SEQUENCES` forget `snowflake_lastval()`, as they
//! make `lastval()` forget (a pooler's reset between clients).
//!
//! Installed last among the preloaded libraries' hooks when the library is
//! listed after `citus`, so it runs before Citus carries a command to the
//! other nodes: a refusal here leaves every node as it was.

use crate::bgworkers::claims::away;
use crate::citus;
use crate::issue;
use pgrx::pg_sys;
use pgrx::prelude::*;

static mut PREV_PROCESS_UTILITY: pg_sys::ProcessUtility_hook_type = None;

/// Installs the hook; call from `_PG_init` while libraries are preloaded.
pub fn install() {
    // SAFETY: hooks are installed once, at preload, before any query runs.
    unsafe {
        PREV_PROCESS_UTILITY = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(process_utility);
    }
}

/// Checks `stmt`, then runs it (`run`) with whatever it needs arranged.
fn around(stmt: *mut pg_sys::Node, run: impl FnOnce() + std::panic::UnwindSafe) {
    // SAFETY: the statement Postgres is about to run, unchanged.
    unsafe { citus::refuse_divergent_default(stmt) };
    // SAFETY: as above; read before the command runs.
    let discards = unsafe { discards_sequences(stmt) };
    away::around(stmt, run);
    // After the command: one refused (inside a transaction block) forgets nothing.
    if discards {
        issue::forget_last();
    }
}

/// Whether `stmt` is `DISCARD ALL` or `DISCARD SEQUENCES`.
///
/// # Safety
/// `stmt` is null or a valid node.
unsafe fn discards_sequences(stmt: *mut pg_sys::Node) -> bool {
    // SAFETY: a DiscardStmt node, by its tag.
    unsafe {
        !stmt.is_null()
            && pgrx::is_a(stmt, pg_sys::NodeTag::T_DiscardStmt)
            && matches!(
                (*stmt.cast::<pg_sys::DiscardStmt>()).target,
                pg_sys::DiscardMode::DISCARD_ALL | pg_sys::DiscardMode::DISCARD_SEQUENCES
            )
    }
}

// The hook's arguments changed in 14 (readOnlyTree): one definition each.
#[cfg(not(feature = "pg13"))]
#[pg_guard]
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: the next hook in line, or Postgres's own, with the
    // arguments it was called with.
    around(unsafe { (*pstmt).utilityStmt }, || unsafe {
        match PREV_PROCESS_UTILITY {
            Some(prev) => prev(pstmt, query, read_only_tree, context, params, env, dest, qc),
            None => pg_sys::standard_ProcessUtility(
                pstmt,
                query,
                read_only_tree,
                context,
                params,
                env,
                dest,
                qc,
            ),
        }
    })
}

#[cfg(feature = "pg13")]
#[pg_guard]
unsafe extern "C-unwind" fn process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query: *const std::ffi::c_char,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: as above.
    around(unsafe { (*pstmt).utilityStmt }, || unsafe {
        match PREV_PROCESS_UTILITY {
            Some(prev) => prev(pstmt, query, context, params, env, dest, qc),
            None => pg_sys::standard_ProcessUtility(pstmt, query, context, params, env, dest, qc),
        }
    })
}
