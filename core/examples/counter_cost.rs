//! What counting issued IDs costs on top of taking them, with every thread
//! taking from one shared generator word, as backends do.
//!
//! Three ways to count: not at all; one shared atomic counter (a second
//! contended cache line per ID); a slot per thread that only its owner
//! writes (what the extension does, one slot per Postgres process). Prints
//! ns per ID and the ratio to not counting. Run by bench/run.sh:
//!
//!     cargo run --release -p snowflake_id_core --example counter_cost

use snowflake_id_core::generator::{try_take, Limits, Shared};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Instant;

const IDS_PER_THREAD: u64 = 4_000_000;
const ROUNDS: usize = 7;

#[repr(align(64))]
#[derive(Default)]
struct Padded(AtomicU64);

#[derive(Clone, Copy, PartialEq)]
enum Counting {
    None,
    SharedAtomic,
    OwnSlot,
}

fn run(threads: usize, counting: Counting) -> f64 {
    let lim = Limits {
        sequence_bits: 12,
        last_tick: u64::MAX >> 13,
        lead_ticks: u64::MAX >> 13,
        queue_cap: 1,
    };
    let shared = Shared::resume(None, lim.sequence_bits);
    shared.publish_durable(u64::MAX >> 14);
    let total = Padded::default();
    let slots: Vec<Padded> = (0..threads).map(|_| Padded::default()).collect();
    let barrier = Barrier::new(threads);
    let started = std::sync::Mutex::new(None);
    std::thread::scope(|scope| {
        for slot in &slots {
            let (shared, total, barrier, started) = (&shared, &total, &barrier, &started);
            scope.spawn(move || {
                barrier.wait();
                started.lock().unwrap().get_or_insert_with(Instant::now);
                for _ in 0..IDS_PER_THREAD {
                    let t = try_take(shared, &lim, 1, 1, 0).expect("room for every ID");
                    match counting {
                        Counting::None => {}
                        Counting::SharedAtomic => {
                            total.0.fetch_add(t.count, Ordering::Relaxed);
                        }
                        Counting::OwnSlot => {
                            let s = &slot.0;
                            s.store(s.load(Ordering::Relaxed) + t.count, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    let elapsed = started.lock().unwrap().expect("threads ran").elapsed();
    let counted: u64 = total.0.load(Ordering::Relaxed)
        + slots
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .sum::<u64>();
    assert!(counting == Counting::None || counted == IDS_PER_THREAD * threads as u64);
    elapsed.as_nanos() as f64 / (IDS_PER_THREAD * threads as u64) as f64
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    println!("| threads | not counted (ns/ID) | shared atomic counter | per-process slot |");
    println!("|---:|---:|---:|---:|");
    for threads in [1, 2, 4] {
        let mut ns = [vec![], vec![], vec![]];
        // Interleaved rounds, so drift on a noisy machine touches all three alike.
        for _ in 0..ROUNDS {
            for (i, c) in [Counting::None, Counting::SharedAtomic, Counting::OwnSlot]
                .into_iter()
                .enumerate()
            {
                ns[i].push(run(threads, c));
            }
        }
        let [none, shared, own] = ns.map(median);
        println!(
            "| {threads} | {none:.1} | {shared:.1} ({:.2}×) | {own:.1} ({:.2}×) |",
            shared / none,
            own / none
        );
    }
}
