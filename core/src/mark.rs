//! The durable high-water mark: a small file that says "no ID with a tick
//! above this was ever issued", plus the settings those IDs were made under
//! and the server (system identifier, timeline) that wrote it.
//!
//! The file holds two fixed 512-byte slots, each with a checksum. A write
//! puts the new record into the first slot, `fdatasync`, then into the
//! second, `fdatasync`; IDs under the new mark are handed out only after
//! both returned. So a write torn by a crash damages one slot while the other
//! holds either the new record or the last published one, and a slot damaged
//! later (a flipped bit on disk) leaves its twin holding the same newest
//! record: one damaged slot never sends generation back below a published
//! mark. The file is created whole (temp file, fsync, rename, fsync of the
//! directory), so it is either absent or complete.
//!
//! Files written by 0.1.0 (format 1) alternated the slots instead, so there
//! the only valid slot may be older than a published mark: a format-1 file
//! with a damaged slot is treated as damaged.

use crate::layout::{FieldOrder, Layout, NAMED};
use crate::live_history::{self, LiveHistory};
use crate::timefmt::format_instant;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The state file's name inside the data directory.
pub const FILE_NAME: &str = "snowflake_id.state";

const SLOT: usize = 512;
/// The longest encoded record (format 4): format 3's fields, then the
/// history of live worker ids, as long as it needs to be.
const RECORD: usize = HISTORY_AT + live_history::MAX_ENCODED + 4;
const _: () = assert!(RECORD <= SLOT);
const HISTORY_AT: usize = 88;
const MAGIC: [u8; 8] = *b"SNOWFLK\x04";
/// Format 3: 96 bytes, no history of live worker ids (earlier builds of
/// 0.2.0 wrote it; WAL from one of them is still replayed).
const RECORD_V3: usize = 96;
const MAGIC_V3: [u8; 8] = *b"SNOWFLK\x03";
/// Format 2: 80 bytes, no ceiling (earlier builds of 0.2.0 wrote it; WAL
/// from one of them is still replayed).
const RECORD_V2: usize = 80;
const MAGIC_V2: [u8; 8] = *b"SNOWFLK\x02";
/// Format 1 (0.1.0): 64 bytes, no system identifier or timeline.
const MAGIC_V1: [u8; 8] = *b"SNOWFLK\x01";
const RECORD_V1: usize = 64;

/// The settings a mark was written under: what decides how IDs decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub epoch_ms: i64,
    pub unit_ms: u64,
    pub time_bits: u8,
    pub worker_bits: u8,
    pub sequence_bits: u8,
    pub order: FieldOrder,
}

impl Identity {
    pub fn of(layout: &Layout) -> Identity {
        Identity {
            epoch_ms: layout.epoch_ms(),
            unit_ms: layout.unit_ms(),
            time_bits: layout.time_bits() as u8,
            worker_bits: layout.worker_bits() as u8,
            sequence_bits: layout.sequence_bits() as u8,
            order: layout.order(),
        }
    }

    /// The layout this identity describes.
    pub fn layout(&self) -> Layout {
        let custom = crate::layout::CustomSpec {
            unit_ms: self.unit_ms,
            time_bits: u32::from(self.time_bits),
            worker_bits: u32::from(self.worker_bits),
            sequence_bits: u32::from(self.sequence_bits),
            order: self.order,
            epoch_ms: None,
        };
        let layout = NAMED.iter().find(|l| Identity::of(l) == *self).cloned();
        layout.unwrap_or_else(|| {
            custom
                .with_epoch(self.epoch_ms)
                .unwrap_or_else(|_| NAMED[0].with_epoch(self.epoch_ms))
        })
    }

    /// "the twitter layout" or "layout 'time=..' with epoch ...".
    pub fn describe(&self) -> String {
        let l = self.layout();
        match l.name() {
            Some(n) => format!("the {n} layout (epoch {})", format_instant(self.epoch_ms)),
            None => format!(
                "layout '{}' with epoch {}",
                l.spec(),
                format_instant(self.epoch_ms)
            ),
        }
    }
}

pub use crate::worker_id::WORKER_UNKNOWN;

/// One write of the mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Counts writes; the newest valid slot wins.
    pub generation: u64,
    pub identity: Identity,
    /// The worker id IDs were issued with, or [`WORKER_UNKNOWN`]: for the
    /// log and the status only (the mark covers every worker id alike).
    pub worker_id: u32,
    /// No ID with a tick above this was issued.
    pub mark_tick: u64,
    /// Wall clock at the write, for people reading the status.
    pub written_at_ms: i64,
    /// `GetSystemIdentifier()` of the server whose generator the mark
    /// covers; 0 when unknown (format 1).
    pub system_id: u64,
    /// The timeline that server was on; 0 when unknown (format 1).
    pub timeline: u32,
    /// The generator's `copies::continue_term` at the write (0: none), so
    /// that a restart, a crash or a promoted standby continues from copied
    /// IDs ahead of the clock as the server did, in every database at
    /// once. Bytes format 2 left zero, so a file written before reads as
    /// none, and a library before this one ignores it.
    pub continue_term: i64,
    /// The first tick no ID may carry while copied IDs a floor found more
    /// than an hour ahead of the clock are set aside, unsettled (0: none),
    /// and the database that holds them: every database's IDs stop below
    /// them, across a restart too (format 3).
    pub ceiling: Ceiling,
    /// The worker ids this server issued live IDs under, and when (format
    /// 4; a record before it reads as its worker id live since the epoch).
    pub history: LiveHistory,
}

/// Where IDs stop while copied IDs ahead of the clock are unsettled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ceiling {
    pub tick: u64,
    pub database: u32,
}

/// CRC-32C (Castagnoli), bit by bit: the record is 60 bytes and written a
/// few times a second, so a table buys nothing.
pub(crate) fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HISTORY_AT];
        b[0..8].copy_from_slice(&MAGIC);
        self.encode_fields(&mut b);
        b[56..64].copy_from_slice(&self.system_id.to_le_bytes());
        b[64..68].copy_from_slice(&self.timeline.to_le_bytes());
        b[68..76].copy_from_slice(&self.continue_term.to_le_bytes());
        b[76..84].copy_from_slice(&self.ceiling.tick.to_le_bytes());
        b[84..88].copy_from_slice(&self.ceiling.database.to_le_bytes());
        self.history.encode(&mut b);
        let crc = crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Whether `len` bytes can be one whole record (of any format): for
    /// records that come without a slot around them (WAL).
    pub fn whole(b: &[u8]) -> bool {
        Self::length(b).is_some_and(|(len, _)| len == b.len())
    }

    /// The length of the record `b` starts with, and its format.
    fn length(b: &[u8]) -> Option<(usize, u8)> {
        match b.get(0..8)? {
            m if m == MAGIC => Some((
                HISTORY_AT + LiveHistory::len_at(b.get(HISTORY_AT..)?)? + 4,
                4,
            )),
            m if m == MAGIC_V3 => Some((RECORD_V3, 3)),
            m if m == MAGIC_V2 => Some((RECORD_V2, 2)),
            m if m == MAGIC_V1 => Some((RECORD_V1, 1)),
            _ => None,
        }
    }

    /// The fields format 1 and 2 share, at the same offsets.
    fn encode_fields(&self, b: &mut [u8]) {
        b[8..16].copy_from_slice(&self.generation.to_le_bytes());
        b[16..24].copy_from_slice(&self.identity.epoch_ms.to_le_bytes());
        b[24..32].copy_from_slice(&self.identity.unit_ms.to_le_bytes());
        b[32] = self.identity.time_bits;
        b[33] = self.identity.worker_bits;
        b[34] = self.identity.sequence_bits;
        b[35] = match self.identity.order {
            FieldOrder::TimeWorkerSequence => 0,
            FieldOrder::TimeSequenceWorker => 1,
        };
        b[36..40].copy_from_slice(&self.worker_id.to_le_bytes());
        b[40..48].copy_from_slice(&self.mark_tick.to_le_bytes());
        b[48..56].copy_from_slice(&self.written_at_ms.to_le_bytes());
    }

    /// A record of any format, or `None` if `b` holds none intact.
    pub fn decode(b: &[u8]) -> Option<Record> {
        Self::decode_versioned(b).map(|(r, _)| r)
    }

    fn decode_versioned(b: &[u8]) -> Option<(Record, u8)> {
        let (len, version) = Self::length(b)?;
        let b = b.get(0..len)?;
        if crc32c(&b[0..len - 4]).to_le_bytes() != b[len - 4..len] {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let order = match b[35] {
            0 => FieldOrder::TimeWorkerSequence,
            1 => FieldOrder::TimeSequenceWorker,
            _ => return None,
        };
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let (system_id, timeline, continue_term) = match version {
            2..=4 => (u64_at(56), u32_at(64), u64_at(68) as i64),
            _ => (0, 0, 0),
        };
        let ceiling = match version {
            3 | 4 => Ceiling {
                tick: u64_at(76),
                database: u32_at(84),
            },
            _ => Ceiling::default(),
        };
        let worker_id = u32_at(36);
        let history = match version {
            4 => LiveHistory::decode(&b[HISTORY_AT..len - 4])?,
            _ => LiveHistory::unknown_since(worker_id),
        };
        Some((
            Record {
                generation: u64_at(8),
                identity: Identity {
                    epoch_ms: u64_at(16) as i64,
                    unit_ms: u64_at(24),
                    time_bits: b[32],
                    worker_bits: b[33],
                    sequence_bits: b[34],
                    order,
                },
                worker_id,
                mark_tick: u64_at(40),
                written_at_ms: u64_at(48) as i64,
                system_id,
                timeline,
                continue_term,
                ceiling,
                history,
            },
            version,
        ))
    }
}

/// What a read of the state file found.
// A record (with its history of worker ids) is read a few times per start:
// not worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// No file: this server never issued an ID (or the file was removed).
    Missing,
    Valid(Record),
    /// A file that holds no valid record.
    Damaged(String),
}

/// The state file of one data directory.
#[derive(Debug, Clone)]
pub struct MarkFile {
    dir: PathBuf,
}

impl MarkFile {
    pub fn in_dir(dir: impl Into<PathBuf>) -> MarkFile {
        MarkFile { dir: dir.into() }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    pub fn read(&self) -> io::Result<Stored> {
        let mut bytes = Vec::with_capacity(2 * SLOT);
        match File::open(self.path()) {
            Ok(mut f) => f.read_to_end(&mut bytes)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Stored::Missing),
            Err(e) => return Err(e),
        };
        if bytes.len() != 2 * SLOT {
            return Ok(Stored::Damaged(format!(
                "it is {} bytes long instead of {}",
                bytes.len(),
                2 * SLOT
            )));
        }
        let slots = [0, SLOT].map(|at| Record::decode_versioned(&bytes[at..]));
        Ok(match slots {
            [Some((a, _)), Some((b, _))] => Stored::Valid(if a.generation >= b.generation { a } else { b }),
            [Some((r, 2..=4)), None] | [None, Some((r, 2..=4))] => Stored::Valid(r),
            [Some(_), None] | [None, Some(_)] => Stored::Damaged(
                "one of its two records fails its checksum, and the file was written by snowflake_id 0.1.0, which kept the newest mark in one slot only".into(),
            ),
            [None, None] => Stored::Damaged("neither of its two records passes its checksum".into()),
        })
    }

    /// Whether [`MarkFile::write`] could open the file now (a missing file
    /// counts as writable: it is created whole). Writes nothing.
    pub fn check_writable(&self) -> io::Result<()> {
        match OpenOptions::new().write(true).open(self.path()) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Writes `rec` durably into both slots, one after the other, or creates
    /// the file whole if there is none.
    pub fn write(&self, rec: &Record) -> io::Result<()> {
        match OpenOptions::new().write(true).open(self.path()) {
            Ok(f) => {
                let bytes = rec.encode();
                for slot in [0, SLOT] {
                    f.write_all_at(&bytes, slot as u64)?;
                    f.sync_data()?;
                }
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.create(rec),
            Err(e) => Err(e),
        }
    }

    fn create(&self, rec: &Record) -> io::Result<()> {
        let mut bytes = vec![0u8; 2 * SLOT];
        for slot in [0, SLOT] {
            let rec = rec.encode();
            bytes[slot..slot + rec.len()].copy_from_slice(&rec);
        }
        replace_file(&self.dir, FILE_NAME, &bytes)
    }
}

/// Puts `bytes` into `dir/name` whole or not at all, durably: a temporary
/// file written and fsync'd, renamed over the old one, then the directory
/// fsync'd so that the rename itself survives a crash.
pub fn replace_file(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all_at(bytes, 0)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("snowflake-mark-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn record(generation: u64, mark_tick: u64) -> Record {
        Record {
            generation,
            identity: Identity::of(&Layout::by_name("snowflake_id").unwrap()),
            worker_id: 7,
            mark_tick,
            written_at_ms: 1_750_000_000_000,
            system_id: 7_300_000_000_000_000_001,
            timeline: 3,
            continue_term: 218_750_000_000,
            ceiling: Ceiling {
                tick: 1 << 40,
                database: 16_384,
            },
            history: LiveHistory::default()
                .with_live(3, 0, 1_000)
                .with_live(7, 50_000, 50_001),
        }
    }

    /// A record as snowflake_id 0.1.0 wrote it (format 1).
    fn encode_v1(r: &Record) -> [u8; RECORD_V1] {
        let mut b = [0u8; RECORD_V1];
        b[0..8].copy_from_slice(&MAGIC_V1);
        r.encode_fields(&mut b);
        let crc = crc32c(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn flip(path: &Path, at: usize) {
        let mut bytes = fs::read(path).unwrap();
        bytes[at] ^= 0x01;
        fs::write(path, bytes).unwrap();
    }

    #[test]
    fn records_round_trip_and_checksums_catch_damage() {
        let r = record(9, 123_456);
        assert_eq!(Record::decode(&r.encode()), Some(r));
        for i in 0..r.encode().len() {
            let mut b = r.encode();
            b[i] ^= 0x10;
            assert_eq!(
                Record::decode(&b),
                None,
                "a flipped bit at byte {i} went unnoticed"
            );
        }
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn a_torn_write_falls_back_to_the_last_published_mark() {
        let dir = temp_dir("torn");
        let f = MarkFile::in_dir(&dir);
        assert_eq!(f.read().unwrap(), Stored::Missing);
        f.write(&record(1, 100)).unwrap();
        f.write(&record(2, 200)).unwrap();
        f.write(&record(3, 300)).unwrap();
        assert_eq!(f.read().unwrap(), Stored::Valid(record(3, 300)));
        // Generation 4 torn halfway through the first slot: 3 is still there.
        let whole = record(4, 400).encode();
        let half = &whole[..whole.len() / 2];
        let file = OpenOptions::new().write(true).open(f.path()).unwrap();
        file.write_all_at(half, 0).unwrap();
        assert_eq!(f.read().unwrap(), Stored::Valid(record(3, 300)));
        // Torn in the second slot after the first was written: the new one,
        // never published, but above everything that was.
        file.write_all_at(&record(4, 400).encode(), 0).unwrap();
        file.write_all_at(half, SLOT as u64).unwrap();
        assert_eq!(f.read().unwrap(), Stored::Valid(record(4, 400)));
        assert!(!dir.join(format!("{FILE_NAME}.tmp")).exists());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn one_damaged_slot_never_loses_the_newest_mark() {
        let dir = temp_dir("rot");
        let f = MarkFile::in_dir(&dir);
        for (gen, mark) in [(1, 100), (2, 200), (3, 300)] {
            f.write(&record(gen, mark)).unwrap();
        }
        for slot in [0, SLOT] {
            for at in [slot, slot + 40, slot + record(3, 300).encode().len() - 1] {
                flip(&f.path(), at);
                assert_eq!(
                    f.read().unwrap(),
                    Stored::Valid(record(3, 300)),
                    "byte {at} flipped"
                );
                flip(&f.path(), at);
            }
        }
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn files_of_0_1_0_are_read_and_a_damaged_slot_there_is_refused() {
        let dir = temp_dir("v1");
        let f = MarkFile::in_dir(&dir);
        let (old, new) = (record(2, 200), record(3, 300));
        let mut bytes = vec![0u8; 2 * SLOT];
        bytes[..RECORD_V1].copy_from_slice(&encode_v1(&old));
        bytes[SLOT..SLOT + RECORD_V1].copy_from_slice(&encode_v1(&new));
        fs::write(f.path(), &bytes).unwrap();
        let unknown_origin = Record {
            system_id: 0,
            timeline: 0,
            continue_term: 0,
            ceiling: Ceiling::default(),
            history: LiveHistory::unknown_since(new.worker_id),
            ..new
        };
        assert_eq!(f.read().unwrap(), Stored::Valid(unknown_origin));
        // The newest of 0.1.0's alternating slots damaged: the other one may be
        // older than IDs already issued.
        flip(&f.path(), SLOT + 41);
        assert!(matches!(f.read().unwrap(), Stored::Damaged(why) if why.contains("0.1.0")));
        // The next write moves the file to the current format whole.
        f.write(&record(4, 400)).unwrap();
        flip(&f.path(), 41);
        assert_eq!(f.read().unwrap(), Stored::Valid(record(4, 400)));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn records_of_formats_2_and_3_are_read_without_what_came_later() {
        let r = record(5, 500);
        // Each format's first bytes are the one before's, under another magic.
        let older = |len: usize, magic: [u8; 8]| {
            let mut b = vec![0u8; len];
            b[..len - 4].copy_from_slice(&r.encode()[..len - 4]);
            b[0..8].copy_from_slice(&magic);
            let crc = crc32c(&b[0..len - 4]);
            b[len - 4..].copy_from_slice(&crc.to_le_bytes());
            b
        };
        let unknown = LiveHistory::unknown_since(r.worker_id);
        let v3 = Record {
            history: unknown,
            ..r
        };
        assert_eq!(Record::decode(&older(RECORD_V3, MAGIC_V3)), Some(v3));
        let v2 = Record {
            ceiling: Ceiling::default(),
            ..v3
        };
        assert_eq!(Record::decode(&older(RECORD_V2, MAGIC_V2)), Some(v2));
        assert_eq!(Record::decode(&r.encode()), Some(r));
    }

    #[test]
    fn a_file_with_no_valid_record_is_damaged_not_missing() {
        let dir = temp_dir("damaged");
        let f = MarkFile::in_dir(&dir);
        fs::write(f.path(), vec![0xAB; 2 * SLOT]).unwrap();
        assert!(matches!(f.read().unwrap(), Stored::Damaged(why) if why.contains("checksum")));
        fs::write(f.path(), b"short").unwrap();
        assert!(matches!(f.read().unwrap(), Stored::Damaged(why) if why.contains("5 bytes")));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn identities_name_their_layouts() {
        let tw = Identity::of(&Layout::by_name("twitter").unwrap());
        assert_eq!(
            tw.describe(),
            "the twitter layout (epoch 2010-11-04 01:42:54.657+00)"
        );
        let moved = Identity::of(&Layout::by_name("twitter").unwrap().with_epoch(0));
        assert_eq!(
            moved.describe(),
            "layout 'time=41,worker=10,sequence=12,unit=1ms' with epoch 1970-01-01 00:00:00+00"
        );
    }
}
