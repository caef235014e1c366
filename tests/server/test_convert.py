"""snowflake_convert on real tables: its refusals (SQLSTATE, message, hint),
and a conversion under concurrent inserts into a table and the table that
references it. The walkthrough with its exact output is in
pg_regress/sql/convert.sql."""

import random
import threading

import psycopg2

from harness import Stopwatch, Window, server, wait_until

SERIAL_TOP = 2**31


def test_what_cannot_be_converted_is_refused_with_the_reason_and_what_to_do():
    with server("convert-errors", conf={"snowflake_id.worker_id": 3}) as s:
        s.sql("""
            CREATE TABLE parents (id serial PRIMARY KEY, note text, code uuid);
            CREATE TABLE kids (id int PRIMARY KEY REFERENCES parents, x int);
            CREATE TABLE rnd (id int PRIMARY KEY DEFAULT (random() * 1000)::int);
            CREATE TABLE shared_a (id bigint PRIMARY KEY DEFAULT nextval('shared_seq'));
            CREATE TABLE shared_b (id bigint PRIMARY KEY DEFAULT nextval('shared_seq'));
            CREATE TABLE ahead (id bigserial PRIMARY KEY);
            INSERT INTO ahead VALUES (9223372036854775000);
            CREATE MATERIALIZED VIEW parent_ids AS SELECT id FROM parents;
            CREATE VIEW v AS SELECT id FROM parents;
            CREATE ROLE app LOGIN;
        """.replace("CREATE TABLE shared_a", "CREATE SEQUENCE shared_seq; CREATE TABLE shared_a"))
        cases = [
            ("SELECT snowflake_convert('v')", "42809", "is a view"),
            ("SELECT snowflake_convert('parents', 'nope')", "42703", 'column "nope" of public.parents does not exist'),
            ("SELECT snowflake_convert('parents', 'code')", "42804", "of type uuid"),
            ("SELECT snowflake_convert('kids')", "0A000", "takes its values from another table"),
            ("SELECT snowflake_convert('rnd')", "0A000", "which is not a sequence"),
            ("SELECT snowflake_convert('shared_a', drop_sequence => true)", "2BP01", "public.shared_b.id"),
            ("SELECT snowflake_convert('ahead')", "55000", "the largest is 9223372036854775000"),
            ("SELECT snowflake_convert('parents')", "0A000", "materialized view public.parent_ids"),
        ]
        for query, code, words in cases:
            got, message, hint = s.error(query)
            assert (got, words in message, hint != "") == (code, True, True), (query, got, message, hint)
        # Nothing of a refused conversion stays: one transaction.
        assert s.one("SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
                     " WHERE attrelid = 'parents'::regclass AND attname = 'id'") == "integer"
        # Anyone may call it, and it changes only what the caller could
        # change as the owner: a role that is not the owner's is refused
        # before anything happens (more in test_security.py).
        s.sql("CREATE TABLE owned_by_postgres (id serial PRIMARY KEY)")
        with psycopg2.connect(host=s.dir, port=s.port, user="app", dbname="postgres") as conn, conn.cursor() as cur:
            try:
                cur.execute("SELECT snowflake_convert('owned_by_postgres')")
                raise AssertionError("app converted a table of postgres's")
            except psycopg2.Error as e:
                assert e.diag.sqlstate == "42501" and "owned by role postgres" in e.diag.message_primary, e
        # A dry run shows the same refusals, and a shared sequence that stays is fine.
        assert s.error("SELECT snowflake_convert('ahead', dry_run => true)")[0] == "55000"
        s.sql("SELECT snowflake_convert('shared_a')")
        assert s.one("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'shared_b'::regclass") \
            == "nextval('shared_seq'::regclass)"


def insert_loop(s, stop, errors, counts, who):
    """Inserts orders, and lines for them, the way an application does:
    one order with its lines per transaction, or lines alone."""
    rnd = random.Random(who)
    try:
        conn = s.connect(autocommit=False)
        cur = conn.cursor()
        n = 0
        while not stop.is_set():
            if rnd.random() < 0.5:
                cur.execute("INSERT INTO orders (note) VALUES ('o') RETURNING id")
                order = cur.fetchone()[0]
                cur.execute("INSERT INTO lines (order_id) VALUES (%s), (%s)", (order, order))
                n += 3
            else:
                cur.execute("INSERT INTO lines (order_id) SELECT id FROM orders ORDER BY id DESC LIMIT 1")
                n += cur.rowcount
            conn.commit()
        counts[who] = n
        conn.close()
    except Exception as e:  # the main thread reports it
        errors.append(f"{who}: {e}")


def inserts_for_a_while(s, errors, done):
    """Lets the inserting sessions go on for 1.5 s and until the query
    `done` holds; an insert that failed ends the wait."""
    window = Window(1.5)

    def enough():
        assert errors == [], errors
        return not window.open() and s.one(done)

    wait_until(enough, f"the inserts never got this far: {done}")


def test_a_table_under_concurrent_inserts_is_converted_without_failing_one_insert():
    with server("convert-busy", conf={"snowflake_id.worker_id": 3}) as s:
        s.sql("""
            CREATE TABLE orders (id serial PRIMARY KEY, note text);
            CREATE TABLE lines (id serial PRIMARY KEY, order_id int NOT NULL REFERENCES orders);
            INSERT INTO orders (note) SELECT 'old' FROM generate_series(1, 1000);
            INSERT INTO lines (order_id) SELECT id FROM orders;
        """)
        stop, errors, counts = threading.Event(), [], {}
        threads = [threading.Thread(target=insert_loop, args=(s, stop, errors, counts, i)) for i in range(4)]
        for t in threads:
            t.start()
        # Inserts before the conversion, and after it (new keys in both
        # tables): for a while, and at least one of each, however slow.
        inserts_for_a_while(s, errors, f"SELECT count(*) > 1000 FROM orders WHERE id < {SERIAL_TOP}")
        watch = Stopwatch()
        ran = [r[0] for r in s.sql("SELECT snowflake_convert('orders')")]
        took = watch.seconds()
        inserts_for_a_while(s, errors, f"SELECT (SELECT count(*) > 0 FROM orders WHERE id >= {SERIAL_TOP})"
                                       f" AND (SELECT count(*) > 0 FROM lines WHERE order_id >= {SERIAL_TOP})")
        stop.set()
        for t in threads:
            t.join()
        assert errors == [], errors
        print(f"converted in {took:.2f} s under 4 inserting sessions; it ran: {ran}")
        assert ran[0] == "LOCK TABLE public.lines, public.orders IN ACCESS EXCLUSIVE MODE;", ran
        # Every insert landed, before and after; the keys stayed, the new
        # ones are snowflake IDs above them, and every line has its order.
        rows = s.one("SELECT count(*) FROM orders") + s.one("SELECT count(*) FROM lines")
        assert rows == 2000 + sum(counts.values()), (rows, counts)
        before, after, old_max = s.sql(
            f"SELECT count(*) FILTER (WHERE id < {SERIAL_TOP}), count(*) FILTER (WHERE id >= {SERIAL_TOP}),"
            f" max(id) FILTER (WHERE id < {SERIAL_TOP}) FROM orders")[0]
        assert before > 1000 and after > 0, (before, after)
        assert s.one(f"SELECT min(id) FROM orders WHERE id >= {SERIAL_TOP}") > old_max
        assert s.one("SELECT count(*) FROM orders WHERE note = 'old' AND id BETWEEN 1 AND 1000") == 1000
        assert s.one("SELECT count(*) FROM lines l LEFT JOIN orders o ON o.id = l.order_id WHERE o.id IS NULL") == 0
        assert s.one("SELECT count(*) FROM lines WHERE order_id >= %s", (SERIAL_TOP,)) > 0
        assert s.sql("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attname IN ('id', 'order_id')"
                     " AND attrelid IN ('orders'::regclass, 'lines'::regclass) ORDER BY attrelid, attname") \
            == [("bigint",), ("integer",), ("bigint",)]
        # The session's own lock_timeout is its own again after the call.
        s.sql("CREATE TABLE other (id serial PRIMARY KEY)")
        with s.connect(autocommit=False) as conn, conn.cursor() as cur:
            cur.execute("SET LOCAL lock_timeout = '7s'")
            cur.execute("SELECT count(*) FROM snowflake_convert('other')")
            assert cur.fetchone()[0] == 3
            cur.execute("SHOW lock_timeout")
            assert cur.fetchone()[0] == "7s"


def test_views_partitions_sequences_and_errors_inside_exception_blocks():
    """What an independent review found: default privileges of the
    converting role, partitions named as the target, foreign keys made on a
    partition, a sequence held by an application transaction, and an error
    inside a PL/pgSQL exception block."""
    with server("convert-review", conf={"snowflake_id.worker_id": 3}) as s:
        s.sql("""
            CREATE ROLE auditor;
            CREATE TABLE emp (id serial PRIMARY KEY, qty int NOT NULL);
            CREATE VIEW emp_v AS SELECT id FROM emp;
            ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO auditor;
            CREATE TABLE ev (id bigserial, at date NOT NULL, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
            CREATE TABLE ev_25 PARTITION OF ev FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
            CREATE TABLE orders (id serial PRIMARY KEY);
            CREATE TABLE lines (order_id int NOT NULL, at date NOT NULL) PARTITION BY RANGE (at);
            CREATE TABLE lines_25 PARTITION OF lines FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
            ALTER TABLE lines_25 ADD FOREIGN KEY (order_id) REFERENCES orders;
            CREATE TABLE held (id serial PRIMARY KEY);
            CREATE TABLE marker (x int);
            CREATE TABLE t2 (id serial PRIMARY KEY);
        """)
        # The view made again has the privileges it had, not the converting
        # role's defaults.
        s.sql("SELECT snowflake_convert('emp')")
        assert s.one("SELECT has_table_privilege('auditor', 'emp_v', 'SELECT')") is False
        assert s.error("SELECT snowflake_convert('emp', 'qty')")[0] == "0A000"
        assert s.error("SELECT snowflake_convert(999999::oid::regclass)")[0] == "42P01"
        code, message, hint = s.error("SELECT snowflake_convert('ev_25')")
        assert code == "0A000" and "snowflake_convert('public.ev'" in hint, (code, message, hint)
        ran = [r[0] for r in s.sql("SELECT snowflake_convert('orders')")]
        assert "ALTER TABLE public.lines ALTER COLUMN order_id TYPE bigint;" in ran, ran
        # An application transaction that took from the sequence and then
        # inserts: the conversion waits for it without a deadlock for anyone.
        app = s.connect(autocommit=False)
        cur = app.cursor()
        cur.execute("SELECT nextval('held_id_seq')")
        result = {}
        t = threading.Thread(target=lambda: result.update(ran=s.sql(
            "SELECT snowflake_convert('held', drop_sequence => true)")))
        t.start()
        # The conversion has found the sequence held, and pauses between
        # attempts to lock it (on its latch: wait event Extension).
        pausing = ("SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%snowflake_convert(''held''%'"
                   " AND wait_event_type = 'Extension' AND pid <> pg_backend_pid()")
        wait_until(lambda: not t.is_alive() or s.one(pausing), "the conversion never waited for the held sequence")
        assert t.is_alive(), f"the conversion did not wait for the transaction that holds the sequence: {result}"
        cur.execute("INSERT INTO held VALUES (currval('held_id_seq'))")
        app.commit()
        app.close()
        wait_until(lambda: not t.is_alive(), "the conversion did not end once the application's transaction did")
        assert ("DROP SEQUENCE public.held_id_seq;",) in result["ran"], result
        # An error while it waits for its locks, caught by an exception
        # block: the block's own work is undone, as the block promises, and
        # the statement goes on. The timeout is one error, not two: where the
        # conversion saw the time up a little before Postgres's timer fired,
        # the timer once cancelled what came after the block (the sleep gives
        # it the time to).
        locker = s.connect(autocommit=False)
        locker.cursor().execute("LOCK TABLE t2 IN ACCESS SHARE MODE")
        with s.connect() as conn, conn.cursor() as c:
            c.execute("SET statement_timeout = '1s'")
            c.execute("""DO $$ BEGIN
                BEGIN INSERT INTO marker VALUES (1); PERFORM snowflake_convert('t2');
                EXCEPTION WHEN query_canceled THEN RAISE NOTICE 'gave up'; END;
                PERFORM pg_sleep(0.3);
                INSERT INTO marker VALUES (2);
            END $$""")
            c.execute("SELECT array_agg(x ORDER BY x) FROM marker")
            assert c.fetchone()[0] == [2]
        locker.rollback()
        locker.close()


def test_a_conversion_and_its_dry_run_leave_the_sessions_lastval_as_it_was():
    """The order check draws an ID of its own, which is in no row: the
    caller's snowflake_lastval() is still the last ID the caller drew."""
    with server("convert-lastval", conf={"snowflake_id.worker_id": 3}) as s:
        s.sql("CREATE TABLE t (id serial PRIMARY KEY, v int); INSERT INTO t (v) SELECT generate_series(1, 10)")
        with s.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT snowflake_nextval()")
            drawn = cur.fetchone()[0]
            cur.execute("SELECT count(*) FROM snowflake_convert('t', dry_run => true)")
            assert cur.fetchone()[0] > 0
            cur.execute("SELECT snowflake_lastval()")
            assert cur.fetchone()[0] == drawn
            cur.execute("SELECT count(*) FROM snowflake_convert('t')")
            cur.execute("SELECT snowflake_lastval()")
            assert cur.fetchone()[0] == drawn
            cur.execute("INSERT INTO t (v) VALUES (11) RETURNING id")
            inserted = cur.fetchone()[0]
            cur.execute("SELECT snowflake_lastval()")
            assert cur.fetchone()[0] == inserted > drawn
