//! The generator: one 64-bit counter in shared memory, advanced by
//! compare-and-swap, never by a lock.
//!
//! The counter is `tick << sequence_bits | sequence`, the ID without its
//! worker bits. Taking IDs moves it to `max(next, now_tick << sequence_bits)`
//! plus the number taken, so:
//! - within a tick the sequence counts up; a full tick carries into the next
//!   tick by plain addition, borrowing ticks ahead of the clock instead of
//!   spinning;
//! - a clock that steps back changes nothing: `next` only ever grows;
//! - every caller on every backend gets a range no one else got, in the order
//!   the swaps succeeded.
//!
//! Two bounds keep it honest. IDs may carry a tick at most `lead_ticks` ahead
//! of the wall clock (past that, the caller waits for the clock or is told why
//! not), and only ticks below `durable_end` may be issued: that bound moves up
//! only after a durable mark at or above it has been written, so after a crash
//! generation resumes above every ID that was handed out.

use crate::failure::{Class, Failure};
use crate::layout::Layout;
use crate::timefmt::{format_duration, format_instant, setting_value_at_least, UnixMs};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// The SQL functions that draw IDs from the generator: a column whose
/// default calls one of them is a column of IDs.
pub const GENERATING_FUNCTIONS: [&str; 4] = [
    "snowflake_nextval",
    "snowflake_nextval_batch",
    "snowflake_nextval_array",
    "snowflake_uuidv7",
];

/// [`GENERATING_FUNCTIONS`] as an SQL list of literals, for `IN (...)`.
pub fn generating_functions_sql() -> String {
    GENERATING_FUNCTIONS
        .iter()
        .map(|f| format!("'{f}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The state shared by every backend. Its words sit on one cache line: a
/// caller needs each, and one miss is cheaper than several.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Shared {
    /// The smallest counter value that may be issued next.
    next: AtomicU64,
    /// Ticks below this are covered by the durable mark.
    durable_end: AtomicU64,
    /// Where generation's time continues from after a floor above copied
    /// IDs ahead of the clock (`copies::continue_term`; 0: none).
    continue_term: AtomicI64,
}

impl Shared {
    /// State for a server whose durable mark says no ID carries a tick above
    /// `mark`; `None` when nothing was ever issued.
    pub fn resume(mark: Option<u64>, sequence_bits: u32) -> Shared {
        let s = Shared::default();
        s.reset(mark, sequence_bits);
        s
    }

    /// Puts the state where [`Shared::resume`] would, for a state that
    /// already lives in shared memory.
    pub fn reset(&self, mark: Option<u64>, sequence_bits: u32) {
        let (next, end) = match mark {
            Some(m) => ((m + 1) << sequence_bits, m + 1),
            None => (0, 0),
        };
        self.durable_end.store(0, Ordering::SeqCst);
        self.next.store(next, Ordering::SeqCst);
        self.durable_end.store(end, Ordering::SeqCst);
    }

    /// Puts every later ID above tick `floor`. Nothing becomes issuable by
    /// it: ticks above the durable mark still wait for a new mark.
    pub fn raise_floor(&self, floor: u64, sequence_bits: u32) {
        let first = floor.saturating_add(1).min(u64::MAX >> sequence_bits) << sequence_bits;
        self.next.fetch_max(first, Ordering::AcqRel);
    }

    /// Makes generation continue from copied IDs ahead of the clock (a
    /// `copies::continue_term`; the furthest ahead wins).
    pub fn continue_with(&self, term: i64) {
        self.continue_term.fetch_max(term, Ordering::Relaxed);
    }

    /// The largest term given to [`Self::continue_with`] (0: none), which
    /// each durable mark carries.
    pub fn continue_term(&self) -> i64 {
        self.continue_term.load(Ordering::Relaxed)
    }

    /// The instant generation works from when the clock reads `clock_ms`
    /// (one load, on the line the call reads anyway).
    #[inline]
    pub fn now_ms(&self, clock_ms: i64) -> i64 {
        crate::copies::generation_now(clock_ms, self.continue_term.load(Ordering::Relaxed))
    }

    /// How long, on the clock, until generation's time, now `gen_ms`, has
    /// moved on `wait_ms`: what the errors announce. While a lead melts,
    /// `gen_ms` is 7/8 of the clock plus the term, which gives the clock.
    pub fn real_wait_at(&self, wait_ms: u64, gen_ms: i64) -> u64 {
        let term = self.continue_term.load(Ordering::Relaxed);
        if term == 0 {
            return wait_ms;
        }
        let pace = 1i128 << crate::copies::CATCH_UP_SHIFT;
        let clock_ms = ((i128::from(gen_ms) - i128::from(term)) * pace / (pace - 1)) as i64;
        crate::copies::real_wait_ms(wait_ms, clock_ms, term)
    }

    /// How long to sleep for generation's time to move on `wait_ms`.
    pub fn real_wait_ms(&self, wait_ms: u64, clock_ms: i64) -> u64 {
        crate::copies::real_wait_ms(
            wait_ms,
            clock_ms,
            self.continue_term.load(Ordering::Relaxed),
        )
    }

    /// The next counter value that may be issued.
    pub fn next(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }

    /// The first tick not yet covered by the durable mark.
    pub fn durable_end(&self) -> u64 {
        self.durable_end.load(Ordering::Acquire)
    }

    /// Publishes a durable mark. Call only after the mark is on disk, and
    /// only while holding whatever serialises mark writers.
    pub fn publish_durable(&self, mark: u64) {
        self.durable_end.fetch_max(mark + 1, Ordering::AcqRel);
    }

    /// Stops all generation until a new mark is published (used when the
    /// durable state must be re-established).
    pub fn revoke_durable(&self) {
        self.durable_end.store(0, Ordering::SeqCst);
    }
}

/// The per-call limits a take is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub sequence_bits: u32,
    /// The last tick an ID may carry at all.
    pub last_tick: u64,
    /// How many ticks IDs may run ahead of the clock's tick.
    pub lead_ticks: u64,
    /// The most values one take may claim beyond the lead (see [`try_take`]).
    pub queue_cap: u64,
}

/// A run of consecutive counter values handed to one caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    pub first: u64,
    pub count: u64,
    /// Ticks ahead of the clock this take was the first to enter.
    pub borrowed_ticks: u64,
    /// When it entered ticks ahead: how far the start of its last tick is
    /// ahead of the clock reading it was handed out at, in ms. The largest
    /// value ever seen is the furthest IDs ran ahead (set by [`generate`]).
    pub ahead_ms: i64,
    /// The clock tick from which the run is within the lead and may be
    /// handed out: the tick it was taken at, unless it was claimed ahead.
    pub ready_tick: u64,
}

/// Why a take could not complete now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocked {
    /// The durable mark must first cover `through_tick`.
    NeedDurable { through_tick: u64 },
    /// IDs are already further ahead of the clock than the lead and the
    /// caller's patience allow; the clock must reach `resume_tick` first.
    /// `next_tick` is the tick the next ID would carry.
    AheadOfClock { resume_tick: u64, next_tick: u64 },
    /// A batch found the part of the first tick beyond the lead that
    /// batches may claim already claimed (the rest is kept for single IDs);
    /// it may try again once the clock reaches `retry_tick`.
    BatchLaneFull { retry_tick: u64, next_tick: u64 },
    /// The layout has no tick left.
    Exhausted,
}

/// Tries to take up to `want` (at least 1) consecutive counter values at
/// clock tick `now_tick`. May take fewer when the lead bound cuts the run
/// short; never blocks, never spins on anything but a lost swap.
///
/// `patience_ticks` is how many ticks the caller is willing to wait for the
/// clock. With patience, a caller that finds the lead used up claims its
/// values now, in line, and hands them out once the clock has caught up
/// ([`Taken::ready_tick`]): waiters are served in the order they came. A run
/// claimed ahead holds at most [`Limits::queue_cap`] values and stays in one
/// tick, so no one caller holds the line for long; and takes of more than one
/// value claim ahead only in the first half of a tick, so however many
/// sessions take batches, the rest of the tick stays for single calls.
#[inline]
pub fn try_take(
    shared: &Shared,
    lim: &Limits,
    now_tick: u64,
    want: u64,
    patience_ticks: u64,
) -> Result<Taken, Blocked> {
    debug_assert!(want >= 1);
    let s = lim.sequence_bits;
    let floor = now_tick.min(lim.last_tick + 1) << s;
    let allowed_tick = now_tick.saturating_add(lim.lead_ticks).min(lim.last_tick);
    let queue_tick = allowed_tick
        .saturating_add(patience_ticks)
        .min(lim.last_tick);
    let mut next = shared.next.load(Ordering::Acquire);
    loop {
        let first = next.max(floor);
        let first_tick = first >> s;
        if first_tick > lim.last_tick {
            return Err(Blocked::Exhausted);
        }
        if first_tick > queue_tick {
            return Err(Blocked::AheadOfClock {
                resume_tick: first_tick - lim.lead_ticks,
                next_tick: first_tick,
            });
        }
        let count = if first_tick <= allowed_tick {
            want.min(((allowed_tick + 1) << s) - first)
        } else {
            let in_tick = first - (first_tick << s);
            let lane_end = if want > 1 { (1u64 << s) / 2 } else { 1u64 << s };
            if in_tick >= lane_end {
                return Err(Blocked::BatchLaneFull {
                    retry_tick: now_tick + 1,
                    next_tick: first_tick,
                });
            }
            want.min(lim.queue_cap).min(lane_end - in_tick)
        };
        let last_tick = (first + count - 1) >> s;
        if last_tick >= shared.durable_end.load(Ordering::Acquire) {
            return Err(Blocked::NeedDurable {
                through_tick: last_tick,
            });
        }
        match shared.next.compare_exchange_weak(
            next,
            first + count,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                // Ticks past both the clock and the previous run were entered by this take.
                let entered_from = if next == 0 { 0 } else { ((next - 1) >> s) + 1 };
                let lo = entered_from.max(now_tick + 1);
                let borrowed_ticks = if last_tick >= lo {
                    last_tick - lo + 1
                } else {
                    0
                };
                return Ok(Taken {
                    first,
                    count,
                    borrowed_ticks,
                    ahead_ms: 0,
                    ready_tick: last_tick.saturating_sub(lim.lead_ticks).max(now_tick),
                });
            }
            Err(seen) => next = seen,
        }
    }
}

/// The largest `max_lead` the setting takes, in ms: a million days (about
/// 2,700 years), more than any named layout's whole time range, so a
/// forward clock jump of any size that IDs were issued in has a lead that
/// covers it. A round number of days, so that `SHOW` prints it ('1e+06d')
/// as a value the setting takes back.
pub const MAX_LEAD_LIMIT_MS: u64 = 1_000_000 * 86_400_000;

/// The settings that shape waiting, checked against the layout, with the
/// limits they imply worked out once (no division per call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub max_lead_ms: u64,
    pub max_wait_ms: u64,
    lim: Limits,
}

impl Policy {
    /// Checks the settings against the layout's tick length: a wait bound
    /// shorter than one tick would turn plain overload into errors.
    pub fn new(layout: &Layout, max_lead_ms: u64, max_wait_ms: u64) -> Result<Policy, Failure> {
        if max_wait_ms < layout.unit_ms() {
            return Err(Failure::new(
                Class::InvalidParameter,
                format!(
                    "snowflake_id.max_wait ({max_wait_ms} ms) is shorter than one tick of {} ({} ms)",
                    layout.title(),
                    layout.unit_ms()
                ),
            )
            .detail("Callers that ask for IDs faster than the layout allows wait up to one tick for the next one.")
            .hint(format!(
                "ALTER SYSTEM SET snowflake_id.max_wait = '{}'; SELECT pg_reload_conf();",
                setting_value_at_least(layout.unit_ms())
            )));
        }
        Ok(Policy {
            max_lead_ms,
            max_wait_ms,
            lim: Limits {
                sequence_bits: layout.sequence_bits(),
                last_tick: layout.last_tick(),
                lead_ticks: max_lead_ms / layout.unit_ms(),
                // A sixty-fourth of a tick: small batches still queue in one
                // run, while a bulk caller's claim holds others up for no
                // more than a sliver of a tick.
                queue_cap: ((1u64 << layout.sequence_bits()) / 64).max(1),
            },
        })
    }

    /// The limits for the layout this policy was checked against.
    #[inline]
    pub fn limits(&self) -> Limits {
        self.lim
    }
}

/// What the generator needs from the world: a clock, a way to wait, and a
/// way to make a mark durable. The Postgres shell implements it over the
/// system clock, latches and a file; tests implement it over plain numbers.
pub trait Env {
    type Error;
    /// The wall clock, read once per call and again after each wait.
    fn now_ms(&mut self) -> UnixMs;
    /// Waits about `ms` milliseconds; may return early; must let the caller
    /// be cancelled. Returns how long it really waited, in microseconds,
    /// by a clock that does not step.
    fn wait_ms(&mut self, ms: u64) -> Result<u64, Self::Error>;
    /// Makes the durable mark cover `through_tick` and publishes it, waiting
    /// at most about `budget_ms` for anything (a synchronous standby) the
    /// publication needs. Returns how long it waited for that, in µs.
    fn make_durable(&mut self, through_tick: u64, budget_ms: u64) -> Result<u64, Self::Error>;
    /// Turns a failure into the caller's error.
    fn fail(&mut self, failure: Failure) -> Self::Error;
}

/// One attempt at taking up to `want` values with the clock reading `now`,
/// without waiting: [`try_take`] at the clock's tick, with
/// [`Taken::ahead_ms`] filled in. `None` when the clock reads before the
/// layout's epoch. This is all a caller does when nothing has to wait, so it
/// serves as the fast path.
#[inline]
pub fn take_at(
    shared: &Shared,
    layout: &Layout,
    lim: &Limits,
    now: UnixMs,
    want: u64,
) -> Option<Result<Taken, Blocked>> {
    let now_tick = layout.tick_at_ms(now)?;
    Some(try_take(shared, lim, now_tick, want, 0).map(|mut t| {
        t.ahead_ms = ahead_ms(layout, lim, &t, now);
        t
    }))
}

/// How far the start of a run's last tick is ahead of the clock reading
/// `now` (0 when it is not ahead): after a burst, and after a backward step
/// of the clock, whose IDs continue in a tick the clock has left.
#[inline]
fn ahead_ms(layout: &Layout, lim: &Limits, t: &Taken, now: UnixMs) -> i64 {
    let start = layout.tick_start_ms((t.first + t.count - 1) >> lim.sequence_bits);
    (start - now).max(0)
}

/// How long one call may still wait for the clock: `max_wait` bounds the
/// call's waits together, not each one.
struct Budget {
    max_us: u64,
    waited_us: u64,
}

impl Budget {
    fn left_ms(&self) -> u64 {
        self.max_us.saturating_sub(self.waited_us) / 1000
    }

    fn waited_ms(&self) -> u64 {
        self.waited_us / 1000
    }

    /// Clock ticks from `now` the caller can still wait for.
    fn patience_ticks(&self, layout: &Layout, now: UnixMs, now_tick: u64) -> u64 {
        let until = now.saturating_add(self.left_ms().min(i64::MAX as u64) as i64);
        layout
            .tick_at_ms(until)
            .map_or(0, |t| t.saturating_sub(now_tick))
    }
}

/// Hands out `want` counter values through `sink`, in one or more
/// increasing runs, waiting for the clock or the durable mark as needed.
/// All its waits (for the clock, and for a synchronous standby to confirm
/// a mark) together last at most about `max_wait`.
pub fn generate<E: Env>(
    shared: &Shared,
    layout: &Layout,
    policy: &Policy,
    env: &mut E,
    want: u64,
    mut sink: impl FnMut(Taken),
) -> Result<(), E::Error> {
    let lim = policy.limits();
    let mut budget = Budget {
        max_us: policy.max_wait_ms.saturating_mul(1000),
        waited_us: 0,
    };
    let mut left = want;
    let mut now = env.now_ms();
    if want > 1 {
        if let Some(f) = batch_too_large(shared, layout, policy, now, want) {
            return Err(env.fail(f));
        }
    }
    while left > 0 {
        let Some(now_tick) = layout.tick_at_ms(now) else {
            return Err(env.fail(clock_before_epoch(layout, now)));
        };
        let patience = budget.patience_ticks(layout, now, now_tick);
        match try_take(shared, &lim, now_tick, left, patience) {
            Ok(mut t) => {
                // Claimed ahead: hand it out once the clock has caught up.
                loop {
                    let ready_at = layout.tick_start_ms(t.ready_tick);
                    if now >= ready_at {
                        break;
                    }
                    let wait = (ready_at - now) as u64;
                    if wait > budget.left_ms() {
                        let last = (t.first + t.count - 1) >> lim.sequence_bits;
                        let behind = (layout.tick_start_ms(last) - now).max(0) as u64;
                        return Err(env.fail(clock_behind(
                            policy,
                            behind,
                            shared.real_wait_at(wait, now),
                            budget.waited_ms(),
                        )));
                    }
                    budget.waited_us += env.wait_ms(wait)?;
                    now = env.now_ms();
                }
                t.ahead_ms = ahead_ms(layout, &lim, &t, now);
                left -= t.count;
                sink(t);
            }
            Err(Blocked::NeedDurable { through_tick }) => {
                budget.waited_us += env.make_durable(through_tick, budget.left_ms())?;
            }
            Err(Blocked::Exhausted) => return Err(env.fail(exhausted(layout))),
            Err(Blocked::BatchLaneFull {
                retry_tick,
                next_tick,
            }) => {
                let wait = (layout.tick_start_ms(retry_tick) - now).max(1) as u64;
                if wait > budget.left_ms() {
                    let behind = (layout.tick_start_ms(next_tick) - now).max(0) as u64;
                    let wait = shared.real_wait_at(wait, now);
                    return Err(env.fail(clock_behind(policy, behind, wait, budget.waited_ms())));
                }
                budget.waited_us += env.wait_ms(wait)?;
                now = env.now_ms();
            }
            Err(Blocked::AheadOfClock {
                resume_tick,
                next_tick,
            }) => {
                let wait = (layout.tick_start_ms(resume_tick) - now).max(1) as u64;
                let behind = (layout.tick_start_ms(next_tick) - now).max(0) as u64;
                let wait = shared.real_wait_at(wait, now);
                return Err(env.fail(clock_behind(policy, behind, wait, budget.waited_ms())));
            }
        }
    }
    Ok(())
}

/// Why a batch of `want` cannot be had within `max_wait` from `now`, if
/// it cannot: checked before anything is taken, so such a batch costs
/// other callers nothing.
fn batch_too_large(
    shared: &Shared,
    layout: &Layout,
    policy: &Policy,
    now: UnixMs,
    want: u64,
) -> Option<Failure> {
    let lim = policy.limits();
    let s = lim.sequence_bits;
    let now_tick = layout.tick_at_ms(now)?;
    let first = shared.next().max(now_tick.min(lim.last_tick + 1) << s);
    let last_tick = first.saturating_add(want - 1) >> s;
    // The clock must reach this tick before the batch's last ID is in the lead.
    let ready_tick = last_tick.saturating_sub(lim.lead_ticks);
    if last_tick > lim.last_tick || ready_tick <= now_tick {
        return None;
    }
    let wait = (layout.tick_start_ms(ready_tick) - now).max(0) as u64;
    if wait <= policy.max_wait_ms {
        return None;
    }
    let reach_tick = layout
        .tick_at_ms(now.saturating_add(policy.max_wait_ms as i64))
        .unwrap_or(now_tick)
        .saturating_add(lim.lead_ticks)
        .min(lim.last_tick);
    let room = ((reach_tick + 1) << s).saturating_sub(first);
    let per_second = (1u64 << s).saturating_mul(1000) / layout.unit_ms();
    Some(
        Failure::new(
            Class::NotReady,
            format!(
                "a batch of {want} IDs would have to wait {} for the system clock, longer than snowflake_id.max_wait ({})",
                format_duration(wait),
                format_duration(policy.max_wait_ms)
            ),
        )
        .detail(format!(
            "{} issues at most {per_second} IDs per second, and IDs may run at most snowflake_id.max_lead ({}) ahead of the clock; {room} IDs can be had now within max_wait. Nothing was taken.",
            layout.title(),
            format_duration(policy.max_lead_ms)
        ))
        .hint({
            let lead = setting_value_at_least((layout.tick_start_ms(last_tick) - now).max(0) as u64 + 1000);
            let raise = format!("let IDs run further ahead: ALTER SYSTEM SET snowflake_id.max_lead = '{lead}'; SELECT pg_reload_conf();");
            if room == 0 {
                format!("IDs are already as far ahead of the clock as max_lead allows: call again once the clock has caught up, or {raise}")
            } else {
                format!("Ask for at most {room} IDs per call, or {raise}")
            }
        }),
    )
}

/// Why a call made at `now` would fail for reasons of time alone (clock
/// before the epoch, layout used up, clock too far behind), if it would.
/// For status reports: it takes nothing.
pub fn time_problem(
    shared: &Shared,
    layout: &Layout,
    policy: &Policy,
    now: UnixMs,
) -> Option<Failure> {
    let Some(now_tick) = layout.tick_at_ms(now) else {
        return Some(clock_before_epoch(layout, now));
    };
    let lim = policy.limits();
    let s = lim.sequence_bits;
    let next_tick = shared.next().max(now_tick.min(lim.last_tick + 1) << s) >> s;
    if next_tick > lim.last_tick {
        return Some(exhausted(layout));
    }
    let resume_tick = next_tick
        .checked_sub(lim.lead_ticks)
        .filter(|&t| t > now_tick)?;
    let wait = shared.real_wait_at((layout.tick_start_ms(resume_tick) - now) as u64, now);
    let behind = (layout.tick_start_ms(next_tick) - now) as u64;
    (wait > policy.max_wait_ms).then(|| clock_behind(policy, behind, wait, 0))
}

fn clock_before_epoch(layout: &Layout, now: UnixMs) -> Failure {
    Failure::new(
        Class::InvalidParameter,
        format!(
            "the system clock reads {}, before the epoch of {} ({})",
            format_instant(now),
            layout.title(),
            format_instant(layout.epoch_ms())
        ),
    )
    .hint("Set the system clock right; if the epoch is what is wrong, set snowflake_id.epoch to a past time and restart.")
}

fn exhausted(layout: &Layout) -> Failure {
    Failure::new(
        Class::LayoutExhausted,
        format!(
            "{} has run out of time: its last ID time was {}",
            layout.title(),
            format_instant(layout.end_ms() - 1)
        ),
    )
    .hint("Move this server to a layout with a later end (more time bits or a later epoch); see \"Changing the layout, epoch or worker id\" in docs/operators.md.")
}

fn clock_behind(policy: &Policy, behind_ms: u64, wait_ms: u64, waited_ms: u64) -> Failure {
    let detail = if waited_ms == 0 {
        format!(
            "Waiting for the clock would take {}, longer than snowflake_id.max_wait ({}).",
            format_duration(wait_ms),
            format_duration(policy.max_wait_ms)
        )
    } else {
        format!(
            "This call has waited {} for the clock and would have to wait {} more; snowflake_id.max_wait ({}) bounds all of one call's waits together.",
            format_duration(waited_ms),
            format_duration(wait_ms),
            format_duration(policy.max_wait_ms)
        )
    };
    Failure::new(
        Class::NotReady,
        format!(
            "the system clock is {} behind the time of the next ID, more than snowflake_id.max_lead ({}) allows",
            format_duration(behind_ms),
            format_duration(policy.max_lead_ms)
        ),
    )
    .detail(detail)
    // The value is rounded up, by less than a day, when it is written out.
    .hint(match behind_ms.saturating_add(1000) {
        lead if lead.saturating_add(86_400_000) <= MAX_LEAD_LIMIT_MS => format!(
            "IDs resume by themselves in {}, when this server's clock reaches the IDs already issued (here, or by the primary this server took over from). To issue IDs ahead of the clock now: ALTER SYSTEM SET snowflake_id.max_lead = '{}'; SELECT pg_reload_conf(); (under Patroni, in postgresql.parameters with patronictl edit-config, for every node).",
            format_duration(wait_ms),
            setting_value_at_least(lead)
        ),
        _ => format!(
            "IDs resume by themselves in {}; no snowflake_id.max_lead reaches that far.",
            format_duration(wait_ms)
        ),
    })
}

/// When and how far ahead the durable mark is moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// How many ticks ahead of the newest tick in use one write covers.
    pub window_ticks: u64,
}

impl Reservation {
    /// About one second of ticks, and never fewer than two, so one write
    /// serves many IDs and the reserver stays a tick ahead.
    pub fn for_layout(layout: &Layout) -> Reservation {
        Reservation {
            window_ticks: (1000 / layout.unit_ms()).max(2),
        }
    }

    /// The newest tick in use: the clock's, or the last issued one if IDs run ahead.
    fn base(shared: &Shared, lim: &Limits, now_tick: u64) -> u64 {
        let next = shared.next();
        let last_issued = if next == 0 {
            0
        } else {
            (next - 1) >> lim.sequence_bits
        };
        now_tick.max(last_issued)
    }

    /// The mark to write so that IDs through `through_tick` and a window
    /// beyond the newest tick in use are covered.
    pub fn target(&self, shared: &Shared, lim: &Limits, now_tick: u64, through_tick: u64) -> u64 {
        let base = Self::base(shared, lim, now_tick).max(through_tick);
        base.saturating_add(self.window_ticks).min(lim.last_tick)
    }

    /// The mark to write: [`Reservation::target`], but never below `written`,
    /// the newest mark already written (a write whose publication another
    /// process may still be waiting for must not be undone by a later,
    /// lower one).
    pub fn next_mark(
        &self,
        shared: &Shared,
        lim: &Limits,
        now_tick: u64,
        through_tick: u64,
        written: Option<u64>,
    ) -> u64 {
        let t = self.target(shared, lim, now_tick, through_tick);
        written.map_or(t, |w| t.max(w))
    }

    /// Whether the reserver should move the mark now: when IDs were
    /// issued since it last looked (`active`) and less than half a window is
    /// left ahead of the newest tick in use. An idle server writes nothing;
    /// the first caller after an idle spell writes the mark itself.
    pub fn due(&self, shared: &Shared, lim: &Limits, now_tick: u64, active: bool) -> bool {
        if !active {
            return false;
        }
        let base = Self::base(shared, lim, now_tick).min(lim.last_tick);
        shared.durable_end() <= base.saturating_add(self.window_ticks / 2)
            && shared.durable_end() <= lim.last_tick
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{CustomSpec, FieldOrder, DEFAULT_EPOCH_MS};
    use proptest::prelude::*;
    use std::collections::HashSet;
    use std::sync::Arc;

    fn lim(s: u32, lead: u64) -> Limits {
        Limits {
            sequence_bits: s,
            last_tick: (1 << 41) - 1,
            lead_ticks: lead,
            queue_cap: 1,
        }
    }

    fn durable(shared: &Shared) {
        shared.publish_durable(u64::MAX - 1);
    }

    #[test]
    fn waits_announced_while_a_lead_melts_are_the_clocks() {
        let sh = Shared::resume(None, 12);
        assert_eq!(sh.real_wait_at(700, DEFAULT_EPOCH_MS), 700);
        let now = DEFAULT_EPOCH_MS + 1_000_000;
        let term = now / 8 + 60_000;
        sh.continue_with(term);
        assert_eq!(sh.continue_term(), term);
        // From generation's time alone, the clock's wait: 8/7 while the lead
        // lasts, the same once it is gone.
        for clock in [
            now,
            now + 1_000,
            now + 400_000,
            now + 479_000,
            now + 481_000,
            now + 10_000_000,
        ] {
            let gen = crate::copies::generation_now(clock, term);
            assert_eq!(
                sh.real_wait_at(700, gen),
                crate::copies::real_wait_ms(700, clock, term),
                "clock {clock}"
            );
        }
        assert_eq!(
            sh.real_wait_at(700, crate::copies::generation_now(now, term)),
            800
        );
    }

    #[test]
    fn sequence_counts_up_within_a_tick_and_jumps_with_the_clock() {
        let sh = Shared::resume(None, 12);
        durable(&sh);
        let l = lim(12, 0);
        assert_eq!(try_take(&sh, &l, 5, 1, 0).unwrap().first, 5 << 12);
        assert_eq!(try_take(&sh, &l, 5, 1, 0).unwrap().first, (5 << 12) + 1);
        assert_eq!(try_take(&sh, &l, 9, 1, 0).unwrap().first, 9 << 12);
    }

    #[test]
    fn a_full_tick_borrows_the_next_instead_of_spinning() {
        let sh = Shared::resume(None, 2);
        durable(&sh);
        let l = lim(2, 3);
        let t = try_take(&sh, &l, 10, 4, 0).unwrap();
        assert_eq!(
            (t.first, t.count, t.borrowed_ticks, t.ahead_ms),
            (40, 4, 0, 0)
        );
        let t = try_take(&sh, &l, 10, 1, 0).unwrap();
        assert_eq!((t.first >> 2, t.borrowed_ticks), (11, 1));
        // A run that crosses ticks counts each tick it enters ahead of the clock once.
        let t = try_take(&sh, &l, 10, 8, 0).unwrap();
        assert_eq!((t.first, t.count, t.borrowed_ticks), (45, 8, 2));
        // The lead bound caps a run, then stops the next one.
        let t = try_take(&sh, &l, 10, 100, 0).unwrap();
        assert_eq!((t.first, t.count), (53, 3));
        assert_eq!(
            try_take(&sh, &l, 10, 1, 0),
            Err(Blocked::AheadOfClock {
                resume_tick: 11,
                next_tick: 14
            })
        );
        assert_eq!(try_take(&sh, &l, 11, 1, 0).unwrap().first, 56);
    }

    #[test]
    fn a_clock_stepping_back_never_repeats() {
        let sh = Shared::resume(None, 12);
        durable(&sh);
        let l = lim(12, 1_000_000);
        let a = try_take(&sh, &l, 1_000_000, 1, 0).unwrap().first;
        let b = try_take(&sh, &l, 999_000, 1, 0).unwrap().first;
        let c = try_take(&sh, &l, 0, 1, 0).unwrap().first;
        assert!(a < b && b < c, "{a} {b} {c}");
        // With no lead allowed, the same step blocks until the clock is back.
        let strict = lim(12, 0);
        assert_eq!(
            try_take(&sh, &strict, 999_000, 1, 0),
            Err(Blocked::AheadOfClock {
                resume_tick: 1_000_000,
                next_tick: 1_000_000
            })
        );
    }

    #[test]
    fn nothing_is_issued_past_the_durable_mark() {
        let sh = Shared::resume(Some(99), 12);
        let l = lim(12, 1000);
        assert_eq!(
            try_take(&sh, &l, 50, 1, 0),
            Err(Blocked::NeedDurable { through_tick: 100 })
        );
        sh.publish_durable(100);
        // A run must be covered whole.
        assert_eq!(
            try_take(&sh, &l, 50, 4097, 0),
            Err(Blocked::NeedDurable { through_tick: 101 })
        );
        let t = try_take(&sh, &l, 50, 4096, 0).unwrap();
        // Resumes above the old mark whatever the clock says, and stops at the new one.
        assert_eq!((t.first, t.count), (100 << 12, 4096));
        assert_eq!(
            try_take(&sh, &l, 50, 1, 0),
            Err(Blocked::NeedDurable { through_tick: 101 })
        );
        sh.revoke_durable();
        assert!(try_take(&sh, &l, 200, 1, 0).is_err());
    }

    #[test]
    fn the_last_tick_is_an_error_never_a_wrap() {
        let sh = Shared::resume(None, 2);
        durable(&sh);
        let l = Limits {
            sequence_bits: 2,
            last_tick: 3,
            lead_ticks: 10,
            queue_cap: 1,
        };
        assert_eq!(try_take(&sh, &l, 3, 10, 0).unwrap().count, 4);
        assert_eq!(try_take(&sh, &l, 3, 1, 0), Err(Blocked::Exhausted));
        assert_eq!(try_take(&sh, &l, 1 << 40, 1, 0), Err(Blocked::Exhausted));
    }

    #[test]
    fn threads_sharing_one_word_never_collide_and_each_sees_increase() {
        let sh = Arc::new(Shared::resume(None, 12));
        durable(&sh);
        let clock = Arc::new(AtomicU64::new(1000));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (sh, clock) = (sh.clone(), clock.clone());
                std::thread::spawn(move || {
                    let l = lim(12, 50);
                    let mut mine = Vec::with_capacity(40_000);
                    for n in 0..40_000u64 {
                        // Some threads read a clock that lags or jumps back.
                        let c = clock.fetch_add(u64::from(n % 97 == 0), Ordering::Relaxed);
                        let now = if i % 3 == 0 { c.saturating_sub(30) } else { c };
                        match try_take(&sh, &l, now, 1 + (n % 3), 0) {
                            Ok(t) => mine.extend(t.first..t.first + t.count),
                            Err(Blocked::AheadOfClock { .. }) => {
                                clock.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                    mine
                })
            })
            .collect();
        let mut all = HashSet::new();
        let mut total = 0;
        for t in threads {
            let mine = t.join().unwrap();
            assert!(
                mine.windows(2).all(|w| w[0] < w[1]),
                "a thread saw IDs go down"
            );
            total += mine.len();
            all.extend(mine);
        }
        assert_eq!(all.len(), total, "some ID was issued twice");
        assert!(total > 8 * 40_000);
    }

    /// A world made of numbers: a clock that moves as told and a durable
    /// mark that is always written.
    struct FakeEnv {
        now: UnixMs,
        steps: Vec<i64>,
        waited: u64,
        waits: u32,
        writes: u32,
        reservation: Reservation,
        lim: Limits,
        shared: Arc<Shared>,
    }

    impl Env for FakeEnv {
        type Error = Failure;
        fn now_ms(&mut self) -> UnixMs {
            if let Some(step) = self.steps.pop() {
                self.now += step;
            }
            self.now
        }
        fn wait_ms(&mut self, ms: u64) -> Result<u64, Failure> {
            self.waits += 1;
            self.waited += ms;
            self.now += ms as i64;
            Ok(ms * 1000)
        }
        fn make_durable(&mut self, through_tick: u64, _budget_ms: u64) -> Result<u64, Failure> {
            self.writes += 1;
            let now_tick = (self.now - DEFAULT_EPOCH_MS) as u64;
            let mark = self
                .reservation
                .target(&self.shared, &self.lim, now_tick, through_tick);
            assert!(mark >= through_tick);
            self.shared.publish_durable(mark);
            Ok(0)
        }
        fn fail(&mut self, f: Failure) -> Failure {
            f
        }
    }

    fn one_ms_layout(seq: u32) -> Layout {
        CustomSpec {
            unit_ms: 1,
            time_bits: 41,
            worker_bits: 10,
            sequence_bits: seq,
            order: FieldOrder::TimeWorkerSequence,
            epoch_ms: None,
        }
        .with_epoch(DEFAULT_EPOCH_MS)
        .unwrap()
    }

    /// A world at `start` and the shared state it issues from.
    fn world(layout: &Layout, policy: &Policy, start: UnixMs) -> (FakeEnv, Arc<Shared>) {
        let env = env_for(layout, policy, start);
        let shared = env.shared.clone();
        (env, shared)
    }

    fn env_for(layout: &Layout, policy: &Policy, start: UnixMs) -> FakeEnv {
        FakeEnv {
            now: start,
            steps: vec![],
            waited: 0,
            waits: 0,
            writes: 0,
            reservation: Reservation::for_layout(layout),
            lim: policy.limits(),
            shared: Arc::new(Shared::resume(None, layout.sequence_bits())),
        }
    }

    #[test]
    fn overload_is_throttled_to_the_layout_capacity() {
        let layout = one_ms_layout(4);
        let policy = Policy::new(&layout, 10, 1000).unwrap();
        let start = DEFAULT_EPOCH_MS + 5000;
        let (mut env, shared) = world(&layout, &policy, start);
        let mut got = vec![];
        let mut furthest_ahead = 0;
        generate(&shared, &layout, &policy, &mut env, 16 * 100, |t| {
            furthest_ahead = furthest_ahead.max(t.ahead_ms);
            got.extend(t.first..t.first + t.count)
        })
        .unwrap();
        assert_eq!(
            furthest_ahead, 10,
            "the lead is used up to max_lead, no further"
        );
        assert_eq!(got.len(), 1600);
        assert!(
            got.windows(2).all(|w| w[1] == w[0] + 1),
            "one caller's IDs are consecutive here"
        );
        // 100 ticks of IDs; ticks 5000..=5010 were open at once, the other 89 waited for the clock.
        assert_eq!(env.waited, 89);
        let last_tick = got.last().unwrap() >> 4;
        assert_eq!(last_tick, 5099);
        assert!(
            layout.tick_start_ms(last_tick) - env.now <= 10,
            "ran further ahead than max_lead"
        );
        assert_eq!(env.writes, 1, "one durable write covers a second of ticks");
    }

    /// A session that takes every ID the clock opens the moment it opens,
    /// waking before anyone else: the worst neighbour a caller can have.
    struct BesideAHog {
        inner: FakeEnv,
        layout: Layout,
        /// The hog is many sessions taking batches with patience: they also
        /// claim every place in line a batch may claim.
        queues_too: bool,
    }

    impl BesideAHog {
        fn hog_takes_all(&mut self) {
            let lim = self.inner.lim;
            while let Some(Ok(_)) = take_at(
                &self.inner.shared,
                &self.layout,
                &lim,
                self.inner.now,
                u64::MAX >> 1,
            ) {}
            let now_tick = self.layout.tick_at_ms(self.inner.now).unwrap();
            while self.queues_too && try_take(&self.inner.shared, &lim, now_tick, 64, 1000).is_ok()
            {
            }
        }
    }

    impl Env for BesideAHog {
        type Error = Failure;
        fn now_ms(&mut self) -> UnixMs {
            self.inner.now_ms()
        }
        fn wait_ms(&mut self, ms: u64) -> Result<u64, Failure> {
            let waited = self.inner.wait_ms(ms)?;
            self.hog_takes_all();
            Ok(waited)
        }
        fn make_durable(&mut self, through_tick: u64, budget_ms: u64) -> Result<u64, Failure> {
            self.inner.make_durable(through_tick, budget_ms)
        }
        fn fail(&mut self, f: Failure) -> Failure {
            f
        }
    }

    #[test]
    fn a_single_call_beside_a_hog_is_served_in_turn() {
        let layout = one_ms_layout(4);
        let policy = Policy::new(&layout, 10, 100).unwrap();
        let inner = env_for(&layout, &policy, DEFAULT_EPOCH_MS + 5000);
        let shared = inner.shared.clone();
        shared.publish_durable(1 << 30);
        let mut env = BesideAHog {
            inner,
            layout,
            queues_too: false,
        };
        env.hog_takes_all();
        let hogged = shared.next();
        for _ in 0..50 {
            let mut got = vec![];
            generate(&shared, &layout, &policy, &mut env, 1, |t| got.push(t))
                .expect("a single call beside a hog must be served within max_wait");
            assert_eq!(got.len(), 1);
            assert!(got[0].first >= hogged && got[0].ahead_ms <= 10);
        }
        // Each call claimed its place in line and waited one tick for it.
        assert_eq!((env.inner.waits, env.inner.waited), (50, 50));
    }

    #[test]
    fn many_sessions_of_batches_leave_room_for_single_calls() {
        let layout = one_ms_layout(8);
        let policy = Policy::new(&layout, 10, 100).unwrap();
        let (inner, shared) = world(&layout, &policy, DEFAULT_EPOCH_MS + 5000);
        shared.publish_durable(1 << 30);
        let mut env = BesideAHog {
            inner,
            layout,
            queues_too: true,
        };
        for _ in 0..50 {
            env.hog_takes_all();
            let mut got = vec![];
            generate(&shared, &layout, &policy, &mut env, 1, |t| got.push(t))
                .expect("single calls must find room beside any number of batch sessions");
            assert_eq!(got.len(), 1);
        }
        // A batch in that crowd waits for its turn, a tick at a time, and
        // gives up when max_wait is spent.
        let e = generate(&shared, &layout, &policy, &mut env, 200, |_| {}).unwrap_err();
        assert_eq!(e.class, Class::NotReady);
        assert!(env.inner.waited <= 50 * 2 + 100);
    }

    #[test]
    fn max_wait_bounds_all_the_waits_of_one_call() {
        let layout = one_ms_layout(4);
        let policy = Policy::new(&layout, 10, 100).unwrap();
        let inner = env_for(&layout, &policy, DEFAULT_EPOCH_MS + 5000);
        let shared = inner.shared.clone();
        shared.publish_durable(1 << 30);
        let mut env = BesideAHog {
            inner,
            layout,
            queues_too: false,
        };
        // 30 ticks of IDs fit within max_wait when nobody else asks, so the
        // batch starts; beside the hog it gets a sliver per tick and gives up
        // once its waits add up to max_wait.
        let e = generate(&shared, &layout, &policy, &mut env, 16 * 30, |_| {}).unwrap_err();
        assert_eq!(e.class, Class::NotReady);
        assert!(
            env.inner.waited <= 100,
            "waited {} ms in all",
            env.inner.waited
        );
        assert!(env.inner.waits > 1);
        assert!(
            e.detail
                .as_deref()
                .unwrap()
                .contains("bounds all of one call's waits together"),
            "{:?}",
            e.detail
        );
    }

    #[test]
    fn a_batch_that_cannot_be_had_within_max_wait_takes_nothing() {
        let js53 = Layout::by_name("js53").unwrap();
        let policy = Policy::new(&js53, 10_000, 1000).unwrap();
        let (mut env, shared) = world(&js53, &policy, js53.epoch_ms() + 86_400_000);
        let e = generate(&shared, &js53, &policy, &mut env, 1_000_000, |_| {}).unwrap_err();
        assert_eq!(e.class, Class::NotReady);
        assert!(
            e.message
                .starts_with("a batch of 1000000 IDs would have to wait"),
            "{}",
            e.message
        );
        assert!(
            e.detail
                .as_deref()
                .unwrap()
                .contains("65536 IDs per second"),
            "{:?}",
            e.detail
        );
        assert_eq!(
            (shared.next(), env.waits),
            (0, 0),
            "a refused batch took IDs or waited"
        );
        // What fits in the lead is one run, taken in one step.
        let mut runs = vec![];
        generate(&shared, &js53, &policy, &mut env, 600_000, |t| runs.push(t)).unwrap();
        assert_eq!((runs.len(), runs[0].count), (1, 600_000));
    }

    #[test]
    fn a_clock_far_behind_is_an_error_that_says_how_far() {
        let layout = one_ms_layout(12);
        let policy = Policy::new(&layout, 10_000, 1000).unwrap();
        let (mut env, shared) = world(&layout, &policy, DEFAULT_EPOCH_MS + 3_600_000);
        generate(&shared, &layout, &policy, &mut env, 1, |_| {}).unwrap();
        // Within the lead: absorbed, no wait.
        env.steps = vec![-5_000];
        generate(&shared, &layout, &policy, &mut env, 1, |_| {}).unwrap();
        assert_eq!(env.waits, 0);
        // Just past the lead: a short wait.
        env.steps = vec![-5_500];
        generate(&shared, &layout, &policy, &mut env, 1, |_| {}).unwrap();
        assert_eq!((env.waits, env.waited), (1, 500));
        assert_eq!(time_problem(&shared, &layout, &policy, env.now), None);
        // Far past it: an error, at once, and the status can tell before anyone calls.
        env.steps = vec![-60_000];
        let reported = time_problem(&shared, &layout, &policy, env.now - 60_000).unwrap();
        let e = generate(&shared, &layout, &policy, &mut env, 1, |_| {}).unwrap_err();
        assert_eq!(reported, e);
        assert_eq!(env.waits, 1);
        assert_eq!(e.class, Class::NotReady);
        // The clock now reads 70 s before the newest ID: 60 s more than the lead.
        assert!(
            e.message
                .starts_with("the system clock is 1 min 10 s behind"),
            "{}",
            e.message
        );
        assert!(
            e.detail
                .as_deref()
                .unwrap()
                .contains("would take 1 min 0 s"),
            "{:?}",
            e.detail
        );
        assert!(
            e.hint.as_deref().unwrap().contains("max_lead = '71s'"),
            "{:?}",
            e.hint
        );
    }

    #[test]
    fn a_forward_jump_of_weeks_has_a_lead_that_covers_it() {
        let layout = one_ms_layout(12);
        let policy = Policy::new(&layout, 10_000, 1000).unwrap();
        let (mut env, shared) = world(&layout, &policy, DEFAULT_EPOCH_MS + 86_400_000);
        // Forty days ahead, one ID, and back.
        env.steps = vec![40 * 86_400_000];
        generate(&shared, &layout, &policy, &mut env, 1, |_| {}).unwrap();
        env.steps = vec![-40 * 86_400_000];
        let e = generate(&shared, &layout, &policy, &mut env, 1, |_| {}).unwrap_err();
        let hint = e.hint.unwrap();
        assert!(hint.contains("max_lead = '41d'"), "{hint}");
        // The hint can be followed: 41 days is a lead the setting takes.
        let wider = Policy::new(&layout, 41 * 86_400_000, 1000).unwrap();
        const { assert!(41 * 86_400_000 <= MAX_LEAD_LIMIT_MS) };
        generate(&shared, &layout, &wider, &mut env, 1, |_| {}).unwrap();
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let js53 = Layout::by_name("js53").unwrap();
        let e = Policy::new(&js53, 10_000, 500).unwrap_err();
        assert_eq!(e.class, Class::InvalidParameter);
        assert!(
            e.message
                .contains("max_wait (500 ms) is shorter than one tick"),
            "{}",
            e.message
        );
        assert!(e.hint.unwrap().contains("'1000ms'"));
        assert!(Policy::new(&js53, 0, 1000).is_ok());
    }

    #[test]
    fn before_the_epoch_and_after_the_end() {
        let layout = Layout::by_name("baidu").unwrap();
        let policy = Policy::new(&layout, 10_000, 1000).unwrap();
        let (mut env, shared) = world(&layout, &policy, layout.end_ms() + 10);
        let e = generate(&shared, &layout, &policy, &mut env, 1, |_| {}).unwrap_err();
        assert_eq!(
            Some(&e),
            time_problem(&shared, &layout, &policy, env.now).as_ref()
        );
        assert_eq!(e.class, Class::LayoutExhausted);
        assert!(e.message.contains("2024-11-"), "{}", e.message);
        env.now = layout.epoch_ms() - 1;
        let e = generate(&shared, &layout, &policy, &mut env, 1, |_| {}).unwrap_err();
        assert!(e.message.contains("before the epoch"), "{}", e.message);
        assert_eq!(Some(e), time_problem(&shared, &layout, &policy, env.now));
    }

    #[test]
    fn the_background_writer_keeps_callers_off_the_disk() {
        for layout in [
            one_ms_layout(12),
            Layout::by_name("js53").unwrap(),
            Layout::by_name("sonyflake").unwrap(),
        ] {
            let policy = Policy::new(&layout, 10_000, 1000).unwrap();
            let lim = policy.limits();
            let res = Reservation::for_layout(&layout);
            let sh = Shared::resume(Some(0), layout.sequence_bits());
            let mut caller_writes = 0;
            let mut seen = sh.next();
            // A writer that looks every 100 ms; callers every ms, at the clock.
            for ms in 0..20_000u64 {
                let now_tick = (ms + 10_000) / layout.unit_ms();
                if ms % 100 == 0 {
                    let active = std::mem::replace(&mut seen, sh.next()) != sh.next();
                    if res.due(&sh, &lim, now_tick, active) {
                        sh.publish_durable(res.target(&sh, &lim, now_tick, 0));
                    }
                }
                if let Err(Blocked::NeedDurable { through_tick }) =
                    try_take(&sh, &lim, now_tick, 1, 0)
                {
                    caller_writes += 1;
                    sh.publish_durable(res.target(&sh, &lim, now_tick, through_tick));
                }
            }
            assert!(
                caller_writes <= 1,
                "{}: callers wrote {caller_writes} times",
                layout.describe()
            );
        }
    }

    #[test]
    fn an_idle_server_writes_no_mark_and_the_first_caller_after_writes_one() {
        let layout = one_ms_layout(12);
        let lim = Policy::new(&layout, 10_000, 1000).unwrap().limits();
        let res = Reservation::for_layout(&layout);
        let sh = Shared::resume(Some(0), 12);
        sh.publish_durable(2000);
        assert!(try_take(&sh, &lim, 1000, 1, 0).is_ok());
        let mut seen = sh.next();
        let mut writes = 0;
        // Ten idle seconds, looked at every 100 ms.
        for ms in (1000..11_000u64).step_by(100) {
            let active = std::mem::replace(&mut seen, sh.next()) != sh.next();
            if res.due(&sh, &lim, ms, active) {
                writes += 1;
            }
        }
        assert_eq!(writes, 0, "an idle server moved its mark");
        assert_eq!(
            try_take(&sh, &lim, 11_000, 1, 0),
            Err(Blocked::NeedDurable {
                through_tick: 11_000
            })
        );
        assert!(res.due(&sh, &lim, 11_000, true));
    }

    #[test]
    fn a_later_write_never_lowers_the_mark() {
        let layout = Layout::by_name("js53").unwrap();
        let lim = Policy::new(&layout, 10_000, 1000).unwrap().limits();
        let res = Reservation::for_layout(&layout);
        let sh = Shared::resume(Some(100), layout.sequence_bits());
        // A caller ran ten ticks ahead and wrote a mark it has not published yet.
        let written = res.next_mark(&sh, &lim, 100, 110, None);
        assert_eq!(written, 112);
        // The writer looks with the clock at 101 and the old published bound.
        assert_eq!(
            res.target(&sh, &lim, 101, 0),
            103,
            "the bare target would go back"
        );
        assert_eq!(res.next_mark(&sh, &lim, 101, 0, Some(written)), 112);
    }

    #[test]
    fn a_raised_floor_moves_ids_up_but_issues_nothing_by_itself() {
        let sh = Shared::resume(Some(100), 12);
        sh.publish_durable(1000);
        let l = lim(12, 1_000_000);
        sh.raise_floor(500, 12);
        assert_eq!(try_take(&sh, &l, 50, 1, 0).unwrap().first, 501 << 12);
        // Lower floors change nothing.
        sh.raise_floor(10, 12);
        assert_eq!(try_take(&sh, &l, 50, 1, 0).unwrap().first, (501 << 12) + 1);
        // Above the durable mark, a new mark is still needed.
        sh.raise_floor(5000, 12);
        assert_eq!(
            try_take(&sh, &l, 50, 1, 0),
            Err(Blocked::NeedDurable { through_tick: 5001 })
        );
    }

    proptest! {
        /// Any clock, stepping any way, any request sizes: one caller's IDs
        /// strictly increase, stay under the durable mark, and never run
        /// further ahead of the clock than the lead.
        #[test]
        fn any_clock_any_load(
            steps in prop::collection::vec(-5_000i64..5_000, 1..200),
            wants in prop::collection::vec(1u64..3000, 1..200),
            lead in 0u64..2000,
        ) {
            let layout = one_ms_layout(6);
            let policy = Policy::new(&layout, lead, 1_000_000).unwrap();
            let (mut env, shared) = world(&layout, &policy, DEFAULT_EPOCH_MS + 1_000_000);
            let mut last: Option<u64> = None;
            for (i, want) in wants.iter().enumerate() {
                env.steps = vec![steps[i % steps.len()]];
                let mut runs = vec![];
                generate(&shared, &layout, &policy, &mut env, *want, |t| runs.push(t)).unwrap();
                prop_assert_eq!(runs.iter().map(|t| t.count).sum::<u64>(), *want);
                for t in runs {
                    prop_assert!(t.ahead_ms <= lead as i64);
                    prop_assert!(last.is_none_or(|l| t.first > l));
                    let end = t.first + t.count - 1;
                    last = Some(end);
                    prop_assert!(end >> 6 < shared.durable_end());
                }
                let ahead = layout.tick_start_ms(last.unwrap() >> 6) - env.now;
                prop_assert!(ahead <= lead as i64, "ran {} ms ahead with lead {}", ahead, lead);
            }
        }
    }
}
