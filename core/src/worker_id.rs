//! Where this server's worker id comes from: the `snowflake_id.worker_id`
//! setting (the default), or the number that ends the host's name plus an
//! offset, for platforms that give each instance a number never shared
//! (Kubernetes StatefulSet ordinals `pg-0`, `pg-1`; CloudNativePG instance
//! serials `cluster-1`, `cluster-2`).
//!
//! Or, on Citus, the node's group id plus the offset: one integer Citus keeps
//! unique among a cluster's primaries (its own distributed sequences build
//! on it the same way), readable only from the database once the server
//! runs, so that source settles the id late ([`from_citus_group`]).
//!
//! And the backfill worker id's rule ([`backfill`]): the worker id IDs for
//! past times carry, set, within the layout and not the live one.
//!
//! Every inconsistency is an error naming the settings involved: a worker id
//! nobody chose is how two servers come to share one.

use crate::failure::{Class, Failure};
use crate::layout::Layout;

/// The worker id of a mark written before the worker id was known (it
/// comes from Citus, read after start): no worker id is that large.
pub const WORKER_UNKNOWN: u32 = u32::MAX;

const RESTART: &str = "then restart PostgreSQL";

/// `snowflake_id.worker_id_source`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Setting,
    HostName,
    Citus,
    /// Leased from a registry database (`snowflake_id.registry`).
    Registry,
}

impl Source {
    pub fn parse(text: &str) -> Result<Source, Failure> {
        match text.trim().to_ascii_lowercase().as_str() {
            "setting" => Ok(Source::Setting),
            "hostname" => Ok(Source::HostName),
            "citus" => Ok(Source::Citus),
            "registry" => Ok(Source::Registry),
            _ => Err(Failure::new(
                Class::InvalidParameter,
                format!("invalid snowflake_id.worker_id_source: '{text}'"),
            )
            .hint(format!(
                "Use 'setting' (the worker id is snowflake_id.worker_id), 'hostname' (the number that ends this host's name, plus snowflake_id.worker_id_offset) , 'citus' (this node's Citus group id, plus snowflake_id.worker_id_offset) or 'registry' (leased from the registry snowflake_id.registry names); {RESTART}."
            ))),
        }
    }
}

/// A worker id, before it is checked against the layout's worker bits, and
/// where it came from in words (for the status and for errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derived {
    /// `None` when the setting is unset (the caller says how to set it),
    /// or when it comes from Citus.
    pub worker_id: Option<i64>,
    pub origin: String,
    /// `Some(offset)`: the worker id is the Citus group id plus this,
    /// settled once the server runs.
    pub citus_offset: Option<i32>,
    /// Leased from the registry once the server runs.
    pub registry: bool,
}

/// What the worker-id settings say (`snowflake_id.worker_id`, `-1` while
/// unset; `worker_id_source`; `worker_id_offset`) and this host's name
/// (`None` if it could not be read).
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub worker_id: i32,
    pub source: &'a str,
    pub offset: i32,
    pub host_name: Option<&'a str>,
}

/// The worker id the settings name, not yet checked against a layout.
pub fn derive(inputs: Inputs<'_>) -> Result<Derived, Failure> {
    match Source::parse(inputs.source)? {
        Source::Setting | Source::Registry if inputs.offset != 0 => Err(Failure::new(
            Class::InvalidParameter,
            format!(
                "snowflake_id.worker_id_offset = {} is set, but the worker id comes from neither the host name nor Citus (offsets apply to those alone)",
                inputs.offset
            ),
        )
        .hint(format!(
            "Remove it (ALTER SYSTEM RESET snowflake_id.worker_id_offset), or set snowflake_id.worker_id_source = 'hostname' or 'citus'; {RESTART}."
        ))),
        Source::Setting => Ok(Derived {
            worker_id: (inputs.worker_id != -1).then_some(inputs.worker_id as i64),
            origin: "snowflake_id.worker_id".into(),
            citus_offset: None,
            registry: false,
        }),
        source @ (Source::HostName | Source::Citus | Source::Registry) if inputs.worker_id != -1 => {
            let (value, from) = match source {
                Source::Citus => ("citus", "this node's Citus group id"),
                Source::Registry => ("registry", "a lease from the registry"),
                _ => ("hostname", "the host name"),
            };
            Err(Failure::new(
                Class::InvalidParameter,
                format!(
                    "snowflake_id.worker_id = {} is set, but snowflake_id.worker_id_source = '{value}' takes the worker id from {from}",
                    inputs.worker_id
                ),
            )
            .hint(format!(
                "Keep one: ALTER SYSTEM RESET snowflake_id.worker_id to use {from}, or ALTER SYSTEM RESET snowflake_id.worker_id_source to use the setting; {RESTART}."
            )))
        }
        Source::HostName => from_host_name(inputs.host_name, inputs.offset),
        Source::Citus => Ok(Derived {
            worker_id: None,
            origin: citus_words(None, inputs.offset),
            citus_offset: Some(inputs.offset),
            registry: false,
        }),
        Source::Registry => Ok(Derived {
            worker_id: None,
            origin: "the registry (no lease yet)".into(),
            citus_offset: None,
            registry: true,
        }),
    }
}

/// "Citus group id 3 + snowflake_id.worker_id_offset 100", or, before the
/// group id is read, "Citus group id (not read yet)".
fn citus_words(group_id: Option<i64>, offset: i32) -> String {
    let group = group_id.map_or("(not read yet)".to_string(), |g| g.to_string());
    if offset == 0 {
        format!("Citus group id {group}")
    } else {
        format!("Citus group id {group} + snowflake_id.worker_id_offset {offset}")
    }
}

/// What a node's own Citus metadata says, as its database holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CitusNode {
    /// `pg_dist_local_group.groupid`: written by the coordinator when it
    /// adds the node (with metadata sync, Citus's default); 0 until then.
    pub group_id: i64,
    /// Whether this node's `pg_dist_node` lists a primary in group 0 (the
    /// coordinator). The coordinator's group id is 0 too, so a 0 is believed
    /// only where the coordinator is listed: on a worker that is not added
    /// yet, `pg_dist_node` is empty.
    pub coordinator_listed: bool,
    /// Whether this server is, as far as it can tell, a standby of another
    /// node promoted beside it: it ran as a standby since its start, and
    /// its metadata lists, on its own port, a node of its group's that
    /// Citus does not use as a primary. Its `group_id` is then its origin's,
    /// copied with the data.
    pub promoted: Option<Promoted>,
}

/// What a promoted standby is listed as in its own Citus metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Promoted {
    /// A clone of the group's primary (`citus_add_clone_node`, Citus 13.2+)
    /// not yet given a group of its own.
    Clone,
    /// A secondary of the group (`citus_add_secondary_node`): its primary
    /// is still the group's.
    Secondary,
}

/// The worker id of a node whose `worker_id_source` is 'citus', from its
/// metadata (`None`: the database asked has no Citus), with its origin in
/// words. Waits rather than guesses: a 0 that may be a worker not yet added
/// is refused, as is an id past the layout's worker bits (never wrapped).
pub fn from_citus_group(
    node: Option<CitusNode>,
    offset: i32,
    layout: &Layout,
) -> Result<(u32, String), Failure> {
    const LATER: &str = "nothing needs a restart: the next call reads it again";
    let Some(node) = node else {
        return Err(Failure::new(
            Class::NotReady,
            "this server's worker id is not known yet: snowflake_id.worker_id_source = 'citus' reads it from the Citus metadata, and this database has none",
        )
        .hint(format!(
            "Take the first ID after a start in the database where CREATE EXTENSION citus ran (every database then uses the id read there); {LATER}."
        )));
    };
    match node.promoted {
        Some(Promoted::Clone) => {
            return Err(Failure::new(
                Class::NotReady,
                format!(
                    "this node was promoted from a Citus clone of group {}'s primary and has no group of its own yet: the group id it holds is its origin's",
                    node.group_id
                ),
            )
            .detail("citus_promote_clone_and_rebalance gives the promoted clone a new group id right after promoting it; IDs issued under the origin's group id meanwhile would repeat the origin's.")
            .hint(format!(
                "Wait for citus_promote_clone_and_rebalance to finish; {LATER}. A clone promoted another way (pg_ctl promote, a failover tool) keeps its origin's group id: it must not run beside its origin, so stop one of the two, or remove the clone's entry on the coordinator (citus_remove_clone_node) once its origin is gone for good."
            )));
        }
        Some(Promoted::Secondary) => {
            return Err(Failure::new(
                Class::NotReady,
                format!(
                    "this node is a Citus secondary of group {} promoted out of recovery: the group's primary issues IDs under the same worker id",
                    node.group_id
                ),
            )
            .detail("A secondary shares its primary's group id; promoted beside a running primary, both would issue the same IDs.")
            .hint(format!(
                "If this node replaces its primary, on the coordinator, in this order: while the old primary still runs, remove this node's secondary entry (SELECT citus_remove_node('<this host>', <this port>)); stop the old primary for good; then make this node the group's primary (SELECT citus_update_node(<the primary's nodeid>, '<this host>', <this port>)). Otherwise stop this node. {LATER}."
            )));
        }
        None => {}
    }
    if node.group_id == 0 && !node.coordinator_listed {
        return Err(Failure::new(
            Class::NotReady,
            "this node's Citus group id is 0, the coordinator's, but no coordinator is in its metadata: it is a worker not added to a cluster yet, or a coordinator that has not named itself",
        )
        .detail("A worker's group id is written by the coordinator when it adds the node; until then every worker would take the coordinator's worker id.")
        .hint(format!(
            "On the coordinator, run SELECT citus_add_node('<this node's host>', <port>) for a worker (with citus.enable_metadata_sync on, Citus's default), or SELECT citus_set_coordinator_host('<its host>', <port>) for the coordinator itself; {LATER}."
        )));
    }
    let max = layout.max_worker();
    let worker = node.group_id.saturating_add(i64::from(offset));
    if node.group_id < 0 || worker < 0 || worker as u64 > max {
        return Err(Failure::new(
            Class::InvalidParameter,
            format!(
                "the worker id {worker} from {} does not fit the {} worker bits of {} (0 to {max})",
                citus_words(Some(node.group_id), offset),
                layout.worker_bits(),
                layout.title()
            ),
        )
        .detail("Citus gives a new group id to every node added, and again to a node removed and added back; they are never reused.")
        .hint(format!(
            "{} snowflake_id.worker_id_offset on every node so that each group id lands in 0 to {max}{}; {RESTART}.",
            if worker < 0 { "Raise" } else { "Lower" },
            if worker < 0 { "" } else { ", or use a layout with more worker bits" }
        )));
    }
    Ok((
        worker as u32,
        format!(
            "{} (worker ids up to {max} fit this layout)",
            citus_words(Some(node.group_id), offset)
        ),
    ))
}

fn from_host_name(host: Option<&str>, offset: i32) -> Result<Derived, Failure> {
    let Some(host) = host else {
        return Err(Failure::new(
            Class::NotReady,
            "snowflake_id.worker_id_source = 'hostname', but this host's name could not be read",
        )
        .hint(format!(
            "Set snowflake_id.worker_id and ALTER SYSTEM RESET snowflake_id.worker_id_source; {RESTART}."
        )));
    };
    // The first label of a fully qualified name is the instance's own. The
    // number must follow a hyphen and have no leading zero, as the
    // orchestrators write it: `db07` and `db7` would otherwise be one id.
    // Only the last number counts (`shard-2-0` is ordinal 0 of `shard-2`).
    let label = host.split('.').next().unwrap_or_default();
    let digits = label
        .rsplit_once('-')
        .filter(|(base, n)| {
            !base.is_empty()
                && !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && (n.len() == 1 || !n.starts_with('0'))
        })
        .map(|(_, n)| n)
        .unwrap_or_default();
    if digits.is_empty() {
        return Err(Failure::new(
            Class::InvalidParameter,
            format!(
                "the host name \"{host}\" does not end in \"-<number>\", so snowflake_id.worker_id_source = 'hostname' cannot take a worker id from it"
            ),
        )
        .hint(format!(
            "Give each server a host name that ends in a hyphen and its instance number without leading zeros, as a Kubernetes StatefulSet (pg-0, pg-1) or CloudNativePG (cluster-1, cluster-2) does; or set snowflake_id.worker_id and ALTER SYSTEM RESET snowflake_id.worker_id_source; {RESTART}."
        )));
    }
    // Too many digits for any layout: i64::MAX is refused as out of range.
    let number = digits.parse::<i64>().unwrap_or(i64::MAX);
    let origin = if offset == 0 {
        format!("host name \"{host}\"")
    } else {
        format!("host name \"{host}\" ({number} + snowflake_id.worker_id_offset {offset})")
    };
    Ok(Derived {
        worker_id: Some(number.saturating_add(offset as i64)),
        origin,
        citus_offset: None,
        registry: false,
    })
}

/// The backfill worker id (`snowflake_id.backfill_worker_id`, `set`) that
/// IDs for past times carry beside the live worker id `live`: set, within
/// the layout's worker field, and not the live one, whose IDs of the same
/// times it would repeat. The claims worker claims it only when this holds;
/// a backfill fails with the error.
pub fn backfill(set: Option<u32>, live: u32, layout: &Layout) -> Result<u32, Failure> {
    let max = layout.max_worker();
    let Some(w) = set else {
        return Err(Failure::new(
            Class::NotReady,
            "snowflake_nextval_at needs a backfill worker id, and snowflake_id.backfill_worker_id is not set",
        )
        .detail("IDs for past times carry a worker id of their own, so that none can equal an ID this server or another issued live at that time.")
        .hint(format!(
            "Pick a worker id from 0 to {max} that no server issues IDs under (live or backfilled), set snowflake_id.backfill_worker_id to it in postgresql.conf, and reload: SELECT pg_reload_conf();"
        )));
    };
    if u64::from(w) > max {
        return Err(Failure::new(
            Class::InvalidParameter,
            format!(
                "snowflake_id.backfill_worker_id = {w} does not fit the worker field of {} (0 to {max})",
                layout.title()
            ),
        )
        .hint(format!(
            "Set it to a worker id from 0 to {max} that no server issues IDs under, and reload."
        )));
    }
    if w == live {
        return Err(Failure::new(
            Class::InvalidParameter,
            format!("snowflake_id.backfill_worker_id = {w} is this server's own worker id"),
        )
        .detail(
            "Backfilled IDs at a time would then be live IDs of that time: they could repeat them.",
        )
        .hint("Set it to a worker id no server issues IDs under, and reload."));
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derive_from(
        source: &str,
        worker_id: i32,
        offset: i32,
        host: Option<&str>,
    ) -> Result<Derived, Failure> {
        derive(Inputs {
            worker_id,
            source,
            offset,
            host_name: host,
        })
    }

    #[test]
    fn a_backfill_worker_id_is_set_fits_and_is_not_the_live_one() {
        let layout = Layout::by_name(crate::layout::DEFAULT_NAME).unwrap();
        assert_eq!(backfill(Some(7), 1, &layout), Ok(7));
        let unset = backfill(None, 1, &layout).unwrap_err();
        assert_eq!(unset.class, Class::NotReady);
        assert!(unset.hint.unwrap().contains("from 0 to 1023"));
        let wide = backfill(Some(1024), 1, &layout).unwrap_err();
        assert_eq!(wide.class, Class::InvalidParameter);
        assert!(
            wide.message.contains("does not fit the worker field"),
            "{}",
            wide.message
        );
        let live = backfill(Some(1), 1, &layout).unwrap_err();
        assert!(
            live.message.contains("is this server's own worker id"),
            "{}",
            live.message
        );
    }

    #[test]
    fn the_setting_is_the_default_source() {
        let d = derive_from("setting", 5, 0, Some("pg-3")).unwrap();
        assert_eq!(
            (d.worker_id, d.origin.as_str()),
            (Some(5), "snowflake_id.worker_id")
        );
        assert_eq!(derive_from("setting", -1, 0, None).unwrap().worker_id, None);
    }

    #[test]
    fn the_number_that_ends_the_host_name_plus_the_offset() {
        let cases = [
            ("pg-0", 0, 0),
            ("pg-12", 0, 12),
            ("orders-db-7", 100, 107),
            ("cluster-3", -1, 2),
            ("pg-4.pg.default.svc.cluster.local", 0, 4),
            ("orders-shard-2-0", 0, 0),
        ];
        for (host, offset, want) in cases {
            let d = derive_from("hostname", -1, offset, Some(host)).unwrap();
            assert_eq!(d.worker_id, Some(want), "{host} + {offset}");
            assert!(d.origin.contains(host), "{}", d.origin);
        }
        assert_eq!(
            derive_from("HostName", -1, 100, Some("pg-2"))
                .unwrap()
                .origin,
            "host name \"pg-2\" (2 + snowflake_id.worker_id_offset 100)"
        );
    }

    #[test]
    fn a_host_name_without_a_number_is_refused_naming_it() {
        for host in [
            "db-primary",
            "pg-1a",
            "",
            "pg.7",
            "db07",
            "db-07",
            "-3",
            "pg-",
        ] {
            let e = derive_from("hostname", -1, 0, Some(host)).unwrap_err();
            assert_eq!(e.class, Class::InvalidParameter);
            assert!(
                e.message
                    .contains(&format!("\"{host}\" does not end in \"-<number>\"")),
                "{}",
                e.message
            );
            assert!(e.hint.unwrap().contains("StatefulSet"));
        }
        let e = derive_from("hostname", -1, 0, None).unwrap_err();
        assert!(e.message.contains("could not be read"), "{}", e.message);
    }

    #[test]
    fn citus_settles_the_worker_id_late_from_the_group_id() {
        let d = derive_from("Citus", -1, 100, None).unwrap();
        assert_eq!((d.worker_id, d.citus_offset), (None, Some(100)));
        assert_eq!(
            d.origin,
            "Citus group id (not read yet) + snowflake_id.worker_id_offset 100"
        );
        let e = derive_from("citus", 4, 0, None).unwrap_err();
        assert!(
            e.message
                .contains("takes the worker id from this node's Citus group id"),
            "{}",
            e.message
        );
        let layout = Layout::by_name("snowflake_id").unwrap();
        let node = |group_id, coordinator_listed| {
            Some(CitusNode {
                group_id,
                coordinator_listed,
                promoted: None,
            })
        };
        // Workers 1, 2 and the coordinator once it is listed.
        assert_eq!(
            from_citus_group(node(2, true), 0, &layout).unwrap(),
            (
                2,
                "Citus group id 2 (worker ids up to 1023 fit this layout)".to_string()
            )
        );
        assert_eq!(from_citus_group(node(0, true), 0, &layout).unwrap().0, 0);
        assert_eq!(
            from_citus_group(node(3, false), 500, &layout).unwrap().0,
            503
        );
        // A promoted clone holds its origin's group id until Citus writes
        // its own, and a promoted secondary its primary's: both wait.
        for (promoted, words) in [
            (
                Promoted::Clone,
                "promoted from a Citus clone of group 2's primary",
            ),
            (
                Promoted::Secondary,
                "a Citus secondary of group 2 promoted out of recovery",
            ),
        ] {
            let e = from_citus_group(
                Some(CitusNode {
                    group_id: 2,
                    coordinator_listed: true,
                    promoted: Some(promoted),
                }),
                0,
                &layout,
            )
            .unwrap_err();
            assert_eq!(e.class, Class::NotReady);
            assert!(e.message.contains(words), "{}", e.message);
        }
        // A 0 that may be a worker not added yet: wait, never guess.
        let e = from_citus_group(node(0, false), 0, &layout).unwrap_err();
        assert_eq!(e.class, Class::NotReady);
        assert!(e.hint.unwrap().contains("citus_add_node"));
        // No Citus in the database asked.
        let e = from_citus_group(None, 0, &layout).unwrap_err();
        assert_eq!(e.class, Class::NotReady);
        assert!(e.message.contains("has none"), "{}", e.message);
        // Past the worker bits: refused, never wrapped.
        for (group, offset) in [(1024, 0), (1000, 24), (5, -6), (-1, 0)] {
            let e = from_citus_group(node(group, true), offset, &layout).unwrap_err();
            assert_eq!(e.class, Class::InvalidParameter, "{group} + {offset}");
            assert!(
                e.message.contains("does not fit the 10 worker bits"),
                "{}",
                e.message
            );
            // The way out points the right way: up for a worker id below 0.
            let hint = e.hint.unwrap();
            let up = group.saturating_add(offset.into()) < 0;
            assert!(
                hint.starts_with(if up { "Raise" } else { "Lower" }),
                "{group} + {offset}: {hint}"
            );
        }
        assert_eq!(
            from_citus_group(node(1000, true), 23, &layout).unwrap().0,
            1023
        );
    }

    #[test]
    fn a_huge_number_is_not_wrapped_into_range() {
        let d = derive_from("hostname", -1, 5, Some("pg-99999999999999999999999")).unwrap();
        assert_eq!(d.worker_id, Some(i64::MAX));
    }

    #[test]
    fn contradicting_settings_are_refused_not_resolved() {
        let e = derive_from("hostname", 3, 0, Some("pg-1")).unwrap_err();
        assert!(
            e.message
                .starts_with("snowflake_id.worker_id = 3 is set, but"),
            "{}",
            e.message
        );
        assert!(e.hint.unwrap().contains("Keep one"));
        let e = derive_from("setting", 3, 10, Some("pg-1")).unwrap_err();
        assert!(
            e.message.contains("worker_id_offset = 10 is set"),
            "{}",
            e.message
        );
        let e = derive_from("k8s", 3, 0, Some("pg-1")).unwrap_err();
        assert_eq!(e.message, "invalid snowflake_id.worker_id_source: 'k8s'");
        assert!(e.hint.unwrap().contains("'registry'"));
    }

    #[test]
    fn a_registry_source_settles_nothing_at_start_and_takes_no_number_beside_it() {
        let d = derive_from("Registry", -1, 0, Some("pg-1")).unwrap();
        assert!(
            d.registry && d.worker_id.is_none() && d.citus_offset.is_none(),
            "{d:?}"
        );
        let e = derive_from("registry", 3, 0, None).unwrap_err();
        assert!(
            e.message
                .contains("takes the worker id from a lease from the registry"),
            "{}",
            e.message
        );
        let e = derive_from("registry", -1, 5, None).unwrap_err();
        assert!(
            e.message.contains("worker_id_offset = 5 is set"),
            "{}",
            e.message
        );
    }
}
