"""Inserts through server-side prepared statements, the way a driver does by
itself, for `seconds` and until it has run two inserts after the table's key
became bigint (the test converts it once every driver has prepared its
statement), and reports what it saw as JSON: how many inserts succeeded,
each error (SQLSTATE and message) with its count, how many succeeded after
the last error, and whether the conversion was seen.

    prepared_inserts.py psycopg|psycopg-deallocate|asyncpg|asyncpg-transaction DSN TABLE SECONDS

psycopg 3 prepares a statement once it has run prepare_threshold times
(0 here: at once); asyncpg prepares every statement it runs.
psycopg-deallocate is psycopg with what the README tells its users to do
when a prepared statement's result type changed: DEALLOCATE ALL.
asyncpg-transaction runs each insert in a transaction of its own.

Time is the server's: this runs in the drivers' virtual environment, which
cannot import tests/harness.py (it needs psycopg2), so the `seconds` and the
bound on the whole run, harness.TIMEOUT (the same SNOWFLAKE_TEST_TIMEOUT),
are read on the server's clock by a second connection, which also looks at
the key's type. A slow machine makes the run longer, never ends it before
the conversion has been met."""

import asyncio
import json
import os
import sys

driver, dsn, table, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
TIMEOUT = float(os.environ.get("SNOWFLAKE_TEST_TIMEOUT", "180"))
seen = {"ok": 0, "errors": {}, "ok_after_last_error": 0, "driver": driver, "converted": False}
# Started: (the end of `seconds`, the end of the bound) on the server's clock.
START = ("SELECT clock_timestamp() + make_interval(secs => {seconds}),"
         " clock_timestamp() + make_interval(secs => {timeout})")
# Whether the run goes on: `seconds` not over yet, or the key not bigint
# yet (or bigint for fewer than two inserts), within the bound.
LOOK = ("SELECT clock_timestamp() < '{until}'::timestamptz, clock_timestamp() < '{bound}'::timestamptz,"
        " (SELECT format_type(atttypid, atttypmod) = 'bigint' FROM pg_attribute"
        "  WHERE attrelid = '{table}'::regclass AND attname = 'id')")
after_conversion = [0]


def going(row):
    """From a LOOK row: whether to run another insert."""
    window_open, within_bound, converted = row
    if converted and not seen["converted"]:
        seen["converted"] = True
    if not within_bound:
        return False
    return window_open or not seen["converted"] or after_conversion[0] < 2


def inserted():
    if seen["converted"]:
        after_conversion[0] += 1


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
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0) as conn, \
            psycopg.connect(dsn, autocommit=True) as clock:
        until, bound = clock.execute(START.format(seconds=seconds, timeout=TIMEOUT)).fetchone()
        look = LOOK.format(until=until.isoformat(), bound=bound.isoformat(), table=table)
        i = 0
        while going(clock.execute(look).fetchone()):
            i += 1
            inserted()
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
    clock = await asyncpg.connect(dsn)
    until, bound = await clock.fetchrow(START.format(seconds=seconds, timeout=TIMEOUT))
    look = LOOK.format(until=until.isoformat(), bound=bound.isoformat(), table=table)
    i = 0
    while going(await clock.fetchrow(look)):
        i += 1
        inserted()
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
    await clock.close()


if driver.startswith("psycopg"):
    with_psycopg()
else:
    asyncio.run(with_asyncpg())
print(json.dumps(seen))
