//! IDs for past times (`snowflake_nextval_at`): which sequence numbers of
//! the server's backfill worker id have been handed out at which ticks.
//!
//! A backfilled ID is `tick | backfill worker id | sequence`. The worker id
//! is one of the server's own, never its live one, so no live ID of any
//! server shares it (the operator keeps worker ids apart, the claims check
//! them). What stays to be kept unique is the sequence within each tick, and
//! ticks are in the past: there is no high-water tick to stay above, as the
//! live generator has, but a depth per tick, the first sequence number not
//! yet handed out there.
//!
//! [`Depths`] holds that depth over all ticks as a piecewise-constant map of
//! at most [`MAP_CAP`] intervals, in shared memory. It is only ever raised,
//! and raising it further than needed wastes sequence numbers but never
//! repeats one: that is how it stays bounded (neighbouring intervals merge
//! to the higher depth), and why replaying records in any order, or twice,
//! is safe. A backend takes a [`Lease`] from it, a window of sequence numbers
//! over a block of ticks, makes it durable (state file and WAL) before it
//! hands out any ID under it, and then serves IDs in the window from its own
//! memory ([`Backfiller`]): one durable write per lease, not per ID.

use crate::mark::crc32c;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// A hash of ticks: one multiply. Ticks are this process's own numbers,
/// not an attacker's, and SipHash's cost shows at millions of IDs.
#[derive(Default)]
struct TickHasher(u64);

impl Hasher for TickHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type TickMap<V> = HashMap<u64, V, BuildHasherDefault<TickHasher>>;

/// How many numbers each tick used, and of which lease: ticks that come
/// in increasing order (an import sorted by time, the usual case) in a
/// vector, appended to; ticks that come back below them in a hash map.
#[derive(Default)]
struct Counts {
    ordered: Vec<(u64, (u64, u64))>,
    scattered: TickMap<(u64, u64)>,
}

impl Counts {
    #[inline]
    fn get(&self, tick: u64) -> Option<(u64, u64)> {
        match self.ordered.last() {
            Some(&(t, v)) if t == tick => Some(v),
            // Only ticks below the last one ordered were ever scattered.
            Some(&(t, _)) if tick > t => None,
            None => None,
            Some(_) => match self.ordered.binary_search_by_key(&tick, |e| e.0) {
                Ok(i) => Some(self.ordered[i].1),
                Err(_) => self.scattered.get(&tick).copied(),
            },
        }
    }

    #[inline]
    fn set(&mut self, tick: u64, v: (u64, u64)) {
        match self.ordered.last_mut() {
            Some((t, x)) if *t == tick => *x = v,
            Some((t, _)) if tick < *t => match self.ordered.binary_search_by_key(&tick, |e| e.0) {
                Ok(i) => self.ordered[i].1 = v,
                Err(_) => {
                    self.scattered.insert(tick, v);
                }
            },
            _ => self.ordered.push((tick, v)),
        }
    }

    fn len(&self) -> usize {
        self.ordered.len() + self.scattered.len()
    }

    fn clear(&mut self) {
        self.ordered.clear();
        self.scattered.clear();
    }
}

/// The most intervals the depth map keeps.
pub const MAP_CAP: usize = 16_384;

/// The state file's name inside the data directory.
pub const FILE_NAME: &str = "snowflake_id.backfill";
const MAGIC: [u8; 8] = *b"SNOWBF\x00\x01";

/// A window of sequence numbers at every tick of a block: `first ..
/// first + width` at ticks `lo ..= hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub lo: u64,
    pub hi: u64,
    pub first: u64,
    pub width: u64,
}

impl Lease {
    /// The depth the lease leaves its block at: what its record says.
    pub fn depth(&self) -> u64 {
        self.first + self.width
    }

    /// What the lease does to the map, as its WAL record says it.
    pub fn raise(&self) -> Raise {
        Raise {
            lo: self.lo,
            hi: self.hi,
            depth: self.depth(),
        }
    }
}

/// Length of a lease record in WAL.
pub const RECORD: usize = 24;

/// A raise of the map: ticks `lo ..= hi` to `depth` at least. What a
/// lease's WAL record and its row in a database's record of floors say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raise {
    pub lo: u64,
    pub hi: u64,
    pub depth: u64,
}

impl Raise {
    pub fn encode(&self) -> [u8; RECORD] {
        let mut b = [0u8; RECORD];
        b[0..8].copy_from_slice(&self.lo.to_le_bytes());
        b[8..16].copy_from_slice(&self.hi.to_le_bytes());
        b[16..24].copy_from_slice(&self.depth.to_le_bytes());
        b
    }

    /// The raise as the three bigints a row of the record holds.
    pub fn to_row(&self) -> [i64; 3] {
        [self.lo as i64, self.hi as i64, self.depth as i64]
    }

    /// The raises a row's bigints hold, in threes; others (a row's column
    /// only as tidy as whoever wrote it) are passed over.
    pub fn from_row(values: &[i64]) -> Vec<Raise> {
        values
            .chunks_exact(3)
            .filter(|c| c.iter().all(|&v| v >= 0) && c[0] <= c[1])
            .map(|c| Raise {
                lo: c[0] as u64,
                hi: c[1] as u64,
                depth: c[2] as u64,
            })
            .collect()
    }

    pub fn decode(b: &[u8]) -> Option<Raise> {
        if b.len() != RECORD {
            return None;
        }
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
        let r = Raise {
            lo: word(0),
            hi: word(8),
            depth: word(16),
        };
        (r.lo <= r.hi).then_some(r)
    }
}

/// How a backend asks for a lease: a block of `2^block_log2` ticks from
/// the tick asked for, `width` sequence numbers at each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub block_log2: u32,
    pub width: u64,
}

/// Blocks start about four hours long: an import in time order then takes
/// a lease per four hours of history, and sixteen numbers per tick leave
/// room for 256 such passes over the same hours before blocks shrink.
const START_SPAN_MS: u64 = 4 * 3_600_000;
const START_WIDTH: u64 = 16;
/// How far a block shrinks (in [`Depths::lease`], too deep for the window
/// asked; after a tick ran out), and how far a lease moved past while
/// sparse grows the next.
const SHRINK_LOG2: u32 = 4;
const GROW_LOG2: u32 = 2;
/// The longest block: about 35 years of milliseconds.
const MAX_BLOCK_LOG2: u32 = 40;

impl Shape {
    /// The first lease's shape for a layout with ticks of `unit_ms` and
    /// `ids_per_tick` sequence numbers.
    pub fn start(unit_ms: u64, ids_per_tick: u64) -> Shape {
        let ticks = (START_SPAN_MS / unit_ms.max(1)).max(1);
        Shape {
            block_log2: 63 - ticks.leading_zeros(),
            width: START_WIDTH.min((ids_per_tick / 16).max(1)),
        }
    }

    /// The next shape after a lease of this one ran out at a tick: a window
    /// twice as wide, up to a quarter of a tick's numbers (sessions sharing
    /// a tick each leave their window's rest unused), over a block a
    /// sixteenth as long: rows crowding one tick say little of the ticks
    /// hours later, which a long block would raise with every widening.
    /// Doubling, not more: what one lease leaves unused is at most what was
    /// used before it.
    fn denser(self, ids_per_tick: u64) -> Shape {
        Shape {
            block_log2: self.block_log2.saturating_sub(SHRINK_LOG2),
            width: (self.width << 1).min((ids_per_tick / 4).max(self.width)),
        }
    }

    /// The next shape after a lease of this one was left behind having
    /// used at most half its window at any tick: longer blocks, narrower
    /// windows (down to `floor`'s).
    fn sparser(self, floor: Shape) -> Shape {
        Shape {
            block_log2: (self.block_log2 + GROW_LOG2).min(MAX_BLOCK_LOG2),
            width: (self.width >> GROW_LOG2).max(floor.width),
        }
    }
}

/// What a backend asks the map for: a lease at `tick` for at least `n`
/// IDs, shaped as `shape`, ending at `until` at the latest (where the
/// backend's own newer leases begin).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub tick: u64,
    pub shape: Shape,
    pub n: u64,
    pub until: u64,
}

/// Why no lease could be made: at `tick`, only `left` sequence numbers are
/// left, fewer than the `wanted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted {
    pub tick: u64,
    pub left: u64,
    pub wanted: u64,
}

/// The depth of every tick: the first sequence number not yet leased
/// there. Fixed-size, so that it lives in shared memory as it is.
#[derive(Clone)]
#[repr(C)]
pub struct Depths {
    len: u64,
    /// Interval `i` is `starts[i] .. starts[i + 1]` (the last one runs to
    /// the end of time) at `depths[i]`. `starts[0]` is 0.
    starts: [u64; MAP_CAP],
    depths: [u64; MAP_CAP],
}

impl Default for Depths {
    fn default() -> Self {
        Depths {
            len: 1,
            starts: [0; MAP_CAP],
            depths: [0; MAP_CAP],
        }
    }
}

impl std::fmt::Debug for Depths {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.intervals()).finish()
    }
}

impl Depths {
    /// The map as `(start, depth)` pairs, starts increasing from 0.
    pub fn intervals(&self) -> Vec<(u64, u64)> {
        let n = (self.len as usize).clamp(1, MAP_CAP);
        (0..n).map(|i| (self.starts[i], self.depths[i])).collect()
    }

    /// Puts `v` in, merging neighbours of one depth, and, past
    /// [`MAP_CAP`], neighbours of the closest depths into the higher.
    fn set(&mut self, mut v: Vec<(u64, u64)>) {
        v.dedup_by(|b, a| a.1 == b.1);
        while v.len() > MAP_CAP {
            // The pair whose merge raises the fewest numbers: the shallower
            // one's ticks times the difference (the last runs to the end).
            let len = |i: usize| match v.get(i + 1) {
                Some(next) => u128::from(next.0 - v[i].0),
                None => u128::from(u64::MAX - v[i].0) + 1,
            };
            let cost = |i: usize| {
                let lower = if v[i].1 < v[i + 1].1 { i } else { i + 1 };
                len(lower) * u128::from(v[i].1.abs_diff(v[i + 1].1))
            };
            let i = (0..v.len() - 1).min_by_key(|&i| cost(i)).unwrap_or(0);
            v[i].1 = v[i].1.max(v[i + 1].1);
            v.remove(i + 1);
            v.dedup_by(|b, a| a.1 == b.1);
        }
        self.len = v.len() as u64;
        for (i, (s, d)) in v.into_iter().enumerate() {
            self.starts[i] = s;
            self.depths[i] = d;
        }
    }

    /// The deepest depth over ticks `lo ..= hi`.
    pub fn depth_over(&self, lo: u64, hi: u64) -> u64 {
        self.depths_over(lo, hi).max().unwrap_or(0)
    }

    /// The shallowest depth over ticks `lo ..= hi`: raising them to it
    /// changes nothing.
    pub fn min_over(&self, lo: u64, hi: u64) -> u64 {
        self.depths_over(lo, hi).min().unwrap_or(0)
    }

    fn depths_over(&self, lo: u64, hi: u64) -> impl Iterator<Item = u64> + '_ {
        let n = (self.len as usize).clamp(1, MAP_CAP);
        let first = self.starts[..n].partition_point(|&s| s <= lo).max(1) - 1;
        (first..n)
            .take_while(move |&i| self.starts[i] <= hi)
            .map(|i| self.depths[i])
    }

    /// The last tick of the run from `tick` on whose depths are all at most
    /// `most` (`tick` itself at least).
    fn shallow_until(&self, tick: u64, most: u64) -> u64 {
        let n = (self.len as usize).clamp(1, MAP_CAP);
        let i = self.starts[..n].partition_point(|&s| s <= tick).max(1) - 1;
        match (i + 1..n).find(|&j| self.depths[j] > most) {
            Some(j) => (self.starts[j] - 1).max(tick),
            None => u64::MAX,
        }
    }

    /// Raises ticks `lo ..= hi` to at least `depth`.
    pub fn raise(&mut self, lo: u64, hi: u64, depth: u64) {
        let v = self.intervals();
        let at = |t: u64| v[v.partition_point(|&(s, _)| s <= t) - 1].1;
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len() + 2);
        out.extend(v.iter().copied().filter(|&(s, _)| s < lo));
        out.push((lo, at(lo).max(depth)));
        out.extend(
            v.iter()
                .copied()
                .filter(|&(s, _)| s > lo && s <= hi)
                .map(|(s, d)| (s, d.max(depth))),
        );
        if let Some(after) = hi.checked_add(1) {
            if !v.iter().any(|&(s, _)| s == after) {
                out.push((after, at(after)));
            }
            out.extend(v.iter().copied().filter(|&(s, _)| s >= after));
        }
        self.set(out);
    }

    /// The map as raises, one per interval, each to its depth.
    pub fn runs(&self) -> impl Iterator<Item = Raise> + '_ {
        let v = self.intervals();
        let n = v.len();
        (0..n).map(move |i| Raise {
            lo: v[i].0,
            hi: if i + 1 < n { v[i + 1].0 - 1 } else { u64::MAX },
            depth: v[i].1,
        })
    }

    /// Leases a window at `tick` for at least `n` IDs: the block `shape`
    /// names, or a shorter one from `tick` where that one is too deep.
    /// The map is raised over the block before this returns.
    pub fn lease(
        &mut self,
        ask: &Ask,
        ids_per_tick: u64,
        last_tick: u64,
    ) -> Result<Lease, Exhausted> {
        let Ask {
            tick,
            shape,
            n,
            until,
        } = *ask;
        let want = shape.width.max(n);
        let mut b = shape.block_log2.min(63);
        loop {
            // From the tick on: an import in time order never leases the
            // ticks it has passed again.
            let lo = tick;
            // And no further than the ticks as shallow as this one, give or
            // take a window: a lease starts above the deepest tick it covers,
            // and would waste what lies between at every shallower one.
            let base = self.min_over(tick, tick);
            let hi = tick
                .saturating_add((1u64 << b) - 1)
                .min(last_tick)
                .min(until.max(tick))
                .min(self.shallow_until(tick, base.saturating_add(want)));
            let first = self.depth_over(lo, hi);
            let left = ids_per_tick.saturating_sub(first);
            let width = if b == 0 { want.min(left) } else { want };
            if left >= want || (b == 0 && left >= n) {
                self.raise(lo, hi, first + width);
                return Ok(Lease {
                    lo,
                    hi,
                    first,
                    width,
                });
            }
            if b == 0 {
                return Err(Exhausted {
                    tick,
                    left,
                    wanted: n,
                });
            }
            b = b.saturating_sub(SHRINK_LOG2);
        }
    }

    /// The state file's bytes: the map, with a checksum.
    pub fn encode(&self) -> Vec<u8> {
        let v = self.intervals();
        let mut b = Vec::with_capacity(16 + v.len() * 16 + 4);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&(v.len() as u64).to_le_bytes());
        for (s, d) in v {
            b.extend_from_slice(&s.to_le_bytes());
            b.extend_from_slice(&d.to_le_bytes());
        }
        let crc = crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// The map a state file holds, or why it cannot be read.
    pub fn decode(b: &[u8]) -> Result<Depths, String> {
        if b.len() < 20 || b[0..8] != MAGIC {
            return Err("it is not a snowflake_id backfill state file of this version".into());
        }
        let (body, crc) = b.split_at(b.len() - 4);
        if crc32c(body).to_le_bytes() != crc {
            return Err("its checksum does not match".into());
        }
        let word = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().unwrap_or_default());
        let n = word(8) as usize;
        if n == 0 || n > MAP_CAP || body.len() != 16 + n * 16 {
            return Err(format!(
                "it says it holds {n} intervals in {} bytes",
                body.len()
            ));
        }
        let v: Vec<(u64, u64)> = (0..n)
            .map(|i| (word(16 + i * 16), word(24 + i * 16)))
            .collect();
        if v[0].0 != 0 || v.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err("its intervals are out of order".into());
        }
        let mut d = Depths::default();
        d.set(v);
        Ok(d)
    }
}

/// The most pieces of leases one backend keeps, and the most ticks it
/// tracks in them; past either it forgets them all (their unused numbers
/// are never handed out) rather than grow.
const PIECES_CAP: usize = 4096;
const TRACKED_CAP: usize = 1 << 20;

/// The part of a lease that still serves its ticks: `lo ..= hi` (a later
/// lease over some of its ticks takes them over).
#[derive(Clone, Copy)]
struct Piece {
    hi: u64,
    first: u64,
    width: u64,
    serial: u64,
    shape: Shape,
}

/// How the newest lease taken for a block (not for one wide batch) was
/// used: what the next lease's shape is worked out from.
#[derive(Clone, Copy)]
struct Recent {
    serial: u64,
    shape: Shape,
    width: u64,
    /// The most numbers used at any one tick of it.
    peak: u64,
}

/// What `Backfiller::held` found at a tick.
enum Held {
    /// The first of the numbers taken from a lease held.
    Taken(u64),
    /// None held fits: a lease of this shape is to be asked for.
    Lease(Shape),
}

/// One backend's leases, and how much of each it used at each tick.
pub struct Backfiller {
    /// By first tick; they never overlap, so a tick has one piece at most.
    pieces: BTreeMap<u64, Piece>,
    /// For each tick: the serial of the lease its numbers came from last,
    /// and how many of that lease's it used. A count names its lease, so
    /// one left of a lease forgotten or taken over is never read as
    /// another's.
    used: Counts,
    serial: u64,
    recent: Option<Recent>,
    start: Shape,
    ids_per_tick: u64,
}

impl Backfiller {
    pub fn new(start: Shape, ids_per_tick: u64) -> Backfiller {
        Backfiller {
            pieces: BTreeMap::new(),
            used: Counts::default(),
            serial: 0,
            recent: None,
            start,
            ids_per_tick,
        }
    }

    /// Whether this was made for a layout of `ids_per_tick`.
    pub fn fits(&self, start: Shape, ids_per_tick: u64) -> bool {
        self.start == start && self.ids_per_tick == ids_per_tick
    }

    /// The first of `n` consecutive sequence numbers at `tick` that no one
    /// was given, from a lease held or from a new one `lease` makes
    /// (durable before it returns).
    pub fn take<E>(
        &mut self,
        tick: u64,
        n: u64,
        lease: impl FnOnce(&Ask) -> Result<Lease, E>,
    ) -> Result<u64, E> {
        // Bounded whatever the calls: past the cap every lease is forgotten
        // (the next IDs come from new ones), not only when one is taken.
        if self.used.len() >= TRACKED_CAP {
            self.pieces.clear();
            self.used.clear();
        }
        let shape = match self.held(tick, n) {
            Held::Taken(first) => return Ok(first),
            Held::Lease(shape) => shape,
        };
        // A batch wider than the window: a lease of its tick alone, so that
        // its width is not taken at every tick of a block.
        let one_off = n > shape.width;
        let shape = if one_off {
            Shape {
                block_log2: 0,
                width: n,
            }
        } else {
            shape
        };
        // Up to the next piece held: ticks there have numbers of their own,
        // and leasing them again would waste them.
        let until = self
            .pieces
            .range(tick.saturating_add(1)..)
            .next()
            .map_or(u64::MAX, |(&lo, _)| lo - 1);
        let got = lease(&Ask {
            tick,
            shape,
            n,
            until,
        })?;
        Ok(self.keep(got, shape, one_off, tick, n))
    }

    /// The first of `n` numbers at `tick` from a lease held, or the shape
    /// of the lease to ask for: the held one's, denser where it ran out at
    /// this tick, or (none held there) the last lease's, sparser where it
    /// was used to half its width or less.
    fn held(&mut self, tick: u64, n: u64) -> Held {
        let found = self
            .pieces
            .range(..=tick)
            .next_back()
            .map(|(_, p)| *p)
            .filter(|p| p.hi >= tick);
        Held::Lease(match found {
            Some(p) => {
                let used = match self.used.get(tick) {
                    Some((serial, used)) if serial == p.serial => used,
                    _ => 0,
                };
                if used + n <= p.width {
                    self.used.set(tick, (p.serial, used + n));
                    if let Some(r) = self.recent.as_mut().filter(|r| r.serial == p.serial) {
                        r.peak = r.peak.max(used + n);
                    }
                    return Held::Taken(p.first + used);
                }
                if used > 0 {
                    p.shape.denser(self.ids_per_tick)
                } else {
                    p.shape
                }
            }
            None => match self.recent {
                Some(r) if r.peak * 2 <= r.width => r.shape.sparser(self.start),
                Some(r) => r.shape,
                None => self.start,
            },
        })
    }

    /// Keeps the lease `got` (asked in `shape`), of which the first `n`
    /// numbers at `tick` are taken now; their first.
    fn keep(&mut self, got: Lease, shape: Shape, one_off: bool, tick: u64, n: u64) -> u64 {
        if self.pieces.len() >= PIECES_CAP || self.used.len() >= TRACKED_CAP {
            self.pieces.clear();
            self.used.clear();
        }
        self.serial += 1;
        let piece = Piece {
            hi: got.hi,
            first: got.first,
            width: got.width,
            serial: self.serial,
            shape,
        };
        self.cover(got.lo, piece);
        if !one_off {
            self.recent = Some(Recent {
                serial: self.serial,
                shape,
                width: got.width,
                peak: n,
            });
        }
        self.used.set(tick, (self.serial, n));
        got.first
    }

    /// Puts `piece` at `lo`, cutting what it covers out of older pieces.
    fn cover(&mut self, lo: u64, piece: Piece) {
        let hi = piece.hi;
        let overlapping: Vec<(u64, Piece)> = self
            .pieces
            .range(..=hi)
            .rev()
            .take_while(|(_, p)| p.hi >= lo)
            .map(|(&l, p)| (l, *p))
            .collect();
        for (l, p) in overlapping {
            self.pieces.remove(&l);
            if l < lo {
                self.pieces.insert(l, Piece { hi: lo - 1, ..p });
            }
            if p.hi > hi {
                self.pieces.insert(hi + 1, p);
            }
        }
        self.pieces.insert(lo, piece);
    }

    /// The ticks each piece held serves, for tests.
    pub fn pieces(&self) -> Vec<(u64, u64)> {
        self.pieces.iter().map(|(&lo, p)| (lo, p.hi)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    const PER_TICK: u64 = 4096;
    const LAST: u64 = (1 << 41) - 1;

    #[test]
    fn raise_keeps_the_map_piecewise_and_never_lowers() {
        let mut d = Depths::default();
        d.raise(10, 19, 5);
        assert_eq!(d.intervals(), vec![(0, 0), (10, 5), (20, 0)]);
        d.raise(15, 30, 3);
        assert_eq!(d.intervals(), vec![(0, 0), (10, 5), (20, 3), (31, 0)]);
        assert_eq!(d.depth_over(0, 9), 0);
        assert_eq!(d.depth_over(9, 10), 5);
        assert_eq!(d.depth_over(21, 40), 3);
        assert_eq!(d.min_over(9, 25), 0);
        assert_eq!(d.min_over(10, 25), 3);
        d.raise(0, 100, 4);
        assert_eq!(d.intervals(), vec![(0, 4), (10, 5), (20, 4), (101, 0)]);
        d.raise(0, u64::MAX, 7);
        assert_eq!(d.intervals(), vec![(0, 7)]);
        d.raise(u64::MAX - 1, u64::MAX, 9);
        assert_eq!(d.depth_over(u64::MAX, u64::MAX), 9);
    }

    #[test]
    fn a_full_map_merges_into_the_higher_depth() {
        let mut d = Depths::default();
        let n = MAP_CAP as u64 / 2 + 200;
        for i in 0..n {
            d.raise(i * 10, i * 10 + 4, 1 + i % 3);
        }
        assert!(d.intervals().len() <= MAP_CAP);
        for i in 0..n {
            assert!(d.min_over(i * 10, i * 10 + 4) > i % 3);
        }
    }

    #[test]
    fn leases_over_one_tick_never_overlap() {
        let mut d = Depths::default();
        let shape = Shape::start(1, PER_TICK);
        let ask = |tick, n| Ask {
            tick,
            shape,
            n,
            until: u64::MAX,
        };
        let a = d.lease(&ask(1000, 1), PER_TICK, LAST).unwrap();
        let b = d.lease(&ask(1000, 1), PER_TICK, LAST).unwrap();
        assert!(a.lo <= 1000 && 1000 <= a.hi);
        assert_eq!(b.first, a.first + a.width);
        // A block too deep: a smaller one around the tick, then the tick alone.
        let mut d = Depths::default();
        d.raise(1000, 1000, PER_TICK - 3);
        let c = d.lease(&ask(1001, 1), PER_TICK, LAST).unwrap();
        assert!(c.hi < 1000 || c.lo > 1000);
        let e = d.lease(&ask(1000, 2), PER_TICK, LAST).unwrap();
        assert_eq!(
            (e.lo, e.hi, e.first, e.width),
            (1000, 1000, PER_TICK - 3, 3)
        );
        assert_eq!(
            d.lease(&ask(1000, 1), PER_TICK, LAST),
            Err(Exhausted {
                tick: 1000,
                left: 0,
                wanted: 1
            })
        );
    }

    #[test]
    fn state_file_round_trips_and_refuses_damage() {
        let mut d = Depths::default();
        d.raise(5, 9, 3);
        let bytes = d.encode();
        assert_eq!(Depths::decode(&bytes).unwrap().intervals(), d.intervals());
        let mut bad = bytes.clone();
        bad[20] ^= 1;
        assert!(Depths::decode(&bad).unwrap_err().contains("checksum"));
        assert!(Depths::decode(&bytes[..10]).is_err());
        let l = Lease {
            lo: 3,
            hi: 7,
            first: 2,
            width: 4,
        };
        assert_eq!(
            Raise::decode(&l.raise().encode()),
            Some(Raise {
                lo: 3,
                hi: 7,
                depth: 6
            })
        );
        assert_eq!(Raise::from_row(&l.raise().to_row()), vec![l.raise()]);
        assert_eq!(
            Raise::from_row(&[1, 2, 3, 5, 4, 1, -1, 2, 2, 9]),
            vec![Raise {
                lo: 1,
                hi: 2,
                depth: 3
            }]
        );
    }

    /// Backends sharing one map, some in time order, some at random and
    /// some all at one tick, each asking for single IDs and batches: no
    /// (tick, sequence) twice, and every number within the tick's range.
    #[test]
    fn backends_sharing_a_map_never_hand_out_one_number_twice() {
        let mut map = Depths::default();
        let start = Shape::start(1, PER_TICK);
        let mut backends: Vec<Backfiller> =
            (0..4).map(|_| Backfiller::new(start, PER_TICK)).collect();
        let mut seen = HashSet::new();
        let mut leases = 0;
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut rand = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for i in 0..200_000u64 {
            let which = (i % 4) as usize;
            let tick = match which {
                0 => 1_000_000 + i / 3,
                1 => rand() % 100_000_000,
                2 => 5_000_000 + (i / 4) % 40,
                _ => 1_000_000 + (i % 5000),
            };
            let n = if i % 97 == 0 { 1 + rand() % 50 } else { 1 };
            let first = backends[which]
                .take(tick, n, |ask| {
                    leases += 1;
                    map.lease(ask, PER_TICK, LAST)
                })
                .unwrap_or_else(|e| panic!("exhausted: {e:?}"));
            for s in first..first + n {
                assert!(s < PER_TICK);
                assert!(seen.insert((tick, s)), "({tick}, {s}) twice");
            }
        }
        // One durable write per lease, far fewer than IDs.
        assert!(leases < 20_000, "{leases} leases");
    }

    #[test]
    fn one_tick_runs_out_with_an_error_not_a_repeat() {
        let mut map = Depths::default();
        let start = Shape::start(1000, 256);
        let mut b = Backfiller::new(start, 256);
        let mut seen = HashSet::new();
        let mut out = None;
        for _ in 0..300 {
            match b.take(42, 1, |ask| map.lease(ask, 256, LAST)) {
                Ok(s) => assert!(seen.insert(s)),
                Err(e) => {
                    out = Some(e);
                    break;
                }
            }
        }
        assert_eq!(seen.len(), 256);
        assert_eq!(
            out,
            Some(Exhausted {
                tick: 42,
                left: 0,
                wanted: 1
            })
        );
    }

    /// An import in time order, sparse over years: leases grow to long
    /// blocks, so the durable writes stay few.
    #[test]
    fn a_sparse_import_in_time_order_takes_few_leases() {
        let mut map = Depths::default();
        let mut b = Backfiller::new(Shape::start(1, PER_TICK), PER_TICK);
        let mut leases = 0;
        // A million rows over ten years, in order.
        let step = 10 * 365 * 86_400_000u64 / 1_000_000;
        for i in 0..1_000_000u64 {
            b.take(i * step, 1, |ask| {
                leases += 1;
                map.lease(ask, PER_TICK, LAST)
            })
            .unwrap();
        }
        assert!(leases < 100, "{leases} leases");
        assert!(map.depth_over(0, LAST) <= 16);
    }

    #[test]
    fn forgetting_and_taking_over_never_repeat() {
        let mut map = Depths::default();
        let mut b = Backfiller::new(
            Shape {
                block_log2: 3,
                width: 2,
            },
            PER_TICK,
        );
        let mut seen = HashSet::new();
        for round in 0..3 {
            for t in 0..(PIECES_CAP as u64 * 3) {
                for tick in [t, t / 2, t * 7 % 1000] {
                    let s = b
                        .take(tick, 1, |ask| map.lease(ask, PER_TICK, LAST))
                        .unwrap();
                    assert!(seen.insert((tick, s)), "round {round}: ({tick}, {s}) twice");
                }
            }
        }
        let p = b.pieces();
        assert!(p.len() <= PIECES_CAP);
        assert!(p.windows(2).all(|w| w[0].1 < w[1].0), "pieces overlap");
    }
}
