//! What the extension refuses on Citus tables, and the ways that work
//! instead, in words.

use crate::failure::{Class, Failure};

/// A Citus table whose rows have more than one placement (a copy on a node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placements {
    /// A reference table: a copy on every node.
    Reference,
    /// A distributed table whose shards have this many placements
    /// (`citus.shard_replication_factor` above 1 when it was made).
    Replicated(i64),
}

/// What makes a column added with a default fill its old rows with values
/// of the node that runs the `ADD COLUMN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fills {
    /// A generating function of the extension, by name.
    Generator(String),
    /// A volatile function written in SQL or a procedural language, by
    /// name: what it calls is not read here, so it may draw IDs.
    Opaque(String),
}

/// A column an `ALTER TABLE ... ADD COLUMN` adds, and the default that
/// fills its old rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    /// Quoted.
    pub column: String,
    pub column_type: String,
    /// The default as PostgreSQL prints it: the column's own, or, where it
    /// has none, its domain's (`domain` names it).
    pub default: String,
    pub domain: Option<String>,
    pub fills: Fills,
}

/// `ALTER TABLE <table> ADD COLUMN ...` where the default that fills the
/// old rows draws IDs, or may, and the table has rows kept in several
/// placements: Citus runs the ALTER on every placement, and each fills the
/// old rows from its own node, so the placements would differ (Citus
/// refuses the same for `nextval()`). `table` is quoted, `key` the primary key's columns,
/// quoted (empty: the table has none).
pub fn replicated_table_add_column(
    table: &str,
    placements: &Placements,
    added: &Added,
    key: &[String],
) -> Failure {
    let Added {
        column,
        column_type,
        default,
        domain,
        fills,
    } = added;
    let fill = if key.is_empty() {
        "give the table a primary key first, then fill the old rows with one INSERT ... SELECT ... ON CONFLICT (<key>) DO UPDATE through the coordinator".to_string()
    } else {
        let key = key.join(", ");
        format!(
            "INSERT INTO {table} ({key}, {column}) SELECT {key}, {default} FROM {table} WHERE {column} IS NULL ON CONFLICT ({key}) DO UPDATE SET {column} = excluded.{column};"
        )
    };
    let (what, why) = match placements {
        Placements::Reference => (
            format!("the Citus reference table {table}: it is not empty"),
            "Citus adds the column on every node that holds a copy of the table",
        ),
        Placements::Replicated(n) => (
            format!("the distributed table {table}: it is not empty, and each of its shards has {n} copies"),
            "Citus adds the column to every copy of every shard",
        ),
    };
    let (calls, values) = match fills {
        Fills::Generator(g) => (format!("{g}()"), "IDs drawn on its own node"),
        Fills::Opaque(f) => (
            format!("{f}(), a volatile function whose body snowflake_id does not read,"),
            "values made on its own node (IDs, if the function draws any)",
        ),
    };
    let (whose, steps) = match domain {
        None => (
            format!("a column whose DEFAULT calls {calls}"),
            format!(
                "Add the column without its default, set the default, then fill the old rows once through the coordinator: ALTER TABLE {table} ADD COLUMN {column} {column_type}; ALTER TABLE {table} ALTER COLUMN {column} SET DEFAULT {default};"
            ),
        ),
        Some(d) => (
            format!("a column of the domain {d}, whose DEFAULT calls {calls}"),
            format!(
                "Add the column with DEFAULT NULL (which keeps the domain's default off the old rows), give new rows the domain's default back, then fill the old rows once through the coordinator: ALTER TABLE {table} ADD COLUMN {column} {column_type} DEFAULT NULL; ALTER TABLE {table} ALTER COLUMN {column} DROP DEFAULT;"
            ),
        ),
    };
    Failure::new(Class::NotSupported, format!("cannot add {whose} to {what}"))
        .detail(format!(
            "{why}, and each copy would fill the old rows with {values}: the copies would differ."
        ))
        .hint(format!("{steps} {fill}"))
}

/// A node as a Citus node's metadata (`pg_dist_node`) lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// `nodeid`: kept by `citus_update_node` (a new host or port), new for
    /// every node added.
    pub nodeid: i32,
    pub host: String,
    pub port: i32,
    pub group: i64,
    /// `noderole = 'primary'`.
    pub primary: bool,
}

impl Listed {
    fn at(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    fn same_node(&self, other: &Listed) -> bool {
        self.nodeid == other.nodeid
    }
}

/// What the coordinator's metadata says of a worker that lists itself as
/// `me` (its group's primary in its own metadata) and issues IDs under
/// `worker`: nothing wrong, a warning, or (its group given to another node,
/// which Citus does only when told a group id by hand) a refusal. A node
/// removed from the cluster is not told so, and goes on serving the
/// sessions that connect to it with its stale metadata.
pub fn membership(me: &Listed, coordinator: &[Listed], worker: u32) -> Option<Failure> {
    let primaries: Vec<&Listed> = coordinator.iter().filter(|n| n.primary).collect();
    if primaries
        .iter()
        .any(|n| n.same_node(me) && n.group == me.group)
    {
        return None;
    }
    if let Some(other) = primaries.iter().find(|n| n.group == me.group) {
        return Some(
            Failure::new(
                Class::NotReady,
                format!(
                    "the coordinator's metadata gives this node's group {} to node {}: this node ({}) was removed from the Citus cluster and its group id given again",
                    me.group,
                    other.at(),
                    me.at()
                ),
            )
            .detail(format!("Both would issue IDs under worker id {worker}: this node issues none while the coordinator's metadata says so."))
            .hint("Stop this node, or add it back on the coordinator with citus_add_node (without groupid =>), which gives it a group id of its own; nothing needs a restart."),
        );
    }
    if let Some(listed) = primaries.iter().find(|n| n.same_node(me)) {
        return Some(
            Failure::new(
                Class::Warning,
                format!(
                    "the coordinator's metadata gives this node ({}) group {}, its own metadata group {}: Citus has not synced it yet",
                    me.at(),
                    listed.group,
                    me.group
                ),
            )
            .hint("Citus syncs a node's metadata when it is added; the worker id follows the group id once it arrives (SELECT start_metadata_sync_to_node(...) on the coordinator if it does not)."),
        );
    }
    Some(
        Failure::new(
            Class::Warning,
            format!(
                "this node ({}) is not in the coordinator's metadata any more: removed from the Citus cluster, it goes on issuing IDs under worker id {worker} for the sessions that connect to it, through its stale metadata",
                me.at()
            ),
        )
        .hint(format!(
            "Stop it, or add it back on the coordinator with citus_add_node (which gives it a new group id). Never give its group id {} to another node by hand (citus_add_node(..., groupid => {})) while it runs: this node would then refuse IDs, but only once it reads the coordinator's metadata.",
            me.group, me.group
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn added(column: &str, column_type: &str, default: &str, domain: Option<&str>) -> Added {
        Added {
            column: column.into(),
            column_type: column_type.into(),
            default: default.into(),
            domain: domain.map(Into::into),
            fills: Fills::Generator("snowflake_nextval".into()),
        }
    }

    #[test]
    fn a_domains_default_and_an_opaque_function_are_refused_with_a_way_that_works() {
        let f = replicated_table_add_column(
            "rf2",
            &Placements::Reference,
            &added("d", "sfid", "snowflake_nextval()", Some("sfid")),
            &["k".into()],
        );
        assert_eq!(
            f.message,
            "cannot add a column of the domain sfid, whose DEFAULT calls snowflake_nextval() to the Citus reference table rf2: it is not empty"
        );
        assert_eq!(
            f.hint.unwrap(),
            "Add the column with DEFAULT NULL (which keeps the domain's default off the old rows), give new rows the domain's default back, then fill the old rows once through the coordinator: ALTER TABLE rf2 ADD COLUMN d sfid DEFAULT NULL; ALTER TABLE rf2 ALTER COLUMN d DROP DEFAULT; INSERT INTO rf2 (k, d) SELECT k, snowflake_nextval() FROM rf2 WHERE d IS NULL ON CONFLICT (k) DO UPDATE SET d = excluded.d;"
        );
        let opaque = Added {
            fills: Fills::Opaque("public.make_id".into()),
            ..added("d", "bigint", "public.make_id()", None)
        };
        let f = replicated_table_add_column("rf2", &Placements::Replicated(2), &opaque, &[]);
        assert!(f.message.contains("calls public.make_id(), a volatile function whose body snowflake_id does not read,"), "{}", f.message);
        assert!(f.detail.unwrap().contains("IDs, if the function draws any"));
    }

    #[test]
    fn the_refusal_gives_a_way_that_keeps_every_copy_identical() {
        let f = replicated_table_add_column(
            "public.countries",
            &Placements::Reference,
            &added("sid", "bigint", "snowflake_nextval()", None),
            &["code".into()],
        );
        assert_eq!(f.class, Class::NotSupported);
        assert_eq!(
            f.message,
            "cannot add a column whose DEFAULT calls snowflake_nextval() to the Citus reference table public.countries: it is not empty"
        );
        assert_eq!(
            f.hint.unwrap(),
            "Add the column without its default, set the default, then fill the old rows once through the coordinator: ALTER TABLE public.countries ADD COLUMN sid bigint; ALTER TABLE public.countries ALTER COLUMN sid SET DEFAULT snowflake_nextval(); INSERT INTO public.countries (code, sid) SELECT code, snowflake_nextval() FROM public.countries WHERE sid IS NULL ON CONFLICT (code) DO UPDATE SET sid = excluded.sid;"
        );
        let f = replicated_table_add_column(
            "t",
            &Placements::Reference,
            &added("sid", "bigint", "snowflake_nextval()", None),
            &[],
        );
        assert!(f
            .hint
            .unwrap()
            .contains("give the table a primary key first"));
    }

    #[test]
    fn the_way_keeps_the_columns_own_default_and_names_the_copies() {
        let f = replicated_table_add_column(
            "public.orders",
            &Placements::Replicated(2),
            &added(
                "public_id",
                "text",
                "snowflake_to_opaque(snowflake_nextval())",
                None,
            ),
            &["tenant".into(), "id".into()],
        );
        assert_eq!(
            f.message,
            "cannot add a column whose DEFAULT calls snowflake_nextval() to the distributed table public.orders: it is not empty, and each of its shards has 2 copies"
        );
        let hint = f.hint.unwrap();
        assert!(
            hint.contains("ALTER TABLE public.orders ADD COLUMN public_id text;"),
            "{hint}"
        );
        assert!(
            hint.contains("SET DEFAULT snowflake_to_opaque(snowflake_nextval());"),
            "{hint}"
        );
        assert!(
            hint.contains(
                "SELECT tenant, id, snowflake_to_opaque(snowflake_nextval()) FROM public.orders"
            ),
            "{hint}"
        );
        assert!(hint.contains("ON CONFLICT (tenant, id)"), "{hint}");
    }

    #[test]
    fn a_workers_place_in_the_coordinators_metadata_is_judged() {
        let node = |nodeid, host: &str, port, group, primary| Listed {
            nodeid,
            host: host.into(),
            port,
            group,
            primary,
        };
        let me = node(4, "w3", 5432, 3, true);
        let coordinator = [
            node(1, "c", 5432, 0, true),
            node(4, "w3", 5432, 3, true),
            node(5, "w3b", 5432, 3, false),
        ];
        assert_eq!(membership(&me, &coordinator, 3), None);
        // Moved by citus_update_node, the move not synced to it yet: the
        // same node.
        assert_eq!(
            membership(&me, &[node(4, "w3-new", 6432, 3, true)], 3),
            None
        );
        // Its group given to another node by hand: refused.
        let f = membership(
            &me,
            &[node(1, "c", 5432, 0, true), node(9, "w4", 5433, 3, true)],
            3,
        )
        .unwrap();
        assert_eq!(f.class, Class::NotReady);
        assert!(
            f.message
                .contains("gives this node's group 3 to node w4:5433"),
            "{}",
            f.message
        );
        // Removed, its group free: said, not refused.
        let f = membership(&me, &[node(1, "c", 5432, 0, true)], 3).unwrap();
        assert_eq!(f.class, Class::Warning);
        assert!(
            f.message
                .contains("not in the coordinator's metadata any more"),
            "{}",
            f.message
        );
        assert!(f.hint.unwrap().contains("groupid => 3"));
        // Its metadata not synced with the coordinator's yet: said.
        let f = membership(&me, &[node(4, "w3", 5432, 7, true)], 3).unwrap();
        assert_eq!(f.class, Class::Warning);
        assert!(
            f.message.contains("gives this node (w3:5432) group 7"),
            "{}",
            f.message
        );
        // A secondary of its group elsewhere is no owner.
        assert_eq!(
            membership(
                &me,
                &[node(4, "w3", 5432, 3, true), node(6, "x", 1, 3, false)],
                3
            ),
            None
        );
    }
}
