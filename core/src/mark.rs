//! The durable high-water mark: a small file that says "no ID with a tick
//! above this was ever issued", plus the settings those IDs were made under.
//!
//! The file holds two fixed 512-byte slots. Each write goes to the slot the
//! newest record is not in, followed by `fdatasync`; each slot carries a
//! checksum, so a write torn by a crash damages only the slot being written
//! and the other still holds the previous mark. That previous mark is safe:
//! IDs under a new mark are handed out only after the write of that mark has
//! returned. The file is created whole (temp file, fsync, rename, fsync of
//! the directory), so it is either absent or complete.

use crate::layout::{FieldOrder, Layout, NAMED};
use crate::timefmt::format_instant;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The state file's name inside the data directory.
pub const FILE_NAME: &str = "snowflake_id.state";

const SLOT: usize = 512;
const RECORD: usize = 64;
const MAGIC: [u8; 8] = *b"SNOWFLK\x01";

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

/// One write of the mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Counts writes; the newest valid slot wins.
    pub generation: u64,
    pub identity: Identity,
    pub worker_id: u32,
    /// No ID with a tick above this was issued.
    pub mark_tick: u64,
    /// Wall clock at the write, for people reading the status.
    pub written_at_ms: i64,
}

/// CRC-32C (Castagnoli), bit by bit: the record is 60 bytes and written a
/// few times a second, so a table buys nothing.
fn crc32c(data: &[u8]) -> u32 {
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
    pub fn encode(&self) -> [u8; RECORD] {
        let mut b = [0u8; RECORD];
        b[0..8].copy_from_slice(&MAGIC);
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
        let crc = crc32c(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Option<Record> {
        let b = b.get(0..RECORD)?;
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        if b[0..8] != MAGIC || crc32c(&b[0..60]).to_le_bytes() != b[60..64] {
            return None;
        }
        let order = match b[35] {
            0 => FieldOrder::TimeWorkerSequence,
            1 => FieldOrder::TimeSequenceWorker,
            _ => return None,
        };
        Some(Record {
            generation: u64_at(8),
            identity: Identity {
                epoch_ms: u64_at(16) as i64,
                unit_ms: u64_at(24),
                time_bits: b[32],
                worker_bits: b[33],
                sequence_bits: b[34],
                order,
            },
            worker_id: u32::from_le_bytes(b[36..40].try_into().unwrap()),
            mark_tick: u64_at(40),
            written_at_ms: u64_at(48) as i64,
        })
    }
}

/// What a read of the state file found.
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
        let newest = [0, SLOT]
            .iter()
            .filter_map(|&at| Record::decode(&bytes[at..]))
            .max_by_key(|r| r.generation);
        Ok(match newest {
            Some(r) => Stored::Valid(r),
            None => Stored::Damaged("neither of its two records passes its checksum".into()),
        })
    }

    /// Writes `rec` durably: into its slot (`generation % 2`) of the existing
    /// file, or by creating the file whole if there is none.
    pub fn write(&self, rec: &Record) -> io::Result<()> {
        let slot = (rec.generation % 2) as usize * SLOT;
        match OpenOptions::new().write(true).open(self.path()) {
            Ok(f) => {
                f.write_all_at(&rec.encode(), slot as u64)?;
                f.sync_data()
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.create(rec, slot),
            Err(e) => Err(e),
        }
    }

    fn create(&self, rec: &Record, slot: usize) -> io::Result<()> {
        let tmp = self.dir.join(format!("{FILE_NAME}.tmp"));
        let mut bytes = vec![0u8; 2 * SLOT];
        bytes[slot..slot + RECORD].copy_from_slice(&rec.encode());
        {
            let f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            f.write_all_at(&bytes, 0)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, self.path())?;
        sync_dir(&self.dir)
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
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
        }
    }

    #[test]
    fn records_round_trip_and_checksums_catch_damage() {
        let r = record(9, 123_456);
        assert_eq!(Record::decode(&r.encode()), Some(r));
        for i in 0..RECORD {
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
    fn the_newest_slot_wins_and_a_torn_write_falls_back_to_the_other() {
        let dir = temp_dir("slots");
        let f = MarkFile::in_dir(&dir);
        assert_eq!(f.read().unwrap(), Stored::Missing);
        f.write(&record(1, 100)).unwrap();
        f.write(&record(2, 200)).unwrap();
        f.write(&record(3, 300)).unwrap();
        assert_eq!(f.read().unwrap(), Stored::Valid(record(3, 300)));
        // Tear the write of generation 4 halfway: generation 3 is still there.
        let half = &record(4, 400).encode()[..RECORD / 2];
        OpenOptions::new()
            .write(true)
            .open(f.path())
            .unwrap()
            .write_all_at(half, 0)
            .unwrap();
        assert_eq!(f.read().unwrap(), Stored::Valid(record(3, 300)));
        assert!(!dir.join(format!("{FILE_NAME}.tmp")).exists());
        fs::remove_dir_all(dir).unwrap();
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
