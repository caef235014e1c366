"""IDs for past times (snowflake_nextval_at): each carries its own time, and
no ID repeats, whatever runs beside it or happens to the server.

Every check looks at the IDs themselves (collected client side, from rows and
from bare SELECTs) and at the record of floors: every backfilled ID in a
committed row lies in a lease its database's record holds, so that a copy of
the data would know of it."""

import os
import random
import threading

import psycopg2
from copies import arrived
from harness import Stopwatch, let_run, server, servers, started, wait_until

BACKFILL = {"snowflake_id.backfill_worker_id": 1023}
HIST = "CREATE TABLE hist (id bigint PRIMARY KEY, at timestamptz NOT NULL, live boolean NOT NULL DEFAULT false)"
# Every backfilled ID of hist, checked where it lies: its time is its row's
# (to the millisecond), its worker the backfill one, and a lease row of the
# record covers it.
CHECK = """
SELECT count(*),
       count(*) FILTER (WHERE snowflake_timestamp(id) <> date_trunc('milliseconds', at)),
       count(*) FILTER (WHERE (snowflake_decode(id)).worker_id <> 1023),
       count(*) FILTER (WHERE NOT EXISTS (
           SELECT FROM snowflake_id.snowflake_floors f
            WHERE f.backfilled IS NOT NULL
              AND (id >> 22) BETWEEN f.backfilled[1] AND f.backfilled[2]
              AND (id & 4095) < f.backfilled[3]))
  FROM hist WHERE NOT live
"""


def grant(s, role="app"):
    s.sql(f"GRANT EXECUTE ON FUNCTION snowflake_nextval_at(timestamptz),"
          f" snowflake_nextval_at_array(timestamptz, integer) TO {role}")


def check_rows(s):
    n, wrong_time, wrong_worker, unrecorded = s.sql(CHECK)[0]
    assert (wrong_time, wrong_worker, unrecorded) == (0, 0, 0), (n, wrong_time, wrong_worker, unrecorded)
    return n


def test_each_refusal_has_its_sqlstate_and_a_hint():
    with server("bf-refuse") as s:
        code, msg, hint = s.error("SELECT snowflake_nextval_at(now() - interval '1 day')")
        assert code == "55000" and "snowflake_id.backfill_worker_id is not set" in msg, msg
        assert "pg_reload_conf()" in hint and "0 to 1023" in hint, hint

        for value, words in ((1, "this server's own worker id"), (1024, "does not fit the worker field")):
            s.sql(f"ALTER SYSTEM SET snowflake_id.backfill_worker_id = {value}")
            s.reload_and_wait()
            code, msg, hint = s.error("SELECT snowflake_nextval_at(now() - interval '1 day')")
            assert code == "22023" and words in msg, msg
            assert "reload" in hint, hint
        s.sql("ALTER SYSTEM SET snowflake_id.backfill_worker_id = 1023")
        s.reload_and_wait()

        refusals = [
            ("SELECT snowflake_nextval_at('2024-12-31 23:59:59+00')", "22008", "outside the time range", "at or after"),
            ("SELECT snowflake_nextval_at('2100-01-01+00')", "22008", "outside the time range", "at or before"),
            ("SELECT snowflake_nextval_at('infinity')", "22008", "outside the time range", "at or before"),
            ("SELECT snowflake_nextval_at('-infinity')", "22008", "outside the time range", "at or after"),
            ("SELECT snowflake_nextval_at(now() + interval '1 minute')", "22023", "is for past times",
             "snowflake_nextval()"),
            ("SELECT snowflake_nextval_at_array(now(), 0)", "22023", "takes n from 1 to 4096", "its own time"),
            ("SELECT snowflake_nextval_at_array(now(), 4097)", "22023", "takes n from 1 to 4096", "its own time"),
            ("BEGIN READ ONLY; SELECT snowflake_nextval_at(now())", "25006", "read-only transaction",
             "read-write transaction"),
        ]
        for sql, code_wanted, words, hint_words in refusals:
            code, msg, hint = s.error(sql)
            assert code == code_wanted and words in msg, (sql, code, msg)
            assert hint_words in hint, (sql, hint)

        # Within max_lead of the clock is still a past time; NULL is no time.
        assert s.one("SELECT snowflake_nextval_at(now() + interval '5 s') IS NOT NULL")
        assert s.one("SELECT snowflake_nextval_at(NULL) IS NULL")

        # Not for every role: an operator grants it.
        s.sql("CREATE ROLE app LOGIN")
        code, msg, _ = s.error("SELECT snowflake_nextval_at(now())", user="app")
        assert code == "42501", msg
        grant(s)
        assert s.one("SELECT snowflake_nextval_at(now() - interval '1 day') > 0", user="app")

        # One tick holds 4096 numbers of the backfill worker id, then says so.
        at = "'2025-05-05 05:05:05.005+00'"
        assert len(s.one(f"SELECT snowflake_nextval_at_array({at}, 4000)")) == 4000
        code, msg, hint = s.error(f"SELECT snowflake_nextval_at_array({at}, 200)")
        assert code == "2200H" and "only 96 backfilled IDs are left at 2025-05-05 05:05:05.005" in msg, msg
        assert "spread rows that share a time" in hint, hint
        assert len(s.one(f"SELECT snowflake_nextval_at_array({at}, 96)")) == 96
        code, msg, _ = s.error(f"SELECT snowflake_nextval_at({at})")
        assert code == "2200H" and "no backfilled IDs are left" in msg, msg
        # The neighbouring tick is untouched.
        seq = s.one("SELECT (snowflake_decode(snowflake_nextval_at('2025-05-05 05:05:05.006+00'))).sequence")
        assert seq < 4096


def test_ids_carry_their_time_sort_by_it_and_work_as_uuids():
    with server("bf-shape", conf=BACKFILL) as s:
        s.sql(HIST)
        s.sql("INSERT INTO hist (id, at) SELECT snowflake_nextval_at(t), t FROM"
              " (SELECT timestamptz '2025-03-01' + g * interval '997 ms' AS t FROM generate_series(1, 20000) g) v")
        assert check_rows(s) == 20000
        # Across ticks, by time, as live IDs are.
        assert s.one("SELECT bool_and(ordered) FROM (SELECT (id > lag(id) OVER (ORDER BY at)) IS NOT FALSE AS ordered"
                     " FROM hist) o")
        # Within a tick: by worker id, after this server's live IDs there
        # (1023 is the largest): a live ID and a backfilled one of one tick.
        live, back = s.sql("WITH l AS (SELECT snowflake_nextval() AS id)"
                           " SELECT id, snowflake_nextval_at(snowflake_timestamp(id)) FROM l")[0]
        assert s.one("SELECT snowflake_timestamp(%s) = snowflake_timestamp(%s)", (live, back))
        assert back > live
        # A batch at one time: increasing, one tick.
        arr = s.one("SELECT snowflake_nextval_at_array('2025-03-01 00:00:01.5+00', 50)")
        assert arr == sorted(arr) and len(set(arr)) == 50
        assert s.one("SELECT count(DISTINCT snowflake_timestamp(i)) FROM unnest(%s::bigint[]) i", (arr,)) == 1
        # The uuid face: to a UUID and back, its time the same.
        assert s.one("SELECT bool_and(snowflake_uuid_to_id(snowflake_id_to_uuid(id)) = id"
                     " AND snowflake_timestamp(snowflake_uuid_to_id(snowflake_id_to_uuid(id))) = snowflake_timestamp(id))"
                     " FROM hist")
        # snowflake_lastval() answers the last one drawn.
        drawn, last = s.sql("SELECT snowflake_nextval_at('2025-04-01'), snowflake_lastval()")[0]
        assert drawn == last


class Importer(threading.Thread):
    """One session backfilling: INSERT ... SELECT over times that overlap
    the other importers' (some identical), some as arrays at one time, some
    in rolled-back transactions and savepoints, collecting every ID it was
    given (committed or not)."""

    def __init__(self, s, k, rounds):
        super().__init__()
        self.s, self.k, self.rounds = s, k, rounds
        self.ids, self.errors = [], []

    def run(self):
        rnd = random.Random(self.k)
        conn = self.s.connect(autocommit=False)
        cur = conn.cursor()
        try:
            for r in range(self.rounds):
                start = rnd.randint(0, 50)
                kind = rnd.random()
                if kind < 0.5:
                    # Rows every 3 ms from a shared start, in a shuffled order:
                    # other importers cover the same ticks.
                    cur.execute(
                        "INSERT INTO hist (id, at) SELECT snowflake_nextval_at(t), t FROM"
                        " (SELECT timestamptz '2025-02-01' + (%s + g * 3) * interval '1 ms' AS t"
                        "  FROM generate_series(1, 2000) g ORDER BY random()) v RETURNING id", (start,))
                elif kind < 0.8:
                    # Identical times, every importer's: eight ticks, each row
                    # a batch of 2 there.
                    cur.execute(
                        "INSERT INTO hist (id, at) SELECT unnest(snowflake_nextval_at_array(t, 2)), t FROM"
                        " (SELECT timestamptz '2025-02-01 00:00:01+00' + (g % 8) * interval '1 ms' AS t"
                        "  FROM generate_series(1, 40) g) v RETURNING id")
                else:
                    cur.execute("SELECT unnest(snowflake_nextval_at_array(now() - interval '2 days', 20))")
                got = [row[0] for row in cur.fetchall()]
                self.ids.extend(got)
                if r % 5 == 4:
                    conn.rollback()
                elif r % 5 == 3:
                    cur.execute("SAVEPOINT a")
                    cur.execute("SELECT snowflake_nextval_at(timestamptz '2025-02-01' + %s * interval '1 ms')",
                                (start,))
                    self.ids.append(cur.fetchone()[0])
                    cur.execute("ROLLBACK TO SAVEPOINT a")
                    conn.commit()
                else:
                    conn.commit()
        except psycopg2.Error as e:
            self.errors.append((e.pgcode, e.pgerror))
        finally:
            conn.close()


def test_concurrent_overlapping_backfills_beside_live_inserts_never_repeat():
    with server("bf-concurrent", conf=BACKFILL) as s:
        s.sql(HIST)
        grant(s, "postgres")
        stop = threading.Event()
        live_ids = []

        def live():
            conn = s.connect()
            cur = conn.cursor()
            while not stop.is_set():
                cur.execute("INSERT INTO hist (id, at, live) SELECT snowflake_nextval(), now(), true"
                            " FROM generate_series(1, 200) RETURNING id")
                live_ids.extend(r[0] for r in cur.fetchall())
            conn.close()

        lives = [threading.Thread(target=live) for _ in range(2)]
        importers = [Importer(s, k, rounds=25) for k in range(4)]
        for t in lives + importers:
            t.start()
        for t in importers:
            t.join()
        stop.set()
        for t in lives:
            t.join()
        for imp in importers:
            assert not imp.errors, imp.errors
        handed = [i for imp in importers for i in imp.ids] + live_ids
        assert len(handed) == len(set(handed)), f"{len(handed) - len(set(handed))} IDs handed out twice"
        assert check_rows(s) > 10_000
        worker, leases = s.sql("SELECT backfill_worker_id, backfill_leases FROM snowflake_id.snowflake_status")[0]
        # Rolled-back leases took their rows with them.
        assert worker == 1023 and leases >= s.one(
            "SELECT count(*) FROM snowflake_id.snowflake_floors WHERE backfilled IS NOT NULL") > 0
        print(f"{len(handed)} IDs, {len(live_ids)} live; leases: "
              f"{s.one('SELECT count(*) FROM snowflake_id.snowflake_floors WHERE backfilled IS NOT NULL')}")


def test_a_backfill_killed_mid_way_and_run_again_repeats_nothing():
    with servers() as made:
        s = started(made, "bf-kill", conf=BACKFILL, faketime=True, extension=True)
        s.sql(HIST)
        times = ("SELECT timestamptz '2025-02-01' + g * interval '250 us' AS t FROM generate_series(1, {n}) g")
        # Before: committed rows and IDs handed out without a row.
        before = [r[0] for r in s.sql(f"INSERT INTO hist (id, at) SELECT snowflake_nextval_at(t), t FROM"
                                      f" ({times.format(n=20000)}) v RETURNING id")]
        before += s.one("SELECT snowflake_nextval_at_array('2025-02-01 00:00:01+00', 100)")
        # Mid-way: a long import of the same times, killed.
        conn = s.connect()
        pid = conn.get_backend_pid()
        box = {}

        def run():
            try:
                conn.cursor().execute(f"INSERT INTO hist (id, at) SELECT snowflake_nextval_at(t), t FROM"
                                      f" ({times.format(n=3_000_000)}) v ON CONFLICT DO NOTHING")
            except psycopg2.Error as e:
                box["error"] = e

        t = threading.Thread(target=run)
        t.start()
        wait_until(lambda: "error" in box or (
            s.one("SELECT count(*) FROM snowflake_id.snowflake_floors WHERE backfilled IS NOT NULL") >= 1
            and os.path.exists(f"/proc/{pid}")), "the import recorded no lease", interval=0.05)
        assert "error" not in box, box["error"]
        # Further into the import: how far it gets decides nothing (killed
        # anywhere after its first lease, it must repeat nothing).
        let_run(1.0)
        s.kill9(pid)
        t.join()
        assert "error" in box, "the import ended before it was killed"
        # The crash restart; then the whole server killed too, its clock behind.
        s.connect_retry().close()
        s.kill9_all()
        s.set_clock(-3600)
        s.start()
        again = [r[0] for r in s.sql(f"INSERT INTO hist (id, at) SELECT snowflake_nextval_at(t), t FROM"
                                     f" ({times.format(n=200000)}) v RETURNING id")]
        repeated = set(before) & set(again)
        assert not repeated, f"{len(repeated)} IDs issued again after kill -9"
        assert check_rows(s) == 220000


def test_two_servers_backfilling_the_same_times_give_distinct_ids():
    times = "SELECT timestamptz '2025-02-01' + g * interval '100 us' AS t FROM generate_series(1, 100000) g"
    with server("bf-two-a", conf=BACKFILL) as a, \
            server("bf-two-b", conf={"snowflake_id.worker_id": 2, "snowflake_id.backfill_worker_id": 1022}) as b:
        ids = []
        for s in (a, b):
            ids += [r[0] for r in s.sql(f"SELECT snowflake_nextval_at(t) FROM ({times}) v")]
            ids += s.one("SELECT snowflake_nextval_at_array('2025-03-01 00:00:01+00', 4096)")
        assert len(ids) == len(set(ids)) == 2 * 104096


def test_a_damaged_state_file_refuses_backfills_and_nothing_else():
    with server("bf-damaged", conf=BACKFILL) as s:
        s.sql(HIST)
        first = s.one("INSERT INTO hist (id, at) VALUES (snowflake_nextval_at('2025-02-01'), '2025-02-01')"
                      " RETURNING id")
        path = os.path.join(s.data, "snowflake_id.backfill")
        s.stop()
        with open(path, "r+b") as f:
            f.seek(20)
            byte = f.read(1)
            f.seek(20)
            f.write(bytes([byte[0] ^ 0xFF]))
        s.start()
        code, msg, hint = s.error("SELECT snowflake_nextval_at('2025-02-01')")
        assert code == "XX001" and "could not be read when this server started" in msg, msg
        assert "remove it, restart, and call SELECT snowflake_nextval_at(now()); once in every database" in hint, hint
        assert s.one("SELECT snowflake_nextval() > 0")
        assert "checksum does not match" in s.log_text()
        assert "could not be read when this server started" in s.one("SELECT problem FROM snowflake_id.snowflake_status")
        # Removed, as the HINT says: the database's record brings back the
        # lease of the row it holds.
        os.remove(path)
        s.restart()
        again = s.one("INSERT INTO hist (id, at) VALUES (snowflake_nextval_at('2025-02-01'), '2025-02-01')"
                      " RETURNING id")
        assert again != first
        assert "backfill lease(s) of database \"postgres\"'s record were not in this server's record" in s.log_text()


def guide_blocks():
    """The SQL blocks of docs/applications.md's "Importing history" section."""
    import re
    from harness import REPO
    with open(os.path.join(REPO, "docs", "applications.md")) as f:
        text = f.read()
    section = text.split("## Importing history: IDs for past times", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```sql\n(.*?)^```", section, re.M | re.S)


def test_the_guide_s_history_recipes_run_as_the_application():
    from harness import application_role
    operator, *recipes = guide_blocks()
    assert "As a superuser" in operator and len(recipes) == 3
    with server("bf-guide", conf={"snowflake_id.worker_id": 4}) as s:
        application_role(s)
        # What the application brings: history from elsewhere, a serial-keyed
        # table and its child, readings of two years.
        s.sql("""
            CREATE TABLE legacy_events (created_at timestamptz NOT NULL, payload text);
            INSERT INTO legacy_events SELECT timestamptz '2025-03-01' + g * interval '37 s', 'e' || g
              FROM generate_series(1, 20000) g ORDER BY random();
            CREATE TABLE orders (id serial PRIMARY KEY, created_at timestamptz NOT NULL);
            CREATE TABLE order_lines (id serial PRIMARY KEY, order_id integer NOT NULL REFERENCES orders, item text);
            INSERT INTO orders (created_at) SELECT timestamptz '2025-06-01' + g * interval '1 min'
              FROM generate_series(1, 500) g;
            INSERT INTO order_lines (order_id, item) SELECT 1 + g % 500, 'item ' || g FROM generate_series(1, 2000) g;
            CREATE TABLE legacy_readings (taken_at timestamptz NOT NULL, value double precision);
            INSERT INTO legacy_readings SELECT timestamptz '2025-11-30' + g * interval '1 min', g
              FROM generate_series(1, 100000) g;
        """, dbname="appdb", user="app")
        lines_before = s.sql("SELECT o.created_at, l.item FROM order_lines l JOIN orders o ON o.id = l.order_id"
                             " ORDER BY l.item", dbname="appdb")
        for statement in operator.split(";\n"):
            if statement.strip() and not all(line.startswith("--") for line in statement.strip().splitlines()):
                s.sql(statement, dbname="appdb")
        for sql in recipes:
            with s.connect(dbname="appdb", user="app") as conn, conn.cursor() as cur:
                cur.execute(sql)
        one = lambda q: s.one(q, dbname="appdb", user="app")  # noqa: E731
        assert one("SELECT count(*) FROM events WHERE snowflake_timestamp(id) = date_trunc('milliseconds', created_at)"
                   " AND (snowflake_decode(id)).worker_id = 1023") == 20000
        assert one("SELECT bool_and(ok) FROM (SELECT id > lag(id) OVER (ORDER BY created_at) IS NOT FALSE AS ok"
                   " FROM events) e")
        # The orders' new keys carry their times; every line still has its order.
        assert one("SELECT bool_and(snowflake_timestamp(id) = created_at) FROM orders")
        assert s.sql("SELECT o.created_at, l.item FROM order_lines l JOIN orders o ON o.id = l.order_id"
                     " ORDER BY l.item", dbname="appdb") == lines_before
        assert one("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'orders'::regclass") \
            .endswith("snowflake_nextval()")
        # Each reading in its year's partition; a new row in this year's.
        by_year = s.sql("SELECT 'readings_' || extract(year FROM taken_at AT TIME ZONE 'UTC'), count(*)"
                        " FROM legacy_readings GROUP BY 1 ORDER BY 1", dbname="appdb")
        assert len(by_year) == 2
        assert s.sql("SELECT tableoid::regclass::text, count(*) FROM readings GROUP BY 1 ORDER BY 1",
                     dbname="appdb") == by_year
        assert one("INSERT INTO readings (taken_at, value) VALUES (now(), 0) RETURNING tableoid::regclass::text") \
            == "readings_2026"
        assert one("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'") is False


def test_rows_planted_in_the_record_stop_no_id_and_use_up_nothing():
    """A role with no grant writes nothing into the record of floors; the
    database's owner (whose pg_restore writes it) writes what it likes: rows
    with NULLs, with 20 million numbers, a lease over every tick at full
    depth, under this server's system identifier and under another's (which
    makes the next ID floor the database). Live IDs go on, quickly;
    backfills still find their numbers."""
    with server("bf-planted", conf=BACKFILL) as s:
        s.sql("CREATE ROLE evil LOGIN")
        me = s.one("SELECT system_identifier FROM pg_control_system()")
        code, message, hint = s.error("INSERT INTO snowflake_id.snowflake_floors (system_identifier) VALUES (42)",
                                      user="evil")
        assert code == "42501" and "only superusers and the database's owner" in message, message
        assert hint.startswith("Restore the record of floors as a superuser or as the database's owner"), hint
        s.sql("ALTER DATABASE postgres OWNER TO evil")
        with s.connect(user="evil") as conn, conn.cursor() as cur:
            for sysid, value in ((me, "'{1,NULL,3}'"), (me, "array_fill(-1::bigint, ARRAY[20000000])"),
                                 (me, "ARRAY[0, 9223372036854775807, 9223372036854775807]"),
                                 (42, "ARRAY[0, 9223372036854775807, 4096]")):
                cur.execute(f"INSERT INTO snowflake_id.snowflake_floors (system_identifier, backfilled)"
                            f" VALUES ({sysid}, {value})")
            assert any("was not kept: only a superuser may restore them" in n for n in conn.notices)
        assert s.one("SELECT count(*) FROM snowflake_id.snowflake_floors WHERE backfilled IS NOT NULL") == 0
        # A role that may write every table may still only add rows.
        s.one("SELECT snowflake_nextval_at('2025-01-15')")
        s.sql("CREATE ROLE writer LOGIN")
        s.sql("GRANT pg_write_all_data, pg_read_all_data TO writer")
        for sql in ("UPDATE snowflake_id.snowflake_floors SET backfilled = '{0,9223372036854775807,4096}'",
                    "UPDATE snowflake_id.snowflake_floors SET covers = '{00000000-0000-0000-0000-000000000001}'",
                    "DELETE FROM snowflake_id.snowflake_floors"):
            code, msg, _ = s.error(sql, user="writer")
            assert code == "42501" and "only ever added" in msg, (sql, code, msg)
        # (pg_write_all_data has no TRUNCATE; the guard refuses it too.)
        code, _, _ = s.error("TRUNCATE snowflake_id.snowflake_floors", user="writer")
        assert code == "42501"
        watch = Stopwatch()
        assert s.one("SELECT snowflake_nextval() > 0", user="evil")
        took = watch.seconds()
        # The first ID floored the database (the row under another system
        # identifier) and read nothing planted: no lease of the record raised
        # this server's. (How long it took is printed, not bounded: a time
        # limit would be a machine's speed, the log line is what was read.)
        floored = [line for line in s.log_text().splitlines() if "was floored because" in line]
        assert floored, "the first ID did not floor the database"
        assert not any("backfill lease" in line for line in floored), floored
        print(f"the first ID after the planted rows took {took:.2f} s: {floored[-1]}")
        seq = s.one("SELECT (snowflake_decode(snowflake_nextval_at('2025-02-01'))).sequence")
        assert seq < 64, seq


def test_one_session_importing_crowded_ticks_in_time_order_gets_every_number_it_needs():
    """Times truncated to the second in a millisecond layout: 1,500 rows a
    tick, ten ticks, then 3,000 at one tick; in time order, one session."""
    with server("bf-crowded", conf=BACKFILL) as s:
        s.sql(HIST)
        s.sql("INSERT INTO hist (id, at) SELECT snowflake_nextval_at(t), t FROM"
              " (SELECT timestamptz '2025-03-01' + (i / 1500) * interval '1 s' AS t"
              "  FROM generate_series(0, 14999) i) v ORDER BY t")
        s.sql("INSERT INTO hist (id, at) SELECT snowflake_nextval_at(t), t FROM"
              " (SELECT timestamptz '2025-03-01 00:00:20+00' AS t FROM generate_series(1, 3000)) v")
        assert check_rows(s) == 18000
        # An hour later is nearly as fresh as it was: the crowded ticks'
        # widening windows did not reach it (they took it to 4,080 once).
        assert s.one("SELECT (snowflake_decode(snowflake_nextval_at('2025-03-01 01:00:00+00'))).sequence") < 512


def test_an_invalid_backfill_worker_id_in_the_configuration_is_an_error_naming_it():
    with server("bf-setting", conf={"snowflake_id.backfill_worker_id": "'1023x'"}) as s:
        code, msg, hint = s.error("SELECT snowflake_nextval_at('2025-02-01')")
        assert code == "22023" and "snowflake_id.backfill_worker_id = '1023x'" in msg, msg
        assert "pg_reload_conf()" in hint, hint
        s.set_conf(**{"snowflake_id.backfill_worker_id": 1023})
        s.reload_and_wait()
        first = s.one("SELECT snowflake_nextval_at('2025-02-01')")
        # A typo at a reload: Postgres keeps 1023; the extension refuses
        # rather than backfill under a value nobody wrote now.
        s.set_conf(**{"snowflake_id.backfill_worker_id": "'1022 typo'"})
        s.reload_and_wait()
        code, msg, _ = s.error("SELECT snowflake_nextval_at('2025-02-01')")
        assert code == "22023" and "'1022 typo'" in msg, msg
        s.set_conf(**{"snowflake_id.backfill_worker_id": 1022})
        s.reload_and_wait()
        again = s.one("SELECT snowflake_nextval_at('2025-02-01')")
        assert s.sql("SELECT (snowflake_decode(%s)).worker_id, (snowflake_decode(%s)).worker_id",
                     (first, again))[0] == (1023, 1022)


# A backfill at each old ID's time, counted: refused (55000), and equal to
# an old ID. Each call in its own subtransaction, so one refusal does not
# end the rest.
TRY_EACH = """
CREATE FUNCTION try_at(t timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN snowflake_nextval_at(t);
EXCEPTION WHEN object_not_in_prerequisite_state THEN
    RETURN NULL;
END $$;
"""
TRIED = """
SELECT count(*) FILTER (WHERE b IS NULL), count(*) FILTER (WHERE b IN (SELECT id FROM old))
  FROM (SELECT try_at(snowflake_timestamp(id)) AS b FROM old) x
"""


def test_a_worker_id_once_live_here_is_refused_at_the_times_it_was_live():
    # The case of issue 51: worker 1 issues 3,000 IDs, then becomes the
    # backfill worker id beside live worker 2; unchecked, ~2,900 old IDs
    # came back.
    with server("bf-was-live") as s:
        s.sql("CREATE TABLE old AS SELECT i AS id FROM snowflake_nextval_batch(3000) i")
        s.sql(TRY_EACH)
        s.set_conf(**{"snowflake_id.worker_id": 2, "snowflake_id.backfill_worker_id": 1})
        s.restart()
        assert s.one("SELECT (snowflake_decode(snowflake_nextval())).worker_id") == 2
        assert s.sql(TRIED)[0] == (3000, 0)
        code, msg, hint = s.error("SELECT snowflake_nextval_at(snowflake_timestamp(min(id))) FROM old")
        assert code == "55000" and "snowflake_id.backfill_worker_id = 1 issued live IDs on this server from" in msg, msg
        assert "live here before: 1; now: 2" in hint and "reload" in hint, hint
        # Times before worker 1 was live are free (its span starts an hour
        # before its first ID, for a clock stepped back).
        early = s.one("SELECT snowflake_nextval_at(snowflake_timestamp(min(id)) - interval '2 hours') FROM old")
        assert s.one(f"SELECT (snowflake_decode({early})).worker_id") == 1

        # The history is in the state file: kept through kill -9.
        s.kill9_all()
        s.start()
        assert s.sql(TRIED)[0] == (3000, 0)

        # Worker 2 retired in turn: both are refused at their times.
        s.sql("INSERT INTO old SELECT i FROM snowflake_nextval_batch(500) i")
        s.set_conf(**{"snowflake_id.worker_id": 3, "snowflake_id.backfill_worker_id": 2})
        s.restart()
        s.one("SELECT snowflake_nextval()")
        refused, repeated = s.sql(TRIED)[0]
        assert repeated == 0 and refused >= 500, (refused, repeated)
        code, msg, hint = s.error("SELECT snowflake_nextval_at(snowflake_timestamp(max(id))) FROM old")
        assert code == "55000" and "backfill_worker_id = 2 issued live IDs" in msg, msg
        assert "live here before: 1, 2; now: 3" in hint, hint
        s.set_conf(**{"snowflake_id.backfill_worker_id": 1})
        s.reload_and_wait()
        assert s.sql(TRIED)[0][1] == 0


def test_a_backfill_below_the_ids_of_adopted_settings_is_refused():
    # The layout moved (an epoch five years earlier) and was adopted: old IDs
    # decode, under the new settings, to times five years back; a backfill
    # there could equal them.
    with server("bf-adopted", conf=BACKFILL) as s:
        s.sql("CREATE TABLE old AS SELECT i AS id FROM snowflake_nextval_batch(3000) i")
        s.sql(TRY_EACH)
        s.set_conf(**{"snowflake_id.epoch": "'2020-01-01 00:00:00+00'"})
        s.restart()
        assert s.one("SELECT snowflake_adopt_settings()").startswith("adopted")
        assert s.sql(TRIED)[0] == (3000, 0)
        code, msg, hint = s.error("SELECT snowflake_nextval_at(snowflake_timestamp(max(id)) - interval '1 year') FROM old")
        assert code == "55000" and "under other settings" in msg, msg
        assert "Give these rows times from" in hint, hint
        # Above every old ID, whatever its worker: free.
        later = s.one("SELECT snowflake_nextval_at(now() - interval '1 day')")
        assert later > s.one("SELECT max(id) FROM old")


def test_vouching_for_a_backfill_worker_id_is_a_superusers_word_about_copied_data():
    with server("bf-vouch", conf=BACKFILL) as s:
        assert s.one("SELECT snowflake_vouch_backfill_worker_id(1023)").startswith("nothing to vouch for")
        s.sql("CREATE ROLE app LOGIN")
        s.sql("GRANT EXECUTE ON FUNCTION snowflake_vouch_backfill_worker_id(integer) TO app")
        for sql, code_wanted, words in (
            ("SELECT snowflake_vouch_backfill_worker_id(1)", "22023", "this server's live worker id"),
            ("SELECT snowflake_vouch_backfill_worker_id(1024)", "22023", "does not fit the worker field"),
        ):
            code, msg, hint = s.error(sql)
            assert code == code_wanted and words in msg, (sql, code, msg)
            assert hint, sql
        code, msg, _ = s.error("SELECT snowflake_vouch_backfill_worker_id(1023)", user="app")
        assert code == "42501", (code, msg)
        # IDs of another server resumed above: backfills below them wait for
        # the word, which a restart keeps, and which the next copy voids.
        s.one("SELECT snowflake_nextval()")
        far = s.one("SELECT snowflake_nextval_at(now() - interval '1 hour')")
        s.sql(f"SELECT snowflake_resume_above({far} + (1::bigint << 22) * 1000)")
        code, msg, hint = s.error("SELECT snowflake_nextval_at(now() - interval '1 hour')")
        assert code == "55000" and "arrived here" in msg, msg
        assert "SELECT snowflake_vouch_backfill_worker_id(1023);" in hint, hint
        assert "may take times before" in s.one("SELECT snowflake_vouch_backfill_worker_id(1023)")
        s.restart()
        assert s.one("SELECT snowflake_nextval_at(now() - interval '1 hour')") is not None
        s.sql("SELECT snowflake_resume_above(snowflake_nextval() + (1::bigint << 22) * 2000)")
        code, msg, _ = s.error("SELECT snowflake_nextval_at(now() - interval '1 hour')")
        assert code == "55000" and "arrived here" in msg, msg


def test_a_backfill_that_is_a_databases_first_call_after_a_copy_floors_first_and_is_refused():
    """Data of another server arrives (here: its record row and an ID
    column with its IDs, as a restore writes them), and the first call in
    that database is a backfill: the floor runs before the check, so the
    backfill waits for the word like any later one."""
    with server("bf-first-call", conf=BACKFILL) as s:
        other = s.one("SELECT snowflake_nextval_at(now() - interval '10 minutes')")
        arrived(s, "restored", [other], 42)
        code, msg, hint = s.error("SELECT snowflake_nextval_at(now() - interval '20 minutes')", dbname="restored")
        assert code == "55000" and "arrived here" in msg, (code, msg)
        assert "SELECT snowflake_vouch_backfill_worker_id(1023);" in hint, hint
