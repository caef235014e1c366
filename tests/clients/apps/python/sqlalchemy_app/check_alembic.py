#!/usr/bin/env python3
"""Alembic against a database that has the extension and the app's tables.

In a new database <PGDATABASE>_alembic_check (created and dropped here, as the
PG* role, which needs CREATEDB and may create the trusted extension):
1. autogenerate against the empty database renders the models' key as
   server_default=sa.text('snowflake_nextval()'), as the checked-in
   migrations/versions/0001_initial.py has it;
2. `alembic upgrade head` creates the extension (0001's CREATE EXTENSION IF
   NOT EXISTS) and bigint keys with DEFAULT snowflake_nextval(), no identity,
   no sequence; it shows where the extension's table and view are;
3. `alembic check` and `alembic revision --autogenerate` propose no operation
   (the generated file's upgrade() and downgrade() are `pass`), with the
   default configuration, with -x compare_server_default=true and with
   -x include_schemas=true (which needs env.py's include_name filter: without
   it, shown last, autogenerate would drop the extension's table).

Run from this directory:  python check_alembic.py     Ends with "OK".
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import psycopg
from alembic.autogenerate import produce_migrations, render_python_code
from alembic.migration import MigrationContext

from db import make_engine
from models import Base

HERE = os.path.dirname(os.path.abspath(__file__))
base_db = os.environ.get("PGDATABASE", "appdb")
check_db = f"{base_db}_alembic_check"
# Alembic runs on a private copy of the migrations: autogenerate writes a
# revision file into the versions directory, and another run of this script
# at the same moment (the test command runs it against one server per
# PostgreSQL major, side by side) would take that file for a revision its
# database lacks ("Target database is not up to date").
PRIVATE = tempfile.mkdtemp(prefix="alembic-check-")
shutil.copytree(os.path.join(HERE, "migrations"), os.path.join(PRIVATE, "migrations"),
                ignore=shutil.ignore_patterns("__pycache__"))
with open(os.path.join(HERE, "alembic.ini")) as f:
    ini = f.read()
assert "script_location = %(here)s/migrations" in ini
with open(os.path.join(PRIVATE, "alembic.ini"), "w") as f:
    f.write(ini)


def admin(sql):
    with psycopg.connect(dbname=base_db, autocommit=True) as conn:
        conn.execute(sql)


def alembic(*args, expect_ok=True):
    env = {**os.environ, "PGDATABASE": check_db}
    p = subprocess.run(
        [sys.executable, "-m", "alembic", "-c", os.path.join(PRIVATE, "alembic.ini"), *args], cwd=HERE, env=env,
        capture_output=True, text=True,
    )
    if expect_ok and p.returncode != 0:
        sys.exit(f"alembic {' '.join(args)} failed:\n{p.stdout}{p.stderr}")
    return p


def autogenerate(*xargs):
    """alembic revision --autogenerate; returns the file's text and removes it."""
    p = alembic(*xargs, "revision", "--autogenerate", "-m", "autogenerate check")
    m = re.search(r"Generating (\S+\.py)", p.stdout + p.stderr)
    assert m, p.stdout + p.stderr
    path = m.group(1)
    try:
        with open(path) as f:
            return f.read()
    finally:
        os.remove(path)


def statements(text, function):
    """The code lines of upgrade() or downgrade(), less docstring and comments."""
    body = text.split(f"def {function}() -> None:")[1].split("\ndef ")[0]
    lines = [line.strip() for line in body.splitlines()]
    return [line for line in lines if line and not line.startswith(("#", '"""'))]


def ops_of(text):
    return [line for line in statements(text, "upgrade") if line.startswith("op.")]


admin(f'DROP DATABASE IF EXISTS "{check_db}"')
admin(f'CREATE DATABASE "{check_db}"')
failed = []
engine = make_engine(check_db)
try:
    with engine.connect() as conn:
        mc = MigrationContext.configure(conn)
        rendered = render_python_code(produce_migrations(mc, Base.metadata).upgrade_ops)
    expected = "server_default=sa.text('snowflake_nextval()')"
    assert rendered.count(expected) == 2, rendered
    with open(os.path.join(HERE, "migrations/versions/0001_initial.py")) as f:
        assert f.read().count(expected) == 2
    print(f"1. the initial migration renders the key's default as {expected}")

    alembic("upgrade", "head")
    with psycopg.connect(dbname=check_db) as conn:
        for table in ("sa_author", "sa_post"):
            facts = conn.execute(
                "SELECT format_type(a.atttypid, a.atttypmod), pg_get_expr(d.adbin, d.adrelid),"
                " a.attidentity, pg_get_serial_sequence(%s, 'id')"
                " FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
                " WHERE a.attrelid = %s::regclass AND a.attname = 'id'",
                [table, table],
            ).fetchone()
            assert facts == ("bigint", "snowflake_nextval()", "", None), (table, facts)
    print("2. alembic upgrade head: sa_author.id, sa_post.id bigint DEFAULT snowflake_nextval(), no sequence")
    with psycopg.connect(dbname=check_db, autocommit=True) as conn:
        where = conn.execute(
            "SELECT c.relname, n.nspname FROM pg_depend d"
            " JOIN pg_class c ON c.oid = d.objid AND d.classid = 'pg_class'::regclass"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake_id'"
            " WHERE d.deptype = 'e' ORDER BY 1"
        ).fetchall()
    print("   the extension's tables and views: "
          + ", ".join(f"{n}.{r}" for r, n in where))

    for xargs in ([], ["-x", "compare_server_default=true"], ["-x", "include_schemas=true"]):
        label = " ".join(xargs) or "default configuration"
        chk = alembic(*xargs, "check", expect_ok=False)
        text = autogenerate(*xargs)
        ok = (
            chk.returncode == 0
            and statements(text, "upgrade") == ["pass"]
            and statements(text, "downgrade") == ["pass"]
        )
        print(f"3. {label}: alembic check exit {chk.returncode}; "
              f"autogenerate upgrade() {'pass' if ok else ops_of(text)}")
        if not ok:
            failed.append(label)
            said = [line for line in (chk.stdout + chk.stderr).splitlines() if "upgrade operations" in line]
            print("   alembic check: " + (said[0][:160] + " ..." if said else "(nothing)"))

    text = autogenerate("-x", "include_schemas=true", "-x", "schema_filter=false")
    print("   for comparison, include_schemas=true without include_name:", ops_of(text))
    for table in ("snowflake_claims", "snowflake_floors"):
        if (table, "snowflake_id") in where:
            assert f"op.drop_table('{table}', schema='snowflake_id')" in ops_of(text), (table, ops_of(text))
finally:
    engine.dispose()
    admin(f'DROP DATABASE IF EXISTS "{check_db}"')
    shutil.rmtree(PRIVATE, ignore_errors=True)
if failed:
    sys.exit(f"FAILED: autogenerate proposed operations with: {', '.join(failed)}")
print("OK")
