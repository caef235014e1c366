//! Deciding, at start, where generation may resume: above the durable mark,
//! and only under the settings the issued IDs were made under; and, once
//! recovery is over, whether the server runs on a copy of another server's
//! data (a promoted standby, a restored backup, a point-in-time recovery)
//! and how far above the mark that puts the floor.

use crate::failure::{Class, Failure};
use crate::layout::{Layout, Parts};
use crate::mark::{Identity, Record, Stored};

/// What generation may do after the server (or its shared memory) starts.
// A record (with its history of worker ids) is read a few times per start:
// not worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// Nothing was ever issued here.
    Fresh,
    /// Continue above the mark of `rec`. `worker_was` is set when the
    /// worker id changed.
    Continue {
        rec: Record,
        worker_was: Option<u32>,
    },
    /// Generation must not start: the reason, to raise on every call.
    Refused(Failure),
}

const ADOPT_HINT: &str = "run SELECT snowflake_adopt_settings(); as a superuser";

/// Compares what the state file holds with the settings the server runs with
/// (`worker_id` is `None` where it is settled only once the server runs).
pub fn decide(stored: &Stored, layout: &Layout, worker_id: Option<u32>, path: &str) -> Resume {
    match stored {
        Stored::Missing => Resume::Fresh,
        Stored::Damaged(why) => Resume::Refused(
            Failure::new(Class::Corrupted, format!("the durable state file \"{path}\" is damaged: {why}"))
                .detail("Without it, IDs issued before the last restart could be issued again.")
                .hint(format!(
                    "If the system clock is certainly later than every ID this server issued, {ADOPT_HINT} to start a new state from the clock. Do not put back an older copy of the file: it would resume below IDs already issued."
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
            rec: *rec,
            worker_was: worker_id
                .filter(|w| *w != rec.worker_id && rec.worker_id != crate::mark::WORKER_UNKNOWN)
                .map(|_| rec.worker_id),
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

/// What a server knows about where its data came from once recovery is
/// over (or at start, when there was none).
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// This server's `GetSystemIdentifier()` and timeline now.
    pub system_id: u64,
    pub timeline: u32,
    /// Recovery files (`standby.signal`, `recovery.signal`, `backup_label`)
    /// that were in the data directory at start, by name.
    pub recovery_files: &'a [&'a str],
    /// The system identifier and timeline recorded with the newest mark this
    /// generator knows of (state file or WAL replay); 0 where unknown.
    pub mark: Option<(u64, u32)>,
    /// Mark records replayed from WAL since the server started.
    pub replayed_marks: u64,
    /// The time of the last commit or abort replayed (`GetLatestXTime()`),
    /// which Postgres keeps after archive recovery and on standbys only.
    pub latest_xtime_ms: Option<i64>,
}

/// What [`after_copy`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyFloor {
    /// A tick no new ID may carry or go below, when more than the mark is needed.
    pub floor_tick: Option<u64>,
    /// Why the server is a copy and what it resumes above; `None` when it is
    /// not a copy.
    pub note: Option<String>,
}

/// Why the data of this server is a copy of another's, if it is.
fn copied_because(o: &Origin) -> Option<String> {
    if !o.recovery_files.is_empty() {
        return Some(format!(
            "it started with {} in its data directory",
            o.recovery_files.join(" and ")
        ));
    }
    let (system_id, timeline) = o.mark?;
    if system_id != 0 && system_id != o.system_id {
        return Some(format!(
            "its mark was written by another cluster (system identifier {system_id})"
        ));
    }
    (timeline != 0 && timeline != o.timeline).then(|| {
        format!(
            "its mark was written on timeline {timeline}, and it now runs on timeline {}",
            o.timeline
        )
    })
}

/// Where generation may resume on a server that may run on copied data.
///
/// Mark records travel in WAL ahead of every row holding an ID above the
/// previous mark, so when the replayed WAL carried marks, the generator
/// (raised by each replayed mark) already stands above every ID in a replayed
/// committed row. Without any (a primary that did not WAL-log marks, or a
/// PostgreSQL without custom WAL resource managers), the last replayed commit
/// time plus the largest lead IDs may have had bounds them instead.
pub fn after_copy(layout: &Layout, lead_ticks: u64, o: &Origin) -> CopyFloor {
    let Some(why) = copied_because(o) else {
        return CopyFloor {
            floor_tick: None,
            note: None,
        };
    };
    if o.replayed_marks > 0 {
        return CopyFloor {
            floor_tick: None,
            note: Some(format!(
                "this server runs on a copy of another server's data ({why}); it resumes above the mark replayed from WAL"
            )),
        };
    }
    match o.latest_xtime_ms.and_then(|t| layout.tick_at_ms(t)) {
        Some(t) => {
            let floor = t.saturating_add(lead_ticks).min(layout.last_tick());
            CopyFloor {
                floor_tick: Some(floor),
                note: Some(format!(
                    "this server runs on a copy of another server's data ({why}) and replayed no mark; it resumes above the last replayed commit ({}) plus snowflake_id.max_lead",
                    crate::timefmt::format_instant(layout.tick_start_ms(t))
                )),
            }
        }
        None => CopyFloor {
            floor_tick: None,
            note: Some(format!(
                "this server runs on a copy of another server's data ({why}), but neither a replayed mark nor a replayed commit time is known; it resumes above its state file's mark only"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Spec, DEFAULT_EPOCH_MS};

    fn rec(layout: &Layout, worker: u32, mark: u64) -> Record {
        Record {
            generation: 5,
            identity: Identity::of(layout),
            worker_id: worker,
            mark_tick: mark,
            written_at_ms: 0,
            system_id: 11,
            timeline: 1,
            continue_term: 0,
            ceiling: Default::default(),
            history: Default::default(),
        }
    }

    fn origin<'a>(mark: Option<&Record>, files: &'a [&'a str]) -> Origin<'a> {
        Origin {
            system_id: 11,
            timeline: 1,
            recovery_files: files,
            mark: mark.map(|r| (r.system_id, r.timeline)),
            replayed_marks: 0,
            latest_xtime_ms: Some(DEFAULT_EPOCH_MS + 5_000),
        }
    }

    #[test]
    fn a_server_on_its_own_data_needs_no_floor() {
        let l = Layout::by_name("snowflake_id").unwrap();
        let r = rec(&l, 3, 1000);
        let s = after_copy(&l, 10_000, &origin(Some(&r), &[]));
        assert_eq!((s.floor_tick, s.note), (None, None));
        // Format-1 marks carry no origin: not a copy by themselves.
        let v1 = Record {
            system_id: 0,
            timeline: 0,
            ..r
        };
        assert_eq!(after_copy(&l, 10_000, &origin(Some(&v1), &[])).note, None);
        assert_eq!(after_copy(&l, 10_000, &origin(None, &[])).note, None);
    }

    #[test]
    fn copies_are_recognised_and_floored_when_no_mark_was_replayed() {
        let l = Layout::by_name("snowflake_id").unwrap();
        let r = rec(&l, 3, 1000);
        let promoted = Record { timeline: 1, ..r };
        let mut o = origin(Some(&promoted), &[]);
        o.timeline = 2;
        let s = after_copy(&l, 10_000, &o);
        assert_eq!(
            s.floor_tick,
            Some(15_000),
            "last commit 5 s after the epoch, plus 10 s"
        );
        assert!(s
            .note
            .unwrap()
            .contains("on timeline 1, and it now runs on timeline 2"));
        let other = Record { system_id: 12, ..r };
        let s = after_copy(&l, 10_000, &origin(Some(&other), &[]));
        assert!(s.note.unwrap().contains("system identifier 12"));
        let s = after_copy(&l, 0, &origin(Some(&r), &["backup_label"]));
        assert_eq!(s.floor_tick, Some(5_000));
        assert!(s.note.unwrap().contains("started with backup_label"));
        // A replayed mark already covers every replayed row: no extra lead.
        let mut o = origin(Some(&r), &["standby.signal"]);
        o.replayed_marks = 4;
        let s = after_copy(&l, 10_000, &o);
        assert_eq!(s.floor_tick, None);
        assert!(s.note.unwrap().contains("mark replayed from WAL"));
        // Nothing replayed and no commit time: said, not guessed.
        let mut o = origin(Some(&r), &["recovery.signal"]);
        o.latest_xtime_ms = None;
        let s = after_copy(&l, 10_000, &o);
        assert_eq!(s.floor_tick, None);
        assert!(s.note.unwrap().contains("state file's mark only"));
        // The floor never passes the layout's last tick.
        let mut o = origin(Some(&r), &["backup_label"]);
        o.latest_xtime_ms = Some(l.end_ms() - 1);
        assert_eq!(after_copy(&l, 10_000, &o).floor_tick, Some(l.last_tick()));
    }

    #[test]
    fn same_settings_continue_and_a_new_worker_is_noted() {
        let l = Layout::by_name("snowflake_id").unwrap();
        let r = rec(&l, 3, 1000);
        assert_eq!(
            decide(&Stored::Valid(r), &l, Some(3), "f"),
            Resume::Continue {
                rec: r,
                worker_was: None
            }
        );
        assert_eq!(
            decide(&Stored::Valid(r), &l, Some(4), "f"),
            Resume::Continue {
                rec: r,
                worker_was: Some(3)
            }
        );
        assert_eq!(decide(&Stored::Missing, &l, Some(4), "f"), Resume::Fresh);
    }

    #[test]
    fn a_changed_layout_or_epoch_is_refused_with_a_way_out() {
        let l = Layout::by_name("snowflake_id").unwrap();
        let r = rec(&l, 3, 1000);
        for other in [
            Layout::by_name("twitter").unwrap(),
            l.with_epoch(l.epoch_ms() + 1),
        ] {
            let Resume::Refused(f) = decide(&Stored::Valid(r), &other, Some(3), "f") else {
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
        let Resume::Refused(f) = decide(
            &Stored::Damaged("x".into()),
            &l,
            Some(3),
            "/d/snowflake_id.state",
        ) else {
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
