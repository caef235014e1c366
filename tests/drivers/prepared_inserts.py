"""Inserts through server-side prepared statements, the way a driver does by
itself, for `seconds`, and reports what it saw as JSON: how many inserts
succeeded, each error (SQLSTATE and message) with its count, and how many
succeeded after the last error.

    prepared_inserts.py psycopg|psycopg-deallocate|asyncpg|asyncpg-transaction DSN TABLE SECONDS

psycopg 3 prepares a statement once it has run prepare_threshold times
(0 here: at once); asyncpg prepares every statement it runs.
psycopg-deallocate is psycopg with what the README tells its users to do
when a prepared statement's result type changed: DEALLOCATE ALL.
asyncpg-transaction runs each insert in a transaction of its own."""

import asyncio
import json
import sys
import time

driver, dsn, table, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
seen = {"ok": 0, "errors": {}, "ok_after_last_error": 0, "driver": driver}


def failed(code, message):
    key = f"{code} {message}"
    seen["errors"][key] = seen["errors"].get(key, 0) + 1
    seen["ok_after_last_error"] = 0


def succeeded():
    seen["ok"] += 1
    seen["ok_after_last_error"] += 1
    # The first insert has prepared the statement: the test may change the
    # table now (it waits for this line, not for a lucky sleep).
    if seen["ok"] == 1:
        print("prepared", file=sys.stderr, flush=True)


def with_psycopg():
    import psycopg

    seen["version"] = psycopg.__version__
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0) as conn:
        deadline = time.time() + seconds
        i = 0
        while time.time() < deadline:
            i += 1
            try:
                # psycopg keys a prepared statement by its parameter types as
                # well, and sends an int as int2 up to 32767, int4 beyond: a
                # growing counter would make a fresh statement at 32768 and
                # hide what the test measures.
                conn.execute(f"INSERT INTO {table} (n) VALUES (%s) RETURNING id", (i % 10000,)).fetchone()
                succeeded()
            except psycopg.Error as e:
                failed(e.sqlstate, e.diag.message_primary)
                if driver == "psycopg-deallocate" and e.sqlstate == "0A000":
                    conn.execute("DEALLOCATE ALL")


async def with_asyncpg():
    import asyncpg

    seen["version"] = asyncpg.__version__
    conn = await asyncpg.connect(dsn)
    deadline = time.time() + seconds
    i = 0
    while time.time() < deadline:
        i += 1
        try:
            if driver == "asyncpg-transaction":
                async with conn.transaction():
                    await conn.fetchval(f"INSERT INTO {table} (n) VALUES ($1) RETURNING id", i)
            else:
                await conn.fetchval(f"INSERT INTO {table} (n) VALUES ($1) RETURNING id", i)
            succeeded()
        except asyncpg.PostgresError as e:
            failed(e.sqlstate, type(e).__name__)
    await conn.close()


if driver.startswith("psycopg"):
    with_psycopg()
else:
    asyncio.run(with_asyncpg())
print(json.dumps(seen))
