"""What the tests of copies between clusters share (tests/replication/test_copies.py,
tests/packaging/test_pg_upgrade.py): a database with every kind of ID column
the automatic floor reads, filled on the original server with a burst at its
end, and history backfilled at past times (snowflake_nextval_at), and what
the copy's server then issues into it, backfills included.

The copy's server runs with its clock 60 s behind the original's (libfaketime),
the same worker id, and applications writing at once: two sessions inserting
into every table, nobody running a statement first."""

import threading

import psycopg2
from harness import Stopwatch, Window, wait_until

# A bigint key, an event log without any index, a uuid key, a partitioned
# table (its leaf partitions read one by one), and a bigint column an
# application fills itself, which only snowflake_resume_above() finds.
SCHEMA = """
CREATE EXTENSION IF NOT EXISTS snowflake_id;
CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), n int);
CREATE TABLE ev (id bigint DEFAULT snowflake_nextval(), n int);
CREATE TABLE u (id uuid PRIMARY KEY DEFAULT snowflake_uuidv7(), n int);
CREATE TABLE p (id bigint DEFAULT snowflake_nextval(), n int, PRIMARY KEY (n, id)) PARTITION BY RANGE (n);
CREATE TABLE p_low PARTITION OF p FOR VALUES FROM (MINVALUE) TO (1000);
CREATE TABLE p_high PARTITION OF p FOR VALUES FROM (1000) TO (MAXVALUE);
CREATE TABLE app_made (ref bigint, n int);
CREATE TABLE hist (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), at timestamptz NOT NULL, n int);
"""
# History both servers backfill: 20 s of 2025, a row every 2 ms, and a
# batch at one time (the same IDs would be issued again if the copy's server
# knew nothing of the original's backfills).
HISTORY = """
INSERT INTO hist (id, at, n) SELECT snowflake_nextval_at(t), t, {n}
  FROM (SELECT timestamptz '2025-02-01' + g * interval '2 ms' AS t FROM generate_series(1, 10000) g) v;
INSERT INTO hist (id, at, n) SELECT i, '2025-02-01 00:00:01+00', {n}
  FROM unnest(snowflake_nextval_at_array('2025-02-01 00:00:01+00', 100)) i;
"""
BACKFILL_WORKER_ID = 1023


def arrived(s, dbname, ids, system_identifier, table="t", key=True):
    """Database `dbname`, made with the extension and a table `table` (a
    bigint ID column, a primary key with `key`, else none, so a floor reads
    every row) holding `ids`, and the record's row a restored dump of server
    `system_identifier` would bring: its next ID floors."""
    s.sql(f"CREATE DATABASE {dbname}")
    s.sql("CREATE EXTENSION snowflake_id", dbname=dbname)
    s.sql(f"CREATE TABLE {table} (id bigint {'PRIMARY KEY ' if key else ''}DEFAULT snowflake_nextval(), n int)",
          dbname=dbname)
    s.sql(f"INSERT INTO {table} (id, n) SELECT i, 1 FROM unnest(%s::bigint[]) i", (list(ids),), dbname=dbname)
    s.sql("INSERT INTO snowflake_id.snowflake_floors (system_identifier) VALUES (%s)", (system_identifier,),
          dbname=dbname)


def backfill_history(s, dbname, n):
    """Sets the backfill worker id (as an operator would, on each server:
    ALTER SYSTEM is not carried by pg_upgrade or a dump) and backfills
    HISTORY; returns the IDs it made."""
    if s.one("SHOW snowflake_id.backfill_worker_id") != str(BACKFILL_WORKER_ID):
        s.sql(f"ALTER SYSTEM SET snowflake_id.backfill_worker_id = {BACKFILL_WORKER_ID}")
        s.reload_and_wait()
    s.sql(HISTORY.format(n=n), dbname=dbname)
    return set(r[0] for r in s.sql(f"SELECT id FROM hist WHERE n = {n}", dbname=dbname))
TABLES = ("t", "ev", "u", "p")
# Every ID in the database, as bigint, with the row's n.
ALL_IDS = """
SELECT id, n FROM t UNION ALL SELECT id, n FROM ev UNION ALL SELECT snowflake_uuid_to_id(id), n FROM u
UNION ALL SELECT id, n FROM p
"""
# The n of rows written after the copy.
AFTER = 10_000_000
CLOCK_BEHIND_S = 60


def fill(s, dbname="postgres", rows=2000):
    """The original's data: rows in every table, then a burst of IDs into
    the event log (a batch, as fast as the generator gives them: it runs
    ahead of the clock) and IDs the application stored itself, the newest
    of all (made as by a clock ten minutes ahead)."""
    for table in ("t", "ev", "u"):
        s.sql(f"INSERT INTO {table} (n) SELECT g FROM generate_series(1, {rows}) g", dbname=dbname)
    s.sql(f"INSERT INTO p (n) SELECT g FROM generate_series(1, {rows}) g", dbname=dbname)
    s.sql("INSERT INTO ev (id, n) SELECT i, 0 FROM snowflake_nextval_batch(200000) i", dbname=dbname)
    # Above everything the automatic floor reads, by more than the copy's
    # writes take (its IDs move on with its clock after the floor).
    s.sql("INSERT INTO app_made (ref, n) SELECT snowflake_from_timestamp(clock_timestamp() + interval '10 min') + g,"
          " 0 FROM generate_series(1, 10) g", dbname=dbname)
    history = backfill_history(s, dbname, 0)
    return {
        "history": history,
        "top": s.one(f"SELECT max(id) FROM ({ALL_IDS}) a", dbname=dbname),
        "app_top": s.one("SELECT max(ref) FROM app_made", dbname=dbname),
        "ids": set(r[0] for r in s.sql(f"SELECT id FROM ({ALL_IDS}) a", dbname=dbname)),
    }


def a_second_past_the_last_id(s, dbname="postgres"):
    """Waits until the server's clock is a second past the time of the last
    ID it issued (a burst runs ahead of the clock): the next one is made a
    second above every ID before it."""
    wait_until(lambda: s.one("SELECT clock_timestamp() > last_id_time + interval '1 s'"
                             " FROM snowflake_id.snowflake_status", dbname=dbname),
               f"{s.name}: the clock did not pass the last ID's time by a second")


def write_at_once(s, dbname="postgres", seconds=3.0, sessions=2):
    """Two sessions inserting into every table as soon as the copy's server
    is up, each for `seconds` after its first insert returned and for at
    least one insert into every table. Returns the wait of the first insert
    (seconds, for printing), the errors by SQLSTATE, and how many inserts
    succeeded."""
    first = {}
    errors = {}
    done = [0]
    lock = threading.Lock()

    def work(k):
        conn = s.connect(dbname=dbname)
        cur = conn.cursor()
        window = None
        i = 0
        while window is None or window.open() or i < len(TABLES):
            table = TABLES[i % len(TABLES)]
            took = Stopwatch()
            try:
                cur.execute(f"INSERT INTO {table} (n) VALUES (%s)", (AFTER + k * 1_000_000 + i,))
                with lock:
                    done[0] += 1
                    first.setdefault("wait", took.seconds())
            except psycopg2.Error as e:
                with lock:
                    errors[e.pgcode] = errors.get(e.pgcode, 0) + 1
            window = window or Window(seconds)
            i += 1
        conn.close()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return first.get("wait"), errors, done[0]


NEW_HERE = "no floor of this server covers it yet"
# Whether this server's floors cover every row of server %s in the record.
COVERED = """
SELECT bool_and(EXISTS (SELECT FROM snowflake_id.snowflake_floors m
                        WHERE m.system_identifier = (SELECT system_identifier FROM pg_control_system())
                          AND f.arrival = ANY (m.covers)))
FROM snowflake_id.snowflake_floors f WHERE f.system_identifier = %s AND f.backfilled IS NULL
"""


def copy_floors(s):
    """The log's floors made because of a copy (not of a database new here)."""
    return [line for line in s.log_text().splitlines() if "was floored because" in line and NEW_HERE not in line]


def check_copy(s, original, dbname="postgres", what="the copy"):
    """The copy's server issues at once, with no error, and no ID the copied
    data holds: every new ID is above every copied one. Returns the first
    insert's wait."""
    wait, errors, inserted = write_at_once(s, dbname=dbname)
    assert not errors, f"{what}: inserts failed right after the copy: {errors}\n{s.log_text()[-3000:]}"
    assert inserted > 0
    new = [r[0] for r in s.sql(f"SELECT id FROM ({ALL_IDS}) a WHERE n >= {AFTER}", dbname=dbname)]
    assert len(new) == inserted == len(set(new)), f"{what}: {inserted} inserts, {len(new)} new rows"
    repeated = set(new) & original["ids"]
    assert not repeated, f"{what}: {len(repeated)} IDs issued again"
    assert min(new) > original["top"], f"{what}: a new ID {min(new)} is below the copied {original['top']}"
    # The floor was the extension's doing, said in the log, for the copy
    # (not only as a database new to this server).
    assert copy_floors(s), s.log_text()[-3000:]
    # The same history backfilled again here: the copy's record of floors
    # carried the original's leases, and its floor raised this server's.
    if "history" in original and s.one("SELECT count(*) FROM hist WHERE n = 0", dbname=dbname):
        # The original's live worker ids are not known here: backfills below
        # its IDs wait for an operator's word on the backfill worker id.
        if s.one("SHOW snowflake_id.backfill_worker_id") != str(BACKFILL_WORKER_ID):
            s.sql(f"ALTER SYSTEM SET snowflake_id.backfill_worker_id = {BACKFILL_WORKER_ID}")
            s.reload_and_wait()
        code, message, hint = s.error("SELECT snowflake_nextval_at('2025-02-01')", dbname=dbname)
        assert code == "55000" and "arrived here" in message, (what, code, message)
        vouch = f"SELECT snowflake_vouch_backfill_worker_id({BACKFILL_WORKER_ID});"
        assert vouch in hint, hint
        assert "may take times before" in s.one(vouch)
        again = backfill_history(s, dbname, AFTER)
        assert len(again) == len(original["history"])
        repeated = again & original["history"]
        assert not repeated, f"{what}: {len(repeated)} backfilled IDs issued again"
        assert "backfill lease(s) of the record raised this server's" in s.log_text()
    print(f"{what}: first insert waited {wait * 1000:.0f} ms (clock {CLOCK_BEHIND_S} s behind); "
          f"{inserted} inserts in 3 s or more, none failed")
    return wait
