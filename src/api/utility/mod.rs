//! The one utility hook of the extension: what it checks or arranges around
//! commands others run. A Citus reference table is kept from diverging
//! (`citus::refuse_divergent_default`), the claims worker leaves the
//! databases that commands need to themselves (`away::around`), and
//! `DISCARD ALL` / `DISCARD SEQUENCES` forget `snowflake_lastval()`, as they
//! make `lastval()` forget (a pooler's reset between clients), and the
//! record of floors hears of copies a subscription leaves behind and of
//! databases dropped (`copies`).
//!
//! Installed last among the preloaded libraries' hooks when the library is
//! listed after `citus`, so it runs before Citus carries a command to the
//! other nodes: a refusal here leaves every node as it was.

mod away;

use crate::citus;
use crate::copies;
use crate::issue;
use crate::pg::database;
use crate::pg::ddl::Statement;
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
fn around(stmt: &Statement<'_>, run: impl FnOnce() + std::panic::UnwindSafe) {
    citus::refuse_divergent_default(stmt);
    if stmt.changes_subscription() {
        copies::before_subscription_change();
    }
    // Read before the command runs.
    let discards = stmt.discards_sequences();
    let dropped = stmt
        .drops_database()
        .then(|| stmt.database_needing_free())
        .flatten()
        .and_then(database::oid_by_name);
    let record_altered = stmt.altered_table().is_some_and(copies::is_record);
    away::around(stmt, run);
    // Its triggers disabled (pg_restore --disable-triggers), rows could
    // come in unheard: every database checks again at commit.
    if record_altered {
        copies::record_altered();
    }
    // After the command: one refused (inside a transaction block) forgets nothing.
    if discards {
        issue::forget_last();
    }
    if let Some(db) = dropped {
        copies::database_dropped(db);
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
    // SAFETY: the statement Postgres is about to run, whose tree outlives
    // the command.
    let stmt = unsafe { Statement::new((*pstmt).utilityStmt) };
    // SAFETY: the next hook in line, or Postgres's own, with the
    // arguments it was called with.
    around(&stmt, || unsafe {
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
    let stmt = unsafe { Statement::new((*pstmt).utilityStmt) };
    // SAFETY: as above.
    around(&stmt, || unsafe {
        match PREV_PROCESS_UTILITY {
            Some(prev) => prev(pstmt, query, context, params, env, dest, qc),
            None => pg_sys::standard_ProcessUtility(pstmt, query, context, params, env, dest, qc),
        }
    })
}
