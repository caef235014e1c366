"""Copies that carry rows but not the durable mark, into a server with the
same worker id whose clock is 60 s behind the original's: a custom-format
dump restored with pg_restore, pg_dumpall replayed with psql, and a logical
initial copy. Nobody runs a statement after the copy: the extension finds
the copy (its record of floors, snowflake_id.snowflake_floors, names
another server, or a subscription finished an initial copy) and floors the
database before its first ID. Every ID issued afterwards is above every
copied one; the inserts right after the copy do not fail (IDs continue
from the copied ones' time instead of waiting for the clock); the first
insert's wait is printed.

Also: an ordinary restart and a database made here read no data; the
record is the extension's alone; snowflake_resume_above() finds IDs an
application stored itself, and snowflake_resume_above(uuid) takes a uuid
column's largest. (pg_upgrade: tests/packaging/test_pg_upgrade.py.)"""

import os
import re

import pytest

from copies import ALL_IDS, CLOCK_BEHIND_S, COVERED, SCHEMA, a_second_past_the_last_id, check_copy, copy_floors, fill
from harness import PG_BIN, SYSTEM_PG_BIN, Server, _as_postgres, application_role, servers, started


# Debian's own PostgreSQL: the dump's source wherever the suite runs, so
# that on a newer major the dump crosses majors as users' do on the way up
# (15.20's pg_dump leaves its pg_attver column option out; see
# docs/operators.md, "On the way to 18"). The test command's own copy of it,
# where the extension is installed.
SYSTEM_BIN = SYSTEM_PG_BIN


def original(made, name, conf=None, bin=None):
    s = started(made, name, conf=conf, bin=bin)
    s.sql(SCHEMA)
    return s, fill(s)


def copy_target(made, name, conf=None):
    """The copy's server: same worker id, its clock 60 s behind."""
    s = Server(name, faketime=True, conf=conf)
    made.append(s)
    s.set_clock(-CLOCK_BEHIND_S)
    s.start()
    return s


def shell(cmd):
    r = _as_postgres(["bash", "-o", "pipefail", "-c", cmd], check=False)
    assert r.returncode == 0, f"{cmd}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r


def conn_args(s):
    return f"-h {s.dir} -p {s.port} -U postgres"


def test_a_restored_custom_dump_is_floored_by_the_extension():
    """Dumped from Debian's 15 by its pg_dump, restored with this major's
    pg_restore (15 or the newest the suite builds)."""
    with servers() as made:
        a, data = original(made, "dump-a", bin=SYSTEM_BIN)
        b = copy_target(made, "dump-b")
        dump = os.path.join(b.dir, "a.dump")
        shell(f"{SYSTEM_BIN}/pg_dump -Fc {conn_args(a)} -d postgres -f {dump}")
        a.stop()
        shell(f"{PG_BIN}/pg_restore {conn_args(b)} -d postgres --exit-on-error {dump}")
        # The dump carried the original's row of the record.
        a_sysid = b.one("SELECT min(system_identifier) FROM snowflake_id.snowflake_floors"
                        " WHERE system_identifier <> (SELECT system_identifier FROM pg_control_system())")
        assert a_sysid is not None
        check_copy(b, data, what="pg_dump -Fc | pg_restore")
        # IDs the application stored itself (no default calls a generating
        # function there) are above the automatic floor: one statement
        # without a table list puts every later ID above them too.
        assert b.one("SELECT snowflake_nextval()") < data["app_top"]
        said = b.one("SELECT snowflake_resume_above()")
        assert "every new ID is above" in said and "app_made.ref" in said, said
        assert b.one("SELECT snowflake_nextval()") > data["app_top"]
        # The uuid form: a uuid column's largest.
        said = b.one("SELECT snowflake_resume_above((SELECT id FROM u ORDER BY id DESC LIMIT 1))")
        assert "every new ID is above" in said, said
        # This server's floor now covers the original's row: a restart reads nothing.
        assert b.one(COVERED, (a_sysid,)) is True
        floors = b.log_text().count("was floored because")
        b.restart()
        b.sql("INSERT INTO t (n) VALUES (-1)")
        assert b.log_text().count("was floored because") == floors


def test_a_second_restore_of_the_same_server_after_a_rehearsal_is_floored_again():
    """A migration rehearsed: the original's dump restored and used, then
    the application's tables emptied and the original's newer data restored
    into the same database (`--data-only`, the record's rows with it). The
    original's rows arrive again, so the copy's server floors again, above
    the newer IDs (a floor that covered the original's server, not its
    rows, let them repeat)."""
    with servers() as made:
        a, data = original(made, "rehearsal-a")
        b = copy_target(made, "rehearsal-b")
        dump = os.path.join(b.dir, "a.dump")
        shell(f"{PG_BIN}/pg_dump -Fc {conn_args(a)} -d postgres -f {dump}")
        shell(f"{PG_BIN}/pg_restore {conn_args(b)} -d postgres --exit-on-error {dump}")
        check_copy(b, data, what="the rehearsal's restore")
        floors = b.log_text().count("was floored because")
        # The original went on issuing: newer IDs, a second above the rest.
        a_second_past_the_last_id(a)
        a.sql("INSERT INTO t (n) SELECT g FROM generate_series(1, 500) g")
        a.sql("INSERT INTO ev (id, n) SELECT i, 0 FROM snowflake_nextval_batch(50000) i")
        newer = {
            "top": a.one(f"SELECT max(id) FROM ({ALL_IDS}) x"),
            "ids": set(r[0] for r in a.sql(f"SELECT id FROM ({ALL_IDS}) x")),
        }
        assert newer["top"] > b.one(f"SELECT max(id) FROM ({ALL_IDS}) x")
        shell(f"{PG_BIN}/pg_dump -Fc --data-only {conn_args(a)} -d postgres -f {dump}")
        a.stop()
        b.sql("TRUNCATE t, ev, u, p, app_made, hist")
        shell(f"{PG_BIN}/pg_restore {conn_args(b)} -d postgres --data-only --single-transaction"
              f" --exit-on-error {dump}")
        check_copy(b, newer, what="the real restore after a rehearsal")
        assert b.log_text().count("was floored because") == floors + 1


def test_pg_dumpall_replayed_with_psql_is_floored_by_the_extension():
    with servers() as made:
        a, data = original(made, "dumpall-a")
        b = copy_target(made, "dumpall-b")
        out = os.path.join(b.dir, "all.sql")
        shell(f"{PG_BIN}/pg_dumpall {conn_args(a)} -f {out}")
        a.stop()
        # The role postgres exists already there: that one error is expected.
        shell(f"{PG_BIN}/psql {conn_args(b)} -d postgres -q -f {out} 2>&1 | grep -v 'already exists' || true")
        assert b.one("SELECT count(*) FROM t") == 2000
        check_copy(b, data, what="pg_dumpall | psql")


def subscribed_copy(made, name):
    """An original publishing its tables and a copy's server subscribed to
    them, the initial copy ended; the copy's server took one ID before the
    copy (made here: it reads no data). Returns (original, its data, copy)."""
    a, data = original(made, f"{name}-a", conf={"wal_level": "logical"})
    a.sql("CREATE PUBLICATION pub FOR TABLE t, ev, u, p")
    b = copy_target(made, f"{name}-b")
    b.sql(SCHEMA)
    b.sql("INSERT INTO app_made (ref, n) VALUES (snowflake_nextval(), -1)")
    assert "was floored because" not in b.log_text()
    b.sql(f"CREATE SUBSCRIPTION sub CONNECTION 'host={a.dir} port={a.port} user=postgres dbname=postgres'"
          " PUBLICATION pub")
    b.wait_for("SELECT count(*) = 5 AND bool_and(srsubstate = 'r') FROM pg_subscription_rel", timeout=120,
               what="the initial copy did not end")
    return a, data, b


def test_a_logical_initial_copy_is_floored_by_the_extension():
    with servers() as made:
        a, data, b = subscribed_copy(made, "logical")
        assert b.one("SELECT count(*) FROM ev") == data_rows(a, "ev")
        # The cut-over: the original stops, the copy takes the writes.
        b.sql("ALTER SUBSCRIPTION sub DISABLE")
        a.stop()
        check_copy(b, data, what="logical replication's initial copy")
        assert "a subscription copied tables into it" in b.log_text()


def test_a_logical_copy_cut_over_with_drop_subscription_is_floored_through_a_crash():
    """The usual end of a migration by logical replication: the subscription
    dropped before the copy's first ID (which empties the catalog's account
    of the tables it copied), then a crash before that ID. The record was
    told before the drop, in the drop's own transaction."""
    with servers() as made:
        a, data, b = subscribed_copy(made, "logical-drop")
        b.sql("DROP SUBSCRIPTION sub")
        a.stop()
        assert b.one("SELECT count(*) FROM pg_subscription_rel") == 0
        assert not copy_floors(b), "the case is not made: a floor for the copy came before the drop"
        b.kill9_all()
        b.start()
        check_copy(b, data, what="a logical copy cut over with DROP SUBSCRIPTION")
        assert any("dropped or changed before a floor" in line for line in copy_floors(b)), copy_floors(b)


def test_a_subscription_dropped_while_a_table_is_being_copied_is_noted():
    """DROP SUBSCRIPTION while a table's initial copy is under way (here it
    keeps failing on a row the copy's server holds already): the copy could
    commit between the extension's look and the drop, so the record is told
    all the same, and the next ID floors."""
    with servers() as made:
        a = started(made, "copying-a", conf={"wal_level": "logical"})
        a.sql(SCHEMA)
        a.sql("INSERT INTO t (n) SELECT g FROM generate_series(1, 100) g")
        a.sql("CREATE PUBLICATION pub FOR TABLE t")
        clash = a.one("SELECT min(id) FROM t")
        b = copy_target(made, "copying-b")
        b.sql(SCHEMA)
        b.sql(f"INSERT INTO t (id, n) VALUES ({clash}, -1)")
        b.sql(f"CREATE SUBSCRIPTION sub CONNECTION 'host={a.dir} port={a.port} user=postgres dbname=postgres'"
              " PUBLICATION pub")
        b.wait_for_log("duplicate key value violates unique constraint", what="the copy did not begin")
        assert b.one("SELECT count(*) FROM pg_subscription_rel WHERE srsubstate IN ('i', 'd')") == 1
        b.sql("DROP SUBSCRIPTION sub")
        assert b.one("SELECT count(*) FROM snowflake_id.snowflake_floors WHERE system_identifier = 0") == 1
        b.sql("INSERT INTO t (n) VALUES (1)")
        assert any("dropped or changed before a floor" in line for line in copy_floors(b)), copy_floors(b)


@pytest.mark.parametrize("triggers", ["", "--disable-triggers"])
def test_a_data_only_restore_into_a_database_in_use_floors_its_open_sessions(triggers):
    """pg_restore --data-only into a database whose sessions already take
    IDs (a pool's): the record's rows the restore writes make every session
    check again before its next ID once the restore commits, the sessions
    already open included, in repeatable-read transactions whose snapshot
    predates it: one that only read, and one that had written (which SPI
    would otherwise read with its own snapshot). With --disable-triggers
    (the record's guard disabled around its rows), the ALTER TABLE that
    disables it tells every session the same."""
    with servers() as made:
        a, data = original(made, "dataonly-a")
        b = copy_target(made, "dataonly-b")
        b.sql(SCHEMA)
        dump = os.path.join(b.dir, "a.dump")
        shell(f"{PG_BIN}/pg_dump -Fc --data-only {conn_args(a)} -d postgres -f {dump}")
        a.stop()
        before = b.one("SELECT snowflake_nextval()")
        assert before < data["top"], "the case is not made: the copy's IDs are below this server's"
        # The sessions touch no table the restore writes: its ALTER TABLE
        # ... DISABLE TRIGGER waits for every lock on them.
        b.sql("CREATE TABLE scratch (n int)")
        sessions = []
        for writes in (False, True):
            conn = b.connect(autocommit=False)
            cur = conn.cursor()
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("SELECT 1")
            cur.fetchone()
            if writes:
                cur.execute("INSERT INTO scratch VALUES (1)")
            sessions.append((conn, cur))
        rows = b.one("SELECT count(*) FROM t")
        shell(f"{PG_BIN}/pg_restore {conn_args(b)} -d postgres --data-only --single-transaction {triggers}"
              f" --exit-on-error {dump}")
        for conn, cur in sessions:
            cur.execute("SELECT snowflake_nextval(), (SELECT count(*) FROM t)")
            after, rows_after = cur.fetchone()
            assert rows_after == rows, "the case is not made: the transaction sees the restored rows"
            assert after > data["top"], f"an open session issued {after}, below the restored {data['top']}"
            conn.rollback()
            conn.close()
        check_copy(b, data, what="a data-only restore into a database in use")


def test_a_second_logical_copy_from_a_publisher_with_less_wal_is_floored_too():
    """Two subscriptions from two publishers. The second copy ends at an LSN
    of its own publisher's that is smaller than where the first copy ended
    on the first publisher's: LSNs of two publishers say nothing of each
    other, and the second copy is floored all the same (where the newest
    LSN was compared, it was not, and its IDs came again)."""
    ddl = "CREATE TABLE {t} (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), v text)"
    with servers() as made:
        p1 = started(made, "lsn-p1", conf={"wal_level": "logical", "snowflake_id.worker_id": 10})
        p2 = started(made, "lsn-p2", conf={"wal_level": "logical"})
        p1.sql("CREATE EXTENSION snowflake_id; " + ddl.format(t="a") +
               "; INSERT INTO a (v) SELECT 'a' FROM generate_series(1, 100)")
        # The first publisher's WAL runs far ahead of the second's.
        p1.sql("CREATE TABLE filler AS SELECT g, repeat('x', 100) AS pad FROM generate_series(1, 100000) g")
        p1.sql("CREATE PUBLICATION pa FOR TABLE a")
        # The second publisher shares the copy's worker id: its IDs are
        # the ones the copy could issue again.
        p2.sql("CREATE EXTENSION snowflake_id; " + ddl.format(t="b") +
               "; INSERT INTO b (v) SELECT 'b' FROM generate_series(1, 5000)")
        p2.sql("CREATE PUBLICATION pb FOR TABLE b")
        s = copy_target(made, "lsn-s")
        s.sql("CREATE EXTENSION snowflake_id; " + ddl.format(t="a") + "; " + ddl.format(t="b"))
        s.one("SELECT snowflake_nextval()")
        for sub, pub, pubsrv, table in (("sa", "pa", p1, "a"), ("sb", "pb", p2, "b")):
            s.sql(f"CREATE SUBSCRIPTION {sub} CONNECTION 'host={pubsrv.dir} port={pubsrv.port} user=postgres"
                  f" dbname=postgres' PUBLICATION {pub}")
            s.wait_for(f"SELECT count(*) = 1 AND bool_and(srsubstate = 'r') FROM pg_subscription_rel"
                       f" WHERE srrelid = '{table}'::regclass", timeout=120, what=f"the copy of {table} did not end")
            # A new session's first ID, after each copy.
            assert s.one(f"SELECT snowflake_nextval() > (SELECT max(id) FROM {table})") is True, table
        lsn = dict(s.sql("SELECT srrelid::regclass::text, srsublsn FROM pg_subscription_rel"))
        assert s.one(f"SELECT '{lsn['b']}'::pg_lsn < '{lsn['a']}'::pg_lsn") is True, \
            f"the case is not made: the second copy ended at {lsn['b']}, not below the first's {lsn['a']}"
        assert s.log_text().count("was floored because a subscription copied tables into it") == 2, s.log_text()[-3000:]


def data_rows(s, table):
    return s.one(f"SELECT count(*) FROM {table}")


def test_an_ordinary_restart_and_a_new_database_read_no_data():
    with servers() as made:
        s = started(made, "floors-plain")
        s.sql(SCHEMA)
        fill(s, rows=100)
        s.restart()
        s.kill9_all()
        s.start()
        s.sql("INSERT INTO t (n) VALUES (1)")
        s.sql("CREATE DATABASE other")
        s.sql(SCHEMA, dbname="other")
        s.sql("INSERT INTO ev (n) VALUES (1)", dbname="other")
        assert "was floored because" not in s.log_text(), s.log_text()[-3000:]
        # One row per database, the server that made it, besides a row per
        # backfill lease.
        assert s.one("SELECT count(*) FROM snowflake_id.snowflake_floors WHERE system_identifier ="
                     " (SELECT system_identifier FROM pg_control_system()) AND floor IS NULL"
                     " AND backfilled IS NULL") == 1


def test_a_database_owner_dumps_and_restores_and_gains_nothing():
    """What an application's role does with its own database (no superuser):
    pg_dump it, restore it elsewhere with pg_restore, as itself. The copy is
    floored all the same, reading a table the role cannot read; the floor
    reads each table as its owner, so code a role planted (an index
    expression, extended statistics, a planted max()) runs as that role,
    never as a superuser; a view with a generating default is not read;
    the record's rows a role writes can ask for a floor, never spare one."""
    with servers() as made:
        a = started(made, "floors-sec-a")
        application_role(a)
        # A table the application cannot read.
        a.sql("CREATE TABLE hidden (id bigint PRIMARY KEY DEFAULT snowflake_nextval())", dbname="appdb")
        a.sql("INSERT INTO hidden SELECT FROM generate_series(1, 500)", dbname="appdb")
        a.sql("GRANT USAGE ON SCHEMA public TO app", dbname="appdb")
        # The application's traps, all in its own objects: code that makes
        # it a superuser if anyone reads its table with more rights than it.
        for statement in (
                "CREATE FUNCTION public.escalate() RETURNS void LANGUAGE plpgsql AS"
                " $$BEGIN EXECUTE 'ALTER ROLE app SUPERUSER'; EXCEPTION WHEN OTHERS THEN NULL; END$$",
                "CREATE FUNCTION public.evil() RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS"
                " $$BEGIN PERFORM public.escalate(); RETURN 0; END$$",
                "CREATE TABLE mine (id bigint PRIMARY KEY DEFAULT snowflake_nextval())",
                "CREATE INDEX ON mine ((id + public.evil()))",
                "CREATE STATISTICS mine_st ON (id + public.evil()) FROM mine",
                "CREATE VIEW v AS SELECT id FROM mine",
                "ALTER VIEW v ALTER COLUMN id SET DEFAULT snowflake_nextval()",
                "CREATE FUNCTION public.max(bigint) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint'"):
            a.sql(statement, dbname="appdb", user="app")
        top = a.one("SELECT max(id) FROM hidden", dbname="appdb")
        # The record: anyone reads it (pg_dump does), the database's owner
        # adds rows (pg_restore does), but changes none, and a row it adds
        # covers nothing.
        a.sql("INSERT INTO snowflake_id.snowflake_floors (system_identifier, covers, floor) VALUES (7, '{00000000-0000-0000-0000-000000000001}', 5)",
              dbname="appdb", user="app")
        assert a.sql("SELECT cardinality(covers), floor FROM snowflake_id.snowflake_floors WHERE system_identifier = 7",
                     dbname="appdb") == [(0, None)]
        a.sql("DELETE FROM snowflake_id.snowflake_floors WHERE system_identifier = 7", dbname="appdb")
        # A role that is neither a superuser nor the database's owner adds none.
        a.sql("CREATE ROLE other LOGIN")
        code, message, _ = a.error("INSERT INTO snowflake_id.snowflake_floors (system_identifier) VALUES (7)",
                                   dbname="appdb", user="other")
        assert code == "42501" and "only superusers and the database's owner" in message, message
        for statement in ("DELETE FROM snowflake_id.snowflake_floors",
                          "UPDATE snowflake_id.snowflake_floors SET covers = '{}'",
                          "TRUNCATE snowflake_id.snowflake_floors"):
            code, _, _ = a.error(statement, dbname="appdb", user="app")
            assert code == "42501", statement
        for f in ("snowflake_resume_above()", "snowflake_resume_above(1::bigint)"):
            code, _, _ = a.error(f"SELECT {f}", dbname="appdb", user="app")
            assert code == "42501", f

        b = copy_target(made, "floors-sec-b")
        b.sql("CREATE ROLE app LOGIN")
        b.sql("CREATE DATABASE appdb OWNER app")
        dump = os.path.join(b.dir, "a.dump")
        # As the application's role, both ways ("hidden" is left out of the
        # dump by a role that cannot read it; the superuser restores it).
        shell(f"{PG_BIN}/pg_dump -Fc -h {a.dir} -p {a.port} -U app -d appdb -T hidden -f {dump}")
        shell(f"{PG_BIN}/pg_dump -Fc {conn_args(a)} -d appdb -t hidden -f {dump}.hidden")
        a.stop()
        shell(f"{PG_BIN}/pg_restore -h {b.dir} -p {b.port} -U app -d appdb --exit-on-error {dump}")
        shell(f"{PG_BIN}/pg_restore {conn_args(b)} -d appdb --exit-on-error {dump}.hidden")
        first = b.one("INSERT INTO mine DEFAULT VALUES RETURNING id", dbname="appdb", user="app")
        assert first > top, "the floor missed a table the caller cannot read"
        log = b.log_text()
        assert "was floored because" in log and "hidden.id" in log, log[-3000:]
        assert "public.v." not in log
        assert b.one("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'") is False
        # The same for the superuser's statement over every column.
        b.sql("SELECT snowflake_resume_above()", dbname="appdb")
        assert b.one("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'") is False


def test_values_far_ahead_refuse_ids_until_an_operator_sets_them_aside():
    """A restored dump whose ID columns hold values more than an hour ahead
    of the clock (a sentinel, a row made by a clock a month ahead): a floor
    below them could repeat them, one above them would move every
    database's IDs that far. The copy's server refuses IDs in that
    database, naming the largest; the HINT's statement, pasted by a
    superuser, sets them aside and floors the plausible IDs (a domain's
    column included); IDs then flow, a month behind those values. Another
    database issues meanwhile, its status naming the refusal. (tests/server/test_copies_columns.py: a clock corrected.)"""
    with servers() as made:
        a, data = original(made, "floors-far-a")
        a.sql("CREATE DOMAIN idd AS bigint")
        a.sql("CREATE TABLE d (id idd PRIMARY KEY DEFAULT snowflake_nextval())")
        a_second_past_the_last_id(a)
        a.sql("INSERT INTO d SELECT FROM generate_series(1, 10)")
        a.sql("INSERT INTO t (id, n) VALUES (snowflake_from_timestamp(now() + interval '30 days'), -7)")
        a.sql("INSERT INTO ev (id, n) VALUES (9223372036854775807, -7), (-5, -7)")
        d_top = a.one("SELECT max(id) FROM d")
        b = copy_target(made, "floors-far-b")
        b.sql("CREATE DATABASE other")
        b.sql("CREATE EXTENSION snowflake_id", dbname="other")
        dump = os.path.join(b.dir, "a.dump")
        shell(f"{PG_BIN}/pg_dump -Fc {conn_args(a)} -d postgres -f {dump}")
        a.stop()
        shell(f"{PG_BIN}/pg_restore {conn_args(b)} -d postgres --exit-on-error {dump}")
        code, msg, hint = b.error("INSERT INTO t (n) VALUES (1)")
        assert code == "55000" and "public.ev.id holds 9223372036854775807" in msg, (code, msg)
        assert b.one("SELECT snowflake_nextval() > 0", dbname="other") is True
        assert b.one("SELECT problem FROM snowflake_id.snowflake_status", dbname="other") == msg
        said = b.one(re.search(r"SELECT \S*snowflake_resume_above\(\);", hint).group())
        assert "set aside as no ID: public.ev.id holds 9223372036854775807" in said, said
        first = b.one("INSERT INTO t (n) VALUES (1) RETURNING id")
        # Above the newest plausible ID, the domain column's (written last,
        # a second after the rest: only a floor that read it is above it).
        assert max(data["ids"]) < d_top < first < a_month_ahead(b)
        assert b.one("SELECT snowflake_nextval()", dbname="other") > first
        assert b.one("SELECT problem FROM snowflake_id.snowflake_status", dbname="other") is None


def a_month_ahead(s):
    return s.one("SELECT snowflake_from_timestamp(now() + interval '29 days')")


def test_pg_restore_tells_no_error_and_the_record_keeps_both_servers():
    """The record's rows restore beside the row CREATE EXTENSION wrote,
    even into the server the dump came from (no key to collide on)."""
    with servers() as made:
        a, _ = original(made, "floors-self")
        dump = os.path.join(a.dir, "self.dump")
        shell(f"{PG_BIN}/pg_dump -Fc {conn_args(a)} -d postgres -f {dump}")
        a.sql("CREATE DATABASE again")
        shell(f"{PG_BIN}/pg_restore {conn_args(a)} -d again --exit-on-error {dump}")
        a.sql("INSERT INTO t (n) VALUES (-1)", dbname="again")
        # Its own server's dump: nothing came from elsewhere, nothing read.
        assert "was floored because" not in a.log_text()
