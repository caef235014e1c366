"""snowflake_convert() as a migration operation whose warning cannot be missed.

snowflake_convert() widens every smallint or integer key column it moves (the
key and the foreign keys pointing at it) to bigint, and says so in a server
WARNING: Django registers no notice handler (psycopg 3 drops notices), so a
RunSQL("SELECT snowflake_convert(...)") runs without a word. The statements
it returns name those columns: here each must be named in `widens`, or the
migration fails, in its transaction, before anything is kept.
"""
import re

from django.db import migrations


def SnowflakeConvert(table, widens=()):
    def forwards(apps, schema_editor):
        with schema_editor.connection.cursor() as cur:
            cur.execute("SELECT * FROM snowflake_convert(%s)", [table])
            statements = [row[0] for row in cur.fetchall()]
        widened = {
            f"{alter.group(1)}.{column}"
            for statement in statements
            if (alter := re.match(r"ALTER TABLE (\S+) ", statement))
            for column in re.findall(r"ALTER COLUMN (\S+) TYPE bigint", statement)
        }
        unnamed = sorted(widened - set(widens))
        if unnamed:
            raise RuntimeError(
                f"snowflake_convert({table!r}) would widen {', '.join(unnamed)} to bigint:"
                " map each as a 64-bit field in the models first, then name it in widens=[...]"
            )

    # No reverse: the ids issued since cannot go back into integer.
    return migrations.RunPython(forwards)
