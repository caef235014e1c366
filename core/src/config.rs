//! Turning the server's identity settings into a layout and a worker id, or
//! into an error that names the setting and says how to fix it.
//!
//! These settings are fixed at server start. A bad one does not stop the
//! server (an outage for a typo); it makes every generating call fail with
//! the reason, and the reason is logged at start.

use crate::failure::{Class, Failure};
use crate::layout::{Layout, Spec, DEFAULT_NAME};
use crate::registry::Policy;
use crate::timefmt::{format_instant, parse_instant, UnixMs};
use crate::worker_id;

/// `snowflake_id.epoch`'s default, as written.
pub const DEFAULT_EPOCH_TEXT: &str = "2025-01-01 00:00:00+00";

/// The identity settings as the server holds them.
#[derive(Debug, Clone, Copy)]
pub struct RawSettings<'a> {
    /// `-1` while unset.
    pub worker_id: i32,
    pub layout: &'a str,
    pub epoch: &'a str,
    /// Whether `snowflake_id.epoch` was set anywhere (rather than defaulted).
    pub epoch_set: bool,
    /// `snowflake_id.worker_id_source` and `snowflake_id.worker_id_offset`.
    pub worker_id_source: &'a str,
    pub worker_id_offset: i32,
    /// `snowflake_id.registry_policy` (read where the source is 'registry').
    pub registry_policy: &'a str,
    /// This host's name, `None` if it could not be read.
    pub host_name: Option<&'a str>,
}

/// This server's validated identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub layout: Layout,
    pub worker: WorkerSource,
    /// Where the worker id came from, in words.
    pub worker_id_origin: String,
    /// [`Layout::warn_from_ms`], worked out once: every ID compares with it.
    pub warn_from_ms: UnixMs,
}

/// This server's worker id, or where it will come from once the server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerSource {
    /// Known at start: from the setting or the host name.
    Fixed(u32),
    /// This node's Citus group id plus the offset, read from its database
    /// ([`worker_id::from_citus_group`]).
    CitusGroup { offset: i32 },
    /// Leased from the registry database once the server runs
    /// ([`crate::registry`]), or kept from the lease file at start.
    Registry { policy: Policy },
}

impl WorkerSource {
    /// The worker id, if it is known at start.
    pub fn fixed(self) -> Option<u32> {
        match self {
            WorkerSource::Fixed(w) => Some(w),
            WorkerSource::CitusGroup { .. } | WorkerSource::Registry { .. } => None,
        }
    }
}

const RESTART: &str = "then restart PostgreSQL";

pub fn configure(raw: &RawSettings) -> Result<Config, Failure> {
    let layout = server_layout(raw)?;
    let max = layout.max_worker();
    let derived = worker_id::derive(worker_id::Inputs {
        worker_id: raw.worker_id,
        source: raw.worker_id_source,
        offset: raw.worker_id_offset,
        host_name: raw.host_name,
    })?;
    if derived.registry {
        let policy = Policy::parse(raw.registry_policy)?;
        return Ok(Config {
            layout,
            worker: WorkerSource::Registry { policy },
            worker_id_origin: derived.origin,
            warn_from_ms: layout.warn_from_ms(),
        });
    }
    if let Some(offset) = derived.citus_offset {
        return Ok(Config {
            layout,
            worker: WorkerSource::CitusGroup { offset },
            worker_id_origin: derived.origin,
            warn_from_ms: layout.warn_from_ms(),
        });
    }
    let from_setting = derived.origin == "snowflake_id.worker_id";
    let worker_id = match derived.worker_id {
        None => {
            return Err(Failure::new(Class::NotReady, "snowflake_id.worker_id is not set")
                .detail("Every server that issues IDs needs a worker id of its own, so that IDs from different servers never collide.")
                .hint(format!(
                    // No number suggested: any one may be another server's.
                    "Pick a number from 0 to {max} that no other server whose IDs meet this one's holds (snowflake_id.snowflake_status shows each server's), then ALTER SYSTEM SET snowflake_id.worker_id = <that number>; {RESTART}."
                )))
        }
        Some(w) if (w < 0 || w as u64 > max) && from_setting => {
            return Err(Failure::new(
                Class::InvalidParameter,
                format!(
                    "snowflake_id.worker_id = {w} does not fit the {} worker bits of {} (0 to {max})",
                    layout.worker_bits(),
                    layout.title()
                ),
            )
            .hint(format!("ALTER SYSTEM SET snowflake_id.worker_id = <0 to {max}>; {RESTART}.")))
        }
        Some(w) if w < 0 || w as u64 > max => {
            return Err(Failure::new(
                Class::InvalidParameter,
                format!(
                    "the worker id {} from the {} does not fit the {} worker bits of {} (0 to {max})",
                    if w == i64::MAX { "beyond any layout".to_string() } else { w.to_string() },
                    derived.origin,
                    layout.worker_bits(),
                    layout.title()
                ),
            )
            .hint(format!("Change snowflake_id.worker_id_offset so that every instance number lands in 0 to {max}, or use a layout with more worker bits; {RESTART}.")))
        }
        Some(w) => w as u32,
    };
    Ok(Config {
        layout,
        worker: WorkerSource::Fixed(worker_id),
        worker_id_origin: derived.origin,
        warn_from_ms: layout.warn_from_ms(),
    })
}

/// This server's layout with its epoch settled: all that decoding needs.
pub fn server_layout(raw: &RawSettings) -> Result<Layout, Failure> {
    let wrap = |f: Failure| {
        let hint = f.hint.clone().unwrap_or_default();
        Failure {
            message: format!("invalid snowflake_id.layout: {}", f.message),
            hint: Some(
                format!(
                    "{hint} Set it with ALTER SYSTEM SET snowflake_id.layout = '...'; {RESTART}."
                )
                .trim()
                .to_string(),
            ),
            ..f
        }
    };
    let spec = Spec::parse(raw.layout).map_err(wrap)?;
    let epoch = || {
        parse_instant(raw.epoch).map_err(|why| {
            Failure::new(
                Class::InvalidParameter,
                format!("invalid snowflake_id.epoch: {why}"),
            )
            .hint(format!(
                "ALTER SYSTEM SET snowflake_id.epoch = '{DEFAULT_EPOCH_TEXT}'; {RESTART}."
            ))
        })
    };
    match spec {
        Spec::Named(l) if l.name() == Some(DEFAULT_NAME) => {
            let l = l.with_epoch(epoch()?);
            l.check_time_range().map_err(|f| Failure {
                message: format!("invalid snowflake_id.epoch: {}", f.message),
                ..f
            })?;
            Ok(l)
        }
        Spec::Named(l) if raw.epoch_set => Err(Failure::new(
            Class::InvalidParameter,
            format!(
                "snowflake_id.epoch cannot be combined with {}, which has its own epoch ({})",
                l.title(),
                format_instant(l.epoch_ms())
            ),
        )
        .hint(format!(
            "Remove snowflake_id.epoch (ALTER SYSTEM RESET snowflake_id.epoch), or keep it and use a custom layout with the same widths: snowflake_id.layout = '{}'; {RESTART}.",
            l.spec()
        ))),
        Spec::Named(l) => Ok(l),
        Spec::Custom(c) if c.epoch_ms.is_some() => Err(wrap(
            Failure::new(Class::InvalidParameter, "it carries an epoch")
                .hint("Give the epoch in snowflake_id.epoch instead."),
        )),
        Spec::Custom(c) => c.with_epoch(epoch()?).map_err(wrap),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(
        worker_id: i32,
        layout: &'static str,
        epoch: &'static str,
        epoch_set: bool,
    ) -> RawSettings<'static> {
        RawSettings {
            worker_id,
            layout,
            epoch,
            epoch_set,
            worker_id_source: "setting",
            worker_id_offset: 0,
            registry_policy: "keep",
            host_name: Some("db1"),
        }
    }

    #[test]
    fn defaults_need_only_a_worker_id() {
        let c = configure(&raw(1, "snowflake_id", DEFAULT_EPOCH_TEXT, false)).unwrap();
        assert_eq!(
            (c.layout.describe(), c.worker),
            ("snowflake_id".to_string(), WorkerSource::Fixed(1))
        );
        let e = configure(&raw(-1, "snowflake_id", DEFAULT_EPOCH_TEXT, false)).unwrap_err();
        assert_eq!(
            (e.class, e.message.as_str()),
            (Class::NotReady, "snowflake_id.worker_id is not set")
        );
        assert!(e
            .hint
            .unwrap()
            .contains("ALTER SYSTEM SET snowflake_id.worker_id = <that number>; then restart"));
    }

    #[test]
    fn a_worker_id_must_fit_the_layout() {
        let e = configure(&raw(32, "js53", DEFAULT_EPOCH_TEXT, false)).unwrap_err();
        assert_eq!(e.class, Class::InvalidParameter);
        assert_eq!(e.message, "snowflake_id.worker_id = 32 does not fit the 5 worker bits of the js53 layout (0 to 31)");
        assert!(
            configure(&raw(-7, "snowflake_id", DEFAULT_EPOCH_TEXT, false))
                .unwrap_err()
                .message
                .contains("= -7")
        );
        assert_eq!(
            configure(&raw(31, "js53", DEFAULT_EPOCH_TEXT, false))
                .unwrap()
                .worker
                .fixed(),
            Some(31)
        );
    }

    #[test]
    fn a_worker_id_from_the_host_name_must_fit_the_layout_too() {
        let from_host = |host: &'static str, offset: i32, layout: &'static str| {
            configure(&RawSettings {
                worker_id_source: "hostname",
                worker_id_offset: offset,
                registry_policy: "keep",
                host_name: Some(host),
                ..raw(-1, layout, DEFAULT_EPOCH_TEXT, false)
            })
        };
        let c = from_host("pg-31", 0, "js53").unwrap();
        assert_eq!(
            (c.worker.fixed(), c.worker_id_origin.as_str()),
            (Some(31), "host name \"pg-31\"")
        );
        let e = from_host("pg-30", 2, "js53").unwrap_err();
        assert_eq!(e.class, Class::InvalidParameter);
        assert_eq!(
            e.message,
            "the worker id 32 from the host name \"pg-30\" (30 + snowflake_id.worker_id_offset 2) does not fit the 5 worker bits of the js53 layout (0 to 31)"
        );
        assert!(e.hint.unwrap().contains("snowflake_id.worker_id_offset"));
        assert!(from_host("pg-0", -1, "js53")
            .unwrap_err()
            .message
            .contains("worker id -1 from"));
        assert!(from_host("pg-99999999999999999999", 0, "snowflake_id")
            .unwrap_err()
            .message
            .contains("beyond any layout"));
    }

    #[test]
    fn an_epoch_setting_outside_timestamptz_is_refused() {
        for layout in ["snowflake_id", "time=41,worker=10,sequence=12,unit=1ms"] {
            let e = configure(&raw(1, layout, "-9223372036854775808", true)).unwrap_err();
            assert_eq!(e.class, Class::InvalidParameter);
            assert!(
                e.message
                    .contains("before the earliest time a timestamptz can hold"),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn the_epoch_setting_moves_the_default_and_custom_layouts_only() {
        let c = configure(&raw(1, "snowflake_id", "2020-01-01 00:00:00+00", true)).unwrap();
        assert_eq!(c.layout.epoch_ms(), 1_577_836_800_000);
        assert_eq!(
            c.layout.describe(),
            "time=41,worker=10,sequence=12,unit=1ms"
        );
        let c = configure(&raw(
            1,
            "total=53,worker=2,sequence=10,unit=1ms",
            "2020-01-01 00:00:00+00",
            true,
        ))
        .unwrap();
        assert_eq!(c.layout.epoch_ms(), 1_577_836_800_000);
        let c = configure(&raw(1, "twitter", DEFAULT_EPOCH_TEXT, false)).unwrap();
        assert_eq!(c.layout.epoch_ms(), 1_288_834_974_657);
        let e = configure(&raw(1, "twitter", "2020-01-01 00:00:00+00", true)).unwrap_err();
        assert!(
            e.message
                .contains("cannot be combined with the twitter layout"),
            "{}",
            e.message
        );
        assert!(e
            .hint
            .unwrap()
            .contains("'time=41,worker=10,sequence=12,unit=1ms'"));
    }

    #[test]
    fn bad_values_name_their_setting() {
        let e = configure(&raw(1, "snowflake_id", "2025-01-01", true)).unwrap_err();
        assert!(
            e.message
                .starts_with("invalid snowflake_id.epoch: '2025-01-01' has no UTC offset"),
            "{}",
            e.message
        );
        let e = configure(&raw(1, "twiter", DEFAULT_EPOCH_TEXT, false)).unwrap_err();
        assert!(
            e.message
                .starts_with("invalid snowflake_id.layout: unknown layout 'twiter'"),
            "{}",
            e.message
        );
        assert!(e.hint.unwrap().contains("then restart PostgreSQL"));
        let e = configure(&raw(
            1,
            "time=41,worker=10,sequence=12,unit=1ms,epoch=2020-01-01Z",
            DEFAULT_EPOCH_TEXT,
            false,
        ))
        .unwrap_err();
        assert!(e.message.contains("carries an epoch"), "{}", e.message);
    }

    #[test]
    fn a_citus_worker_id_is_settled_once_the_server_runs() {
        let c = configure(&RawSettings {
            worker_id_source: "citus",
            worker_id_offset: 7,
            registry_policy: "keep",
            ..raw(-1, "snowflake_id", DEFAULT_EPOCH_TEXT, false)
        })
        .unwrap();
        assert_eq!(c.worker, WorkerSource::CitusGroup { offset: 7 });
        assert_eq!(c.worker.fixed(), None);
    }

    #[test]
    fn a_registry_source_names_its_policy_and_no_worker_id() {
        let leased = RawSettings {
            worker_id_source: "registry",
            registry_policy: "disposable",
            ..raw(-1, "snowflake_id", DEFAULT_EPOCH_TEXT, false)
        };
        let cfg = configure(&leased).unwrap();
        assert_eq!(
            cfg.worker,
            WorkerSource::Registry {
                policy: Policy::Disposable
            }
        );
        assert_eq!(cfg.worker.fixed(), None);
        let bad = RawSettings {
            registry_policy: "sometimes",
            ..leased
        };
        let e = configure(&bad).unwrap_err();
        assert!(e.message.contains("registry_policy"), "{}", e.message);
        // The policy is read only where the worker id is leased.
        let fixed = RawSettings {
            worker_id_source: "setting",
            ..bad
        };
        assert!(configure(&RawSettings {
            worker_id: 3,
            ..fixed
        })
        .is_ok());
    }
}
