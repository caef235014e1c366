//! What one process found in the configuration files at a reload, shared
//! with every other: the files are the same for all, and parsing them again
//! in each new session cost every connection after a reload about half a
//! millisecond (`pgbench -C`, with one `ALTER SYSTEM` and a reload: 0.78 ms
//! over `SELECT 1` against a sequence's 0.14).
//!
//! One reload's judgement is a set of bits, one per setting whose text in
//! the files is invalid. A process that finds no judgement for its reload
//! parses the files and publishes what it found; one that finds the
//! judgement "nothing invalid" parses nothing. Where a setting is invalid
//! each process parses the files itself, for the text of its error.

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};

/// No reload's: published while a judgement is being replaced.
const NONE: i64 = i64::MIN;

pub struct Judged {
    stamp: AtomicI64,
    bits: AtomicU32,
}

impl Default for Judged {
    fn default() -> Self {
        Judged {
            stamp: AtomicI64::new(NONE),
            bits: AtomicU32::new(0),
        }
    }
}

impl Judged {
    /// The bits judged at the reload stamped `stamp`, if a process judged it.
    pub fn at(&self, stamp: i64) -> Option<u32> {
        if stamp == NONE || self.stamp.load(Ordering::Acquire) != stamp {
            return None;
        }
        let bits = self.bits.load(Ordering::Acquire);
        // A judgement replaced between the two loads is not taken.
        (self.stamp.load(Ordering::Acquire) == stamp).then_some(bits)
    }

    /// Publishes the bits found at the reload stamped `stamp`.
    pub fn publish(&self, stamp: i64, bits: u32) {
        self.stamp.store(NONE, Ordering::Release);
        self.bits.store(bits, Ordering::Release);
        self.stamp.store(stamp, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_judgement_is_found_for_its_own_reload_only() {
        let j = Judged::default();
        assert_eq!(j.at(5), None);
        j.publish(5, 0);
        assert_eq!(j.at(5), Some(0));
        assert_eq!(j.at(6), None);
        j.publish(6, 0b10);
        assert_eq!(j.at(6), Some(0b10));
        assert_eq!(j.at(5), None);
        assert_eq!(j.at(NONE), None);
    }

    #[test]
    fn a_reader_racing_a_writer_takes_a_whole_judgement_or_none() {
        use std::sync::Arc;
        let j = Arc::new(Judged::default());
        let w = {
            let j = Arc::clone(&j);
            std::thread::spawn(move || {
                for s in 1..50_000i64 {
                    j.publish(s, (s % 2) as u32);
                }
            })
        };
        for _ in 0..200_000 {
            for s in [7i64, 8, 9] {
                if let Some(bits) = j.at(s) {
                    assert_eq!(bits, (s % 2) as u32);
                }
            }
        }
        w.join().unwrap();
    }
}
