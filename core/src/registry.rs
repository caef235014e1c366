//! Worker ids leased from a registry (`worker_id_source = 'registry'`): the
//! policies, the lease this server holds as its file keeps it, and what a
//! registry's answer must look like before it is believed.
//!
//! A lease never expires by a timeout: a registry that stopped hearing from
//! a server cannot tell a dead server from a partitioned one, and handing
//! its worker id to another would make two live servers issue the same IDs.
//! A worker id is leased again only once released, and the next holder
//! issues above the last ID time the released holder reported.

use crate::failure::{Class, Failure};

/// The lease file, in the data directory: copied by a base backup (which
/// keeps the lease), not by `pg_upgrade` or a dump (which lease anew).
pub const FILE_NAME: &str = "snowflake_id.worker_lease";

const FILE_HEAD: &str = "snowflake_id worker lease 1";

/// `snowflake_id.registry_policy`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// The same worker id across restarts, as long as the lease is held.
    Keep,
    /// A new worker id at every start; the old ones stay spent until an
    /// operator releases them in the registry.
    Disposable,
}

impl Policy {
    pub fn parse(text: &str) -> Result<Policy, Failure> {
        match text.trim().to_ascii_lowercase().as_str() {
            "keep" => Ok(Policy::Keep),
            "disposable" => Ok(Policy::Disposable),
            _ => Err(Failure::new(
                Class::InvalidParameter,
                format!("invalid snowflake_id.registry_policy: '{text}'"),
            )
            .hint("Use 'keep' (the same leased worker id across restarts) or 'disposable' (a new one at every start); then restart PostgreSQL.")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Policy::Keep => "keep",
            Policy::Disposable => "disposable",
        }
    }
}

/// The lease this server holds, as its file and its WAL record keep it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub worker_id: u32,
    /// The system identifier of the cluster that leased it: a copy into
    /// another cluster (another identifier) leases its own.
    pub system_identifier: u64,
    /// When the registry granted it (Unix ms).
    pub leased_at_ms: i64,
    /// The last ID time of the worker id's previous holder (Unix ms), which
    /// every ID under this lease is above; `None`: never held before.
    pub floor_ms: Option<i64>,
    pub policy: Policy,
    /// Released (`snowflake_release_worker_id()`): no ID is issued under it.
    pub released: bool,
}

impl Lease {
    pub fn encode(&self) -> Vec<u8> {
        format!(
            "{FILE_HEAD}\nworker_id={}\nsystem_identifier={}\nleased_at_ms={}\nfloor_ms={}\npolicy={}\nreleased={}\n",
            self.worker_id,
            self.system_identifier,
            self.leased_at_ms,
            self.floor_ms.map_or("none".into(), |f| f.to_string()),
            self.policy.name(),
            self.released,
        )
        .into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Result<Lease, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
        let mut lines = text.lines();
        if lines.next() != Some(FILE_HEAD) {
            return Err(format!("its first line is not \"{FILE_HEAD}\""));
        }
        let mut field = |name: &str| -> Result<String, String> {
            let line = lines.next().ok_or(format!("{name} is missing"))?;
            line.strip_prefix(name)
                .and_then(|r| r.strip_prefix('='))
                .map(str::to_string)
                .ok_or(format!("expected {name}=, found \"{line}\""))
        };
        let num = |name: &str, v: String| {
            v.parse::<i64>()
                .map_err(|_| format!("{name} is not a number: \"{v}\""))
        };
        let worker_id = field("worker_id")?;
        let worker_id = worker_id
            .parse::<u32>()
            .map_err(|_| format!("worker_id is not a worker id: \"{worker_id}\""))?;
        let sys = field("system_identifier")?;
        let system_identifier = sys
            .parse::<u64>()
            .map_err(|_| format!("system_identifier is not a number: \"{sys}\""))?;
        let leased_at_ms = num("leased_at_ms", field("leased_at_ms")?)?;
        let floor = field("floor_ms")?;
        let floor_ms = if floor == "none" {
            None
        } else {
            Some(num("floor_ms", floor)?)
        };
        let policy = Policy::parse(&field("policy")?).map_err(|f| f.message)?;
        let released = match field("released")?.as_str() {
            "true" => true,
            "false" => false,
            other => return Err(format!("released is neither true nor false: \"{other}\"")),
        };
        Ok(Lease {
            worker_id,
            system_identifier,
            leased_at_ms,
            floor_ms,
            policy,
            released,
        })
    }

    /// Whether this server issues under this lease at start without asking
    /// the registry: its own cluster's, held, and the policy keeps it.
    pub fn kept_by(&self, system_identifier: u64, policy: Policy) -> bool {
        self.system_identifier == system_identifier
            && !self.released
            && policy == Policy::Keep
            && self.policy == Policy::Keep
    }
}

/// Why backfills are refused while the registry says the backfill worker
/// id was another server's live one.
pub fn backfill_taken() -> Failure {
    Failure::new(
        Class::NotReady,
        "the registry says this server's snowflake_id.backfill_worker_id was leased live to another server: backfills under it would repeat that server's IDs",
    )
    .hint("Set snowflake_id.backfill_worker_id to an id the registry never leased (count down from the layout's largest), then reload; live IDs go on meanwhile.")
}

/// How far ahead of this server's clock a previous holder's last ID time
/// may be: what copied IDs may lead by, too.
pub const FLOOR_AHEAD_MS: i64 = 3_600_000;

/// The largest worker id a registry leases (24 bits; registry.sql refuses a
/// larger one): its lease table is searched for the lowest free id, and no
/// fleet is that large.
pub const MAX_LEASED_WORKER: u64 = 16_777_215;

/// The largest worker id a server with a layout whose largest is
/// `layout_max` asks a registry for: a layout with more worker bits leases
/// from the registry's range rather than not at all.
pub fn leasable_max(layout_max: u64) -> u64 {
    layout_max.min(MAX_LEASED_WORKER)
}

/// A registry's answer to a lease, as its columns came (text, NULL as None).
#[derive(Debug, Clone, Default)]
pub struct Answer<'a> {
    pub worker_id: Option<&'a str>,
    pub system_identifier: Option<&'a str>,
    pub leased_at_ms: Option<&'a str>,
    pub floor_ms: Option<&'a str>,
}

/// The lease a registry's answer grants, or why it is not believed: any
/// NULL where a value belongs, a worker id past the layout's worker bits,
/// another cluster's lease, a number that is no number. A registry is
/// another server: its rows are checked as input.
pub fn lease_from(
    answer: &Answer<'_>,
    own_system_identifier: u64,
    max_worker: u64,
    policy: Policy,
    now_ms: i64,
) -> Result<Lease, Failure> {
    let refused = |what: String| {
        Failure::new(
            Class::Corrupted,
            format!("the registry's answer to this server's lease is refused: {what}"),
        )
        .hint("Look at the registry's row for this server (SELECT * FROM snowflake_registry.leases in the registry's database): its rows are written by snowflake_registry.lease() alone; a row written by hand must be corrected or deleted there.")
    };
    let need = |name: &str, v: Option<&str>| -> Result<String, Failure> {
        v.map(str::to_string)
            .ok_or_else(|| refused(format!("{name} is NULL")))
    };
    let w = need("worker_id", answer.worker_id)?;
    let worker_id = w
        .parse::<u64>()
        .ok()
        .filter(|w| *w <= max_worker)
        .ok_or_else(|| {
            refused(format!(
                "worker id {w} is not one of this layout's (0 to {max_worker})"
            ))
        })? as u32;
    let s = need("system_identifier", answer.system_identifier)?;
    let sys = s
        .parse::<u64>()
        .map_err(|_| refused(format!("system identifier \"{s}\" is not a number")))?;
    if sys != own_system_identifier {
        return Err(refused(format!(
            "worker id {worker_id} is leased to system identifier {sys}, not to this cluster's {own_system_identifier}"
        )));
    }
    let l = need("leased_at_ms", answer.leased_at_ms)?;
    let leased_at_ms = l
        .parse::<i64>()
        .map_err(|_| refused(format!("leased_at_ms \"{l}\" is not a number")))?;
    let floor_ms = match answer.floor_ms {
        None => None,
        Some(f) => Some(f.parse::<i64>().ok().filter(|f| *f >= 0).ok_or_else(|| {
            refused(format!(
                "the previous holder's last ID time \"{f}\" is not a time"
            ))
        })?),
    };
    // IDs more than an hour ahead of the clock are never continued from
    // (as for copied IDs): a floor that far would stop this server's IDs,
    // or, past the layout, wrap them.
    if let Some(f) = floor_ms.filter(|f| *f > now_ms.saturating_add(FLOOR_AHEAD_MS)) {
        return Err(refused(format!(
            "the previous holder's last ID time {} is more than an hour ahead of this server's clock",
            crate::timefmt::format_instant(f)
        )));
    }
    Ok(Lease {
        worker_id,
        system_identifier: sys,
        leased_at_ms,
        floor_ms,
        policy,
        released: false,
    })
}

/// The keywords a libpq connection string sets, as libpq reads them:
/// `keyword = value` pairs (a value in single quotes may hold spaces;
/// backslash escapes a quote or a backslash), or a `postgresql://` URI,
/// whose `user:password@` and `?keyword=value` parameters count. Enough to
/// tell what it names without loading libpq (a setting's check runs in
/// every process); libpq itself parses it again at connect.
pub fn conninfo_words(text: &str) -> Result<Vec<(String, String)>, String> {
    let t = text.trim();
    for scheme in ["postgresql://", "postgres://"] {
        if let Some(rest) = t.strip_prefix(scheme) {
            return Ok(uri_words(rest));
        }
    }
    let mut words = Vec::new();
    let mut chars = t.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(words);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!("missing \"=\" after \"{key}\""));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err("unterminated quoted string".into()),
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        words.push((key, value));
    }
}

/// A URI's words after its scheme: the password of its user part, and its
/// parameters (percent-decoded).
fn uri_words(rest: &str) -> Vec<(String, String)> {
    let (main, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = main.split('/').next().unwrap_or("");
    let mut words = Vec::new();
    if let Some((user_info, _)) = authority.rsplit_once('@') {
        if let Some((user, password)) = user_info.split_once(':') {
            words.push(("user".to_string(), percent_decoded(user)));
            words.push(("password".to_string(), percent_decoded(password)));
        } else {
            words.push(("user".to_string(), percent_decoded(user_info)));
        }
    }
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        words.push((percent_decoded(k), percent_decoded(v)));
    }
    words
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A connection string's keywords that are refused in
/// `snowflake_id.registry`: a password there would sit in a setting and
/// its file; libpq reads it from the password file or the service file.
pub fn conninfo_problem(keywords: &[(String, String)]) -> Option<Failure> {
    keywords
        .iter()
        .any(|(k, v)| (k == "password" || k == "sslpassword") && !v.is_empty())
        .then(|| {
            Failure::new(
                Class::InvalidParameter,
                "snowflake_id.registry holds a password (password= or sslpassword=)",
            )
            .detail("Settings are written in files and shown to superusers; a password does not belong there.")
            .hint("Remove it and put the password in the password file of the server's operating-system user (~/.pgpass, or passfile= in the connection string), or use a service (service=, in pg_service.conf).")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease() -> Lease {
        Lease {
            worker_id: 7,
            system_identifier: u64::MAX - 3,
            leased_at_ms: 1_700_000_000_000,
            floor_ms: Some(1_700_000_000_123),
            policy: Policy::Keep,
            released: false,
        }
    }

    #[test]
    fn a_layout_with_more_worker_bits_than_a_registry_leases_asks_for_its_range() {
        assert_eq!(leasable_max(1023), 1023);
        assert_eq!(leasable_max(MAX_LEASED_WORKER), MAX_LEASED_WORKER);
        assert_eq!(leasable_max((1 << 26) - 1), MAX_LEASED_WORKER);
    }

    #[test]
    fn a_lease_file_reads_back_what_was_written() {
        let l = lease();
        assert_eq!(Lease::decode(&l.encode()), Ok(l.clone()));
        let none = Lease {
            floor_ms: None,
            policy: Policy::Disposable,
            released: true,
            ..l
        };
        assert_eq!(Lease::decode(&none.encode()), Ok(none));
    }

    #[test]
    fn a_damaged_lease_file_says_what_is_wrong() {
        assert!(Lease::decode(b"something else\n")
            .unwrap_err()
            .contains("first line"));
        let text = String::from_utf8(lease().encode())
            .unwrap()
            .replace("worker_id=7", "worker_id=-1");
        assert!(Lease::decode(text.as_bytes())
            .unwrap_err()
            .contains("worker_id"));
        let cut = &lease().encode()[..40];
        assert!(Lease::decode(cut).is_err());
    }

    #[test]
    fn a_lease_is_kept_at_start_only_by_its_own_cluster_while_held_and_kept() {
        let l = lease();
        assert!(l.kept_by(l.system_identifier, Policy::Keep));
        assert!(!l.kept_by(1, Policy::Keep));
        assert!(!l.kept_by(l.system_identifier, Policy::Disposable));
        assert!(!Lease {
            released: true,
            ..l.clone()
        }
        .kept_by(l.system_identifier, Policy::Keep));
    }

    fn answer<'a>(w: Option<&'a str>, s: Option<&'a str>, f: Option<&'a str>) -> Answer<'a> {
        Answer {
            worker_id: w,
            system_identifier: s,
            leased_at_ms: Some("5"),
            floor_ms: f,
        }
    }

    #[test]
    fn a_registry_answer_is_believed_only_when_it_is_whole_and_ours() {
        let lease_from = |a: &Answer<'_>, sys, max, policy| lease_from(a, sys, max, policy, 1_000);
        let ok = lease_from(&answer(Some("3"), Some("42"), None), 42, 1023, Policy::Keep).unwrap();
        assert_eq!((ok.worker_id, ok.floor_ms, ok.leased_at_ms), (3, None, 5));
        let with_floor = lease_from(
            &answer(Some("3"), Some("42"), Some("99")),
            42,
            1023,
            Policy::Keep,
        )
        .unwrap();
        assert_eq!(with_floor.floor_ms, Some(99));
        let refused = |a: Answer<'_>| lease_from(&a, 42, 1023, Policy::Keep).unwrap_err();
        assert!(refused(answer(None, Some("42"), None))
            .message
            .contains("worker_id is NULL"));
        assert!(refused(answer(Some("3"), None, None))
            .message
            .contains("system_identifier is NULL"));
        assert!(refused(answer(Some("1024"), Some("42"), None))
            .message
            .contains("0 to 1023"));
        assert!(
            refused(answer(Some("99999999999999999999"), Some("42"), None))
                .message
                .contains("not one of")
        );
        assert!(refused(answer(Some("-1"), Some("42"), None))
            .message
            .contains("not one of"));
        assert!(refused(answer(Some("3"), Some("43"), None))
            .message
            .contains("not to this cluster's 42"));
        assert!(refused(answer(Some("3"), Some("42"), Some("-5")))
            .message
            .contains("not a time"));
        assert!(refused(answer(Some("3"), Some("x"), None))
            .message
            .contains("not a number"));
        assert_eq!(refused(answer(None, None, None)).class, Class::Corrupted);
        // An hour ahead of the clock (1 s here) at most.
        assert!(lease_from(
            &answer(Some("3"), Some("42"), Some("3601000")),
            42,
            1023,
            Policy::Keep
        )
        .is_ok());
        let far = refused(answer(Some("3"), Some("42"), Some("3601001")));
        assert!(
            far.message.contains("more than an hour ahead"),
            "{}",
            far.message
        );
        let max = i64::MAX.to_string();
        assert!(refused(answer(Some("3"), Some("42"), Some(&max)))
            .message
            .contains("more than an hour ahead"));
    }

    #[test]
    fn a_password_in_the_registry_setting_is_refused() {
        let kw = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert!(conninfo_problem(&[kw("host", "r"), kw("password", "")]).is_none());
        assert!(conninfo_problem(&[kw("sslpassword", "k3y")]).is_some());
        let f = conninfo_problem(&[kw("host", "r"), kw("password", "s3cret")]).unwrap();
        assert_eq!(f.class, Class::InvalidParameter);
        assert!(!f.message.contains("s3cret"));
        assert!(f.hint.unwrap().contains("pgpass"));
    }

    #[test]
    fn connection_strings_are_read_as_libpq_reads_them() {
        let words = |t: &str| conninfo_words(t).unwrap();
        let w = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(
            words("host=r port=5432"),
            [w("host", "r"), w("port", "5432")]
        );
        assert_eq!(
            words(" password = 'a b\\'c' user=x\\ y "),
            [w("password", "a b'c"), w("user", "x y")]
        );
        assert_eq!(words(""), []);
        assert!(conninfo_words("host").unwrap_err().contains("missing"));
        assert!(conninfo_words("password='open")
            .unwrap_err()
            .contains("unterminated"));
        assert_eq!(
            words("postgresql://u:p%40ss@h:5/db?sslmode=require"),
            [
                w("user", "u"),
                w("password", "p@ss"),
                w("sslmode", "require")
            ]
        );
        assert_eq!(
            words("postgres://h/db?password=x&user=y"),
            [w("password", "x"), w("user", "y")]
        );
        assert_eq!(words("postgresql://u@h"), [w("user", "u")]);
        for holds in [
            "password=x",
            "postgresql://u:x@h",
            "postgresql://h?password=x",
            "sslpassword='k'",
        ] {
            assert!(conninfo_problem(&words(holds)).is_some(), "{holds}");
        }
        for holds_none in ["host=h passfile=/p", "postgresql://u@h/db", "service=fleet"] {
            assert!(
                conninfo_problem(&words(holds_none)).is_none(),
                "{holds_none}"
            );
        }
    }

    #[test]
    fn policies_parse_with_a_hint() {
        assert_eq!(Policy::parse(" Keep "), Ok(Policy::Keep));
        assert_eq!(Policy::parse("disposable"), Ok(Policy::Disposable));
        assert!(Policy::parse("forever")
            .unwrap_err()
            .hint
            .unwrap()
            .contains("'keep'"));
    }
}
