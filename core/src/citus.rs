//! What the extension refuses on Citus tables, and the ways that work
//! instead, in words.

use crate::failure::{Class, Failure};

/// `ALTER TABLE <reference table> ADD COLUMN <column> ... DEFAULT
/// snowflake_nextval()` on a table with rows: Citus runs the ALTER on every
/// node that holds a copy, and each node fills the old rows from its own
/// generator, so the copies would differ (Citus refuses the same for
/// `nextval()`). `table` and `column` are quoted, `key` the primary key's
/// columns, quoted (empty: the table has none).
pub fn reference_table_add_column(
    table: &str,
    column: &str,
    column_type: &str,
    key: &[String],
) -> Failure {
    let fill = if key.is_empty() {
        "give the table a primary key first, then fill the old rows with one INSERT ... SELECT ... ON CONFLICT (<key>) DO UPDATE through the coordinator".to_string()
    } else {
        let key = key.join(", ");
        format!(
            "INSERT INTO {table} ({key}, {column}) SELECT {key}, snowflake_nextval() FROM {table} WHERE {column} IS NULL ON CONFLICT ({key}) DO UPDATE SET {column} = excluded.{column};"
        )
    };
    Failure::new(
        Class::NotSupported,
        format!("cannot add a column whose DEFAULT calls snowflake_nextval() to the Citus reference table {table}: it is not empty"),
    )
    .detail("Citus adds the column on every node that holds a copy of the table, and each node would fill the old rows with IDs of its own: the copies would differ.")
    .hint(format!(
        "Add the column without its default, set the default, then fill the old rows once through the coordinator: ALTER TABLE {table} ADD COLUMN {column} {column_type}; ALTER TABLE {table} ALTER COLUMN {column} SET DEFAULT snowflake_nextval(); {fill}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_gives_a_way_that_keeps_every_copy_identical() {
        let f = reference_table_add_column("public.countries", "sid", "bigint", &["code".into()]);
        assert_eq!(f.class, Class::NotSupported);
        assert!(f
            .message
            .ends_with("reference table public.countries: it is not empty"));
        assert_eq!(
            f.hint.unwrap(),
            "Add the column without its default, set the default, then fill the old rows once through the coordinator: ALTER TABLE public.countries ADD COLUMN sid bigint; ALTER TABLE public.countries ALTER COLUMN sid SET DEFAULT snowflake_nextval(); INSERT INTO public.countries (code, sid) SELECT code, snowflake_nextval() FROM public.countries WHERE sid IS NULL ON CONFLICT (code) DO UPDATE SET sid = excluded.sid;"
        );
        let f = reference_table_add_column("t", "sid", "bigint", &[]);
        assert!(f
            .hint
            .unwrap()
            .contains("give the table a primary key first"));
    }
}
