//! Data that came from another cluster: whether a database must be floored
//! before its next ID, and where the time inside IDs continues afterwards.
//!
//! A physical copy (a standby, a base backup, PITR) keeps the system
//! identifier and replays the durable mark from WAL. A `pg_upgrade`, a dump
//! restored elsewhere or a logical copy carries rows but not the mark, into
//! a server with another system identifier. Each database keeps a record of
//! the floors made in it (`snowflake_id.snowflake_floors`). Every row gets
//! an arrival, a random UUID, when it is written into a database (the
//! record's guard sets it, whatever a dump says), and every floor writes
//! the flooring server's row, naming the arrivals of other servers' rows it
//! covered. The rows travel with the data (pg_upgrade carries the table,
//! pg_dump its rows, a publication of all tables its rows), so a database
//! is floored by a server before its first ID there unless its floors
//! covered every row of another server that arrived: arrivals, not
//! servers, because the same server's rows arrive again with newer data (a
//! rehearsal restore, then the real one).
//! What a role may write into the record, and when servers read it, is the
//! shell's (`copies.rs`, the record's guard).

use crate::layout::Layout;
use crate::timefmt::format_instant;
use crate::{Class, Failure};

/// One server's row in a database's record of floors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloorRow {
    pub system_identifier: i64,
    /// When the row was written into this database (a random UUID).
    pub arrival: u128,
    /// The arrivals of other servers' rows this server's floor covered.
    pub covers: Vec<u128>,
    /// The state of this database's subscriptions' finished initial copies
    /// when this server floored (`subscription_copies`), if any had finished.
    pub subscription_copies: Option<u64>,
    /// The highest ID the floor found.
    pub floor: Option<i64>,
    /// When the row was written, by the writing server's clock (for this
    /// server's floors: the clock the floor was made at).
    pub written_ms: i64,
}

/// The system identifier of a row that stands for copied rows of unknown
/// origin: written when a subscription is dropped or changed after its
/// initial copies finished and before this server floored them (dropping a
/// subscription empties the catalog that told of its copies). No server
/// has it; a floor covers it as any other.
pub const COPIED_UNFLOORED: i64 = 0;

/// Why a database must be floored before this server issues in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// Rows of other servers that no floor of this server covered: a
    /// pg_upgrade, a restored dump, a copied record.
    OtherServers(Vec<i64>),
    /// A subscription's table finished its initial copy since this server's
    /// last floor.
    InitialCopy,
    /// No row at all: a database new to this server, a record emptied, or
    /// rows that came without it.
    NoRecord,
    /// It held copied IDs set aside as more than an hour ahead of the
    /// clock, unsettled when the server restarted: only a read tells
    /// whether they still are.
    SetAside,
}

impl Why {
    /// The reason, for the server log.
    pub fn describe(&self) -> String {
        match self {
            Why::OtherServers(ids) => {
                let servers: Vec<String> = ids
                    .iter()
                    .filter(|&&s| s != COPIED_UNFLOORED)
                    .map(i64::to_string)
                    .collect();
                let dropped = "a subscription copied tables into it and was dropped or changed before a floor";
                match (servers.is_empty(), ids.contains(&COPIED_UNFLOORED)) {
                    (true, _) => dropped.to_string(),
                    (false, unknown) => format!(
                        "its data came from another cluster (system identifier {}){}",
                        servers.join(", "),
                        if unknown { format!("; {dropped}") } else { String::new() }
                    ),
                }
            }
            Why::InitialCopy => "a subscription copied tables into it".to_string(),
            Why::NoRecord => {
                "no floor of this server covers it yet (new here, or its record of floors was emptied)"
                    .to_string()
            }
            Why::SetAside => {
                "it held copied IDs more than an hour ahead of the clock, set aside and unsettled before the server restarted"
                    .to_string()
            }
        }
    }
}

/// One finished initial copy of a table by a subscription: the
/// subscription's and the table's oids, and the publisher's LSN at which
/// the copy ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FinishedCopy {
    pub subscription: u32,
    pub table: u32,
    pub lsn: u64,
}

/// The state of a database's subscriptions' finished initial copies as one
/// number, the same in every process, or `None` where no copy has
/// finished. The whole set, not its newest LSN: the LSNs of two publishers
/// say nothing of each other, and a table copied from a publisher whose
/// WAL is shorter than another's ends at a smaller LSN, yet after it.
pub fn copies_state(copies: &[FinishedCopy]) -> Option<u64> {
    if copies.is_empty() {
        return None;
    }
    let mut copies = copies.to_vec();
    copies.sort_unstable();
    let mut h = Fnv::new();
    for c in &copies {
        h.eat(u64::from(c.subscription));
        h.eat(u64::from(c.table));
        h.eat(c.lsn);
    }
    Some(h.finish())
}

/// FNV-1a over 64-bit words: stable across processes and builds.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn eat(&mut self, v: u64) {
        for b in v.to_le_bytes() {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0.max(1)
    }
}

/// Whether the database whose record is `rows` must be floored before this
/// server (`me`) issues in it; `copies` is the state of its subscriptions'
/// finished initial copies (`copies_state`), if any finished.
pub fn floor_needed(me: i64, rows: &[FloorRow], copies: Option<u64>) -> Option<Why> {
    if rows.is_empty() {
        // A subscription's copies are the likelier story, and the one to tell.
        return Some(if copies.is_some() {
            Why::InitialCopy
        } else {
            Why::NoRecord
        });
    }
    let mine: Vec<&FloorRow> = rows.iter().filter(|r| r.system_identifier == me).collect();
    let mut others: Vec<i64> = uncovered(me, rows).map(|r| r.system_identifier).collect();
    others.sort_unstable();
    others.dedup();
    if !others.is_empty() {
        return Some(Why::OtherServers(others));
    }
    // A floor of this server made with the copies as they are now covers
    // them; any other state (a table copied since, from whichever
    // publisher) needs a floor of its own.
    match copies {
        Some(now) if mine.iter().any(|m| m.subscription_copies == Some(now)) => None,
        Some(_) => Some(Why::InitialCopy),
        None => None,
    }
}

/// The arrivals a floor by `me` covers: every other server's row that no
/// floor of `me` covered yet (the record grows by what arrived, not by
/// what it held).
pub fn covered(me: i64, rows: &[FloorRow]) -> Vec<u128> {
    let mut arrivals: Vec<u128> = uncovered(me, rows).map(|r| r.arrival).collect();
    arrivals.sort_unstable();
    arrivals.dedup();
    arrivals
}

/// Other servers' rows whose arrival no floor of `me` covered. One pass
/// over what this server's rows cover: a record of many rows costs its
/// size, not its square.
fn uncovered(me: i64, rows: &[FloorRow]) -> impl Iterator<Item = &FloorRow> {
    let covered: std::collections::HashSet<u128> = rows
        .iter()
        .filter(|r| r.system_identifier == me)
        .flat_map(|m| m.covers.iter().copied())
        .collect();
    rows.iter()
        .filter(move |r| r.system_identifier != me && !covered.contains(&r.arrival))
}

/// How far ahead of this server's clock the time inside IDs may continue
/// after a floor: copied IDs made by a clock up to an hour ahead of this
/// one are continued from, as a sequence would be, rather than waited for.
pub const COPY_LEAD_LIMIT_MS: i64 = 3_600_000;

/// How much slower than the clock the time inside IDs runs while it is
/// ahead of the clock after a floor (a shift: an eighth). IDs then flow at
/// seven eighths of the layout's rate, and the lead is gone after eight
/// times its length (at most eight hours).
pub const CATCH_UP_SHIFT: u32 = 3;

/// After a floor at `floor` (an ID of `layout`) made when this server's
/// clock read `floored_ms`: the term of [`generation_now`] that makes IDs
/// continue from the floor's time, if that was ahead of the clock by no
/// more than [`COPY_LEAD_LIMIT_MS`]. It depends on those two numbers alone,
/// which the record of floors keeps, so that a restart continues exactly
/// where IDs were. Further ahead, the floor still holds, and calls wait or
/// fail as after a clock stepped back.
pub fn continue_term(layout: &Layout, floor: i64, floored_ms: i64) -> Option<i64> {
    let at = layout.tick_start_ms(layout.decode_tick(floor).ok()?);
    let lead = at - floored_ms;
    (lead > 0 && lead <= COPY_LEAD_LIMIT_MS).then_some(lead + (floored_ms >> CATCH_UP_SHIFT))
}

/// The instant generation works from when the clock reads `clock_ms`,
/// given the largest [`continue_term`] (0: none): the floor's time when it
/// was made, then a lead that melts at an eighth of the clock's pace. Time
/// moves on with the clock (the waits the errors announce are true) and
/// never back.
#[inline]
pub fn generation_now(clock_ms: i64, term: i64) -> i64 {
    if term == 0 {
        return clock_ms;
    }
    clock_ms + (term - (clock_ms >> CATCH_UP_SHIFT)).max(0)
}

/// How long to sleep, the clock reading `clock_ms`, for the time
/// [`generation_now`] gives to move on `wait_ms`: longer while a lead
/// melts (that time then moves at seven eighths of the clock's pace; the
/// lead's end within the sleep only shortens what it takes).
pub fn real_wait_ms(wait_ms: u64, clock_ms: i64, term: i64) -> u64 {
    if generation_now(clock_ms, term) > clock_ms {
        let pace = 1u64 << CATCH_UP_SHIFT;
        wait_ms.saturating_mul(pace).div_ceil(pace - 1)
    } else {
        wait_ms
    }
}

/// The largest ID (of any worker) that `snowflake_resume_above()` without
/// an argument takes as one: made no later than [`COPY_LEAD_LIMIT_MS`]
/// after `now_ms`. A bigint column's larger values are other numbers (a
/// nanosecond count, another system's ID), not IDs of this layout.
pub fn plausible_upper(layout: &Layout, now_ms: i64) -> i64 {
    let until_ms = now_ms.saturating_add(COPY_LEAD_LIMIT_MS);
    let end_ms = layout.end_ms() - 1;
    if until_ms >= end_ms {
        return i64::MAX;
    }
    let first_after = layout
        .lower_bound(i128::from(until_ms + 1) * 1000)
        .unwrap_or(i64::MAX);
    first_after.saturating_sub(1).max(0)
}

/// The tick of the smallest ID a floor set aside: while they are
/// unsettled no database's ID reaches it, so that none repeats them
/// whichever database asks first once the clock gets there. A value past
/// the layout's end (a sentinel) stops nothing.
pub fn ceiling_tick(layout: &Layout, lowest_set_aside: i64) -> u64 {
    layout.decode_tick(lowest_set_aside).unwrap_or(u64::MAX)
}

/// The error of an ID that would reach the ceiling: `db` holds the IDs set
/// aside; `nextval` and `resume` are the functions' names as pasted.
pub fn past_ceiling(layout: &Layout, tick: u64, db: &str, nextval: &str, resume: &str) -> Failure {
    Failure::new(
        Class::NotReady,
        format!(
            "snowflake_id issues no ID made at {} or later: database \"{db}\" holds IDs copied from another server from then on, set aside as more than an hour ahead of the clock and not settled",
            format_instant(layout.tick_start_ms(tick))
        ),
    )
    .detail("An ID of any database past that time could repeat one of them.")
    .hint(format!(
        "In database \"{db}\", SELECT {nextval}(); floors above them once the clock is within an hour of them, and IDs continue in every database; while they are further ahead its error says how to settle them (SELECT {resume}(); there sets them aside as no IDs)."
    ))
}

/// What the status says of a ceiling a durable mark carried over a restart,
/// until its database floors again (the mark names the database by OID).
pub fn unsettled(layout: &Layout, tick: u64, database: u32) -> Failure {
    Failure::new(
        Class::NotReady,
        format!(
            "copied IDs that a floor set aside in the database of OID {database}, more than an hour ahead of the clock, are not settled: no ID made at {} or later is issued in any database",
            format_instant(layout.tick_start_ms(tick))
        ),
    )
    .detail("An ID of any database past that time could repeat one of them.")
    .hint(format!(
        "Take one ID in that database (SELECT datname FROM pg_database WHERE oid = {database};): it floors again, and lifts this or says how to settle them."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row of server `s` that arrived as `arrival`, covering `covers`.
    fn row(s: i64, arrival: u128, covers: &[u128], copies: Option<u64>) -> FloorRow {
        FloorRow {
            system_identifier: s,
            arrival,
            covers: covers.to_vec(),
            subscription_copies: copies,
            floor: None,
            written_ms: 0,
        }
    }

    #[test]
    fn a_database_made_here_needs_nothing() {
        assert_eq!(floor_needed(7, &[row(7, 1, &[], None)], None), None);
        // Restored into the server it was dumped from: its own rows twice.
        assert_eq!(
            floor_needed(7, &[row(7, 1, &[], None), row(7, 2, &[], None)], None),
            None
        );
    }

    #[test]
    fn rows_of_another_server_need_a_floor_until_one_covers_them() {
        // pg_upgrade: only the old cluster's row.
        assert_eq!(
            floor_needed(9, &[row(7, 1, &[], None)], None),
            Some(Why::OtherServers(vec![7]))
        );
        // A restore: this server's creation row and the dumped one.
        let restored = [row(9, 1, &[], None), row(7, 2, &[], None)];
        assert_eq!(
            floor_needed(9, &restored, None),
            Some(Why::OtherServers(vec![7]))
        );
        assert_eq!(covered(9, &restored), vec![2]);
        let floored = [
            row(9, 1, &[], None),
            row(7, 2, &[], None),
            row(9, 3, &[2], None),
        ];
        assert_eq!(floor_needed(9, &floored, None), None);
        // A copy of a copy: the server the copy came from had covered a third.
        let chain = [row(7, 1, &[5], None), row(5, 2, &[], None)];
        assert_eq!(
            floor_needed(9, &chain, None),
            Some(Why::OtherServers(vec![5, 7]))
        );
        assert_eq!(covered(9, &chain), vec![1, 2]);
    }

    #[test]
    fn the_same_servers_rows_arriving_again_need_a_floor_again() {
        // A rehearsal restore floored, then the real one (newer data of the
        // same server) restored into the same database: its rows arrive
        // anew, and only what is new is covered by the next floor.
        let rehearsed = [
            row(9, 1, &[], None),
            row(7, 2, &[], None),
            row(9, 3, &[2], None),
        ];
        assert_eq!(floor_needed(9, &rehearsed, None), None);
        let mut again = rehearsed.to_vec();
        again.push(row(7, 4, &[], None));
        assert_eq!(
            floor_needed(9, &again, None),
            Some(Why::OtherServers(vec![7]))
        );
        assert_eq!(covered(9, &again), vec![4]);
        again.push(row(9, 5, &[4], None));
        assert_eq!(floor_needed(9, &again, None), None);
        // Another server's floor names arrivals it covered: none of them
        // spares this server a floor.
        let theirs = [
            row(9, 1, &[], None),
            row(7, 2, &[], None),
            row(8, 3, &[2], None),
        ];
        assert_eq!(
            floor_needed(9, &theirs, None),
            Some(Why::OtherServers(vec![7, 8]))
        );
    }

    #[test]
    fn an_empty_record_is_floored() {
        assert_eq!(floor_needed(9, &[], None), Some(Why::NoRecord));
        assert_eq!(floor_needed(9, &[], Some(3)), Some(Why::InitialCopy));
        assert!(Why::NoRecord.describe().contains("no floor of this server"));
    }

    #[test]
    fn copies_dropped_before_a_floor_are_floored_once_each() {
        let floored = [row(9, 1, &[], None)];
        let dropped = [row(9, 1, &[], None), row(COPIED_UNFLOORED, 2, &[], None)];
        let why = floor_needed(9, &dropped, None).unwrap();
        assert_eq!(why, Why::OtherServers(vec![COPIED_UNFLOORED]));
        assert!(
            why.describe().starts_with("a subscription copied tables"),
            "{}",
            why.describe()
        );
        assert_eq!(covered(9, &dropped), vec![2]);
        let mut after = dropped.to_vec();
        after.push(row(9, 3, &[2], None));
        assert_eq!(floor_needed(9, &after, None), None);
        assert_eq!(floor_needed(9, &floored, None), None);
        // A second subscription dropped later leaves a marker of its own.
        after.push(row(COPIED_UNFLOORED, 4, &[], None));
        assert_eq!(
            floor_needed(9, &after, None),
            Some(Why::OtherServers(vec![COPIED_UNFLOORED]))
        );
        let both = Why::OtherServers(vec![COPIED_UNFLOORED, 7]).describe();
        assert!(
            both.contains("system identifier 7)") && both.contains("dropped"),
            "{both}"
        );
    }

    fn copy(subscription: u32, table: u32, lsn: u64) -> FinishedCopy {
        FinishedCopy {
            subscription,
            table,
            lsn,
        }
    }

    #[test]
    fn a_finished_initial_copy_is_floored_once() {
        let one = copies_state(&[copy(1, 10, 0x0700_5558)]);
        let created = [row(9, 1, &[], None)];
        assert_eq!(floor_needed(9, &created, one), Some(Why::InitialCopy));
        let floored = [row(9, 1, &[], None), row(9, 2, &[], one)];
        assert_eq!(floor_needed(9, &floored, one), None);
        // A table added to the publication later and copied.
        let two = copies_state(&[copy(1, 10, 0x0700_5558), copy(1, 11, 0x0800_0000)]);
        assert_eq!(floor_needed(9, &floored, two), Some(Why::InitialCopy));
        assert_eq!(floor_needed(9, &floored, None), None);
    }

    #[test]
    fn a_copy_from_a_publisher_with_less_wal_is_floored_too() {
        // The first publisher's copy ended at 0/07005558; a second
        // subscription's, from a publisher whose WAL is shorter, at
        // 0/02550A38, later.
        let first = copies_state(&[copy(1, 10, 0x0700_5558)]);
        let floored = [row(9, 1, &[], None), row(9, 2, &[], first)];
        let both = copies_state(&[copy(1, 10, 0x0700_5558), copy(2, 20, 0x0255_0A38)]);
        assert_eq!(floor_needed(9, &floored, both), Some(Why::InitialCopy));
        // A table copied again (a re-initialised publisher) at a smaller LSN.
        let again = copies_state(&[copy(1, 10, 0x0100_0000)]);
        assert_eq!(floor_needed(9, &floored, again), Some(Why::InitialCopy));
    }

    #[test]
    fn the_copies_state_is_the_set_whatever_its_order() {
        let a = [copy(1, 10, 5), copy(2, 20, 7)];
        let b = [copy(2, 20, 7), copy(1, 10, 5)];
        assert_eq!(copies_state(&a), copies_state(&b));
        assert_ne!(copies_state(&a), copies_state(&a[..1]));
        assert_ne!(
            copies_state(&a),
            copies_state(&[copy(1, 10, 5), copy(2, 20, 8)])
        );
        assert_eq!(copies_state(&[]), None);
    }

    #[test]
    fn ids_continue_from_a_floor_up_to_an_hour_ahead_and_catch_up() {
        let l = Layout::by_name("snowflake_id").unwrap();
        let now = l.epoch_ms() + 1_000_000;
        let ahead = l.lower_bound(i128::from(now + 60_000) * 1000).unwrap();
        let term = continue_term(&l, ahead, now).unwrap();
        // From the floor's time, then on with the clock at 7/8 of its pace,
        // until the lead is gone (after eight times its length).
        assert_eq!(generation_now(now, term), now + 60_000);
        assert_eq!(generation_now(now + 8_000, term), now + 60_000 + 7_000);
        assert_eq!(generation_now(now + 480_000, term), now + 480_000);
        assert_eq!(generation_now(now + 10_000_000, term), now + 10_000_000);
        for t in (now..now + 600_000).step_by(997) {
            assert!(generation_now(t + 1, term) >= generation_now(t, term));
        }
        assert_eq!(generation_now(now, 0), now);
        // Waits while the lead melts take 8/7 as long by the clock.
        assert_eq!(real_wait_ms(700, now, term), 800);
        assert_eq!(real_wait_ms(700, now + 480_000, term), 700);
        assert_eq!(real_wait_ms(700, now, 0), 700);
        let behind = l.lower_bound(i128::from(now - 60_000) * 1000).unwrap();
        assert_eq!(continue_term(&l, behind, now), None);
        let far = l
            .lower_bound(i128::from(now + COPY_LEAD_LIMIT_MS + 1) * 1000)
            .unwrap();
        assert_eq!(continue_term(&l, far, now), None);
    }

    #[test]
    fn plausible_ids_end_an_hour_after_the_clock() {
        let l = Layout::by_name("snowflake_id").unwrap();
        let now = l.epoch_ms() + 1_000_000;
        let upper = plausible_upper(&l, now);
        assert_eq!(l.decode(upper).unwrap().unix_ms, now + COPY_LEAD_LIMIT_MS);
        assert!(l.decode(upper + 1).unwrap().unix_ms > now + COPY_LEAD_LIMIT_MS);
        // Near the layout's end, every ID is one.
        assert_eq!(plausible_upper(&l, l.end_ms() - 10), i64::MAX);
        // The ceiling is the smallest set-aside ID's tick: below it, none.
        let c = ceiling_tick(&l, upper + 1);
        assert_eq!(c, l.decode_tick(upper + 1).unwrap());
        assert!(l.tick_start_ms(c) > now + COPY_LEAD_LIMIT_MS - 1);
        // A sentinel stops nothing before the layout's end.
        assert!(ceiling_tick(&l, i64::MAX) >= l.last_tick());
    }
}
