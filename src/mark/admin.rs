//! The superuser's ways to re-establish the mark: adopt the current
//! settings after a refusal, and resume above IDs that arrived without it.

use super::file::{file, io_failure};
use super::{publish, read_only, refused, resume, write};
use crate::pg::clock::now_ms;
use crate::pg::{role, xlog};
use crate::shmem::Shmem;
use snowflake_id_core::config::Config;
use snowflake_id_core::copies;
use snowflake_id_core::generator::{Limits, Reservation};
use snowflake_id_core::layout::Layout;
use snowflake_id_core::live_history::LiveHistory;
use snowflake_id_core::mark::{Identity, Stored, WORKER_UNKNOWN};
use snowflake_id_core::resume::adopted_mark;
use snowflake_id_core::timefmt::{format_duration, format_instant};
use snowflake_id_core::{Class, Failure};

/// How long these functions wait for a synchronous standby; a superuser
/// can cancel them sooner.
const ADMIN_STANDBY_WAIT_MS: u64 = 60_000;

/// A superuser, on a server that is not in recovery: what every function
/// that moves this server's generation by hand asks of its caller.
pub fn require_superuser(function: &str) -> Result<(), Failure> {
    if !role::is_superuser() {
        return Err(Failure::new(
            Class::Privilege,
            format!("only a superuser may run {function}"),
        ));
    }
    if xlog::in_recovery() {
        return Err(read_only());
    }
    Ok(())
}

/// Re-establishes the durable state under the current settings, so that new
/// IDs continue numerically above every ID the old state could cover.
pub fn adopt(shm: &Shmem, cfg: &Config, lim: &Limits) -> Result<String, Failure> {
    require_superuser("snowflake_adopt_settings()")?;
    let (w, text) = shm.mark.with_lock(|| {
        // Only a refused state is replaced: a running generator is never moved back.
        if shm.refusal.mark().is_none() {
            return Ok((
                None,
                format!(
                    "nothing to adopt: IDs are already issued under {} with {}",
                    Identity::of(&cfg.layout).describe(),
                    worker_words(shm.worker.get().unwrap_or(WORKER_UNKNOWN))
                ),
            ));
        }
        let file = file();
        let old = match file.read().map_err(|e| io_failure("read", e))? {
            Stored::Valid(r) => Some(r),
            Stored::Missing => None,
            Stored::Damaged(_) => {
                let aside = crate::pg::datadir::data_dir()
                    .join(format!("snowflake_id.state.damaged-{}", now_ms()));
                std::fs::rename(file.path(), &aside).map_err(|e| io_failure("move aside", e))?;
                None
            }
        };
        let floor = adopted_mark(old.as_ref(), &cfg.layout)?;
        let now_tick = cfg.layout.tick_at_ms(now_ms()).unwrap_or(0);
        shm.gen.revoke_durable();
        shm.gen.reset(floor, cfg.layout.sequence_bits());
        shm.mark.set_generation(old.map_or(0, |r| r.generation));
        resume::floor_if_copied(shm, cfg, lim);
        let reservation = Reservation::for_layout(&cfg.layout);
        let mark = reservation.target(&shm.gen, lim, now_tick, floor.unwrap_or(0));
        // IDs of the old settings (or of a state no one can read) may be
        // anywhere below the new ones: no backfill goes there.
        let backfill_from = floor.map_or(now_tick, |f| f + 1);
        shm.mark.set_history(LiveHistory::adopted(
            backfill_from,
            shm.worker.get().unwrap_or(WORKER_UNKNOWN),
        ));
        let w = write(shm, cfg, mark)?;
        shm.refusal.lift_mark();
        let from = match old {
            Some(r) => format!("{} ({})", r.identity.describe(), worker_words(r.worker_id)),
            None => "no readable state".to_string(),
        };
        let first = cfg
            .layout
            .tick_start_ms(floor.map_or(now_tick, |f| (f + 1).max(now_tick)));
        Ok((
            Some(w),
            format!(
                "adopted {} with {} (from {from}); the next ID carries a time of {} or later",
                Identity::of(&cfg.layout).describe(),
                worker_words(shm.worker.get().unwrap_or(WORKER_UNKNOWN)),
                format_instant(first)
            ),
        ))
    })?;
    if let Some(w) = w {
        publish(shm, w, ADMIN_STANDBY_WAIT_MS)?;
    }
    Ok(text)
}

/// Puts every later ID of this server above `id` (an ID of this server's
/// layout, from any worker), durably: for data that arrived without the
/// mark where the extension cannot find it itself. Superuser only.
pub fn resume_above(shm: &Shmem, cfg: &Config, lim: &Limits, id: i64) -> Result<String, Failure> {
    require_superuser("snowflake_resume_above()")?;
    let said = floor_above(shm, cfg, lim, id, ADMIN_STANDBY_WAIT_MS)?;
    super::lift_copies(shm, cfg, None);
    Ok(said)
}

/// Puts every later ID of this server above `id`, durably, waiting at most
/// `standby_wait_ms` for a synchronous standby: what `resume_above` does,
/// and what the floor of copied data does on the extension's own behalf.
pub fn floor_above(
    shm: &Shmem,
    cfg: &Config,
    lim: &Limits,
    id: i64,
    standby_wait_ms: u64,
) -> Result<String, Failure> {
    if xlog::in_recovery() {
        return Err(read_only());
    }
    if let Some(f) = refused(shm) {
        return Err(f);
    }
    let layout: &Layout = &cfg.layout;
    let tick = layout.decode_tick(id)?;
    if tick >= layout.last_tick() {
        return Err(Failure::new(
            Class::IdOutOfRange,
            format!("{} has no tick left above the ID {id}", layout.title()),
        )
        .hint("Move this server to a layout with a later end; see \"Changing the layout, epoch or worker id\" in docs/operators.md."));
    }
    let now = now_ms();
    let now_tick = layout.tick_at_ms(now).unwrap_or(0);
    // IDs made by a clock ahead of this one continue from their time, as a
    // sequence would, instead of waiting for this clock (up to an hour).
    // Said before the floor is raised: sessions issuing meanwhile would
    // otherwise find the next ID that far ahead of their clock and fail.
    let continues = copies::continue_term(layout, id, now);
    if let Some(term) = continues {
        shm.continue_with(term);
    }
    let w = shm.mark.with_lock(|| {
        resume::floor_if_copied(shm, cfg, lim);
        // IDs of servers whose live worker ids are not known here: no
        // backfill below them but under a worker id an operator vouches for.
        shm.mark
            .set_history(shm.mark.history().with_copied_below(tick + 1));
        shm.gen.raise_floor(tick, lim.sequence_bits);
        let reservation = Reservation::for_layout(layout);
        let mark = reservation.next_mark(&shm.gen, lim, now_tick, tick + 1, shm.mark.tick());
        write(shm, cfg, mark)
    })?;
    publish(shm, w, standby_wait_ms)?;
    let first_tick = (shm.gen.next() >> lim.sequence_bits).max(now_tick);
    let first_ms = layout.tick_start_ms(first_tick);
    let ahead = first_ms - now;
    let mut text = format!(
        "every new ID is above {id}; the next carries a time of {} or later",
        format_instant(first_ms)
    );
    if ahead > 0 && continues.is_some() {
        text.push_str(&format!(
            ", {} ahead of the clock: IDs continue from there, at seven eighths of the clock's pace until it catches up",
            format_duration(ahead as u64)
        ));
    } else if ahead > 0 {
        text.push_str(&format!(
            ", {} ahead of the clock, more than the hour IDs continue across (calls wait or fail while that is more than snowflake_id.max_lead)",
            format_duration(ahead as u64)
        ));
    }
    Ok(text)
}

/// Records, durably, a superuser's word that `worker` never issued live
/// IDs on any server whose data this one holds: backfills under it may go
/// below the copied IDs again, until more data arrives.
pub fn vouch(shm: &Shmem, cfg: &Config, worker: i32) -> Result<String, Failure> {
    require_superuser("snowflake_vouch_backfill_worker_id()")?;
    let max = cfg.layout.max_worker();
    let Some(w) = u32::try_from(worker).ok().filter(|w| u64::from(*w) <= max) else {
        return Err(Failure::new(
            Class::InvalidParameter,
            format!(
                "worker id {worker} does not fit the worker field of {} (0 to {max})",
                cfg.layout.title()
            ),
        )
        .hint("Give the worker id snowflake_id.backfill_worker_id is set to."));
    };
    let (w, text) = shm.mark.with_lock(|| {
        let h = shm.mark.history();
        if h.current == w || shm.worker.get() == Some(w) || cfg.worker.fixed() == Some(w) {
            return Err(Failure::new(
                Class::InvalidParameter,
                format!("worker id {w} is this server's live worker id"),
            )
            .detail("Backfills never take the live worker id: its IDs at past times would be live IDs of those times.")
            .hint("Vouch for the worker id snowflake_id.backfill_worker_id is set to, once it is another."));
        }
        if h.copied_below == 0 {
            return Ok((
                None,
                format!("nothing to vouch for: no data of another server arrived here; backfills under worker id {w} are refused only where it was live here"),
            ));
        }
        shm.mark.set_history(h.vouch(w));
        let written = match shm.mark.tick() {
            Some(mark) => Some(write(shm, cfg, mark)?),
            None => None,
        };
        Ok((
            written,
            format!(
                "backfills under worker id {w} may take times before {} again (until data of another server arrives here): it never issued live IDs on a server whose data this one holds, as vouched",
                format_instant(cfg.layout.tick_start_ms(h.copied_below))
            ),
        ))
    })?;
    if let Some(w) = w {
        publish(shm, w, ADMIN_STANDBY_WAIT_MS)?;
    }
    Ok(text)
}

/// "worker id 3", or what is said before a Citus node has read its own.
fn worker_words(worker: u32) -> String {
    if worker == WORKER_UNKNOWN {
        "its worker id not read from Citus yet".to_string()
    } else {
        format!("worker id {worker}")
    }
}
