#!/usr/bin/env python3
"""An id taken from a URL is a str: what psycopg 3 and asyncpg do with it.

- psycopg 3 returns bigint as a Python int (exact at any size) and accepts the
  str as a parameter: it sends it untyped and PostgreSQL casts it to bigint.
- asyncpg prepares the statement, learns that $1 is bigint and wants an int:
  a str raises asyncpg.exceptions.DataError before anything is sent. Convert
  with int() (which also rejects what is not a number: answer 404 then).

Run with the PG* variables set: python drivers_ids.py   Ends with "OK".
"""
import asyncio

import asyncpg
import psycopg

with psycopg.connect(autocommit=True) as conn:
    conn.execute("CREATE EXTENSION IF NOT EXISTS snowflake_id")
    conn.execute("CREATE TEMPORARY TABLE item (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), name text)")
    new_id = conn.execute("INSERT INTO item (name) VALUES ('x') RETURNING id").fetchone()[0]
    # Past what a JavaScript Number holds exactly, but on js53.
    js53 = conn.execute("SELECT current_setting('snowflake_id.layout') = 'js53'").fetchone()[0]
    assert type(new_id) is int and (new_id < 2**53 if js53 else new_id > 2**53), new_id
    from_url = str(new_id)  # e.g. /items/<id>
    row = conn.execute("SELECT id, name FROM item WHERE id = %s", [from_url]).fetchone()
    assert row == (new_id, "x"), row
    print(f"psycopg {psycopg.__version__}: id {new_id} is an int; a str parameter works")


async def with_asyncpg(new_id):
    conn = await asyncpg.connect()
    try:
        await conn.execute("CREATE TEMPORARY TABLE item (id bigint PRIMARY KEY, name text)")
        await conn.execute("INSERT INTO item VALUES ($1, 'x')", new_id)
        from_url = str(new_id)
        try:
            await conn.fetchrow("SELECT id, name FROM item WHERE id = $1", from_url)
            raise SystemExit("expected asyncpg to refuse a str for a bigint parameter")
        except asyncpg.exceptions.DataError as e:
            print(f"asyncpg {asyncpg.__version__}: a str parameter -> DataError: {e}")
        row = await conn.fetchrow("SELECT id, name FROM item WHERE id = $1", int(from_url))
        assert tuple(row) == (new_id, "x"), row
        print("  int(id_from_url) works")
    finally:
        await conn.close()


asyncio.run(with_asyncpg(new_id))
print("OK")
