"""snowflake_convert() as a migration operation whose warning cannot be missed.

snowflake_convert() widens every smallint or integer key column it moves (the
key and the foreign keys pointing at it) to bigint, and says so in a server
WARNING: Django registers no notice handler (psycopg 3 drops notices), so a
RunSQL("SELECT snowflake_convert(...)") runs without a word. The statements
it returns name those columns: here a dry run lists them first, and each
must be named in `widens` (quoted as SQL quotes it), or the migration fails
before anything is converted.
"""
import re

from django.db import migrations

# An identifier as PostgreSQL writes it: bare, or in double quotes (a quote
# inside doubled).
IDENT = r'(?:"(?:[^"]|"")*"|[^\s".,]+)'


def widened_columns(statements):
    """The columns the statements widen to bigint, as `table.column` with
    each name quoted as SQL quotes it (public.orders."legacy id")."""
    return {
        f"{alter.group(1)}.{column}"
        for statement in statements
        if (alter := re.match(rf"ALTER TABLE ((?:{IDENT}\.)?{IDENT}) ", statement))
        for column in re.findall(rf"ALTER COLUMN ({IDENT}) TYPE bigint", statement)
    }


def SnowflakeConvert(table, widens=()):
    def forwards(apps, schema_editor):
        with schema_editor.connection.cursor() as cur:
            # A dry run first: nothing is converted unless every widening is named.
            cur.execute("SELECT * FROM snowflake_convert(%s, dry_run => true)", [table])
            unnamed = sorted(widened_columns(row[0] for row in cur.fetchall()) - set(widens))
            if unnamed:
                raise RuntimeError(
                    f"snowflake_convert({table!r}) would widen {', '.join(unnamed)} to bigint:"
                    " map each as a 64-bit field in the models first, then name it in widens=[...]"
                )
            cur.execute("SELECT * FROM snowflake_convert(%s)", [table])

    # No reverse: the ids issued since cannot go back into integer.
    return migrations.RunPython(forwards)
