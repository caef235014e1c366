"""What a floor reads and what it refuses: every column that can hold this
server's IDs (domains to any depth, numeric, defaults through functions of
any language, a trigger that sets the ID, partitions), and copied IDs more
than an hour ahead of the clock, which refuse IDs in every database until
the clock is corrected or an operator sets them aside.

A floor is asked for as a restore asks for one: a superuser's row in the
record of floors naming another server (tests/replication/test_copies.py
restores real dumps). Each column gets a value ahead of everything before
it, so a floor that missed the column would issue below it."""

import re
import threading

from copies import arrived
from harness import pg_major, server, servers, started, wait_until

COLUMNS = """
CREATE DOMAIN id1 AS bigint;
CREATE DOMAIN id2 AS id1;
CREATE TABLE dd (id id2 PRIMARY KEY DEFAULT snowflake_nextval());
CREATE DOMAIN gid1 AS bigint DEFAULT snowflake_nextval();
CREATE DOMAIN gid2 AS gid1;
CREATE TABLE dg (id gid2 PRIMARY KEY);
CREATE TABLE num (id numeric(20) PRIMARY KEY DEFAULT snowflake_nextval());
CREATE FUNCTION plid() RETURNS bigint LANGUAGE plpgsql AS $$BEGIN RETURN SNOWFLAKE_NEXTVAL(); END$$;
CREATE TABLE wp (id bigint PRIMARY KEY DEFAULT plid());
CREATE FUNCTION sqlid() RETURNS bigint LANGUAGE sql AS 'SELECT snowflake_nextval()';
CREATE FUNCTION outer_id() RETURNS bigint LANGUAGE sql AS 'SELECT sqlid() + 0';
CREATE TABLE ws (id bigint PRIMARY KEY DEFAULT outer_id());
CREATE FUNCTION set_key() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN NEW."Key" := snowflake_nextval(); RETURN NEW; END$$;
CREATE TABLE tr ("Key" bigint PRIMARY KEY, size bigint);
CREATE TRIGGER tr_key BEFORE INSERT ON tr FOR EACH ROW EXECUTE FUNCTION set_key();
CREATE TABLE pt (id id2 DEFAULT snowflake_nextval(), n int) PARTITION BY RANGE (n);
CREATE TABLE pt_all PARTITION OF pt FOR VALUES FROM (MINVALUE) TO (MAXVALUE);
CREATE TABLE parent_t (id bigint DEFAULT snowflake_nextval());
CREATE TABLE child_t (id bigint);
ALTER TABLE child_t INHERIT parent_t;
CREATE TABLE app_num (v numeric);
CREATE TABLE app_dd (v id2);
"""
# A SQL function with a standard body names its callee in the catalog, not
# in its source (14 and later).
STANDARD_BODY = """
CREATE FUNCTION stdid() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT snowflake_nextval(); END;
CREATE TABLE wstd (id bigint PRIMARY KEY DEFAULT stdid());
"""
# The columns a floor must read, in the order their values are planted.
FLOORED = ["dd.id", "dg.id", "num.id", "wp.id", "ws.id", 'tr."Key"', "pt_all.id", "parent_t.id", "child_t.id"]


def plant(s, column, minutes):
    """Stores an ID made `minutes` ahead of the clock in `column` (as
    replication would: no trigger fires), then asks for a floor as a
    restore does; returns the ID."""
    table, col = column.split(".")
    v = s.one(f"SELECT snowflake_from_timestamp(clock_timestamp() + interval '{minutes} min')")
    extra = ", n" if table == "pt_all" else ""
    s.sql(f"SET session_replication_role = replica; INSERT INTO {table} ({col}{extra}) VALUES ({v}{', 1' if extra else ''})")
    return v


def ask_for_a_floor(s, k):
    s.sql(f"INSERT INTO snowflake_id.snowflake_floors (system_identifier) VALUES ({1000 + k})")


def test_every_column_that_can_hold_ids_is_floored_and_resume_above_reads_them_all():
    with server("copies-columns") as s:
        s.sql(COLUMNS)
        floored = list(FLOORED)
        if pg_major() >= 14:
            s.sql(STANDARD_BODY)
            floored.append("wstd.id")
        # Each column in turn holds the newest ID: only a floor that read it
        # issues above it.
        for k, column in enumerate(floored, 1):
            v = plant(s, column, 3 * k)
            ask_for_a_floor(s, k)
            got = s.one("SELECT snowflake_nextval()")
            assert got > v, f"the floor missed {column}"
        # Exactly these columns: not the trigger's table's other column
        # (its function does not name it), nor a column no generator fills.
        read = re.findall(r"flooring database \"postgres\" because .*?: reading (\d+) column", s.log_text())
        assert read and int(read[-1]) == len(floored), (read, floored)
        # The operator's statement reads every column of these types,
        # numeric and domains of domains included.
        for k, column in enumerate(["app_num.v", "app_dd.v"], len(floored) + 1):
            v = plant(s, column, 3 * k)
            said = s.one("SELECT snowflake_resume_above()")
            assert f"public.{column}" in said, said
            assert s.one("SELECT snowflake_nextval()") > v, column


def test_ids_far_ahead_of_the_clock_refuse_every_database_until_settled():
    """Copied IDs more than an hour ahead of the clock: floored below, IDs
    could repeat them; floored above, every ID would move that far. The
    database that holds them refuses IDs, with the column, the value and
    what to do (every database's status and the log say the same), until
    the clock is corrected (its next ID floors again, above them) or a
    superuser sets a value aside as no ID. Other databases issue on (their
    data is none of it), below the set-aside IDs' time: once the clock gets
    there, none issues until the database that holds them floored above
    them, across kill -9 too."""
    with server("copies-ahead", faketime=True) as s:
        s.sql("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), n int)")
        s.sql("CREATE DATABASE other")
        s.sql("CREATE EXTENSION snowflake_id", dbname="other")
        busy = s.connect(dbname="other")
        busy.cursor().execute("SELECT snowflake_nextval()")
        far = s.one("SELECT snowflake_from_timestamp(clock_timestamp() + interval '3 hours')")
        s.sql(f"INSERT INTO t (id, n) VALUES ({far}, 1)")
        ask_for_a_floor(s, 1)
        code, msg, hint = s.error("INSERT INTO t (n) VALUES (2)")
        assert code == "55000" and f"public.t.id holds {far}" in msg, (code, msg)
        assert "snowflake_resume_above();" in hint and f"snowflake_resume_above({far});" in hint, hint
        # Again, without a read; the status says why, here and in every
        # database, and the log too. Another database issues on, a session
        # that was issuing included.
        assert s.error("SELECT snowflake_nextval()")[:2] == (code, msg)
        assert s.one("SELECT problem FROM snowflake_id.snowflake_status") == msg
        busy.cursor().execute("SELECT snowflake_nextval()")
        busy.close()
        assert s.one("SELECT snowflake_nextval() > 0", dbname="other") is True
        assert msg in s.one("SELECT problem FROM snowflake_id.snowflake_status", dbname="other")
        assert msg in s.log_text()
        # The clock corrected, no database's ID reaches them before the one
        # that holds them floors above them (whichever asks first), through
        # kill -9 of the server too: the durable mark carries where IDs stop.
        s.set_clock(3 * 3600)
        stop = 'database "postgres" holds IDs copied from another server'
        code, msg2, hint2 = s.error("SELECT snowflake_nextval()", dbname="other")
        assert code == "55000" and stop in msg2, (code, msg2)
        for crash in (True, False):
            # Crash recovery replays the mark from WAL; a clean restart reads
            # the state file alone.
            if crash:
                s.kill9_all()
                s.start()
            else:
                s.restart()
            code, msg2, hint2 = s.error("SELECT snowflake_nextval()", dbname="other")
            assert code == "55000" and stop in msg2, (crash, code, msg2)
        assert "set aside in the database of OID" in s.one("SELECT problem FROM snowflake_id.snowflake_status", dbname="other")
        # Its HINT, pasted there: that database floors again, above them.
        pasted = re.search(r"SELECT \S*snowflake_nextval\(\);", hint2).group()
        assert s.one(pasted) > far
        first = s.one("INSERT INTO t (n) VALUES (3) RETURNING id")
        assert first > far
        assert s.one("SELECT snowflake_nextval()", dbname="other") > far
        assert s.one("SELECT problem FROM snowflake_id.snowflake_status", dbname="other") is None

        # A sentinel is no ID: the HINT's statement, pasted, sets it aside
        # (a negative number is no ID either, and never said).
        s.sql("INSERT INTO t (id, n) VALUES (9223372036854775807, 4), (-5, 5)")
        ask_for_a_floor(s, 2)
        code, msg, hint = s.error("SELECT snowflake_nextval()")
        assert code == "55000" and "public.t.id holds 9223372036854775807" in msg, msg
        assert s.one("SELECT snowflake_nextval() > 0", dbname="other") is True
        # Other databases stop only at the smallest set-aside ID's time: a
        # sentinel stops none of them, hours after the floor.
        s.set_clock(5 * 3600)
        assert s.one("SELECT snowflake_nextval() > 0", dbname="other") is True
        pasted = re.search(r"SELECT \S*snowflake_resume_above\(\);", hint).group()
        said = s.one(pasted)
        assert "set aside as no ID: public.t.id holds 9223372036854775807" in said, said
        assert "-5" not in said
        after = s.one("SELECT snowflake_nextval()")
        assert after > first
        assert s.one("SELECT snowflake_nextval()", dbname="other") > after
        # Settled for good: a restart floors nothing again and refuses nothing.
        s.restart()
        assert s.one("SELECT snowflake_nextval()") > after
        assert s.one("SELECT problem FROM snowflake_id.snowflake_status") is None


def test_sessions_issuing_ids_never_fail_while_another_floors_ahead_of_the_clock():
    """A floor above copied IDs 40 s ahead of the clock (four times
    max_lead): sessions issuing IDs meanwhile, in the floored database and
    in another, continue from the copied IDs' time and never meet "the
    clock is behind"."""
    with server("copies-busy") as s:
        s.sql("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval())")
        s.sql("CREATE DATABASE other")
        s.sql("CREATE EXTENSION snowflake_id", dbname="other")
        stop = threading.Event()
        errors, issued = [], [0]

        def busy(dbname):
            conn = s.connect(dbname=dbname)
            try:
                cur = conn.cursor()
                while not stop.is_set():
                    try:
                        cur.execute("SELECT snowflake_nextval()")
                        issued[0] += 1
                    except Exception as e:  # noqa: BLE001 - every error is the finding
                        errors.append(str(e))
            finally:
                conn.close()

        threads = [threading.Thread(target=busy, args=(db,)) for db in ("postgres", "other")]
        for t in threads:
            t.start()
        try:
            for k in range(1, 6):
                v = s.one(f"SELECT snowflake_from_timestamp(clock_timestamp() + interval '{40 * k} s')")
                s.sql(f"INSERT INTO t (id) VALUES ({v})")
                ask_for_a_floor(s, k)
                before = issued[0]
                assert s.one("SELECT snowflake_nextval()") > v
                # Both sessions went on issuing across the floor.
                wait_until(lambda: issued[0] > before + 100, "the busy sessions stopped issuing")
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert errors == [], errors[:3]


def test_after_a_floor_ahead_of_the_clock_ids_flow_at_the_layouts_rate():
    """js53 issues 65,536 IDs a second, and max_lead lets IDs borrow ten
    seconds of them. After a floor above copied IDs 40 s ahead of the
    clock, a million IDs in one statement do not fail: the time inside IDs
    moves on from the copied ones' at seven eighths of the clock's pace,
    so calls beyond the borrowed seconds wait a tick, not the 40 s until
    the clock gets there (which max_wait refuses)."""
    with server("copies-rate", conf={"snowflake_id.layout": "'js53'"}) as s:
        s.sql("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval())")
        v = s.one("SELECT snowflake_from_timestamp(clock_timestamp() + interval '40 s')")
        s.sql(f"INSERT INTO t (id) VALUES ({v})")
        ask_for_a_floor(s, 1)
        s.sql("INSERT INTO t SELECT FROM generate_series(1, 1000000)")
        assert s.one(f"SELECT count(*) FROM t WHERE id > {v}") == 1_000_000


def test_a_restart_or_crash_after_a_floor_ahead_of_the_clock_issues_in_every_database_at_once():
    """After a floor above copied IDs 40 minutes ahead of the clock (inside
    the hour a floor follows), a restart, a backend's crash and a kill -9 of
    the whole server each leave IDs flowing from the copied IDs' time: the
    first ID of a database that holds no copy, taken before the floored
    database's, neither waits for the clock nor fails (the durable mark
    carries where generation was); so does a standby that streamed from
    before the floor, promoted (the marks it replayed carry it)."""
    with server("copies-restart") as s, servers() as made:
        s.sql("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval())")
        s.sql("CREATE DATABASE other")
        s.sql("CREATE EXTENSION snowflake_id", dbname="other")
        standby = started(made, "copies-restart-standby", copy_of=s, standby=True)
        v = s.one("SELECT snowflake_from_timestamp(clock_timestamp() + interval '40 min')")
        s.sql(f"INSERT INTO t (id) VALUES ({v})")
        ask_for_a_floor(s, 1)
        last = s.one("SELECT snowflake_nextval()")
        assert last > v

        def crash_a_backend():
            conn = s.connect()
            pid = conn.cursor()
            pid.execute("SELECT pg_backend_pid()")
            s.kill9(pid.fetchone()[0])
            conn.close()
            s.wait_for_log("reinitializing", "the postmaster did not restart after the crash")
            s.connect_retry().close()

        def crash_everything():
            s.kill9_all()
            s.start()

        for stop in (s.restart, crash_a_backend, crash_everything):
            stop()
            waits = s.one("SELECT waits FROM snowflake_id.snowflake_status", dbname="other")
            first = s.one("SELECT snowflake_nextval()", dbname="other")
            assert first > last, stop.__name__
            assert s.one("SELECT waits FROM snowflake_id.snowflake_status", dbname="other") == waits, stop.__name__
            last = s.one("SELECT max(x) FROM (SELECT snowflake_nextval() AS x FROM generate_series(1, 1000)) i")
            assert last > first

        lsn = s.one("SELECT pg_current_wal_insert_lsn()::text")
        standby.wait_for(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn", what="the standby did not replay the marks")
        s.stop("immediate")
        standby.promote()
        standby.wait_for("SELECT NOT pg_is_in_recovery()", what="the standby was not promoted")
        assert standby.one("SELECT snowflake_nextval()", dbname="other") > last


def test_a_dropped_database_takes_the_stop_of_its_set_aside_ids_with_it():
    """A database whose copied IDs were set aside stops every database at
    their time; dropped (after a restart, which keeps the stop with their
    IDs unknown), it stops nothing: no ID can repeat them any more."""
    with server("copies-dropped", faketime=True) as s:
        far = s.one("SELECT snowflake_from_timestamp(clock_timestamp() + interval '2 hours')")
        arrived(s, "scratch", [far], 1100, key=False)
        code, message, _ = s.error("SELECT snowflake_nextval()", dbname="scratch")
        assert code == "55000" and f"public.t.id holds {far}" in message, (code, message)
        s.restart()
        s.set_clock(3 * 3600)
        code, message, _ = s.error("SELECT snowflake_nextval()")
        assert code == "55000" and 'database "scratch" holds IDs copied' in message, (code, message)
        s.sql("DROP DATABASE scratch")
        assert s.one("SELECT snowflake_nextval()") > far
        assert s.one("SELECT problem FROM snowflake_id.snowflake_status") is None


def test_databases_with_set_aside_ids_each_keep_their_own_refusal():
    """Two databases hold copied IDs far ahead: each refuses with its own
    column and value, without reading again at each call; one settled, the
    other still refuses, and every database stops at the other's time."""
    with server("copies-two", faketime=True) as s:
        far = {}
        for k, (db, hours) in enumerate((("a", 5), ("b", 3))):
            far[db] = s.one(f"SELECT snowflake_from_timestamp(clock_timestamp() + interval '{hours} hours')")
            arrived(s, db, [far[db]], 1200 + k, table=f"t_{db}", key=False)
        logged = len(s.log_text())
        for _ in range(3):
            for db in far:
                code, message, _ = s.error("SELECT snowflake_nextval()", dbname=db)
                assert code == "55000" and f"public.t_{db}.id holds {far[db]}" in message, (db, code, message)
        for db in far:
            began = s.log_text()[logged:].count(f'flooring database "{db}"')
            assert began == 1, f"database {db} floored {began} times"
        s.sql("SELECT snowflake_resume_above()", dbname="a")
        assert s.one("SELECT snowflake_nextval() > 0", dbname="a") is True
        code, message, _ = s.error("SELECT snowflake_nextval()", dbname="b")
        assert code == "55000" and f"public.t_b.id holds {far['b']}" in message, (code, message)
        s.set_clock(4 * 3600)
        code, message, _ = s.error("SELECT snowflake_nextval()")
        assert code == "55000" and 'database "b" holds IDs copied' in message, (code, message)
        assert s.one("SELECT snowflake_nextval()", dbname="b") > far["b"]
        assert s.one("SELECT snowflake_nextval()") > far["b"]


def test_a_promoted_standby_keeps_the_stop_of_set_aside_ids():
    """A standby that replayed the mark carrying the stop of set-aside
    copied IDs, promoted with its clock past them, issues none at or after
    their time in another database until the one that holds them floors
    above them (the HINT's statement, pasted there)."""
    with server("copies-stop-primary", faketime=True) as s, servers() as made:
        s.sql("CREATE TABLE t (id bigint DEFAULT snowflake_nextval())")
        s.sql("CREATE DATABASE other")
        s.sql("CREATE EXTENSION snowflake_id", dbname="other")
        assert s.one("SELECT snowflake_nextval() > 0", dbname="other") is True
        standby = started(made, "copies-stop-standby", copy_of=s, standby=True, faketime=True)
        far = s.one("SELECT snowflake_from_timestamp(clock_timestamp() + interval '2 hours')")
        s.sql(f"INSERT INTO t VALUES ({far})")
        ask_for_a_floor(s, 1)
        assert s.error("SELECT snowflake_nextval()")[0] == "55000"
        lsn = s.one("SELECT pg_current_wal_insert_lsn()::text")
        standby.wait_for(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn", what="the standby did not replay the mark")
        s.stop("immediate")
        standby.set_clock(3 * 3600)
        standby.promote()
        standby.wait_for("SELECT NOT pg_is_in_recovery()", what="the standby was not promoted")
        code, message, hint = standby.error("SELECT snowflake_nextval()", dbname="other")
        assert code == "55000" and 'database "postgres" holds IDs copied' in message, (code, message)
        pasted = re.search(r"SELECT \S*snowflake_nextval\(\);", hint).group()
        assert standby.one(pasted) > far
        assert standby.one("SELECT snowflake_nextval()", dbname="other") > far
