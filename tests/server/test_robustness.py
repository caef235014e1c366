"""Claims, conversion and text input under hostile data and awkward setups,
on real servers:

- claims: rows that cannot be judged arriving by replication; a publisher
  whose claims table is emptied; template databases; the claims database
  dropped, renamed or copied by its owner;
- snowflake_convert: REPEATABLE READ with a key committed after the
  snapshot; a grant chain on a view made again; a published table; a
  temporary view of another session; a sequence kept by an earlier run;
  pasteable HINTs for names with quotes;
- text arguments in LATIN1 and SQL_ASCII databases."""

import contextlib
import datetime
import json
import os
import re
import subprocess
import threading

import psycopg2
import pytest
from harness import PROGRAM_TIMEOUT, REPO, Deadline, Window, drivers_python, server, servers, started, wait_until
from claims_cluster import problem, publish, subscribe, sysid, wait_claims, wait_problem, writer


def judged(s, name):
    """Waits until the claims worker of `s`, whose claim is named `name`,
    has judged what its claims table holds now: each refresh writes the
    claim, reads the table and judges it, so the second write from here
    comes after the judging of a read made after now."""
    for _ in range(2):
        since = s.one("SELECT clock_timestamp()")
        s.wait_for(f"SELECT count(*) > 0 FROM snowflake_id.snowflake_claims WHERE name = '{name}'"
                   f" AND last_seen > '{since}'", what=f"{s.name} did not refresh its claim")


# --- claims -----------------------------------------------------------------


def test_rows_that_cannot_be_judged_arrive_by_replication_and_the_others_still_count():
    with servers() as made:
        a = writer(made, "poison-a", 5)
        wait_claims(a, 1, "a did not claim its worker id")
        b = writer(made, "poison-b", 5)
        wait_claims(b, 1, "b did not claim its worker id")
        publish(a, "claims", tables="")
        # Rows that name a's own system identifier: the README's row filter
        # passes them on. Written past the guard, as only a superuser can.
        a.sql(f"""SET session_replication_role = replica;
            INSERT INTO snowflake_id.snowflake_claims VALUES
              (5, {sysid(a)}, 1, 991, 'infinite', '-infinity', 'infinity'),
              (-1, {sysid(a)}, 1, 992, repeat('x', 5000), now(), now()),
              (7, {sysid(a)}, 0, 993, 'no timeline', now(), now()),
              (2147483647, {sysid(a)}, 1, 994, 'huge worker id', now(), now())""")
        subscribe(b, "claims_from_a", a, "claims")
        # b still finds a's live claim, refuses as the later claimant, and
        # says so in full despite the 5,000-byte name beside it.
        wait_problem(b, 'worker id 5 is also claimed by the live server "poison-a"')
        code, message, hint = b.error("SELECT snowflake_nextval()")
        assert code == "55000" and "poison-a" in message and "another worker id" in hint, (code, message)
        for s in (a, b):
            s.wait_for_log("claimed_at is -infinity")
            s.wait_for_log("worker_id -1 is negative")
            s.wait_for_log("timeline 0 is not a timeline")
            assert "x" * 65 not in s.log_text()
            # A worker id past every layout's bits is nobody's: judged, never
            # wrapped onto a real one (-1 was once reported as 4294967295).
            assert "4294967295" not in s.log_text() and "huge worker id" not in s.log_text()
        # a, which receives nothing, keeps refreshing its own claim and shows
        # the first row it skips.
        assert "skipped" in problem(a), problem(a)
        first = a.one("SELECT last_seen FROM snowflake_id.snowflake_claims WHERE name = 'poison-a'")
        a.wait_for(f"SELECT last_seen > '{first}' FROM snowflake_id.snowflake_claims WHERE name = 'poison-a'")


def test_emptying_claims_on_a_publisher_breaks_no_subscription_and_changes_no_claim_time():
    with servers() as made:
        a = writer(made, "trunc-a", 5)
        wait_claims(a, 1, "a did not claim its worker id")
        b = writer(made, "trunc-b", 5)
        publish(a, "pub")
        subscribe(b, "from_a", a, "pub")
        wait_problem(b, 'worker id 5 is also claimed by the live server "trunc-a"')
        claimed = a.one("SELECT claimed_at FROM snowflake_id.snowflake_claims")
        # Refused even for a superuser: the guard says how to do it on purpose.
        code, _, hint = a.error("TRUNCATE snowflake_id.snowflake_claims")
        assert code == "42501" and "session_replication_role" in hint
        a.sql("SET session_replication_role = replica; TRUNCATE snowflake_id.snowflake_claims")
        # The worker writes the claim again, with the time it remembers;
        # the subscriber, which still holds the old row, takes the new one
        # in its place instead of stopping on a duplicate key.
        wait_claims(a, 1, "a did not claim again")
        assert a.one("SELECT claimed_at FROM snowflake_id.snowflake_claims") == claimed
        a.sql("INSERT INTO t (id, origin) VALUES (42, 'after the truncate')")
        b.wait_for("SELECT count(*) = 1 FROM t WHERE id = 42", what="the subscription stopped")
        assert b.one("SELECT claimed_at FROM snowflake_id.snowflake_claims WHERE name = 'trunc-a'") == claimed
        assert "duplicate key" not in b.log_text()
        # Who stops has not changed: b claimed later, b still refuses once
        # it has judged the claim that arrived again.
        judged(b, "trunc-b")
        assert b.error("SELECT snowflake_nextval()")[0] == "55000"
        a.sql("SELECT snowflake_nextval()")
        # Emptied on the refusing side, the other's claim counts until it
        # would go stale, and comes back with a's next refresh: refused all
        # along, for a while and until the claim is back and judged.
        b.sql("SET session_replication_role = replica; TRUNCATE snowflake_id.snowflake_claims")
        window = Window(6)
        deadline = Deadline("a's claim never arrived at b again")
        back = "SELECT count(*) > 0 FROM snowflake_id.snowflake_claims WHERE name = 'trunc-a'"
        while window.open() or not b.one(back):
            assert b.error("SELECT snowflake_nextval()")[0] == "55000"
            deadline.check()
            Deadline.nap(0.5)
        judged(b, "trunc-b")
        assert b.error("SELECT snowflake_nextval()")[0] == "55000"


def test_the_extension_made_again_on_a_publisher_breaks_no_subscription_and_changes_no_claim_time():
    with servers() as made:
        a = writer(made, "remade-a", 6)
        wait_claims(a, 1, "a did not claim its worker id")
        b = writer(made, "remade-b", 6)
        publish(a, "pub")
        subscribe(b, "from_a", a, "pub")
        wait_problem(b, 'worker id 6 is also claimed by the live server "remade-a"')
        claimed = a.one("SELECT claimed_at FROM snowflake_id.snowflake_claims")
        a.sql("DROP EXTENSION snowflake_id CASCADE")
        # Meanwhile the application's rows still arrive.
        a.sql("INSERT INTO t (id, origin) VALUES (41, 'while dropped')")
        b.wait_for("SELECT count(*) = 1 FROM t WHERE id = 41", what="the subscription stopped after DROP EXTENSION")
        # The docs' steps: the extension, the default, the table back in the publication.
        a.sql("CREATE EXTENSION snowflake_id")
        a.sql("ALTER TABLE t ALTER id SET DEFAULT snowflake_nextval()")
        a.sql(f"ALTER PUBLICATION pub ADD TABLE snowflake_id.snowflake_claims WHERE (system_identifier = {sysid(a)})")
        wait_claims(a, 1, "a did not claim again")
        assert a.one("SELECT claimed_at FROM snowflake_id.snowflake_claims") == claimed
        a.sql("INSERT INTO t (origin) VALUES ('after the extension came back')")
        b.wait_for("SELECT count(*) = 1 FROM t WHERE origin = 'after the extension came back'",
                   what="the subscription stopped after CREATE EXTENSION")
        since = a.one("SELECT clock_timestamp()")
        b.wait_for(f"SELECT last_seen > '{since}' FROM snowflake_id.snowflake_claims WHERE name = 'remade-a'",
                   what="a's claim no longer arrives")
        assert b.one("SELECT claimed_at FROM snowflake_id.snowflake_claims WHERE name = 'remade-a'") == claimed
        assert "duplicate key" not in b.log_text()
        # Who stops has not changed: b claimed later, b refuses (again, if
        # a's claim went stale while the extension was away); a issues.
        wait_problem(b, 'worker id 6 is also claimed by the live server "remade-a"')
        assert b.error("SELECT snowflake_nextval()")[0] == "55000"
        a.sql("SELECT snowflake_nextval()")


def test_a_template_database_is_refused_and_create_database_keeps_working():
    with servers() as made:
        s = started(made, "claims-template1", conf={"snowflake_id.claims_database": "'template1'"}, extension=True)
        s.wait_for("SELECT problem LIKE '%names the template database \"template1\"%' FROM snowflake_id.snowflake_status")
        for i in range(5):
            s.sql(f"CREATE DATABASE copy{i}")
        s.sql("CREATE DATABASE tpl IS_TEMPLATE true")
        s.sql("CREATE EXTENSION snowflake_id", dbname="tpl")
        s.set_conf(snowflake_id__claims_database="'tpl'")
        s.restart()
        s.wait_for("SELECT problem LIKE '%names the template database \"tpl\"%' FROM snowflake_id.snowflake_status")
        # A role that neither owns it nor is a superuser: nothing sends the
        # worker away for it, so the worker is not there to begin with.
        s.sql("CREATE ROLE copier LOGIN CREATEDB")
        # Copies go on across the worker's next look at the template (one
        # each 10 s, each said in the log): at least three, and until it
        # has looked again.
        said = 'names the template database "tpl"'
        s.wait_for_log(said)
        looked = s.log_text().count(said)
        deadline = Deadline("the claims worker did not look at the template again")
        i = 0
        while i < 3 or s.log_text().count(said) == looked:
            s.sql(f"CREATE DATABASE from_tpl{i} TEMPLATE tpl", user="copier")
            i += 1
            deadline.check()
            Deadline.nap(2)
        s.sql("CREATE DATABASE plain TEMPLATE DEFAULT", user="copier")


def test_the_claims_databases_owner_can_drop_rename_and_copy_it():
    with servers() as made:
        s = claims_in_a_database_of_its_own(made, "claims-db-owner")
        # Someone else cannot send the worker away by trying.
        s.sql("CREATE ROLE other LOGIN CREATEDB")
        pid = worker_pid(s)
        assert s.error("DROP DATABASE claims", user="other")[0] == "42501"
        assert s.error("ALTER DATABASE claims RENAME TO gone", user="other")[0] == "42501"
        assert worker_pid(s) == pid
        # The owner's commands work; each sends the worker away once (a role
        # other than a superuser, at most once in 10 s, by the server's
        # clock: they are spaced so).
        s.sql("CREATE DATABASE claims_copy TEMPLATE claims", user="owner")
        sent = s.one("SELECT clock_timestamp()")
        wait_claims_in(s, "claims", fresh=True)
        ten_seconds_after(s, sent)
        s.sql("ALTER DATABASE claims RENAME TO claims_renamed", user="owner")
        sent = s.one("SELECT clock_timestamp()")
        s.wait_for("SELECT problem LIKE '%cannot connect to database \"claims\"%' FROM snowflake_id.snowflake_status")
        ten_seconds_after(s, sent)
        s.sql("ALTER DATABASE claims_renamed RENAME TO claims", user="owner")
        sent = s.one("SELECT clock_timestamp()")
        wait_claims_in(s, "claims", fresh=True)
        ten_seconds_after(s, sent)
        s.sql("DROP DATABASE claims", user="owner")
        s.wait_for("SELECT problem LIKE '%cannot connect to database \"claims\"%' FROM snowflake_id.snowflake_status")
        s.sql("SELECT snowflake_nextval()")


def ten_seconds_after(s, sent):
    """Waits until the server's clock is past 10 s after `sent`, a time
    of its own read after a command sent the worker away."""
    s.wait_for(f"SELECT clock_timestamp() > '{sent}'::timestamptz + interval '10.5 s'")


def test_a_command_ended_by_fatal_while_the_worker_is_away_lets_it_back():
    """A command that sent the claims worker away and then ends with a FATAL
    error (its session terminated while DROP DATABASE waits, here for the
    lock another transaction holds on the database) never reaches its own
    release: the process's exit releases its hold. Before, the hold stayed
    until its 60 s limit, and every later hold of the database's owner (one
    each 10 s) kept the worker out again for 60 s: out for good."""
    with servers() as made:
        s = claims_in_a_database_of_its_own(made, "claims-away-fatal")
        # COMMENT locks the database until its transaction ends: the DROP,
        # once it has sent the worker away, waits for that lock as long as
        # the test needs (for the database's other sessions, it would wait
        # only 5 s).
        holder = s.connect(autocommit=False)
        holder.cursor().execute("COMMENT ON DATABASE claims IS 'held'")
        sent = s.one("SELECT clock_timestamp()")
        dropper = threading.Thread(target=lambda: s.error("DROP DATABASE claims", user="owner"))
        dropper.start()
        try:
            # The worker left (the hold is taken) and the DROP waits.
            s.wait_for("SELECT count(*) FILTER (WHERE backend_type = 'snowflake_id claims') = 0 "
                       "AND count(*) FILTER (WHERE query = 'DROP DATABASE claims' AND state = 'active'"
                       " AND wait_event_type = 'Lock') = 1 FROM pg_stat_activity",
                       what="the DROP never sent the worker away")
            assert s.one("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE query = 'DROP DATABASE claims' AND state = 'active') t") == 1
        finally:
            wait_until(lambda: not dropper.is_alive(), "the DROP's session did not end")
            holder.rollback()
            holder.close()
        # Back within the worker's restart (5 s) and a refresh, while a
        # leaked hold would have kept it out until 60 s after it was sent
        # away: judged on the server's clock, which a leaked hold waits out,
        # however slow the machine.
        back = wait_claims_in(s, "claims", fresh=True)
        assert back < sent + datetime.timedelta(seconds=60), \
            f"the worker was back at {back}, the hold's 60 s after {sent}: the FATAL exit did not release it"
        assert s.one("SELECT snowflake_nextval() > 0")


def claims_in_a_database_of_its_own(made, name):
    """A server keeping claims in the database `claims`, which the role
    `owner` owns; returned once the claim is kept there."""
    s = started(made, name, conf={"snowflake_id.claims_database": "'claims'"}, extension=True)
    s.sql("CREATE ROLE owner LOGIN CREATEDB")
    s.sql("CREATE DATABASE claims OWNER owner")
    s.sql("CREATE EXTENSION snowflake_id", dbname="claims")
    wait_claims_in(s, "claims")
    return s


def worker_pid(s):
    return s.one("SELECT pid FROM pg_stat_activity WHERE backend_type = 'snowflake_id claims'")


def wait_claims_in(s, db, fresh=False):
    """Waits until the claim in `db` is refreshed (after now, if `fresh`);
    returns the time it was refreshed at."""
    since = s.one("SELECT now()") if fresh else "-infinity"

    def refreshed():
        with contextlib.suppress(psycopg2.Error):
            return s.one(f"SELECT max(last_seen) FROM snowflake_id.snowflake_claims WHERE last_seen > '{since}'",
                         dbname=db)
        return None

    return wait_until(refreshed, lambda: f"no claim kept in {db}: {problem(s)}")


def major(s):
    return int(s.one("SHOW server_version_num")) // 10000


def test_claims_a_subscription_applies_as_another_role_are_skipped_and_the_rest_arrives():
    with servers() as made:
        a = writer(made, "untrusted-a", 1)
        b = writer(made, "untrusted-b", 2)
        if major(b) < 16:
            pytest.skip("a subscription runs as its own non-superuser owner from PostgreSQL 16 on")
        publish(a, "pub")
        subscribe(b, "from_a", a, "pub")
        wait_claims(b, 2, "a's claim did not arrive")
        b.sql("CREATE ROLE repl LOGIN IN ROLE pg_write_all_data, pg_read_all_data")
        b.sql("ALTER SUBSCRIPTION from_a DISABLE")
        b.sql("ALTER SUBSCRIPTION from_a SET (run_as_owner = true, password_required = false)")
        b.sql("ALTER SUBSCRIPTION from_a OWNER TO repl")
        b.sql("ALTER SUBSCRIPTION from_a ENABLE")
        before = b.one("SELECT last_seen FROM snowflake_id.snowflake_claims WHERE name = 'untrusted-a'")
        a.sql("INSERT INTO t (id, origin) VALUES (7, 'through an untrusted apply')")
        b.wait_for("SELECT count(*) = 1 FROM t WHERE id = 7", what="the application's rows stopped")
        b.wait_for_log("claims arriving by this replication are skipped")
        # A refresh of a's claim, then a row after it: once the row is in,
        # b has applied (skipped) the refresh before it.
        since = a.one("SELECT clock_timestamp()")
        a.wait_for(f"SELECT count(*) > 0 FROM snowflake_id.snowflake_claims WHERE name = 'untrusted-a'"
                   f" AND last_seen > '{since}'", what="a did not refresh its claim")
        a.sql("INSERT INTO t (id, origin) VALUES (8, 'after a refresh')")
        b.wait_for("SELECT count(*) = 1 FROM t WHERE id = 8", what="the application's rows stopped")
        assert b.one("SELECT last_seen FROM snowflake_id.snowflake_claims WHERE name = 'untrusted-a'") == before


# --- snowflake_convert --------------------------------------------------------


@pytest.fixture(scope="module")
def srv():
    with server("robust-convert", conf={"snowflake_id.worker_id": 3, "wal_level": "logical"}) as s:
        yield s


def test_a_repeatable_read_conversion_sees_keys_committed_after_its_snapshot(srv):
    srv.sql("CREATE TABLE rr (id bigserial PRIMARY KEY); INSERT INTO rr DEFAULT VALUES")
    for level in ("REPEATABLE READ", "SERIALIZABLE"):
        conn = srv.connect(autocommit=False)
        cur = conn.cursor()
        cur.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
        cur.execute("SELECT count(*) FROM rr")  # the snapshot is taken
        srv.sql("INSERT INTO rr VALUES (9000000000000000000)")
        with pytest.raises(psycopg2.Error) as e:
            cur.execute("SELECT snowflake_convert('rr')")
        assert e.value.pgcode == "55000", e.value
        assert "the largest is 9000000000000000000" in e.value.diag.message_primary, e.value
        conn.rollback()
        conn.close()
        srv.sql("DELETE FROM rr WHERE id = 9000000000000000000")


def test_a_grant_chain_on_a_view_made_again_still_answers_to_revoke_cascade(srv):
    srv.sql("""CREATE ROLE chain_a LOGIN; CREATE ROLE chain_b LOGIN;
        CREATE TABLE chained (id serial PRIMARY KEY);
        CREATE VIEW chained_v AS SELECT id FROM chained;
        GRANT SELECT ON chained_v TO chain_a WITH GRANT OPTION;""")
    srv.sql("CREATE ROLE chain_c LOGIN")
    srv.sql("GRANT SELECT ON chained_v TO chain_b; GRANT SELECT (id) ON chained_v TO chain_c", user="chain_a")
    acls = "SELECT relacl::text, (SELECT attacl::text FROM pg_attribute WHERE attrelid = c.oid AND attname = 'id') " \
           "FROM pg_class c WHERE relname = 'chained_v'"
    before = srv.sql(acls)
    srv.sql("SELECT snowflake_convert('chained')")
    assert srv.sql(acls) == before
    srv.sql("SELECT * FROM chained_v", user="chain_b")
    srv.sql("SELECT id FROM chained_v", user="chain_c")
    srv.sql("REVOKE SELECT ON chained_v FROM chain_a CASCADE")
    assert srv.error("SELECT * FROM chained_v", user="chain_b")[0] == "42501"


def test_a_published_table_waits_for_its_subscribers(srv):
    srv.sql("CREATE TABLE published (id serial PRIMARY KEY); CREATE PUBLICATION pub_published FOR TABLE published")
    code, message, hint = srv.error("SELECT snowflake_convert('published')")
    assert code == "55000" and "publication pub_published" in message, (code, message)
    assert "subscribers_widened => true" in hint
    assert srv.one("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                   "WHERE attrelid = 'published'::regclass AND attname = 'id'") == "integer"
    srv.sql("SELECT snowflake_convert('published', subscribers_widened => true)")
    assert srv.one("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                   "WHERE attrelid = 'published'::regclass AND attname = 'id'") == "bigint"


def test_another_sessions_temporary_view_is_named_in_the_refusal(srv):
    srv.sql("CREATE TABLE temped (id serial PRIMARY KEY)")
    other = srv.connect()
    other.cursor().execute("CREATE TEMP VIEW temped_v AS SELECT id FROM temped")
    try:
        code, message, hint = srv.error("SELECT snowflake_convert('temped')")
        assert code == "0A000", (code, message)
        assert re.search(r"temporary view pg_temp_\d+\.temped_v of another session \(role postgres\)", message), message
        assert "session has ended" in hint and "DROP VIEW pg_temp_" in hint
    finally:
        other.close()
    srv.wait_for("SELECT count(*) = 0 FROM pg_class WHERE relname = 'temped_v'")
    srv.sql("SELECT snowflake_convert('temped')")


def test_a_sequence_an_earlier_conversion_kept_is_dropped_by_a_later_one(srv):
    srv.sql("CREATE TABLE kept (id serial PRIMARY KEY)")
    srv.sql("SELECT snowflake_convert('kept')")
    assert srv.one("SELECT to_regclass('kept_id_seq') IS NOT NULL")
    assert srv.sql("SELECT snowflake_convert('kept')") == []
    done = [r[0] for r in srv.sql("SELECT snowflake_convert('kept', drop_sequence => true)")]
    assert done[-1] == "DROP SEQUENCE public.kept_id_seq;", done
    assert srv.one("SELECT to_regclass('kept_id_seq') IS NULL")


def test_a_hint_naming_a_table_with_a_quote_can_be_pasted(srv):
    srv.sql("""CREATE TABLE "it's" (id serial PRIMARY KEY) PARTITION BY RANGE (id);
        CREATE TABLE "it's_1" PARTITION OF "it's" FOR VALUES FROM (0) TO (1000)""")
    code, _, hint = srv.error("""SELECT snowflake_convert('"it''s_1"')""")
    assert code == "0A000"
    call = re.search(r"snowflake_convert\((.*), \.\.\.\)", hint).group(1)
    # Pasted as it is, it names the table at the top.
    assert srv.one(f"SELECT {call}::regclass::text") == '"it\'s"'


def test_drivers_that_prepare_statements_see_a_conversion_as_the_readme_says(srv):
    """A prepared statement that returns the key cannot run again once the
    key is bigint (0A000 cached plan must not change result type): asyncpg
    prepares again by itself; psycopg 3 fails on every execution until the
    connection deallocates its statements."""
    srv.sql("CREATE TABLE prepared (id serial PRIMARY KEY, n int)")
    socket = f"host={srv.dir} port={srv.port} user=postgres dbname=postgres"
    uri = f"postgresql://postgres@/postgres?host={srv.dir}&port={srv.port}"
    dsns = {"psycopg": socket, "psycopg-deallocate": socket, "asyncpg": uri, "asyncpg-transaction": uri}
    script = os.path.join(REPO, "tests", "drivers", "prepared_inserts.py")
    runs = {d: subprocess.Popen([drivers_python(), script, d, dsn, "prepared", "5"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for d, dsn in dsns.items()}
    # Every driver has prepared its statement (a slow start on a busy
    # machine would otherwise prepare it after the conversion, and see
    # nothing to test).
    for d, p in runs.items():
        line = p.stderr.readline()
        assert line == "prepared\n", (d, line + p.stderr.read())
    srv.sql("SELECT snowflake_convert('prepared')")
    seen = {}
    for d, p in runs.items():
        out, err = p.communicate(timeout=PROGRAM_TIMEOUT)
        assert p.returncode == 0, err
        seen[d] = json.loads(out)
    print(json.dumps(seen, indent=1))
    assert srv.one("SELECT count(*) FROM prepared") == sum(s["ok"] for s in seen.values())
    stale = "0A000 cached plan must not change result type"
    # asyncpg: not one insert failed outside a transaction; inside one, the
    # first after the conversion failed (its transaction with it), then fine.
    assert seen["asyncpg"]["errors"] == {} and seen["asyncpg"]["ok_after_last_error"] > 0, seen["asyncpg"]
    assert seen["asyncpg-transaction"]["errors"] == {"0A000 InvalidCachedStatementError": 1}, seen["asyncpg-transaction"]
    assert seen["asyncpg-transaction"]["ok_after_last_error"] > 0, seen["asyncpg-transaction"]
    # psycopg 3: every insert after the conversion failed...
    assert list(seen["psycopg"]["errors"]) == [stale] and seen["psycopg"]["ok_after_last_error"] == 0, seen["psycopg"]
    # ... until the connection ran DEALLOCATE ALL: one failure, then fine.
    assert seen["psycopg-deallocate"]["errors"] == {stale: 1}, seen["psycopg-deallocate"]
    assert seen["psycopg-deallocate"]["ok_after_last_error"] > 0, seen["psycopg-deallocate"]


# --- every database encoding ------------------------------------------------------


@pytest.mark.parametrize("encoding", ["LATIN1", "SQL_ASCII"])
def test_text_arguments_in_a_database_that_is_not_utf8(srv, encoding, monkeypatch):
    # This client speaks UTF-8, whatever the database's encoding.
    monkeypatch.setenv("PGCLIENTENCODING", "UTF8")
    db = f"enc_{encoding.lower()}"
    srv.sql(f"CREATE DATABASE {db} ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    srv.sql("CREATE EXTENSION snowflake_id", dbname=db)
    calls = [
        ("SELECT snowflake_from_text('é', 'base62')", "22P02"),
        ("SELECT snowflake_from_text('0000000000é', 'base62')", "22P02"),
        ("SELECT snowflake_to_text(1, 'bäse62')", "22023"),
        ("SELECT snowflake_from_text('1', 'bäse62')", "22023"),
        ("SELECT snowflake_decode(1, 'twittér')", "22023"),
        ("SELECT snowflake_timestamp(1, 'twittér')", "22023"),
        ("SELECT snowflake_from_timestamp(now(), 'twittér')", "22023"),
    ]
    for query, code in calls:
        got, message, _ = srv.error(query, dbname=db)
        assert got == code, (encoding, query, got, message)
        assert "UTF-8" not in message or encoding == "SQL_ASCII", message
    # The valid ones work, and give what a UTF-8 database gives.
    assert srv.one("SELECT snowflake_from_text(snowflake_to_text(123456789, 'base62'), 'base62')", dbname=db) \
        == 123456789
    assert srv.one("SELECT (snowflake_decode(1 << 22, 'twitter')).worker_id", dbname=db) == 0
    # A table and column with names beyond ASCII convert.
    srv.sql('CREATE TABLE "tablé" ("clé" serial PRIMARY KEY); CREATE VIEW "vué" AS SELECT "clé" FROM "tablé"',
            dbname=db)
    done = [r[0] for r in srv.sql("""SELECT snowflake_convert('"tablé"', 'clé')""", dbname=db)]
    assert any('"clé" TYPE bigint' in s for s in done), done
    assert srv.one("""SELECT format_type(atttypid, atttypmod) FROM pg_attribute
                      WHERE attrelid = '"tablé"'::regclass AND attname = 'clé'""", dbname=db) == "bigint"
    # A role whose name is beyond ASCII, refused as any other (42501).
    # Made from this database, so that its name is in this encoding here.
    srv.sql(f'CREATE ROLE "rôle_{encoding.lower()}" LOGIN', dbname=db)
    srv.sql('CREATE TABLE "other" (id serial PRIMARY KEY)', dbname=db)
    got, message, _ = srv.error(f"""SET ROLE "rôle_{encoding.lower()}"; SELECT snowflake_convert('other')""", dbname=db)
    assert got == "42501", (got, message)
    if encoding == "SQL_ASCII":
        # Bytes that are no UTF-8: no encoded ID, and said so.
        got, message, _ = srv.error(
            "SELECT snowflake_from_text(convert_from('\\x30ff'::bytea, 'SQL_ASCII'), 'base62')", dbname=db)
        assert got == "22P02", (got, message)
        # The same bytes as an encoding's or a layout's name: no such name.
        bad = "convert_from('\\x62ff'::bytea, 'SQL_ASCII')"
        for query in (f"SELECT snowflake_to_text(1, {bad})", f"SELECT snowflake_from_text('1', {bad})",
                      f"SELECT snowflake_decode(1, {bad})", f"SELECT snowflake_timestamp(1, {bad})",
                      f"SELECT snowflake_from_timestamp(now(), {bad})"):
            got, message, _ = srv.error(query, dbname=db)
            assert got in ("22023", "22021"), (query, got, message)
            assert "panic" not in message.lower() and "&str" not in message, message
        # A view whose text holds such bytes is made again byte for byte.
        srv.sql("CREATE TABLE raw (id serial PRIMARY KEY); "
                "CREATE VIEW raw_v AS SELECT id, convert_from('\\x5a7563ff'::bytea, 'SQL_ASCII') AS city FROM raw",
                dbname=db)
        before = srv.one("SELECT convert_to(pg_get_viewdef('raw_v'), 'SQL_ASCII')", dbname=db)
        srv.sql("SELECT snowflake_convert('raw')", dbname=db)
        assert srv.one("SELECT convert_to(pg_get_viewdef('raw_v'), 'SQL_ASCII')", dbname=db) == before


def test_a_claims_table_made_by_an_earlier_build_without_the_backfill_column_is_still_kept():
    """0.2.0 built before claims told backfill ones apart made the table
    without its `backfill` column, and the version did not change, so no
    update adds it: the claims worker writes and reads such a table as it
    did, the backfill claim among the rows, and issues on."""
    with servers() as made:
        a = writer(made, "oldtable-a", 5, conf={"snowflake_id.backfill_worker_id": 1000})
        wait_claims(a, 2, "a did not claim its worker id and its backfill worker id")
        a.sql("ALTER TABLE snowflake_id.snowflake_claims DROP COLUMN backfill")
        judged(a, "oldtable-a")
        assert sorted(r[0] for r in a.sql("SELECT worker_id FROM snowflake_id.snowflake_claims")) == [5, 1000]
        assert problem(a) is None, problem(a)
        assert a.one("SELECT snowflake_nextval()") > 0
        assert a.one("SELECT snowflake_nextval_at('2025-02-01')") > 0
