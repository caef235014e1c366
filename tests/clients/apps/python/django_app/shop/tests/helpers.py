from django.db import connection


def column_facts(table, column="id"):
    """What the catalog says about one column of the test database."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT format_type(a.atttypid, a.atttypmod),
                   pg_get_expr(d.adbin, d.adrelid),
                   a.attidentity,
                   pg_get_serial_sequence(%s, %s)
              FROM pg_attribute a
              LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
             WHERE a.attrelid = %s::regclass AND a.attname = %s
            """,
            [table, column, table, column],
        )
        type_, default, identity, sequence = cur.fetchone()
    return {"type": type_, "default": default, "identity": identity, "sequence": sequence}


def snowflake_convert(table):
    with connection.cursor() as cur:
        cur.execute("SELECT * FROM snowflake_convert(%s)", [table])
        return [row[0] for row in cur.fetchall()]


SNOWFLAKE_KEY = {
    "type": "bigint",
    "default": "snowflake_nextval()",
    "identity": "",
    "sequence": None,
}
