"""How a server checks its databases for copied data: once per change, not
once per session (a new session's first ID reads no table), and nothing a
role other than a superuser or the database's owner does makes a
database floor, or fails or stalls another session's floor.

Whether a session read a table is told by a lock, not by a time: while a
superuser holds the record of floors locked, a session whose first ID read
it would wait, and with `lock_timeout` set it fails at once (55P03)."""

import threading

import psycopg2
from harness import install_0_1_0_script, pg_major, server, wait_until

NO_WAIT = "SET lock_timeout = 1; "


def held(s):
    """A session holding the record of floors locked against every read."""
    return held_in(s, "postgres")


def held_in(s, dbname):
    conn = s.connect(dbname=dbname, autocommit=False)
    conn.cursor().execute("LOCK TABLE snowflake_id.snowflake_floors IN ACCESS EXCLUSIVE MODE")
    return conn


def test_a_new_sessions_first_id_reads_no_table_once_its_database_was_checked():
    with server("checks-once") as s:
        s.sql("CREATE ROLE app LOGIN")
        # After a start, the first session of the database reads the record
        # once (the test's own proof that a read would be seen).
        s.restart()
        lock = held(s)
        code, _, _ = s.error(NO_WAIT + "SELECT snowflake_nextval()")
        assert code == "55P03", code
        lock.close()
        assert s.one("SELECT snowflake_nextval() > 0") is True
        # Every later session, of any role, reads nothing.
        with held(s):
            for user in ("postgres", "app", "app"):
                assert s.one(NO_WAIT + "SELECT snowflake_nextval() > 0", user=user) is True
        # Another database is checked on its own; databases made and dropped
        # beside it change nothing for it.
        s.sql("CREATE DATABASE other")
        s.sql("CREATE EXTENSION snowflake_id", dbname="other")
        assert s.one("SELECT snowflake_nextval() > 0", dbname="other") is True
        s.sql("CREATE DATABASE gone")
        s.sql("DROP DATABASE gone")
        with held(s):
            for db in ("postgres", "other"):
                assert s.one(NO_WAIT + "SELECT snowflake_nextval() > 0", dbname=db, user="app") is True, db
        # An INSERT of no rows into the record, which any role may run,
        # makes no database check again.
        s.sql("INSERT INTO snowflake_id.snowflake_floors (system_identifier) SELECT 7 WHERE false", user="app")
        with held(s):
            assert s.one(NO_WAIT + "SELECT snowflake_nextval() > 0", user="app") is True
        # A dropped database's OID taken again is checked again (the
        # database made here is new to the server).
        dropped = s.one("SELECT oid FROM pg_database WHERE datname = 'other'")
        s.sql("DROP DATABASE other")
        if pg_major() >= 15:  # CREATE DATABASE ... OID came with 15
            s.sql(f"CREATE DATABASE other OID {dropped}")
            s.sql("CREATE EXTENSION snowflake_id", dbname="other")
            with held_in(s, "other"):
                code, _, _ = s.error(NO_WAIT + "SELECT snowflake_nextval()", dbname="other")
                assert code == "55P03", code


def test_no_role_but_a_superuser_or_the_databases_owner_adds_rows_to_the_record():
    with server("checks-writers") as s:
        s.sql("CREATE ROLE evil LOGIN")
        s.sql("CREATE ROLE owner LOGIN")
        s.sql("CREATE DATABASE owned OWNER owner")
        s.sql("CREATE EXTENSION snowflake_id", dbname="owned")
        for db in ("postgres", "owned"):
            code, message, hint = s.error(
                "INSERT INTO snowflake_id.snowflake_floors (system_identifier) VALUES (7)", dbname=db, user="evil")
            assert code == "42501" and "only superusers and the database's owner" in message, message
            assert "as a superuser or as the database's owner" in hint, hint
        # Its owner may (a restore by it writes the record): the row asks for
        # a floor and covers nothing.
        s.sql("INSERT INTO snowflake_id.snowflake_floors (system_identifier, covers, floor) VALUES (7, '{00000000-0000-0000-0000-000000000001}', 5)",
              dbname="owned", user="owner")
        assert s.sql("SELECT cardinality(covers), floor FROM snowflake_id.snowflake_floors WHERE system_identifier = 7",
                     dbname="owned") == [(0, None)]
        assert s.one("SELECT snowflake_nextval() > 0", dbname="owned", user="evil") is True
        assert 'database "owned" was floored because its data came from another cluster (system identifier 7)' \
            in s.log_text(), s.log_text()[-3000:]


def test_other_sessions_temporary_tables_and_a_superusers_nulls_stop_no_floor():
    """A role with only TEMP keeps a temporary table with a generating
    default open in its session; a superuser's row of another server (with
    NULLs among what it covers, as an edited dump has) makes the next ID
    floor the database. Every role's first ID goes on; the temporary table
    is not read."""
    with server("checks-temp") as s:
        s.sql("CREATE ROLE evil LOGIN")
        s.sql("CREATE ROLE app LOGIN")
        s.sql("CREATE TABLE keep (id bigint PRIMARY KEY DEFAULT snowflake_nextval())")
        s.sql("INSERT INTO keep DEFAULT VALUES")
        with s.connect(user="evil") as evil, evil.cursor() as cur:
            cur.execute("CREATE TEMP TABLE trap (id bigint DEFAULT snowflake_nextval())")
            cur.execute("INSERT INTO trap VALUES (DEFAULT), (9000000000000000000)")
            s.sql("INSERT INTO snowflake_id.snowflake_floors (system_identifier, covers) VALUES (7, '{NULL,00000000-0000-0000-0000-000000000001}')")
            for user in ("app", "postgres", "evil"):
                assert s.one("SELECT snowflake_nextval() > 0", user=user) is True, user
            cur.execute("INSERT INTO trap DEFAULT VALUES")
        floors = [line for line in s.log_text().splitlines() if "was floored because" in line]
        assert any("system identifier 7" in line for line in floors), floors
        assert not any("pg_temp" in line or "trap" in line for line in floors), floors
        assert "1 column(s) read" in floors[-1], floors[-1]


def test_a_floor_holds_no_one_for_its_callers_transaction_and_an_aborted_one_floors_again():
    """The session that floors a database may leave its transaction open
    (any role may: BEGIN; SELECT snowflake_nextval();): sessions that start
    meanwhile take their IDs at once. A floor whose transaction rolled back
    lost its row of the record: the next session floors again. A
    transaction that added rows to the record cannot be prepared (its rows
    would become visible where no session hears of them)."""
    with server("checks-held", conf={"max_prepared_transactions": 2}) as s:
        s.sql("CREATE ROLE app LOGIN")
        s.sql("INSERT INTO snowflake_id.snowflake_floors (system_identifier) VALUES (7)")
        with s.connect(user="app", autocommit=False) as floorer, floorer.cursor() as cur:
            cur.execute("SELECT snowflake_nextval()")
            assert s.one(NO_WAIT + "SELECT snowflake_nextval() > 0", user="app") is True
            floorer.rollback()
        assert s.one("SELECT count(*) FROM snowflake_id.snowflake_floors WHERE floor IS NOT NULL"
                     " OR covers <> '{}'") == 0
        assert s.one("SELECT snowflake_nextval() > 0", user="app") is True
        floors = [line for line in s.log_text().splitlines()
                  if "was floored because" in line and "system identifier 7" in line]
        assert len(floors) == 2, floors
        assert s.one("SELECT count(*) FROM snowflake_id.snowflake_floors m, snowflake_id.snowflake_floors f"
                     " WHERE f.system_identifier = 7 AND f.arrival = ANY (m.covers)") == 1
        with s.connect(autocommit=False) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO snowflake_id.snowflake_floors (system_identifier) VALUES (8)")
            try:
                cur.execute("PREPARE TRANSACTION 'restore'")
                raise AssertionError("a transaction that wrote the record was prepared")
            except psycopg2.Error as e:
                assert e.pgcode == "0A000", e
                conn.rollback()


# What a table's owner, with no other privilege, can do to make a statement
# that reads its table fail or wait (each after the table holds its IDs).
OWNER_TRAPS = {
    "revoked": "REVOKE SELECT ON revoked FROM evil",
    "raising": """
        CREATE FUNCTION boom() RETURNS boolean LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'boom'; END$$;
        ALTER TABLE raising ENABLE ROW LEVEL SECURITY;
        ALTER TABLE raising FORCE ROW LEVEL SECURITY;
        CREATE POLICY p ON raising USING (boom())""",
    "sleeping": """
        ALTER TABLE sleeping ENABLE ROW LEVEL SECURITY;
        ALTER TABLE sleeping FORCE ROW LEVEL SECURITY;
        CREATE POLICY p ON sleeping USING (pg_sleep(3600) IS NOT NULL)""",
    # The planner folds an index predicate's immutable calls of constants,
    # as whoever plans (a fresh backend's relation cache): armed afterwards.
    "predicate": """
        CREATE TABLE armed (on_ boolean);
        INSERT INTO armed VALUES (false);
        CREATE FUNCTION trap(int) RETURNS boolean IMMUTABLE LANGUAGE plpgsql AS
          $$BEGIN IF (SELECT on_ FROM public.armed) THEN RAISE EXCEPTION 'trap'; END IF; RETURN true; END$$;
        CREATE INDEX ON predicate (id) WHERE trap(1);
        UPDATE armed SET on_ = true""",
}


def test_a_table_owner_can_neither_fail_nor_stall_a_floor_nor_hide_its_ids():
    """Each trap set by the owner of a table that holds IDs: a floor a
    restore asks for reads such tables at the storage level (no statement,
    so no policy, privilege or planner), and another role's first ID
    neither fails nor waits, and is above the table's IDs. (A failed or
    stalled read fails here: a statement timeout bounds the wait, far
    beyond what any read takes, far below the policy's sleep.)"""
    with server("checks-owner") as s:
        s.sql("CREATE ROLE evil LOGIN")
        s.sql("CREATE ROLE app LOGIN")
        s.sql("GRANT CREATE ON SCHEMA public TO evil")
        for k, (table, trap) in enumerate(OWNER_TRAPS.items(), 1):
            s.sql(f"CREATE TABLE {table} (id bigint DEFAULT snowflake_nextval())", user="evil")
            v = s.one(f"SELECT snowflake_from_timestamp(clock_timestamp() + interval '{3 * k} min')")
            s.sql(f"INSERT INTO {table} (id) VALUES ({v})", user="evil")
            s.sql(trap, user="evil")
            s.sql(f"INSERT INTO snowflake_id.snowflake_floors (system_identifier) VALUES ({2000 + k})")
            got = s.one("SET statement_timeout = '120s'; SELECT snowflake_nextval()", user="app")
            assert got > v, f"the floor missed {table}"
        # Every trap is armed: a statement reading the tables fails or waits.
        for table in ("revoked", "raising", "predicate"):
            code, _, _ = s.error(f"SELECT max(id) FROM {table}", user="evil")
            assert code in ("42501", "P0001"), (table, code)


def test_a_lock_an_owner_keeps_fails_a_floor_after_max_wait_and_never_stalls_it():
    """The owner of a table that holds IDs keeps a transaction open holding
    it locked against readers (or its index, by a REINDEX), and a restore
    asks for a floor. Whatever `lock_timeout` says (0, never), another
    role's first ID does not wait for the lock: a locked index is passed
    over for a read of every row; a locked table fails the ID with 55000
    once `max_wait` is spent, naming the table, with a HINT whose query
    finds the holder; the lock gone, the next ID floors above the table's
    IDs. The lock decides each outcome, not a time: a stall would run into
    the statement timeout, far beyond `max_wait`."""
    with server("checks-locked", conf={"snowflake_id.max_wait": "'200ms'"}) as s:
        s.sql("CREATE ROLE evil LOGIN")
        s.sql("CREATE ROLE app LOGIN")
        s.sql("GRANT CREATE ON SCHEMA public TO evil")
        s.sql("CREATE TABLE locked (id bigint DEFAULT snowflake_nextval())", user="evil")
        s.sql("CREATE TABLE reindexed (id bigint PRIMARY KEY DEFAULT snowflake_nextval())", user="evil")
        ahead = lambda minutes: s.one(
            f"SELECT snowflake_from_timestamp(clock_timestamp() + interval '{minutes} min')")
        take = "SET statement_timeout = '60s'; SELECT snowflake_nextval()"

        v = ahead(3)
        s.sql(f"INSERT INTO reindexed VALUES ({v})", user="evil")
        holder = s.connect(user="evil", autocommit=False)
        holder.cursor().execute("REINDEX INDEX reindexed_pkey")
        s.sql("INSERT INTO snowflake_id.snowflake_floors (system_identifier) VALUES (3001)")
        assert s.one(take, user="app") > v, "the floor missed the table whose index is locked"
        holder.rollback()

        v = ahead(6)
        s.sql(f"INSERT INTO locked VALUES ({v})", user="evil")
        cur = holder.cursor()
        cur.execute("SELECT pg_backend_pid()")
        holder_pid = cur.fetchone()[0]
        cur.execute("LOCK TABLE locked IN ACCESS EXCLUSIVE MODE")
        s.sql("INSERT INTO snowflake_id.snowflake_floors (system_identifier) VALUES (3002)")
        for _ in range(2):
            code, message, hint = s.error(take, user="app")
            assert code == "55000" and "public.locked.id" in message and "locked against reading" in message, (code, message)
            query = hint[hint.index("SELECT pid"):hint.index("; then")]
            assert "database =" in query and "pg_prepared_xacts" in hint, hint
            assert [r[0] for r in s.sql(query)] == [holder_pid], query
        holder.commit()
        assert s.one(take, user="app") > v, "the floor missed the table once unlocked"

        # A numeric stored out of line is read through the TOAST table's
        # index, which a REINDEX left open holds: bounded the same way.
        s.sql("CREATE TABLE toasted (id numeric DEFAULT snowflake_nextval())", user="evil")
        s.sql("ALTER TABLE toasted ALTER id SET STORAGE EXTERNAL", user="evil")
        s.sql("INSERT INTO toasted VALUES (repeat('9', 5000)::numeric)", user="evil")
        cur.execute("REINDEX TABLE toasted")
        s.sql("INSERT INTO snowflake_id.snowflake_floors (system_identifier) VALUES (3003)")
        code, message, _ = s.error(take, user="app")
        assert code == "55000" and "public.toasted.id" in message, (code, message)
        holder.rollback()
        assert s.one(take, user="app") > v
        holder.close()


def test_sessions_waiting_for_a_floor_that_a_lock_failed_fail_with_it_at_once():
    """Four sessions need the same floor while a table owner keeps a table
    locked: the first floors and fails once `max_wait` is spent; the three
    that waited for it fail with its error without flooring again (each
    would otherwise wait `max_wait` in turn: the fourth four times as
    long). Told by the floors the log says began, not by a time: the
    waiters are seen queued for the floor before the first one fails."""
    with server("checks-chain", conf={"snowflake_id.max_wait": "'20s'"}) as s:
        s.sql("CREATE ROLE evil LOGIN")
        s.sql("CREATE ROLE app LOGIN")
        s.sql("GRANT CREATE ON SCHEMA public TO evil")
        s.sql("CREATE TABLE locked (id bigint DEFAULT snowflake_nextval())", user="evil")
        assert s.one("SELECT snowflake_nextval()") > 0
        holder = s.connect(user="evil", autocommit=False)
        holder.cursor().execute("LOCK TABLE locked IN ACCESS EXCLUSIVE MODE")
        s.sql("INSERT INTO snowflake_id.snowflake_floors (system_identifier) VALUES (3101)")
        logged = len(s.log_text())
        got = {}

        def ask(k):
            got[k] = s.error("SET statement_timeout = '120s'; SELECT snowflake_nextval()", user="app")

        def on_the_record(granted):
            return s.one("SELECT count(*) FROM pg_locks WHERE relation = 'snowflake_id.snowflake_floors'::regclass"
                         f" AND mode = 'ShareUpdateExclusiveLock' AND granted = {granted}")

        threads = [threading.Thread(target=ask, args=(k,)) for k in range(4)]
        threads[0].start()
        wait_until(lambda: on_the_record("true") == 1, "the first session never began the floor")
        for t in threads[1:]:
            t.start()
        wait_until(lambda: on_the_record("false") == 3, "the other sessions never waited for the floor")
        for t in threads:
            t.join()
        for k in range(4):
            code, message, _ = got[k]
            assert code == "55000" and "public.locked.id" in message, (k, code, message)
        began = s.log_text()[logged:].count('flooring database "postgres"')
        assert began == 1, f"{began} floors began: the waiters floored again in turn"
        holder.rollback()
        holder.close()
        assert s.one("SELECT snowflake_nextval()", user="app") > 0


def test_no_role_can_stand_in_for_the_record_where_the_extension_has_none():
    """A database whose extension is still 0.1.0 (its update not run yet)
    has no record of floors: a role that may create a schema there makes
    one of that name, with a view whose function makes its caller a
    superuser. The extension reads only its own table: the next ID is
    refused until the update, as before, and the view is never read."""
    install_0_1_0_script()
    with server("checks-impostor") as s:
        s.sql("CREATE DATABASE old")
        s.sql("CREATE EXTENSION snowflake_id VERSION '0.1.0'", dbname="old")
        s.sql("CREATE ROLE mallory LOGIN")
        s.sql("GRANT CREATE ON DATABASE old TO mallory")
        s.sql("""
            CREATE SCHEMA snowflake_id;
            CREATE FUNCTION snowflake_id.pwn() RETURNS bigint LANGUAGE plpgsql AS
              $$BEGIN ALTER ROLE mallory SUPERUSER; RETURN 1; END$$;
            CREATE VIEW snowflake_id.snowflake_floors AS
              SELECT snowflake_id.pwn() AS system_identifier, NULL::uuid AS arrival, NULL::uuid[] AS covers,
                     NULL::bigint AS subscription_copies, NULL::bigint AS floor, now() AS at,
                     NULL::bigint[] AS backfilled""", dbname="old", user="mallory")
        code, message, hint = s.error("SELECT snowflake_nextval()", dbname="old", user="mallory")
        assert code == "55000" and "not updated" in message, (code, message)
        assert "ALTER EXTENSION snowflake_id UPDATE" in hint
        assert s.one("SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'") is False
