//! IDs as RFC 9562 version 7 UUIDs, and back.
//!
//! A UUIDv7 is `unix_ts_ms (48) | ver (4) | rand_a (12) | var (2) | rand_b (62)`
//! (RFC 9562, section 5.7). The ID's tick goes into `unix_ts_ms` as the
//! Unix millisecond it starts at, which is what `uuid_extract_timestamp()`
//! reads; the ID's bits below the time (worker and sequence, in the layout's
//! order) go into the top of the 74 bits of `rand_a | rand_b`; then 16 bits
//! that check the ID (a fixed mix of it: a UUIDv7 made elsewhere, whose
//! bits there are random, is refused but once in 65,536, instead of read as
//! an ID it never held); what is left below is filler: random for a new
//! UUID, zero for the UUID an existing ID is given. Ticks map to
//! milliseconds one to one and in order, and the ID's bits keep their order
//! above the rest, so UUIDs compare as their IDs do, and the ID is read
//! back exactly whatever the filler.

use crate::failure::{Class, Failure};
use crate::layout::Layout;
use crate::timefmt::format_instant;
use aes::cipher::{BlockCipherEncrypt, KeyInit};
use aes::Aes128;

/// Bits of `rand_a` and `rand_b` together.
const FIELD_BITS: u32 = 74;
/// Bits of `rand_b`.
const RAND_B_BITS: u32 = 62;
/// The largest `unix_ts_ms`.
const MAX_UNIX_MS: i64 = (1 << 48) - 1;
/// Bits that check the ID, below it (fewer where the layout leaves fewer).
const CHECK_BITS: u32 = 16;

fn mask(bits: u32) -> u128 {
    (1u128 << bits) - 1
}

fn check_bits(layout: &Layout) -> u32 {
    CHECK_BITS.min(FIELD_BITS - layout.low_bits())
}

/// The check of an ID: SplitMix64's finalizer (a fixed bijective mix, not a
/// secret: it tells UUIDs of ours from others' random bits, it does not
/// authenticate).
fn check_of(id: u64, bits: u32) -> u128 {
    let mut z = id ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    u128::from(z ^ (z >> 31)) & mask(bits)
}

/// Packs the time and the 74-bit field with version 7 and the RFC variant.
fn pack(unix_ms: u64, field: u128) -> [u8; 16] {
    let rand_a = (field >> RAND_B_BITS) & 0xfff;
    let rand_b = field & ((1 << RAND_B_BITS) - 1);
    let v = (u128::from(unix_ms) << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b;
    v.to_be_bytes()
}

/// The time and the 74-bit field of a version 7 UUID of the RFC variant.
fn unpack(uuid: &[u8; 16]) -> Option<(i64, u128)> {
    let v = u128::from_be_bytes(*uuid);
    let (version, variant) = ((v >> 76) & 0xf, (v >> 62) & 0b11);
    (version == 7 && variant == 0b10).then(|| {
        let rand_a = (v >> 64) & 0xfff;
        let rand_b = v & ((1 << RAND_B_BITS) - 1);
        ((v >> 80) as i64, (rand_a << RAND_B_BITS) | rand_b)
    })
}

/// The Unix millisecond `id`'s tick starts at, if a UUIDv7 can hold it.
fn unix_ms_of(layout: &Layout, id: i64) -> Result<u64, Failure> {
    let unix_ms = layout.decode(id)?.unix_ms;
    if !(0..=MAX_UNIX_MS).contains(&unix_ms) {
        return Err(Failure::new(
            Class::TimeOutOfRange,
            format!(
                "ID {id} of {} is from {}, which a version 7 UUID cannot hold",
                layout.title(),
                format_instant(unix_ms)
            ),
        )
        .detail("A UUIDv7 holds Unix milliseconds from 1970 to 10889.")
        .hint("Keep IDs of this layout as bigint."));
    }
    Ok(unix_ms as u64)
}

/// The UUID of `id` under `layout`, with `filler`'s low bits (as many as
/// [`random_bits`]) below the ID's own and its check (random for a new
/// UUID, zero for a deterministic one).
pub fn from_id(layout: &Layout, id: i64, filler: u128) -> Result<[u8; 16], Failure> {
    let unix_ms = unix_ms_of(layout, id)?;
    let (low, check, random) = (layout.low_bits(), check_bits(layout), random_bits(layout));
    let rest = u128::from(id as u64) & mask(low);
    let field = (rest << (check + random))
        | (check_of(id as u64, check) << random)
        | (filler & mask(random));
    Ok(pack(unix_ms, field))
}

/// The ID a UUID made by [`from_id`] under `layout` holds, whatever its
/// filler; any other UUID is an error that says what it is not.
pub fn to_id(layout: &Layout, uuid: &[u8; 16]) -> Result<i64, Failure> {
    let not_ours = |why: String| {
        Failure::new(
            Class::InvalidParameter,
            format!("{} is not a UUID of {}: {why}", format_uuid(uuid), layout.title()),
        )
        .hint("Only UUIDs made by snowflake_uuidv7() or snowflake_id_to_uuid() under this layout hold an ID; give the layout they were made under as the second argument.")
    };
    let (unix_ms, field) = unpack(uuid)
        .ok_or_else(|| not_ours("it is not a version 7 UUID of the RFC 9562 variant".into()))?;
    let since = unix_ms - layout.epoch_ms();
    let unit = layout.unit_ms() as i64;
    if since < 0 {
        return Err(not_ours(format!(
            "its time, {}, is before the layout's epoch",
            format_instant(unix_ms)
        )));
    }
    if since % unit != 0 {
        return Err(not_ours(format!(
            "its time, {}, is not the start of one of the layout's {unit} ms ticks",
            format_instant(unix_ms)
        )));
    }
    let tick = (since / unit) as u64;
    let time_bits = layout.time_bits();
    if time_bits < 64 && tick >> time_bits != 0 {
        return Err(not_ours(format!(
            "its time, {}, is past the layout's end",
            format_instant(unix_ms)
        )));
    }
    let low = layout.low_bits();
    let rest = (field >> (FIELD_BITS - low)) as u64;
    let id = if low == 64 {
        rest
    } else {
        (tick << low) | rest
    };
    // A 64-bit layout's IDs past 2^63 are negative bigints, as it issues them.
    if layout.total_bits() < 64 && id > i64::MAX as u64 {
        return Err(not_ours("its ID would not be a non-negative bigint".into()));
    }
    let (check, random) = (check_bits(layout), random_bits(layout));
    if (field >> random) & mask(check) != check_of(id, check) {
        return Err(not_ours(
            "the bits below its ID do not check it, as they do in every UUID snowflake_id makes (a UUIDv7 made elsewhere?)".into(),
        ));
    }
    Ok(id as i64)
}

/// The smallest UUIDv7 of the tick of `unix_us` (its `rand` bits all zero):
/// `u >= lower_bound(t)` selects the UUIDs of IDs made at or after `t`'s
/// tick; with millisecond ticks, those of any UUIDv7 made at or after `t`.
pub fn lower_bound(layout: &Layout, unix_us: i128) -> Result<[u8; 16], Failure> {
    Ok(pack(unix_ms_of(layout, layout.lower_bound(unix_us)?)?, 0))
}

/// A UUID in its usual text form, for messages.
pub fn format_uuid(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// How many random bits a new UUID of `layout` holds below its ID's bits
/// and their check: 36 in the default layout.
pub fn random_bits(layout: &Layout) -> u32 {
    FIELD_BITS - layout.low_bits() - check_bits(layout)
}

/// The random filler of new UUIDs: AES-128 in counter mode under a key the
/// caller seeds from the operating system's CSPRNG (as RFC 9562, section
/// 6.9, asks of the random bits). Eight blocks are enciphered at a time,
/// which the processor pipelines, and served 64 bits at a time: a few
/// nanoseconds per UUID where a call to the system's generator per UUID
/// costs hundreds.
pub struct Filler {
    cipher: Aes128,
    counter: u128,
    words: [u64; 2 * BLOCKS],
    used: usize,
}

/// Blocks enciphered per refill.
const BLOCKS: usize = 8;

impl Filler {
    /// A filler from 32 bytes of the system's CSPRNG: the key and the
    /// counter's start.
    pub fn new(seed: [u8; 32]) -> Filler {
        let (key, start) = seed.split_at(16);
        let key: [u8; 16] = key.try_into().expect("16 bytes");
        let start: [u8; 16] = start.try_into().expect("16 bytes");
        Filler {
            cipher: Aes128::new(&key.into()),
            counter: u128::from_le_bytes(start),
            words: [0; 2 * BLOCKS],
            used: 2 * BLOCKS,
        }
    }

    #[cold]
    fn refill(&mut self) {
        let mut blocks: [_; BLOCKS] =
            std::array::from_fn(|i| self.counter.wrapping_add(i as u128).to_le_bytes().into());
        self.counter = self.counter.wrapping_add(BLOCKS as u128);
        self.cipher.encrypt_blocks(&mut blocks);
        for (i, block) in blocks.into_iter().enumerate() {
            let v = u128::from_le_bytes(block.into());
            self.words[2 * i] = v as u64;
            self.words[2 * i + 1] = (v >> 64) as u64;
        }
        self.used = 0;
    }

    #[inline]
    fn word(&mut self) -> u64 {
        if self.used == self.words.len() {
            self.refill();
        }
        self.used += 1;
        self.words[self.used - 1]
    }

    /// `n` (at most 128) random bits, in the low bits of the result.
    #[inline]
    pub fn bits(&mut self, n: u32) -> u128 {
        let low = u128::from(self.word());
        let v = if n > 64 {
            low | u128::from(self.word()) << 64
        } else {
            low
        };
        if n >= 128 {
            v
        } else {
            v & ((1u128 << n) - 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Parts, NAMED};
    use proptest::prelude::*;

    fn layout(name: &str) -> Layout {
        Layout::by_name(name).unwrap()
    }

    /// An ID of `l` at `tick` with the largest worker and sequence.
    fn top_of_tick(l: &Layout, tick: u64) -> i64 {
        l.compose(Parts {
            tick,
            worker: l.max_worker(),
            sequence: l.max_sequence(),
        }) as i64
    }

    #[test]
    fn version_variant_and_time_are_the_rfc_fields() {
        let l = layout("snowflake_id");
        let id = l.lower_bound(1_767_225_600_123_000).unwrap() | 0x3_f_f_f_f; // 2026-01-01 00:00:00.123
        let u = from_id(&l, id, u128::MAX).unwrap();
        let v = u128::from_be_bytes(u);
        assert_eq!((v >> 76) & 0xf, 7, "version");
        assert_eq!((v >> 62) & 0b11, 0b10, "variant");
        assert_eq!((v >> 80) as i64, 1_767_225_600_123, "unix_ts_ms");
        assert_eq!(format_uuid(&u).len(), 36);
        assert_eq!(&format_uuid(&u)[14..15], "7");
    }

    #[test]
    fn round_trip_at_the_ends_of_every_layout() {
        for l in NAMED {
            let ticks = [0, 1, l.last_tick() / 2, l.last_tick()];
            for tick in ticks {
                if l.tick_start_ms(tick) > MAX_UNIX_MS {
                    continue;
                }
                for id in [
                    l.compose(Parts {
                        tick,
                        worker: 0,
                        sequence: 0,
                    }) as i64,
                    top_of_tick(&l, tick),
                ] {
                    for filler in [0, u128::MAX, 0x5555_5555_5555_5555_5555_5555_5555_5555] {
                        let u = from_id(&l, id, filler).unwrap();
                        assert_eq!(to_id(&l, &u).unwrap(), id, "{} {id}", l.title());
                    }
                }
            }
        }
    }

    #[test]
    fn sixty_four_bit_layouts_keep_their_negative_ids() {
        let l = layout("instagram");
        let id = top_of_tick(&l, (1 << l.time_bits()) - 1);
        assert!(id < 0);
        let u = from_id(&l, id, 7).unwrap();
        assert_eq!(to_id(&l, &u).unwrap(), id);
    }

    #[test]
    fn foreign_uuids_are_refused_with_the_reason() {
        let l = layout("snowflake_id");
        // A version 4 UUID.
        let v4 = 0x0191_2d4c_8f2a_4d0e_9b1c_1234_5678_9abc_u128.to_be_bytes();
        let e = to_id(&l, &v4).unwrap_err();
        assert_eq!(e.class, Class::InvalidParameter);
        assert!(e.message.contains("not a version 7 UUID"), "{}", e.message);
        // A UUIDv7 from 2024, before the layout's epoch.
        let early = pack(1_704_067_200_000, 0);
        assert!(to_id(&l, &early)
            .unwrap_err()
            .message
            .contains("before the layout's epoch"));
        // Sonyflake ticks in 10 ms: a millisecond between two ticks is no tick.
        let sony = layout("sonyflake");
        let between = pack((sony.epoch_ms() + 15) as u64, 0);
        assert!(to_id(&sony, &between)
            .unwrap_err()
            .message
            .contains("10 ms ticks"));
        // Past the end of the time field.
        let late = pack((l.end_ms() + 1000) as u64, 0);
        assert!(to_id(&l, &late)
            .unwrap_err()
            .message
            .contains("past the layout's end"));
    }

    #[test]
    fn ids_a_uuidv7_cannot_hold_are_refused() {
        let l = Layout::from_argument("time=43,worker=8,sequence=12,unit=1s,epoch=2020-01-01+00")
            .unwrap();
        let id = top_of_tick(&l, l.last_tick());
        let e = from_id(&l, id, 0).unwrap_err();
        assert_eq!(e.class, Class::TimeOutOfRange);
        assert!(e.message.contains("cannot hold"), "{}", e.message);
    }

    #[test]
    fn bounds_are_the_smallest_uuid_of_the_tick() {
        let l = layout("sonyflake");
        let t = (l.epoch_ms() + 1_000_007) as i128 * 1000;
        let b = lower_bound(&l, t).unwrap();
        let first = from_id(&l, l.lower_bound(t).unwrap(), 0).unwrap();
        assert!(b <= first);
        let before = from_id(&l, l.lower_bound(t).unwrap() - 1, u128::MAX).unwrap();
        assert!(before < b);
        assert_eq!(unpack(&b), Some((l.epoch_ms() + 1_000_000, 0)));
    }

    #[test]
    fn uuidv7s_made_elsewhere_are_refused_by_their_check() {
        // UUIDv7s as another generator makes them: this layout's time, random bits.
        let l = layout("snowflake_id");
        let mut f = Filler::new([9; 32]);
        let ms = (l.epoch_ms() + 1_000_000_000) as u64;
        let passed = (0..100_000)
            .filter(|_| to_id(&l, &pack(ms, f.bits(74))).is_ok())
            .count();
        // One in 65,536 passes by chance: 1.5 expected (the seed is fixed: the count is too).
        assert!(passed < 8, "{passed} of 100,000 foreign UUIDs read as IDs");
        let e = to_id(&l, &pack(ms, 1)).unwrap_err();
        assert!(e.message.contains("do not check it"), "{}", e.message);
        // Any bit of the ID or of its check changed: refused.
        let u = from_id(&l, (1_000_000 << 22) | 77, 0).unwrap();
        for f in 36..74 {
            // Field bit f: rand_b's below 62, rand_a's (past the variant) above.
            let pos = if f < 62 { f } else { f + 2 };
            let v = u128::from_be_bytes(u) ^ (1 << pos);
            assert!(to_id(&l, &v.to_be_bytes()).is_err(), "field bit {f}");
        }
        // The random bits are not checked: any filler reads back.
        assert_eq!(
            to_id(&l, &from_id(&l, (1_000_000 << 22) | 77, u128::MAX).unwrap()).unwrap(),
            (1_000_000 << 22) | 77
        );
    }

    #[test]
    fn filler_is_seeded_and_does_not_repeat() {
        let mut a = Filler::new([1; 32]);
        let mut b = Filler::new([1; 32]);
        let mut c = Filler::new([2; 32]);
        let xs: Vec<u128> = (0..1000).map(|_| a.bits(128)).collect();
        let ys: Vec<u128> = (0..1000).map(|_| b.bits(128)).collect();
        assert_eq!(xs, ys, "same seed, same stream");
        assert_ne!(xs[0], c.bits(128));
        // Fewer bits are the low bits of a word, the rest zero.
        assert!((0..1000).all(|_| a.bits(52) >> 52 == 0));
        assert_eq!(random_bits(&layout("snowflake_id")), 36);
        let mut sorted = xs.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), xs.len());
        // Roughly half the bits set, as random bits are.
        let ones: u32 = xs.iter().map(|x| x.count_ones()).sum();
        assert!((60_000..68_000).contains(&ones), "{ones}");
    }

    proptest! {
        /// Custom layouts at the edges (time fields of a few bits, up to 62
        /// bits below the time and so fewer check bits, ticks of a second):
        /// every ID maps back, and the order holds.
        #[test]
        fn custom_layouts_round_trip(time in 1u32..50, worker in 0u32..=31, sequence in 0u32..=31,
                                     seconds in any::<bool>(), a in any::<u64>(), b in any::<u64>(),
                                     fa in any::<u128>(), fb in any::<u128>()) {
            prop_assume!(time + worker + sequence <= 63 && worker + sequence >= 1);
            let unit = if seconds { "1s" } else { "1ms" };
            let spec = format!("time={time},worker={worker},sequence={sequence},unit={unit},epoch=2025-01-01+00");
            let l = Layout::from_argument(&spec);
            prop_assume!(l.is_ok());
            let l = l.unwrap();
            let keep = |x: u64| {
                let tick = (x >> 7) % (l.last_tick() + 1);
                let tick = tick.min(((MAX_UNIX_MS - l.epoch_ms()) as u64) / l.unit_ms());
                l.compose(Parts { tick, worker: x & l.max_worker(), sequence: (x >> 3) & l.max_sequence() }) as i64
            };
            let (a, b) = (keep(a), keep(b));
            let (ua, ub) = (from_id(&l, a, fa).unwrap(), from_id(&l, b, fb).unwrap());
            prop_assert_eq!(to_id(&l, &ua).unwrap(), a);
            prop_assert_eq!(to_id(&l, &ub).unwrap(), b);
            if a != b {
                prop_assert_eq!(a.cmp(&b), ua.cmp(&ub));
            }
        }

        /// UUIDs compare as their IDs do, whatever their fillers, under
        /// every layout; and each maps back to its ID.
        #[test]
        fn order_and_round_trip(layout_index in 0usize..NAMED.len(), a in any::<u64>(), b in any::<u64>(),
                                fa in any::<u128>(), fb in any::<u128>()) {
            let l = NAMED[layout_index];
            let keep = |x: u64| {
                let tick = (x >> 20) % (l.last_tick() + 1);
                let tick = tick.min(((MAX_UNIX_MS - l.epoch_ms()) as u64) / l.unit_ms());
                l.compose(Parts { tick, worker: x & l.max_worker(), sequence: (x >> 8) & l.max_sequence() }) as i64
            };
            let (a, b) = (keep(a), keep(b));
            let (ua, ub) = (from_id(&l, a, fa).unwrap(), from_id(&l, b, fb).unwrap());
            prop_assert_eq!(to_id(&l, &ua).unwrap(), a);
            prop_assert_eq!(to_id(&l, &ub).unwrap(), b);
            if a != b {
                prop_assert_eq!((a as u64).cmp(&(b as u64)), ua.cmp(&ub));
            }
        }
    }
}
