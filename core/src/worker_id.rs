//! Where this server's worker id comes from: the `snowflake_id.worker_id`
//! setting (the default), or the number that ends the host's name plus an
//! offset, for platforms that give each instance a number never shared
//! (Kubernetes StatefulSet ordinals `pg-0`, `pg-1`; CloudNativePG instance
//! serials `cluster-1`, `cluster-2`).
//!
//! Every inconsistency is an error naming the settings involved: a worker id
//! nobody chose is how two servers come to share one.

use crate::failure::{Class, Failure};

const RESTART: &str = "then restart PostgreSQL";

/// `snowflake_id.worker_id_source`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Setting,
    HostName,
}

impl Source {
    pub fn parse(text: &str) -> Result<Source, Failure> {
        match text.trim().to_ascii_lowercase().as_str() {
            "setting" => Ok(Source::Setting),
            "hostname" => Ok(Source::HostName),
            _ => Err(Failure::new(
                Class::InvalidParameter,
                format!("invalid snowflake_id.worker_id_source: '{text}'"),
            )
            .hint(format!(
                "Use 'setting' (the worker id is snowflake_id.worker_id) or 'hostname' (the number that ends this host's name, plus snowflake_id.worker_id_offset); {RESTART}."
            ))),
        }
    }
}

/// A worker id, before it is checked against the layout's worker bits, and
/// where it came from in words (for the status and for errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derived {
    /// `None` when the setting is unset (the caller says how to set it).
    pub worker_id: Option<i64>,
    pub origin: String,
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
        Source::Setting if inputs.offset != 0 => Err(Failure::new(
            Class::InvalidParameter,
            format!(
                "snowflake_id.worker_id_offset = {} is set, but the worker id does not come from the host name",
                inputs.offset
            ),
        )
        .hint(format!(
            "Remove it (ALTER SYSTEM RESET snowflake_id.worker_id_offset), or set snowflake_id.worker_id_source = 'hostname'; {RESTART}."
        ))),
        Source::Setting => Ok(Derived {
            worker_id: (inputs.worker_id != -1).then_some(inputs.worker_id as i64),
            origin: "snowflake_id.worker_id".into(),
        }),
        Source::HostName if inputs.worker_id != -1 => Err(Failure::new(
            Class::InvalidParameter,
            format!(
                "snowflake_id.worker_id = {} is set, but snowflake_id.worker_id_source = 'hostname' takes the worker id from the host name",
                inputs.worker_id
            ),
        )
        .hint(format!(
            "Keep one: ALTER SYSTEM RESET snowflake_id.worker_id to use the host name, or ALTER SYSTEM RESET snowflake_id.worker_id_source to use the setting; {RESTART}."
        ))),
        Source::HostName => from_host_name(inputs.host_name, inputs.offset),
    }
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
    })
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
        assert!(e.hint.unwrap().contains("'setting'"));
    }
}
