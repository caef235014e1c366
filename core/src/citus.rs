//! What the extension refuses on Citus tables, and the ways that work
//! instead, in words.

use crate::failure::{Class, Failure};

/// A Citus table whose rows have more than one copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Copies {
    /// A reference table: a copy on every node.
    Reference,
    /// A distributed table whose shards have this many copies
    /// (`citus.shard_replication_factor` above 1 when it was made).
    Replicated(i64),
}

/// `ALTER TABLE <table> ADD COLUMN <column> ... DEFAULT <default>` where the
/// default draws IDs (`generator` is the generating function it calls) and
/// the table has rows kept in several copies: Citus runs the ALTER on every
/// copy, and each fills the old rows from its node's generator, so the
/// copies would differ (Citus refuses the same for `nextval()`). `table`
/// and `column` are quoted, `default` the column's default as PostgreSQL
/// prints it, `key` the primary key's columns, quoted (empty: the table has
/// none).
pub fn copied_table_add_column(
    table: &str,
    copies: &Copies,
    column: &str,
    column_type: &str,
    default: &str,
    generator: &str,
    key: &[String],
) -> Failure {
    let fill = if key.is_empty() {
        "give the table a primary key first, then fill the old rows with one INSERT ... SELECT ... ON CONFLICT (<key>) DO UPDATE through the coordinator".to_string()
    } else {
        let key = key.join(", ");
        format!(
            "INSERT INTO {table} ({key}, {column}) SELECT {key}, {default} FROM {table} WHERE {column} IS NULL ON CONFLICT ({key}) DO UPDATE SET {column} = excluded.{column};"
        )
    };
    let (what, why) = match copies {
        Copies::Reference => (
            format!("the Citus reference table {table}: it is not empty"),
            "Citus adds the column on every node that holds a copy of the table",
        ),
        Copies::Replicated(n) => (
            format!("the distributed table {table}: it is not empty, and each of its shards has {n} copies"),
            "Citus adds the column to every copy of every shard",
        ),
    };
    Failure::new(
        Class::NotSupported,
        format!("cannot add a column whose DEFAULT calls {generator}() to {what}"),
    )
    .detail(format!("{why}, and each copy would fill the old rows with IDs drawn on its own node: the copies would differ."))
    .hint(format!(
        "Add the column without its default, set the default, then fill the old rows once through the coordinator: ALTER TABLE {table} ADD COLUMN {column} {column_type}; ALTER TABLE {table} ALTER COLUMN {column} SET DEFAULT {default}; {fill}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_gives_a_way_that_keeps_every_copy_identical() {
        let f = copied_table_add_column(
            "public.countries",
            &Copies::Reference,
            "sid",
            "bigint",
            "snowflake_nextval()",
            "snowflake_nextval",
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
        let f = copied_table_add_column(
            "t",
            &Copies::Reference,
            "sid",
            "bigint",
            "snowflake_nextval()",
            "snowflake_nextval",
            &[],
        );
        assert!(f
            .hint
            .unwrap()
            .contains("give the table a primary key first"));
    }

    #[test]
    fn the_way_keeps_the_columns_own_default_and_names_the_copies() {
        let f = copied_table_add_column(
            "public.orders",
            &Copies::Replicated(2),
            "public_id",
            "text",
            "snowflake_to_opaque(snowflake_nextval())",
            "snowflake_nextval",
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
}
