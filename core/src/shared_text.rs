//! Text that one process writes and any process reads, without a lock: a
//! failure as [`Failure::to_text`] puts it, at most 2 kB. The shell keeps
//! these in shared memory for what the status's `problem` shows (the claims
//! worker's findings and troubles, the refusal found at start).
//!
//! A reader never takes a write under way for "no text": a status that
//! says nothing is wrong while something is, because the writer happened
//! to be descheduled in the middle of a write, is a monitoring view that
//! flaps (seen on a busy 2-core machine, where one node's `problem` read
//! empty and, a moment later from another node, full).

use crate::failure::{Class, Failure};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const TEXT_WORDS: usize = 256;
/// Spins before a reader starts sleeping between tries: a write that is
/// not interrupted takes well under a microsecond.
const SPINS: u32 = 1_000;
/// How long a reader waits for a write under way before it says so: only
/// a writer stopped in the middle of one (SIGSTOP, a debugger) takes this
/// long; a descheduled one is back within a scheduler tick.
const WAIT_FOR_WRITER: Duration = Duration::from_secs(1);

/// A string one process writes and others read, without a lock: a sequence
/// number that is odd while a write is under way (a seqlock).
#[repr(C)]
pub struct SharedText {
    seq: AtomicU64,
    len: AtomicU64,
    words: [AtomicU64; TEXT_WORDS],
}

impl Default for SharedText {
    fn default() -> Self {
        SharedText::new()
    }
}

impl SharedText {
    pub const fn new() -> SharedText {
        SharedText {
            seq: AtomicU64::new(0),
            len: AtomicU64::new(0),
            words: [const { AtomicU64::new(0) }; TEXT_WORDS],
        }
    }

    /// Sets the text (cut at a character boundary to fit). One writer only.
    /// The same text again writes nothing, so readers of a text that is
    /// set at every refresh meet no write under way while it stays.
    pub fn set(&self, text: &str) {
        let mut end = text.len().min(TEXT_WORDS * 8);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let bytes = &text.as_bytes()[..end];
        if self.holds(bytes) {
            return;
        }
        let s = self.open();
        self.fill(bytes);
        self.close(s);
    }

    /// Whether the text is `bytes` already: read by the one writer, which
    /// no other write can interleave with.
    fn holds(&self, bytes: &[u8]) -> bool {
        self.seq.load(Ordering::Relaxed) & 1 == 0
            && self.len.load(Ordering::Relaxed) == bytes.len() as u64
            && bytes
                .chunks(8)
                .zip(&self.words)
                .all(|(chunk, w)| w.load(Ordering::Relaxed) == word(chunk))
    }

    /// Marks a write as under way; returns the odd sequence number.
    fn open(&self) -> u64 {
        // A writer that died between the two increments left it odd.
        let s = self.seq.load(Ordering::Relaxed) | 1;
        self.seq.store(s, Ordering::Relaxed);
        fence(Ordering::Release);
        s
    }

    fn fill(&self, bytes: &[u8]) {
        for (i, chunk) in bytes.chunks(8).enumerate() {
            self.words[i].store(word(chunk), Ordering::Relaxed);
        }
        self.len.store(bytes.len() as u64, Ordering::Relaxed);
    }

    fn close(&self, s: u64) {
        self.seq.store(s + 1, Ordering::Release);
    }

    /// Sets the text to `f`, as `Failure::to_text` writes it, whole: a
    /// failure too long for the space loses its hint, then its detail, then
    /// the end of its message (marked), never the form `failure` reads.
    pub fn set_failure(&self, f: &Failure) {
        let mut f = f.clone();
        let room = TEXT_WORDS * 8;
        if f.to_text().len() > room {
            f.hint = None;
        }
        if f.to_text().len() > room {
            f.detail = None;
        }
        let over = f.to_text().len().saturating_sub(room);
        if over > 0 {
            let mut end = f.message.len().saturating_sub(over + "…".len());
            while !f.message.is_char_boundary(end) {
                end -= 1;
            }
            f.message = format!("{}…", &f.message[..end]);
        }
        self.set(&f.to_text());
    }

    /// The failure `Failure::to_text` put here, if any.
    pub fn failure(&self) -> Option<Failure> {
        self.get().and_then(|t| Failure::from_text(&t))
    }

    /// The text, `None` while it is empty. A write under way is waited for;
    /// one that does not end within a second is said, as a failure's text.
    pub fn get(&self) -> Option<String> {
        self.get_within(WAIT_FOR_WRITER)
    }

    /// `get`, waiting up to `limit` for a write under way (the tests give a
    /// bound no stalled thread of theirs can reach).
    fn get_within(&self, limit: Duration) -> Option<String> {
        let started = Instant::now();
        let mut tries = 0u32;
        loop {
            if let Some(read) = self.try_get() {
                return read;
            }
            tries = tries.saturating_add(1);
            if tries < SPINS {
                std::hint::spin_loop();
            } else if started.elapsed() < limit {
                std::thread::sleep(Duration::from_micros(100));
            } else {
                return Some(
                    Failure::new(
                        Class::Warning,
                        "this note could not be read: the process that writes it has been in the middle of writing it for over a second",
                    )
                    .to_text(),
                );
            }
        }
    }

    /// One consistent reading, or `None` if a write was under way.
    fn try_get(&self) -> Option<Option<String>> {
        let s = self.seq.load(Ordering::Acquire);
        if s & 1 == 1 {
            return None;
        }
        let len = (self.len.load(Ordering::Relaxed) as usize).min(TEXT_WORDS * 8);
        let mut bytes = Vec::with_capacity(len);
        for w in &self.words[..len.div_ceil(8)] {
            bytes.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        bytes.truncate(len);
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == s)
            .then(|| String::from_utf8(bytes).ok().filter(|t| !t.is_empty()))
    }
}

/// Up to 8 bytes as one little-endian word, zero-padded.
fn word(chunk: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..chunk.len()].copy_from_slice(chunk);
    u64::from_le_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_reader_that_meets_a_write_under_way_waits_for_it_and_never_reads_nothing() {
        let text = Arc::new(SharedText::new());
        text.set("the claims of other nodes could not be read");
        // The writer descheduled in the middle of its next write, for
        // longer than any spinning reader waits.
        let s = text.open();
        let reader = {
            let text = Arc::clone(&text);
            // A bound no descheduling of this thread can reach: what is
            // tested is that the reader waits, not how long the product
            // waits (a second), which a busy machine could outlast.
            std::thread::spawn(move || text.get_within(Duration::from_secs(3600)))
        };
        std::thread::sleep(Duration::from_millis(50));
        text.fill(b"the claims of other nodes could not be read: node b");
        text.close(s);
        assert_eq!(
            reader.join().unwrap().as_deref(),
            Some("the claims of other nodes could not be read: node b")
        );
    }

    #[test]
    fn a_writer_stopped_mid_write_is_said_not_taken_for_no_text() {
        let text = SharedText::new();
        text.set("a problem");
        let _ = text.open();
        let read = text.failure().expect("a failure, not nothing");
        assert!(read.message.contains("middle of writing"), "{read:?}");
    }

    #[test]
    fn the_same_text_again_writes_nothing() {
        let text = SharedText::new();
        text.set("one");
        let seq = text.seq.load(Ordering::Relaxed);
        text.set("one");
        assert_eq!(text.seq.load(Ordering::Relaxed), seq);
        text.set("two");
        assert_eq!(text.seq.load(Ordering::Relaxed), seq + 2);
        text.set("");
        assert_eq!(text.get(), None);
        text.set("");
        assert_eq!(text.seq.load(Ordering::Relaxed), seq + 4);
    }

    #[test]
    fn readers_beside_a_busy_writer_see_only_whole_texts() {
        let text = Arc::new(SharedText::new());
        let texts: Vec<String> = (0..8)
            .map(|i| format!("{i}").repeat(100 + 97 * i))
            .collect();
        text.set(&texts[0]);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reads = Arc::new(AtomicU64::new(0));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (text, texts, stop, reads) = (
                    Arc::clone(&text),
                    texts.clone(),
                    Arc::clone(&stop),
                    Arc::clone(&reads),
                );
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let t = text
                            .get_within(Duration::from_secs(3600))
                            .expect("never nothing");
                        assert!(texts.contains(&t), "a torn text of {} bytes", t.len());
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        // Writes go on until the readers have read beside them, however
        // late a busy machine runs them.
        let mut i = 0;
        while i < 20_000 || reads.load(Ordering::Relaxed) < 20_000 {
            text.set(&texts[i % texts.len()]);
            i += 1;
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
    }

    #[test]
    fn a_failure_too_long_for_its_space_is_cut_readably() {
        let text = SharedText::new();
        let short = Failure::new(Class::Corrupted, "short")
            .detail("d")
            .hint("h");
        text.set_failure(&short);
        assert_eq!(text.failure(), Some(short));
        let long = Failure::new(Class::Corrupted, "é".repeat(3000))
            .detail("d")
            .hint("h");
        text.set_failure(&long);
        let back = text.failure().expect("readable");
        assert_eq!(
            (back.class, back.detail.as_deref(), back.hint.as_deref()),
            (Class::Corrupted, None, None)
        );
        assert!(back.message.ends_with('…') && back.message.starts_with("éé"));
        assert!(back.to_text().len() <= 2048);
    }
}
