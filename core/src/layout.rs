//! Bit layouts: how time, worker and sequence are packed into one integer.
//!
//! A layout is pure arithmetic over `u64`. Everything that can go out of range
//! is checked here and answered with a [`Failure`] that names the range, so a
//! decode never returns a wrong answer and a bound never wraps.

use crate::failure::{Class, Failure};
use crate::timefmt::{format_duration, format_instant, parse_instant, UnixMs};

/// Which field sits right below the time field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOrder {
    /// `time | worker | sequence`: Twitter and most others.
    TimeWorkerSequence,
    /// `time | sequence | worker`: Sonyflake.
    TimeSequenceWorker,
}

impl FieldOrder {
    fn spec_name(self) -> &'static str {
        match self {
            FieldOrder::TimeWorkerSequence => "time-worker-sequence",
            FieldOrder::TimeSequenceWorker => "time-sequence-worker",
        }
    }
}

/// A complete layout: epoch, tick length and field widths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    name: Option<&'static str>,
    epoch_ms: UnixMs,
    unit_ms: u64,
    time_bits: u32,
    worker_bits: u32,
    sequence_bits: u32,
    order: FieldOrder,
}

/// The three fields of an ID, as integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    pub tick: u64,
    pub worker: u64,
    pub sequence: u64,
}

/// An ID taken apart, with its tick turned into an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    pub unix_ms: UnixMs,
    pub worker: i32,
    pub sequence: i32,
}

/// The name this extension's own layout goes by.
pub const DEFAULT_NAME: &str = "snowflake_id";
/// 2025-01-01 00:00:00 UTC.
pub const DEFAULT_EPOCH_MS: UnixMs = 1_735_689_600_000;

/// How long before a layout runs out generation starts to warn: a year is
/// time enough to plan and roll out a move to another layout.
pub const END_WARNING_MS: i64 = 365 * 86_400_000;

const fn named(
    name: &'static str,
    epoch_ms: UnixMs,
    unit_ms: u64,
    bits: (u32, u32, u32),
    order: FieldOrder,
) -> Layout {
    Layout {
        name: Some(name),
        epoch_ms,
        unit_ms,
        time_bits: bits.0,
        worker_bits: bits.1,
        sequence_bits: bits.2,
        order,
    }
}

use FieldOrder::{TimeSequenceWorker as TSW, TimeWorkerSequence as TWS};

/// Every named layout, in the order the docs list them.
pub const NAMED: [Layout; 8] = [
    named(DEFAULT_NAME, DEFAULT_EPOCH_MS, 1, (41, 10, 12), TWS),
    named("twitter", 1_288_834_974_657, 1, (41, 10, 12), TWS),
    named("discord", 1_420_070_400_000, 1, (41, 10, 12), TWS),
    // Instagram uses all 64 bits: its IDs turn negative as a bigint in 2046.
    named("instagram", 1_314_220_021_721, 1, (41, 13, 10), TWS),
    // pgEdge's snowflake 2.x (since 2023-10-31): time | node | counter, as
    // Twitter, with its own epoch; its 1.x put the counter above the node.
    named("pgedge", 1_672_531_200_000, 1, (41, 10, 12), TWS),
    named("sonyflake", 1_409_529_600_000, 10, (39, 16, 8), TSW),
    named("baidu", 1_463_702_400_000, 1000, (28, 22, 13), TWS),
    named("js53", 1_546_300_800_000, 1000, (32, 5, 16), TWS),
];

/// `'snowflake_id', 'twitter', ...` for messages.
pub fn known_names() -> String {
    NAMED
        .iter()
        .map(|l| format!("'{}'", l.name.unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How a custom layout is written, for messages.
pub const CUSTOM_FORM: &str =
    "'time=41,worker=10,sequence=12,unit=1ms' (optional: total=N, order=time-sequence-worker, epoch=...)";

/// The latest instant a `timestamptz` can hold: just before 294277-01-01
/// (Postgres' END_TIMESTAMP, in microseconds since 2000-01-01).
const PG_MAX_UNIX_MS: i128 = 9_223_371_331_200_000_000 / 1000 - 1 + 946_684_800_000;
/// The earliest instant a `timestamptz` can hold: 4714-11-24 00:00:00 BC
/// (Postgres' MIN_TIMESTAMP, in microseconds since 2000-01-01).
const PG_MIN_UNIX_MS: i128 = -211_813_488_000_000_000 / 1000 + 946_684_800_000;
const PG_MIN_TEXT: &str = "4714-11-24 00:00:00+00 BC";

/// A custom layout as written, before an epoch is settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomSpec {
    pub unit_ms: u64,
    pub time_bits: u32,
    pub worker_bits: u32,
    pub sequence_bits: u32,
    pub order: FieldOrder,
    pub epoch_ms: Option<UnixMs>,
}

/// What a layout text names: a named layout, or a custom one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    Named(Layout),
    Custom(CustomSpec),
}

fn invalid(msg: String) -> Failure {
    Failure::new(Class::InvalidParameter, msg)
}

fn parse_unit(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, scale) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1000)
    } else {
        return None;
    };
    let n: u64 = num.trim().parse().ok()?;
    let ms = n.checked_mul(scale)?;
    (1..=86_400_000).contains(&ms).then_some(ms)
}

fn format_unit(ms: u64) -> String {
    if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

impl Spec {
    /// Reads a layout name (any case) or a custom `key=value,...` spec.
    pub fn parse(text: &str) -> Result<Spec, Failure> {
        let t = text.trim();
        if let Some(l) = NAMED
            .iter()
            .find(|l| l.name.is_some_and(|n| n.eq_ignore_ascii_case(t)))
        {
            return Ok(Spec::Named(*l));
        }
        if !t.contains('=') {
            return Err(invalid(format!("unknown layout '{t}'")).hint(format!(
                "Use one of the named layouts {}, or a custom layout such as {CUSTOM_FORM}.",
                known_names()
            )));
        }
        let bad = |why: String| {
            invalid(format!("invalid custom layout '{t}': {why}"))
                .hint(format!("A custom layout is written as {CUSTOM_FORM}."))
        };
        let (mut unit, mut time, mut worker, mut seq, mut total, mut order, mut epoch) =
            (None, None, None, None, None, None, None);
        for item in t.split(',') {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| bad(format!("'{}' is not key=value", item.trim())))?;
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
            let bits = |v: &str| {
                v.parse::<u32>()
                    .map_err(|_| bad(format!("{k}={v} is not a whole number of bits")))
            };
            let slot_taken = match k.as_str() {
                "unit" => unit.replace(parse_unit(v).ok_or_else(|| {
                    bad(format!("unit={v} is not a tick length between 1ms and 86400s (write e.g. 1ms, 10ms, 1s)"))
                })?),
                "time" => time.replace(bits(v)?).map(u64::from),
                "worker" => worker.replace(bits(v)?).map(u64::from),
                "sequence" => seq.replace(bits(v)?).map(u64::from),
                "total" => total.replace(bits(v)?).map(u64::from),
                "order" => {
                    let o = match v.to_ascii_lowercase().as_str() {
                        "time-worker-sequence" => TWS,
                        "time-sequence-worker" => TSW,
                        _ => return Err(bad(format!("order={v} is not time-worker-sequence or time-sequence-worker"))),
                    };
                    order.replace(o).map(|_| 0)
                }
                "epoch" => {
                    let e = parse_instant(v).map_err(|why| bad(format!("epoch: {why}")))?;
                    epoch.replace(e).map(|_| 0)
                }
                _ => return Err(bad(format!("unknown field '{k}'"))),
            };
            if slot_taken.is_some() {
                return Err(bad(format!("{k} is given twice")));
            }
        }
        let unit = unit.ok_or_else(|| bad("unit is missing".into()))?;
        let worker = worker.ok_or_else(|| bad("worker is missing".into()))?;
        let seq = seq.ok_or_else(|| bad("sequence is missing".into()))?;
        let time = match (time, total) {
            (Some(t), Some(n)) if t + worker + seq != n => {
                return Err(bad(format!(
                    "time+worker+sequence = {} but total={n}",
                    t + worker + seq
                )))
            }
            (Some(t), _) => t,
            (None, Some(n)) if n > worker + seq => n - worker - seq,
            (None, Some(n)) => return Err(bad(format!("total={n} leaves no bits for time"))),
            (None, None) => return Err(bad("time (or total) is missing".into())),
        };
        if time == 0 || time > 63 {
            return Err(bad(format!("time={time} must be between 1 and 63 bits")));
        }
        if worker > 31 || seq > 31 {
            return Err(bad(
                "worker and sequence must each be at most 31 bits".into()
            ));
        }
        if time + worker + seq > 63 {
            return Err(bad(format!(
                "the fields take {} bits, but an ID must fit in a non-negative bigint (63 bits)",
                time + worker + seq
            )));
        }
        Ok(Spec::Custom(CustomSpec {
            unit_ms: unit,
            time_bits: time,
            worker_bits: worker,
            sequence_bits: seq,
            order: order.unwrap_or(TWS),
            epoch_ms: epoch,
        }))
    }
}

impl CustomSpec {
    /// The layout this spec describes once its epoch is known.
    pub fn with_epoch(&self, epoch_ms: UnixMs) -> Result<Layout, Failure> {
        let l = Layout {
            name: None,
            epoch_ms,
            unit_ms: self.unit_ms,
            time_bits: self.time_bits,
            worker_bits: self.worker_bits,
            sequence_bits: self.sequence_bits,
            order: self.order,
        };
        l.check_time_range()?;
        Ok(l)
    }
}

impl Layout {
    /// Looks up a named layout (any case).
    pub fn by_name(name: &str) -> Option<Layout> {
        NAMED
            .iter()
            .find(|l| l.name.is_some_and(|n| n.eq_ignore_ascii_case(name.trim())))
            .cloned()
    }

    /// Reads a layout argument as `snowflake_decode(id, layout)` takes it: a
    /// name, or a custom spec that carries its own epoch.
    pub fn from_argument(text: &str) -> Result<Layout, Failure> {
        match Spec::parse(text)? {
            Spec::Named(l) => Ok(l),
            Spec::Custom(c) => {
                let epoch = c.epoch_ms.ok_or_else(|| {
                    invalid(format!("the custom layout '{}' has no epoch", text.trim()))
                        .hint("Add epoch=<timestamp with offset> to it, e.g. 'time=41,worker=10,sequence=12,unit=1ms,epoch=2025-01-01 00:00:00+00'.")
                })?;
                c.with_epoch(epoch)
            }
        }
    }

    pub fn name(&self) -> Option<&'static str> {
        self.name
    }
    pub fn epoch_ms(&self) -> UnixMs {
        self.epoch_ms
    }
    pub fn unit_ms(&self) -> u64 {
        self.unit_ms
    }
    pub fn time_bits(&self) -> u32 {
        self.time_bits
    }
    pub fn worker_bits(&self) -> u32 {
        self.worker_bits
    }
    pub fn sequence_bits(&self) -> u32 {
        self.sequence_bits
    }
    pub fn order(&self) -> FieldOrder {
        self.order
    }

    /// Bits below the time field.
    pub fn low_bits(&self) -> u32 {
        self.worker_bits + self.sequence_bits
    }

    pub fn total_bits(&self) -> u32 {
        self.time_bits + self.low_bits()
    }

    pub fn max_worker(&self) -> u64 {
        (1u64 << self.worker_bits) - 1
    }

    pub fn max_sequence(&self) -> u64 {
        (1u64 << self.sequence_bits) - 1
    }

    /// IDs one worker can make in one tick.
    pub fn ids_per_tick(&self) -> u64 {
        1u64 << self.sequence_bits
    }

    /// The last tick whose IDs are non-negative bigints. Below the time
    /// field's own limit only for 64-bit layouts such as Instagram's.
    pub fn last_tick(&self) -> u64 {
        let by_width = (1u64 << self.time_bits) - 1;
        by_width.min((i64::MAX as u64) >> self.low_bits())
    }

    /// Refuses a layout whose times a `timestamptz` cannot all hold: its
    /// IDs could neither be decoded nor bounded, and a clock check against
    /// an epoch past the range would be false.
    pub fn check_time_range(&self) -> Result<(), Failure> {
        let span = self.end_ms_i128() - i128::from(self.epoch_ms);
        let latest_epoch = PG_MAX_UNIX_MS + 1 - span;
        let allowed = if latest_epoch < PG_MIN_UNIX_MS {
            "no epoch fits: use fewer time bits or a shorter unit".to_string()
        } else {
            format!(
                "its epoch must lie from {PG_MIN_TEXT} to {} (Unix ms {PG_MIN_UNIX_MS} to {latest_epoch})",
                format_instant(latest_epoch as i64)
            )
        };
        let why = if i128::from(self.epoch_ms) < PG_MIN_UNIX_MS {
            format!(
                "the epoch {} ms is before the earliest time a timestamptz can hold ({PG_MIN_TEXT})",
                self.epoch_ms
            )
        } else if self.end_ms_i128() - 1 > PG_MAX_UNIX_MS {
            format!(
                "{} runs past the latest time a timestamptz can hold (294276-12-31 23:59:59.999+00)",
                self.title()
            )
        } else {
            return Ok(());
        };
        Err(invalid(why).hint(format!("For {}, {allowed}.", self.title())))
    }

    /// The same layout under another epoch, keeping the name only if the
    /// epoch is the name's own.
    pub fn with_epoch(&self, epoch_ms: UnixMs) -> Layout {
        let mut l = *self;
        if epoch_ms != self.epoch_ms {
            l.name = None;
        }
        l.epoch_ms = epoch_ms;
        l
    }

    /// The name, or the canonical custom spec, for status and messages.
    pub fn describe(&self) -> String {
        match self.name {
            Some(n) => n.to_string(),
            None => self.spec(),
        }
    }

    /// "the twitter layout", or "the layout 'time=..'" for a custom one.
    pub fn title(&self) -> String {
        match self.name {
            Some(n) => format!("the {n} layout"),
            None => format!("the layout '{}'", self.spec()),
        }
    }

    /// The canonical custom spec (without the epoch).
    pub fn spec(&self) -> String {
        let mut s = format!(
            "time={},worker={},sequence={},unit={}",
            self.time_bits,
            self.worker_bits,
            self.sequence_bits,
            format_unit(self.unit_ms)
        );
        if self.order != TWS {
            s.push_str(",order=");
            s.push_str(self.order.spec_name());
        }
        s
    }

    /// Same epoch, tick and widths: IDs from one decode the same under the other.
    pub fn same_shape(&self, other: &Layout) -> bool {
        (
            self.epoch_ms,
            self.unit_ms,
            self.time_bits,
            self.worker_bits,
            self.sequence_bits,
            self.order,
        ) == (
            other.epoch_ms,
            other.unit_ms,
            other.time_bits,
            other.worker_bits,
            other.sequence_bits,
            other.order,
        )
    }

    pub fn compose(&self, p: Parts) -> u64 {
        let (w, s) = (self.worker_bits, self.sequence_bits);
        match self.order {
            TWS => (p.tick << (w + s)) | (p.worker << s) | p.sequence,
            TSW => (p.tick << (w + s)) | (p.sequence << w) | p.worker,
        }
    }

    pub fn decompose(&self, id: u64) -> Parts {
        let (w, s) = (self.worker_bits, self.sequence_bits);
        let tick = if w + s == 64 { 0 } else { id >> (w + s) };
        match self.order {
            TWS => Parts {
                tick,
                worker: (id >> s) & self.max_worker(),
                sequence: id & self.max_sequence(),
            },
            TSW => Parts {
                tick,
                sequence: (id >> w) & self.max_sequence(),
                worker: id & self.max_worker(),
            },
        }
    }

    /// The ID for a generator counter (`tick << sequence_bits | sequence`).
    #[inline]
    pub fn id_from_counter(&self, counter: u64, worker: u64) -> u64 {
        let s = self.sequence_bits;
        match self.order {
            TWS => {
                ((counter >> s) << (self.worker_bits + s))
                    | (worker << s)
                    | (counter & self.max_sequence())
            }
            TSW => (counter << self.worker_bits) | worker,
        }
    }

    /// The instant a tick begins.
    pub fn tick_start_ms(&self, tick: u64) -> UnixMs {
        self.epoch_ms + (tick as i64) * (self.unit_ms as i64)
    }

    /// The instant just past the layout's last tick (by its time width).
    fn end_ms_i128(&self) -> i128 {
        i128::from(self.epoch_ms) + (1i128 << self.time_bits) * i128::from(self.unit_ms)
    }

    /// The instant just past the last tick an ID can carry as a non-negative bigint.
    pub fn end_ms(&self) -> UnixMs {
        let end = i128::from(self.epoch_ms)
            + (i128::from(self.last_tick()) + 1) * i128::from(self.unit_ms);
        end.min(i128::from(i64::MAX)) as i64
    }

    /// From this instant on, generation warns that the layout is running out
    /// ([`END_WARNING_MS`] before its end).
    pub fn warn_from_ms(&self) -> UnixMs {
        self.end_ms().saturating_sub(END_WARNING_MS)
    }

    /// The warning due at `now`: between [`Layout::warn_from_ms`] and the
    /// end. At and after the end, generation fails instead.
    pub fn end_warning(&self, now: UnixMs) -> Option<Failure> {
        let end = self.end_ms();
        (now >= self.warn_from_ms() && now < end).then(|| {
            Failure::new(
                Class::Warning,
                format!(
                    "{} runs out of time in {}, at {}",
                    self.title(),
                    format_duration((end - now) as u64),
                    format_instant(end)
                ),
            )
            .detail(
                "From then on snowflake_nextval() raises an error; it never wraps around to reissue small IDs. \
                 This warning starts one year before the end.",
            )
            .hint("Move this server to a layout with a later end (more time bits or a later epoch); see \"Changing the layout, epoch or worker id\" in docs/operators.md.")
        })
    }

    /// The tick a wall-clock reading falls in; `None` before the epoch.
    #[inline]
    pub fn tick_at_ms(&self, unix_ms: UnixMs) -> Option<u64> {
        let since = unix_ms.checked_sub(self.epoch_ms)?;
        // Most layouts tick in milliseconds: skip the division, the costliest
        // instruction on the path of every ID.
        (since >= 0).then(|| match self.unit_ms {
            1 => since as u64,
            unit => since as u64 / unit,
        })
    }

    fn id_range_text(&self) -> String {
        match self.total_bits() {
            64 => "any bigint".to_string(),
            n => format!("0 to {} (2^{n} - 1)", (1u128 << n) - 1),
        }
    }

    /// Takes an ID apart. For a 64-bit layout a negative bigint is read as
    /// the unsigned number it stands for; otherwise IDs outside
    /// `0 .. 2^total_bits` are an error, never a misread.
    pub fn decode(&self, id: i64) -> Result<Decoded, Failure> {
        let p = self.parts_of(id)?;
        Ok(Decoded {
            unix_ms: self.tick_start_ms(p.tick),
            worker: p.worker as i32,
            sequence: p.sequence as i32,
        })
    }

    /// The tick of an ID, checked as [`Layout::decode`] checks it.
    pub fn decode_tick(&self, id: i64) -> Result<u64, Failure> {
        Ok(self.parts_of(id)?.tick)
    }

    fn parts_of(&self, id: i64) -> Result<Parts, Failure> {
        let total = self.total_bits();
        if total < 64 && (id < 0 || (id as u64) >> total != 0) {
            return Err(Failure::new(
                Class::IdOutOfRange,
                format!("{id} is not an ID of {}: its IDs run from {}", self.title(), self.id_range_text()),
            )
            .hint("Check that the ID and the layout belong together; snowflake_decode(id, layout) reads IDs of another layout."));
        }
        Ok(self.decompose(id as u64))
    }

    /// The smallest ID any worker can issue in the tick containing the
    /// instant `unix_us` (microseconds since 1970).
    pub fn lower_bound(&self, unix_us: i128) -> Result<i64, Failure> {
        let epoch_us = i128::from(self.epoch_ms) * 1000;
        let unit_us = i128::from(self.unit_ms) * 1000;
        let since = unix_us.saturating_sub(epoch_us);
        let first = format_instant(self.epoch_ms);
        let last = format_instant(self.end_ms() - 1);
        let range = |bound: &str, side: &str| {
            Failure::new(
                Class::TimeOutOfRange,
                format!(
                    "{} is outside the time range of {}, which runs from {first} to {last}",
                    describe_us(unix_us),
                    self.title()
                ),
            )
            .hint(format!(
                "Give a time {side} {bound}, or clamp it to that first (with {}).",
                if side == "at or after" {
                    "greatest"
                } else {
                    "least"
                }
            ))
        };
        if since < 0 {
            return Err(range(&first, "at or after"));
        }
        let tick = since / unit_us;
        if tick > i128::from(self.last_tick()) {
            return Err(range(&last, "at or before"));
        }
        Ok(self.compose(Parts {
            tick: tick as u64,
            worker: 0,
            sequence: 0,
        }) as i64)
    }
}

/// The `infinity` of a `timestamptz`, as [`Layout::lower_bound`] takes it;
/// no finite time comes near (a timestamptz's µs since 1970 fit in an i64
/// plus a little).
pub const INFINITY_US: i128 = i128::MAX;
/// The `-infinity` of a `timestamptz`.
pub const NEG_INFINITY_US: i128 = i128::MIN;

fn describe_us(unix_us: i128) -> String {
    match unix_us {
        INFINITY_US => "infinity".to_string(),
        NEG_INFINITY_US => "-infinity".to_string(),
        us => format_instant(us.div_euclid(1000) as i64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn layout(name: &str) -> Layout {
        Layout::by_name(name).unwrap()
    }

    #[test]
    fn named_layouts_fit_their_widths() {
        for l in NAMED.iter() {
            let total = l.total_bits();
            assert!(
                total == 63 || total == 53 || total == 64,
                "{} is {total} bits",
                l.describe()
            );
        }
        assert_eq!(layout("js53").total_bits(), 53);
        assert_eq!(layout("instagram").total_bits(), 64);
        assert_eq!(layout("SonyFlake").name(), Some("sonyflake"));
    }

    #[test]
    fn known_ids_from_other_systems() {
        // A real tweet ID, as tools like TweetedAt read it.
        let d = layout("twitter").decode(1_212_092_628_029_698_048).unwrap();
        assert_eq!(format_instant(d.unix_ms), "2019-12-31 19:26:16.771+00");
        // Discord's documented example 175928847299117063: 2016-04-30 11:18:25.796 UTC, worker 1, process 0, increment 7.
        let d = layout("discord").decode(175_928_847_299_117_063).unwrap();
        assert_eq!(format_instant(d.unix_ms), "2016-04-30 11:18:25.796+00");
        assert_eq!((d.worker >> 5, d.worker & 31, d.sequence), (1, 0, 7));
        // Instagram's article example: 41 bits of ms, shard 1341, sequence 1.
        let id = layout("instagram").compose(Parts {
            tick: 1_387_263_000,
            worker: 1341,
            sequence: 1,
        });
        let d = layout("instagram").decode(id as i64).unwrap();
        assert_eq!(
            (d.unix_ms - 1_314_220_021_721, d.worker, d.sequence),
            (1_387_263_000, 1341, 1)
        );
    }

    #[test]
    fn sonyflake_puts_sequence_above_machine() {
        let l = layout("sonyflake");
        let id = l.compose(Parts {
            tick: 5,
            worker: 0xABCD,
            sequence: 0x12,
        });
        assert_eq!(id, (5 << 24) | (0x12 << 16) | 0xABCD);
        let d = l.decode(id as i64).unwrap();
        assert_eq!(
            (d.unix_ms - l.epoch_ms(), d.worker, d.sequence),
            (50, 0xABCD, 0x12)
        );
    }

    #[test]
    fn pgedge_ids_decode_as_pgedge_packs_them() {
        // From pgEdge/snowflake's snowflake.c (commit ebbdae8, the layout of
        // 2.x since d30fbc3, 2023-10-31): SNOWFLAKE_EPOCH_OFFSET 1672531200 s,
        // sf_msec << 22 (41 bits) | sf_node << 12 (10 bits) | sf_count (12
        // bits). Node 5, count 20, at the epoch, a second later, and at
        // 2026-01-01 00:00:00 UTC (94694400000 ms after it):
        let p = layout("pgedge");
        for (id, ms) in [
            (20_500_i64, 0),
            (4_194_324_500, 1000),
            (397_177_100_697_620_500, 94_694_400_000),
        ] {
            let d = p.decode(id).unwrap();
            assert_eq!(
                (d.unix_ms - 1_672_531_200_000, d.worker, d.sequence),
                (ms, 5, 20)
            );
            let back = p.compose(Parts {
                tick: ms as u64,
                worker: 5,
                sequence: 20,
            });
            assert_eq!(back as i64, id);
        }
        assert_eq!(
            format_instant(p.decode(397_177_100_697_620_500).unwrap().unix_ms),
            "2026-01-01 00:00:00+00"
        );
    }

    #[test]
    fn decode_refuses_what_the_layout_cannot_hold() {
        let e = layout("snowflake_id").decode(-1).unwrap_err();
        assert_eq!(e.class, Class::IdOutOfRange);
        assert!(
            e.message.contains("0 to 9223372036854775807"),
            "{}",
            e.message
        );
        let e = layout("js53").decode(1 << 53).unwrap_err();
        assert!(e.message.contains("2^53 - 1"), "{}", e.message);
        assert!(layout("js53").decode((1 << 53) - 1).is_ok());
        // Instagram's 64-bit IDs: a negative bigint is an ID from after 2046.
        let d = layout("instagram").decode(-1).unwrap();
        assert_eq!((d.worker, d.sequence), (8191, 1023));
    }

    #[test]
    fn lower_bound_is_exact_at_tick_edges() {
        let l = layout("snowflake_id");
        let at = |ms: i64| l.lower_bound(i128::from(ms) * 1000).unwrap();
        assert_eq!(at(DEFAULT_EPOCH_MS), 0);
        assert_eq!(at(DEFAULT_EPOCH_MS + 1), 1 << 22);
        assert_eq!(
            l.lower_bound(i128::from(DEFAULT_EPOCH_MS + 1) * 1000 + 999)
                .unwrap(),
            1 << 22
        );
        let e = l
            .lower_bound(i128::from(DEFAULT_EPOCH_MS) * 1000 - 1)
            .unwrap_err();
        assert_eq!(e.class, Class::TimeOutOfRange);
        assert!(
            e.message.contains("2024-12-31 23:59:59.999+00"),
            "{}",
            e.message
        );
        assert!(
            e.message
                .contains("runs from 2025-01-01 00:00:00+00 to 2094-09-07 15:47:35.551+00"),
            "{}",
            e.message
        );
        assert!(l
            .lower_bound(INFINITY_US)
            .unwrap_err()
            .message
            .starts_with("infinity"));
        let last = l.end_ms() - 1;
        assert_eq!(at(last), (l.last_tick() << 22) as i64);
        assert!(l.lower_bound(i128::from(last + 1) * 1000).is_err());
        // Instagram's bounds stop where its IDs would turn negative.
        let ig = layout("instagram");
        assert!(ig.lower_bound(i128::from(ig.end_ms() - 1) * 1000).unwrap() > 0);
        assert!(ig.lower_bound(i128::from(ig.end_ms()) * 1000).is_err());
    }

    #[test]
    fn epochs_a_timestamptz_cannot_hold_are_refused() {
        let spec = |epoch: &str| {
            Layout::from_argument(&format!(
                "time=41,worker=10,sequence=12,unit=1ms,epoch={epoch}"
            ))
        };
        for epoch in ["-9223372036854775808", "-210866803200001"] {
            let e = spec(epoch).unwrap_err();
            assert_eq!(e.class, Class::InvalidParameter);
            assert!(
                e.message
                    .contains("before the earliest time a timestamptz can hold"),
                "{}",
                e.message
            );
            assert!(e
                .hint
                .unwrap()
                .contains("from 4714-11-24 00:00:00+00 BC to "));
        }
        // Postgres' MIN_TIMESTAMP itself is fine.
        assert_eq!(
            spec("-210866803200000").unwrap().epoch_ms(),
            -210_866_803_200_000
        );
        // The latest epoch leaves the whole range inside END_TIMESTAMP.
        let span = (1i64 << 41) as i128;
        let latest = (PG_MAX_UNIX_MS + 1 - span) as i64;
        assert!(spec(&latest.to_string()).is_ok());
        let e = spec(&(latest + 1).to_string()).unwrap_err();
        assert!(
            e.message.contains("runs past the latest time"),
            "{}",
            e.message
        );
        assert!(e
            .hint
            .unwrap()
            .contains(&format!("Unix ms -210866803200000 to {latest}")));
        let e = Layout::from_argument("time=63,worker=0,sequence=0,unit=1s,epoch=0").unwrap_err();
        assert!(e.hint.unwrap().contains("no epoch fits"));
    }

    #[test]
    fn custom_specs() {
        let Spec::Custom(c) = Spec::parse(" total=53, worker=2 ,sequence=10,unit=1ms").unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (c.time_bits, c.unit_ms, c.order, c.epoch_ms),
            (41, 1, TWS, None)
        );
        let l = c.with_epoch(DEFAULT_EPOCH_MS).unwrap();
        assert_eq!(l.spec(), "time=41,worker=2,sequence=10,unit=1ms");
        assert_eq!(Spec::parse(&l.spec()).unwrap(), Spec::Custom(c));
        let Spec::Custom(c) =
            Spec::parse("time=39,worker=16,sequence=8,unit=10ms,order=time-sequence-worker")
                .unwrap()
        else {
            panic!()
        };
        assert!(c
            .with_epoch(1_409_529_600_000)
            .unwrap()
            .same_shape(&layout("sonyflake")));
        let l = Layout::from_argument(
            "time=32,worker=5,sequence=16,unit=1s,epoch=2019-01-01 00:00:00+00",
        )
        .unwrap();
        assert!(l.same_shape(&layout("js53")));
        assert_eq!(l.describe(), "time=32,worker=5,sequence=16,unit=1s");
    }

    #[test]
    fn custom_spec_errors_say_what_is_wrong() {
        let msg = |t: &str| Spec::parse(t).unwrap_err().message;
        assert!(msg("nope").contains("unknown layout 'nope'"));
        assert!(Spec::parse("nope")
            .unwrap_err()
            .hint
            .unwrap()
            .contains("'twitter'"));
        assert!(msg("time=41,worker=10,sequence=13,unit=1ms").contains("64 bits"));
        assert!(msg("time=41,worker=10,sequence=12").contains("unit is missing"));
        assert!(msg("time=41,worker=10,sequence=12,unit=1h").contains("unit=1h"));
        assert!(msg("time=41,worker=10,sequence=12,unit=1ms,total=60").contains("total=60"));
        assert!(msg("time=41,worker=10,sequence=12,unit=1ms,colour=red")
            .contains("unknown field 'colour'"));
        assert!(msg("time=41,time=40,worker=10,sequence=12,unit=1ms").contains("twice"));
        assert!(msg("time=0,worker=10,sequence=12,unit=1ms").contains("between 1 and 63"));
        assert!(msg("time=20,worker=32,sequence=1,unit=1ms").contains("at most 31"));
        assert!(
            Layout::from_argument("time=41,worker=10,sequence=12,unit=1ms")
                .unwrap_err()
                .message
                .contains("no epoch")
        );
        let Spec::Custom(c) = Spec::parse("time=60,worker=1,sequence=1,unit=1s").unwrap() else {
            panic!()
        };
        assert!(c.with_epoch(0).unwrap_err().message.contains("latest time"));
    }

    fn any_layout() -> impl Strategy<Value = Layout> {
        prop_oneof![
            (0..NAMED.len()).prop_map(|i| NAMED[i]),
            (1u32..=40, 0u32..=11, 0u32..=11, 1u64..=1000, any::<bool>()).prop_map(
                |(t, w, s, u, o)| {
                    CustomSpec {
                        unit_ms: u,
                        time_bits: t,
                        worker_bits: w,
                        sequence_bits: s,
                        order: if o { TSW } else { TWS },
                        epoch_ms: None,
                    }
                    .with_epoch(DEFAULT_EPOCH_MS)
                    .unwrap()
                }
            ),
        ]
    }

    #[test]
    fn a_year_before_the_end_comes_a_warning_that_says_when() {
        let l = Layout::from_argument(
            "time=40,worker=10,sequence=13,unit=1ms,epoch=2025-01-01 00:00:00+00",
        )
        .unwrap();
        let end = l.end_ms();
        assert!(l.end_warning(end - END_WARNING_MS - 1).is_none());
        let w = l.end_warning(end - 3 * 86_400_000).unwrap();
        assert_eq!(w.class, Class::Warning);
        assert!(
            w.message.contains("runs out of time in 3 days 0 h"),
            "{}",
            w.message
        );
        assert!(w.message.contains(&format_instant(end)), "{}", w.message);
        assert!(w.hint.unwrap().contains("Changing the layout"));
        // From the end on it is an error, not a warning.
        assert!(l.end_warning(end).is_none());
        // The default layout is decades from its end.
        assert!(NAMED[0]
            .end_warning(DEFAULT_EPOCH_MS + 50 * END_WARNING_MS)
            .is_none());
    }

    proptest! {
        #[test]
        fn compose_decompose_round_trip(l in any_layout(), t in any::<u64>(), w in any::<u64>(), s in any::<u64>()) {
            let p = Parts { tick: t % (l.last_tick() + 1), worker: w & l.max_worker(), sequence: s & l.max_sequence() };
            let id = l.compose(p);
            prop_assert_eq!(l.decompose(id), p);
            let d = l.decode(id as i64).unwrap();
            prop_assert_eq!(d.unix_ms, l.tick_start_ms(p.tick));
            prop_assert_eq!((d.worker as u64, d.sequence as u64), (p.worker, p.sequence));
            // The bound for the tick's start is the smallest ID of that tick.
            let lb = l.lower_bound(i128::from(d.unix_ms) * 1000).unwrap();
            prop_assert!(lb as u64 <= id);
            prop_assert_eq!(l.decompose(lb as u64).tick, p.tick);
            let counter = (p.tick << l.sequence_bits()) | p.sequence;
            prop_assert_eq!(l.id_from_counter(counter, p.worker), id);
        }

        #[test]
        fn ids_order_like_their_counters(l in any_layout(), a in any::<u64>(), b in any::<u64>(), w in any::<u64>()) {
            let max_counter = ((l.last_tick() + 1) << l.sequence_bits()) - 1;
            let (a, b) = (a % (max_counter + 1), b % (max_counter + 1));
            let w = w & l.max_worker();
            prop_assert_eq!(a.cmp(&b), l.id_from_counter(a, w).cmp(&l.id_from_counter(b, w)));
            prop_assert!(l.id_from_counter(max_counter, l.max_worker()) <= i64::MAX as u64);
        }
    }
}
