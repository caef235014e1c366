#!/usr/bin/env python3
"""The path of an existing project, on a database of its own:

1. migrate to 0003: shop_ticket is a 32-bit AutoField (identity) table with rows;
2. someone runs snowflake_convert('shop_ticket') by hand: the column is now
   bigint with DEFAULT snowflake_nextval(), but the code still says AutoField,
   and a new row cannot be read back by id (DoesNotExist, no SQL sent);
3. the recipe: Ticket.id = SnowflakeAutoField and migration 0004, applied by
   `migrate` (its snowflake_convert() call finds nothing left to do);
4. new and old rows round-trip by id, foreign keys work, and makemigrations
   sees no change.

Run from this directory with the PG* variables of a role that has CREATEDB:
    python convert_demo.py
It creates and drops the database <PGDATABASE>_convert_demo. Ends with "OK".
"""
import io
import os
import sys

import psycopg

base_db = os.environ.get("PGDATABASE", "appdb")
demo_db = f"{base_db}_convert_demo"


def admin(sql):
    with psycopg.connect(dbname=base_db, autocommit=True) as conn:
        conn.execute(sql)


admin(f'DROP DATABASE IF EXISTS "{demo_db}"')
admin(f'CREATE DATABASE "{demo_db}"')
os.environ["PGDATABASE"] = demo_db
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "snowproj.settings")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.migrations.loader import MigrationLoader  # noqa: E402

from shop.models import Ticket, TicketNote  # noqa: E402

try:
    quiet = io.StringIO()
    call_command("migrate", "shop", "0003", stdout=quiet)
    old_apps = MigrationLoader(connection).project_state(("shop", "0003_ticket")).apps
    OldTicket = old_apps.get_model("shop", "Ticket")
    OldNote = old_apps.get_model("shop", "TicketNote")
    first = OldTicket.objects.create(subject="from the identity days")
    OldNote.objects.create(ticket=first, text="old note")
    print(f"1. before: ticket id {first.pk} (identity)")

    with connection.cursor() as cur:
        cur.execute("SELECT * FROM snowflake_convert('shop_ticket')")
        done = [r[0] for r in cur.fetchall()]
    print("2. snowflake_convert('shop_ticket') by hand ran:")
    for statement in done:
        print("     " + statement)
    broken = OldTicket.objects.create(subject="after the conversion")
    try:
        OldTicket.objects.get(pk=broken.pk)
        sys.exit("expected DoesNotExist from the AutoField model")
    except OldTicket.DoesNotExist:
        print(f"   new id {broken.pk}: get(pk=...) with the AutoField model -> DoesNotExist")

    out = io.StringIO()
    call_command("migrate", stdout=out)
    assert "Applying shop.0004_ticket_snowflake_id... OK" in out.getvalue(), out.getvalue()
    print("3. migrate: Applying shop.0004_ticket_snowflake_id... OK")

    for t in (first, broken):
        assert Ticket.objects.get(pk=t.pk).subject == t.subject
    new = Ticket.objects.create(subject="after the recipe")
    note = TicketNote.objects.create(ticket=new, text="new note")
    assert Ticket.objects.get(pk=new.pk).notes.get().pk == note.pk
    assert TicketNote.objects.get(text="old note").ticket_id == first.pk
    assert list(Ticket.objects.order_by("pk").values_list("pk", flat=True)) == [first.pk, broken.pk, new.pk]
    print(f"4. get(pk=...) works for ids {first.pk}, {broken.pk}, {new.pk}; foreign keys too")

    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_get_expr(d.adbin, d.adrelid), a.attidentity, format_type(a.atttypid, a.atttypmod),"
            " pg_get_serial_sequence('shop_ticket', 'id')"
            " FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
            " WHERE a.attrelid = 'shop_ticket'::regclass AND a.attname = 'id'"
        )
        facts = cur.fetchone()
    assert facts == ("snowflake_nextval()", "", "bigint", None), facts
    print("   shop_ticket.id: bigint DEFAULT snowflake_nextval(), no identity, no sequence")
    call_command("makemigrations", "--check", "--dry-run", stdout=io.StringIO())
    print("   makemigrations --check: no changes")
finally:
    connection.close()
    admin(f'DROP DATABASE IF EXISTS "{demo_db}"')
print("OK")
