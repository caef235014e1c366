//! Text in shared memory that one process writes and any reads, without
//! a lock: a failure as `Failure::to_text` puts it, at most 2 kB.

use snowflake_id_core::Failure;
use std::sync::atomic::{fence, AtomicU64, Ordering};

const TEXT_WORDS: usize = 256;

/// A string one process writes and others read, without a lock: a sequence
/// number that is odd while a write is under way (a seqlock).
#[repr(C)]
pub struct SharedText {
    seq: AtomicU64,
    len: AtomicU64,
    words: [AtomicU64; TEXT_WORDS],
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
    pub fn set(&self, text: &str) {
        let mut end = text.len().min(TEXT_WORDS * 8);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let bytes = &text.as_bytes()[..end];
        // A writer that died between the two increments left it odd.
        let s = self.seq.load(Ordering::Relaxed) | 1;
        self.seq.store(s, Ordering::Relaxed);
        fence(Ordering::Release);
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.words[i].store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
        self.len.store(end as u64, Ordering::Relaxed);
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

    /// The text, or `None` while it is empty (or being written for long).
    pub fn get(&self) -> Option<String> {
        for _ in 0..1_000 {
            let s = self.seq.load(Ordering::Acquire);
            if s & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let len = (self.len.load(Ordering::Relaxed) as usize).min(TEXT_WORDS * 8);
            let mut bytes = Vec::with_capacity(len);
            for w in &self.words[..len.div_ceil(8)] {
                bytes.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
            }
            bytes.truncate(len);
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s {
                return String::from_utf8(bytes).ok().filter(|t| !t.is_empty());
            }
        }
        None
    }
}
