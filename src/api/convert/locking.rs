//! The locks a conversion takes before it looks at the data: every table it
//! alters and the sequence it drops, taken in short attempts so that no
//! application transaction waits long behind it.

use pgrx::prelude::*;
use snowflake_id_core::{Class, Failure};

use super::facts::{args, tree};
use crate::pg::error::raise;
use crate::pg::spi::ok as spi;
use crate::pg::{lock, timeout, xact};

/// What a conversion must hold before it looks at the data: every table
/// it alters, and the sequence it drops (with `drop_sequence`, or an
/// identity's), whose users would otherwise keep the DROP waiting.
pub(super) struct Locks {
    pub(super) tables: Vec<pg_sys::Oid>,
    /// The tables, named, for messages.
    pub(super) names: String,
    pub(super) sequence: Option<pg_sys::Oid>,
}

/// The longest one attempt to lock waits in the queue: while it waits, every
/// new insert into the table waits behind it.
const ATTEMPT_MAX_MS: i32 = 20;
/// The pause after a failed attempt, in which nobody waits for this one.
const PAUSE_MS: u64 = 100;

/// Takes `locks` without ever waiting long while holding part of them, or
/// holding up others for long. Whatever order the tables are locked in,
/// some application transaction can hold one of them and wait for another
/// (an order inserted, then its lines, in one transaction); waiting there
/// would end in a deadlock error for someone. And while a lock request
/// waits, every later request on the table waits behind it: behind a long
/// transaction, the application's inserts would wait as long. So each
/// attempt takes them one by one within 20 ms (or half of
/// `deadlock_timeout`, if less) in all, gives back what it got if it fails,
/// pauses 100 ms, and tries again, until the session's own `lock_timeout`
/// (if any) is spent: behind a long transaction, inserts wait at most 20 ms
/// at a time, in at most a sixth of the time.
fn lock(locks: &Locks) {
    let (deadlock_ms, budget_ms) = timeout::lock_waits_ms();
    let attempt_ms = u64::try_from((deadlock_ms / 2).clamp(1, ATTEMPT_MAX_MS)).unwrap_or(1);
    let start = std::time::Instant::now();
    loop {
        let mut wait = std::time::Duration::from_millis(attempt_ms);
        if budget_ms > 0 {
            let left =
                std::time::Duration::from_millis(budget_ms as u64).saturating_sub(start.elapsed());
            if left.is_zero() {
                raise(
                    Failure::new(
                        Class::LockNotAvailable,
                        format!("could not lock the tables to convert within lock_timeout ({budget_ms} ms)"),
                    )
                    .detail(format!("Tables: {}.", locks.names))
                    .hint("Run it again when fewer transactions hold these tables, or with a longer lock_timeout (0 waits until it gets them)."),
                );
            }
            wait = wait.min(left);
        }
        if try_lock(locks, wait) {
            return;
        }
        statement_timeout_check();
        crate::pg::clock::sleep_on_latch(PAUSE_MS);
        pgrx::check_for_interrupts!();
    }
}

/// Raises the statement timeout's error once the statement has run for
/// `statement_timeout`. Postgres raises it itself, except when it comes due
/// during a lock wait that its lock_timeout ends first: the one error
/// reported then is the lock timeout, which an attempt takes as its own,
/// and the statement timeout would never come again. The timer is disarmed
/// first (Postgres raises its own error if it fired meanwhile): else, its
/// time read here a little before it fires, it would cancel the statement a
/// second time, after an exception block caught this error.
fn statement_timeout_check() {
    if timeout::statement_time_is_up() {
        timeout::disarm_statement_timeout();
        pgrx::ereport!(
            ERROR,
            PgSqlErrorCode::ERRCODE_QUERY_CANCELED,
            "canceling statement due to statement timeout"
        );
    }
}

/// One attempt in a subtransaction, which gives the locks back if it fails.
fn try_lock(locks: &Locks, wait: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + wait;
    xact::attempt(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, || {
        for &t in &locks.tables {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            // Gone with the subtransaction if it fails; put back by the
            // caller if not.
            set_local_lock_timeout(left);
            // The table, then (as LOCK TABLE does) its partitions and
            // children, which no one can add while it is locked; all within
            // what is left of the attempt.
            lock::relation(t, lock::Mode::AccessExclusive);
            for child in descendants(t) {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    return false;
                }
                set_local_lock_timeout(left);
                lock::relation(child, lock::Mode::AccessExclusive);
            }
        }
        locks
            .sequence
            .is_none_or(|seq| lock::relation_if_free(seq, lock::Mode::AccessExclusive))
    })
}

/// The partitions and children of `relid`, at every level.
fn descendants(relid: pg_sys::Oid) -> Vec<pg_sys::Oid> {
    spi(Spi::connect(|c| {
        c.select(
            &format!("{} SELECT relid FROM tree WHERE relid <> $1", tree("$1")),
            None,
            &args([relid.into()]),
        )
        .map(|rows| {
            rows.filter_map(|r| r.get::<pg_sys::Oid>(1).ok().flatten())
                .collect()
        })
    }))
}

/// `SET LOCAL lock_timeout` to `left` (at least 1 ms): gone with the
/// subtransaction if the attempt fails, put back by the caller if not.
fn set_local_lock_timeout(left: std::time::Duration) {
    let statement = format!("SET LOCAL lock_timeout = {}", left.as_millis().max(1));
    if crate::pg::spi::execute(&statement) < 0 {
        pgrx::error!("snowflake_convert could not run: {statement}");
    }
}

/// `lock` with the session's own lock_timeout in force again afterwards
/// (a released subtransaction hands its SET LOCAL on to the transaction).
pub(super) fn lock_keeping_timeout(locks: &Locks) {
    let old = spi(Spi::get_one::<String>(
        "SELECT current_setting('lock_timeout')",
    ))
    .unwrap_or_default();
    lock(locks);
    spi(Spi::run_with_args(
        "SELECT set_config('lock_timeout', $1, true)",
        &[old.into()],
    ));
}
