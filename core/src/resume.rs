//! Deciding, at start, where generation may resume: above the durable mark,
//! and only under the settings the issued IDs were made under.

use crate::failure::{Class, Failure};
use crate::layout::{Layout, Parts};
use crate::mark::{Identity, Record, Stored};

/// What generation may do after the server (or its shared memory) starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// Nothing was ever issued here.
    Fresh,
    /// Continue above `mark`. `worker_was` is set when the worker id changed.
    Continue {
        mark: u64,
        generation: u64,
        worker_was: Option<u32>,
    },
    /// Generation must not start: the reason, to raise on every call.
    Refused(Failure),
}

const ADOPT_HINT: &str = "run SELECT snowflake_adopt_settings(); as a superuser";

/// Compares what the state file holds with the settings the server runs with.
pub fn decide(stored: &Stored, layout: &Layout, worker_id: u32, path: &str) -> Resume {
    match stored {
        Stored::Missing => Resume::Fresh,
        Stored::Damaged(why) => Resume::Refused(
            Failure::new(Class::Corrupted, format!("the durable state file \"{path}\" is damaged: {why}"))
                .detail("Without it, IDs issued before the last restart could be issued again.")
                .hint(format!(
                    "Restore the file from a backup; or, if the system clock is certainly later than every ID this server issued, {ADOPT_HINT} to start a new state from the clock."
                )),
        ),
        Stored::Valid(rec) if rec.identity != Identity::of(layout) => Resume::Refused(
            Failure::new(
                Class::NotReady,
                format!(
                    "this server's IDs were issued under {}, but it now runs with {}",
                    rec.identity.describe(),
                    Identity::of(layout).describe()
                ),
            )
            .detail("New IDs could repeat the numbers of issued ones, and issued IDs would decode to other times.")
            .hint(format!(
                "Set snowflake_id.layout and snowflake_id.epoch back and restart; or, to move to the new settings for good, {ADOPT_HINT}: new IDs then continue above every ID issued before."
            )),
        ),
        Stored::Valid(rec) => Resume::Continue {
            mark: rec.mark_tick,
            generation: rec.generation,
            worker_was: (rec.worker_id != worker_id).then_some(rec.worker_id),
        },
    }
}

/// The mark under the `new` layout above which every new ID is numerically
/// greater than any ID the old record could cover; `None` when any tick of
/// the new layout will do (nothing is known of the past).
pub fn adopted_mark(old: Option<&Record>, new: &Layout) -> Result<Option<u64>, Failure> {
    let Some(old) = old else { return Ok(None) };
    let old_layout = old.identity.layout();
    let old_max = old_layout.compose(Parts {
        tick: old.mark_tick,
        worker: old_layout.max_worker(),
        sequence: old_layout.max_sequence(),
    });
    let first_tick = (old_max >> new.low_bits()) + 1;
    if first_tick > new.last_tick() {
        return Err(Failure::new(
            Class::InvalidParameter,
            format!(
                "{} cannot issue IDs above the ones already issued (up to {old_max})",
                new.title()
            ),
        )
        .hint(
            "Choose a layout with more time bits or an earlier epoch, or keep the old settings.",
        ));
    }
    Ok(first_tick.checked_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Spec;

    fn rec(layout: &Layout, worker: u32, mark: u64) -> Record {
        Record {
            generation: 5,
            identity: Identity::of(layout),
            worker_id: worker,
            mark_tick: mark,
            written_at_ms: 0,
        }
    }

    #[test]
    fn same_settings_continue_and_a_new_worker_is_noted() {
        let l = Layout::by_name("snowflake_id").unwrap();
        let r = rec(&l, 3, 1000);
        assert_eq!(
            decide(&Stored::Valid(r), &l, 3, "f"),
            Resume::Continue {
                mark: 1000,
                generation: 5,
                worker_was: None
            }
        );
        assert_eq!(
            decide(&Stored::Valid(r), &l, 4, "f"),
            Resume::Continue {
                mark: 1000,
                generation: 5,
                worker_was: Some(3)
            }
        );
        assert_eq!(decide(&Stored::Missing, &l, 4, "f"), Resume::Fresh);
    }

    #[test]
    fn a_changed_layout_or_epoch_is_refused_with_a_way_out() {
        let l = Layout::by_name("snowflake_id").unwrap();
        let r = rec(&l, 3, 1000);
        for other in [
            Layout::by_name("twitter").unwrap(),
            l.with_epoch(l.epoch_ms() + 1),
        ] {
            let Resume::Refused(f) = decide(&Stored::Valid(r), &other, 3, "f") else {
                panic!()
            };
            assert_eq!(f.class, Class::NotReady);
            assert!(
                f.message
                    .contains("were issued under the snowflake_id layout"),
                "{}",
                f.message
            );
            assert!(f.hint.unwrap().contains("snowflake_adopt_settings()"));
        }
        let Resume::Refused(f) =
            decide(&Stored::Damaged("x".into()), &l, 3, "/d/snowflake_id.state")
        else {
            panic!()
        };
        assert_eq!(f.class, Class::Corrupted);
        assert!(f
            .message
            .contains("\"/d/snowflake_id.state\" is damaged: x"));
    }

    #[test]
    fn adopting_puts_new_ids_above_all_old_ones() {
        let old = Layout::by_name("snowflake_id").unwrap();
        let r = rec(&old, 3, 60_000_000_000); // late 2026
        let old_max = old.compose(Parts {
            tick: 60_000_000_000,
            worker: 1023,
            sequence: 4095,
        });
        let Spec::Custom(c) = Spec::parse("time=43,worker=8,sequence=12,unit=1ms").unwrap() else {
            panic!()
        };
        for new in [
            Layout::by_name("sonyflake").unwrap(),
            c.with_epoch(old.epoch_ms()).unwrap(),
            old.with_epoch(0),
        ] {
            let mark = adopted_mark(Some(&r), &new).unwrap().unwrap();
            let first_new = new.compose(Parts {
                tick: mark + 1,
                worker: 0,
                sequence: 0,
            });
            assert!(first_new > old_max, "{}", new.describe());
            let just_below = new.compose(Parts {
                tick: mark,
                worker: new.max_worker(),
                sequence: new.max_sequence(),
            });
            assert!(
                just_below <= old_max + (1 << new.low_bits()),
                "{} goes further than needed",
                new.describe()
            );
        }
        // 53-bit IDs stay below 2^53, far below these 63-bit ones: no way up.
        let e = adopted_mark(Some(&r), &Layout::by_name("js53").unwrap()).unwrap_err();
        assert!(
            e.message
                .starts_with("the js53 layout cannot issue IDs above"),
            "{}",
            e.message
        );
        assert_eq!(adopted_mark(None, &old).unwrap(), None);
    }
}
