"""No role gains a privilege, or stops ID issuance, through the extension.

Real servers, hostile roles: a database owner (or, as on clusters made
before PostgreSQL 15, any role that may create in `public`) plants
functions and operators whose names and argument types match calls the
extension's own SQL could make, and a table owner's CHECK constraint calls
a function of theirs. Each trap writes who ran it to a log table and makes
its author a superuser when it runs as one. The extension's claims worker
runs every 2 s as the bootstrap superuser, and snowflake_convert is called
by a superuser: no trap may ever run with more than its author's rights
(the log says who ran each), and no author may end up a superuser.

Besides: claims forged by a role that may write any table
(pg_write_all_data), and a claims database whose owner set it read-only,
unreachable by timeouts, and closed to connections."""

import contextlib
import io
import os

import psycopg2
import pytest
from harness import Server, Stopwatch, pg_major, servers, started, wait_until

# The claims worker's refreshes (one each 2 s) watched for a trap to run.
WATCHED_REFRESHES = 4


def traps(author):
    """Functions and operators in public that a careless statement would
    call instead of the built-in ones (each an exact match, where the
    built-in needs a cast or is variadic), all leading to trap(): log the
    caller, and if the caller is a superuser, make `author` one."""
    return f"""
    CREATE TABLE public.trap_log (ran_as text, what text);
    GRANT INSERT, SELECT ON public.trap_log TO PUBLIC;
    CREATE FUNCTION public.trap(what text) RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO public.trap_log VALUES (current_user, what);
        IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
            EXECUTE 'ALTER ROLE {author} SUPERUSER';
        END IF;
    END $$;
    CREATE FUNCTION public.format(text, name) RETURNS text LANGUAGE plpgsql AS $$
        BEGIN PERFORM public.trap('format(text, name)'); RETURN pg_catalog.format($1, $2); END $$;
    CREATE FUNCTION public.format(text, name, name) RETURNS text LANGUAGE plpgsql AS $$
        BEGIN PERFORM public.trap('format(text, name, name)'); RETURN pg_catalog.format($1, $2, $3); END $$;
    CREATE FUNCTION public.quote_ident(name) RETURNS text LANGUAGE plpgsql AS $$
        BEGIN PERFORM public.trap('quote_ident(name)'); RETURN pg_catalog.quote_ident($1::text); END $$;
    CREATE FUNCTION public.pg_get_serial_sequence(text, name) RETURNS text LANGUAGE plpgsql AS $$
        BEGIN PERFORM public.trap('pg_get_serial_sequence(text, name)');
              RETURN pg_catalog.pg_get_serial_sequence($1, $2::text); END $$;
    CREATE FUNCTION public.trap_mul(numeric, integer) RETURNS numeric LANGUAGE plpgsql AS $$
        BEGIN PERFORM public.trap('*(numeric, integer)'); RETURN $1 OPERATOR(pg_catalog.*) $2::numeric; END $$;
    CREATE OPERATOR public.* (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = public.trap_mul);
    CREATE FUNCTION public.trap_eq(name, text) RETURNS boolean LANGUAGE plpgsql AS $$
        BEGIN PERFORM public.trap('=(name, text)'); RETURN $1::text OPERATOR(pg_catalog.=) $2; END $$;
    CREATE OPERATOR public.= (LEFTARG = name, RIGHTARG = text, FUNCTION = public.trap_eq);
    """


def superuser(srv, role):
    return srv.one("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,))


# This test's sessions' own timeouts, whatever the database's owner set,
# from the session's start: a `SET statement_timeout = 0` sent with the
# query is itself under the owner's 1 ms, and a busy machine misses it.
OWN_TIMEOUTS = "-c statement_timeout=0 -c idle_in_transaction_session_timeout=0 -c lock_timeout=0"


def own_claim_seen(srv, db, table="snowflake_id.snowflake_claims"):
    return srv.one(f"SELECT max(last_seen) FROM {table} WHERE system_identifier = "
                   "(SELECT system_identifier FROM pg_control_system())", dbname=db, options=OWN_TIMEOUTS)


def problem(srv):
    """The status's problem (every server here has the extension in postgres too)."""
    return srv.one("SELECT problem FROM snowflake_id.snowflake_status")


def claims_kept(srv, db, table="snowflake_id.snowflake_claims"):
    """Waits for this server's claim, then sees it refreshed again."""
    srv.wait_for_in(db, f"SELECT count(*) > 0 FROM {table}",
                    what=f"no claim written: {problem(srv)}")
    refreshes(srv, db, 1, table)


def refreshes(srv, db, n, table="snowflake_id.snowflake_claims"):
    """Waits until the claims worker has written this server's claim `n`
    times more (each write reads and judges the table as well)."""
    for _ in range(n):
        before = own_claim_seen(srv, db, table)
        wait_until(lambda before=before: own_claim_seen(srv, db, table) != before,
                   lambda: f"the claim was not refreshed: {problem(srv)}")


def claims_server(made, name, db="claims", **conf):
    srv = started(made, name, conf={"snowflake_id.claims_database": f"'{db}'", **conf}, extension=True)
    return srv


def wait_for_in(self, db, query, timeout=None, what=None):
    def check():
        with contextlib.suppress(psycopg2.OperationalError):
            return self.one(query, dbname=db, options=OWN_TIMEOUTS)
        return False

    wait_until(check, what or f"waiting for: {query}", timeout)


Server.wait_for_in = wait_for_in


def test_overloads_planted_by_the_claims_databases_owner_never_run_as_the_worker():
    with servers() as made:
        srv = claims_server(made, "sec_owner")
        srv.sql("CREATE ROLE mallory LOGIN")
        srv.sql("CREATE DATABASE claims OWNER mallory")
        # The extension in a schema of its own, and a table of the same
        # name in public, with a trap on every insert.
        srv.sql("CREATE SCHEMA ext", dbname="claims")
        srv.sql("CREATE EXTENSION snowflake_id SCHEMA ext; GRANT USAGE ON SCHEMA ext TO PUBLIC", dbname="claims")
        srv.sql(traps("mallory"), dbname="claims", user="mallory")
        srv.sql("""
            CREATE TABLE public.snowflake_claims (worker_id integer, system_identifier bigint, timeline bigint,
                instance bigint, name text, claimed_at timestamptz, last_seen timestamptz);
            CREATE FUNCTION public.trap_row() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN PERFORM public.trap('public.snowflake_claims'); RETURN NEW; END $$;
            CREATE TRIGGER trap BEFORE INSERT ON public.snowflake_claims FOR EACH ROW EXECUTE FUNCTION public.trap_row();
            ALTER DATABASE claims SET search_path = public, ext;
        """, dbname="claims", user="mallory")
        claims_kept(srv, "claims", "snowflake_id.snowflake_claims")
        refreshes(srv, "claims", WATCHED_REFRESHES)
        assert srv.sql("SELECT * FROM public.trap_log", dbname="claims") == []
        assert srv.one("SELECT count(*) FROM public.snowflake_claims", dbname="claims") == 0
        assert not superuser(srv, "mallory")
        assert problem(srv) is None


def test_a_database_owner_installs_it_without_gaining_anything():
    """Trusted, as pgcrypto is: the owner of a database creates it there
    (the scripts run as the bootstrap superuser), with traps planted in the
    schema it goes into. Nothing of theirs runs as the superuser, and they
    get none of what needs one."""
    with servers() as made:
        srv = claims_server(made, "sec_trusted", db="appdb")
        srv.sql("CREATE ROLE owner LOGIN")
        srv.sql("CREATE DATABASE appdb OWNER owner")
        srv.sql(traps("owner"), dbname="appdb", user="owner")
        srv.sql("CREATE EXTENSION snowflake_id", dbname="appdb", user="owner")
        claims_kept(srv, "appdb")
        refreshes(srv, "appdb", WATCHED_REFRESHES)
        assert srv.sql("SELECT * FROM public.trap_log", dbname="appdb") == []
        assert not superuser(srv, "owner")
        # The extension is the owner's; its objects are the bootstrap
        # superuser's, the claims and the status in a schema of their own.
        assert srv.one("SELECT extowner::regrole::text FROM pg_extension WHERE extname = 'snowflake_id'",
                       dbname="appdb") == "owner"
        assert srv.sql("SELECT DISTINCT pg_get_userbyid(p.proowner)::text FROM pg_proc p"
                       " JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'"
                       " JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake_id'",
                       dbname="appdb") == [("postgres",)]
        assert srv.one("SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'snowflake_id'",
                       dbname="appdb") == "postgres"
        assert srv.one("SELECT snowflake_nextval() > 0", dbname="appdb", user="owner") is True
        for statement, code in [
            ("SELECT snowflake_resume_above(1)", "42501"),
            ("SELECT snowflake_adopt_settings()", "42501"),
            ("SELECT * FROM snowflake_status()", "42501"),
            ("SELECT * FROM snowflake_id.snowflake_status", "42501"),
            ("SELECT * FROM snowflake_id.snowflake_claims", "42501"),
            ("DROP TABLE snowflake_id.snowflake_claims", "42501"),
            ("DROP SCHEMA snowflake_id CASCADE", "42501"),
            ("GRANT EXECUTE ON FUNCTION snowflake_resume_above(bigint) TO owner", "42501"),
            ("CREATE TABLE snowflake_id.t (i int)", "42501"),
        ]:
            assert srv.error(statement, dbname="appdb", user="owner")[0] == code, statement
        # A role without CREATE on the database cannot install it.
        srv.sql("CREATE ROLE stranger LOGIN")
        srv.sql("CREATE DATABASE other")
        assert srv.error("CREATE EXTENSION snowflake_id", dbname="other", user="stranger")[0] == "42501"
        # Dropping it is the owner's to do, in their own database.
        srv.sql("DROP EXTENSION snowflake_id", dbname="appdb", user="owner")
        assert srv.one("SELECT count(*) FROM pg_namespace WHERE nspname = 'snowflake_id'", dbname="appdb") == 0


def test_objects_the_extensions_owner_adds_to_it_are_never_used_in_place_of_its_own():
    """The owner of a trusted extension may add objects of its own to it
    (ALTER EXTENSION ADD needs only that ownership). A table named
    snowflake_claims so added, with a trigger, must not be what the claims
    worker writes (as the bootstrap superuser); a function named
    snowflake_nextval so added must not be the default a superuser's
    snowflake_convert writes."""
    with servers() as made:
        srv = claims_server(made, "sec_added")
        srv.sql("CREATE ROLE mallory LOGIN")
        srv.sql("CREATE DATABASE claims OWNER mallory")
        srv.sql(traps("mallory"), dbname="claims", user="mallory")
        srv.sql("""
            CREATE SCHEMA aaa; CREATE SCHEMA zzz;
            CREATE EXTENSION snowflake_id SCHEMA zzz;
            CREATE TABLE public.snowflake_claims (worker_id integer, system_identifier bigint, timeline bigint,
                instance bigint, name text, claimed_at timestamptz, last_seen timestamptz);
            CREATE FUNCTION public.trap_stmt() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN PERFORM public.trap('added snowflake_claims'); RETURN NULL; END $$;
            CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON public.snowflake_claims
                FOR EACH STATEMENT EXECUTE FUNCTION public.trap_stmt();
            ALTER EXTENSION snowflake_id ADD TABLE public.snowflake_claims;
            CREATE FUNCTION aaa.snowflake_nextval() RETURNS bigint LANGUAGE plpgsql AS $$
                BEGIN PERFORM public.trap('added snowflake_nextval'); RETURN zzz.snowflake_nextval(); END $$;
            ALTER EXTENSION snowflake_id ADD FUNCTION aaa.snowflake_nextval();
            CREATE TABLE public.adm (id serial PRIMARY KEY, note text);
        """, dbname="claims", user="mallory")
        claims_kept(srv, "claims")
        # A superuser converts a table of mallory's.
        srv.sql("SELECT zzz.snowflake_convert('public.adm')", dbname="claims")
        default = srv.one("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'public.adm'::regclass",
                          dbname="claims")
        assert default == "zzz.snowflake_nextval()", default
        srv.sql("INSERT INTO public.adm (note) VALUES ('by a superuser')", dbname="claims")
        refreshes(srv, "claims", WATCHED_REFRESHES)
        assert srv.sql("SELECT * FROM public.trap_log", dbname="claims") == []
        assert srv.one("SELECT count(*) FROM public.snowflake_claims", dbname="claims") == 0
        assert not superuser(srv, "mallory")
        assert problem(srv) is None


def test_a_schema_swapped_during_the_rewrite_cannot_plant_the_default():
    """The default is written as schema-qualified text and parsed again by
    ALTER TABLE, after the rewrite. The owner of the functions' schema
    swaps it during the rewrite (from a CHECK of their table): the default
    would call their function. The conversion must notice and undo all."""
    with servers() as made:
        srv = claims_server(made, "sec_swap")
        srv.sql("CREATE ROLE mallory LOGIN")
        srv.sql("CREATE DATABASE claims OWNER mallory")
        srv.sql(traps("mallory"), dbname="claims", user="mallory")
        srv.sql("""
            CREATE SCHEMA zzz;
            CREATE EXTENSION snowflake_id SCHEMA zzz;
            CREATE FUNCTION public.sneaky(bigint) RETURNS boolean LANGUAGE plpgsql AS $f$
            BEGIN
                IF EXISTS (SELECT 1 FROM public.armed)
                   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'zzz_real') THEN
                    ALTER SCHEMA zzz RENAME TO zzz_real;
                    CREATE SCHEMA zzz;
                    CREATE FUNCTION zzz.snowflake_nextval() RETURNS bigint LANGUAGE plpgsql AS $g$
                        BEGIN PERFORM public.trap('swapped default'); RETURN zzz_real.snowflake_nextval(); END $g$;
                END IF;
                RETURN true;
            END $f$;
            CREATE TABLE public.armed (on_ boolean);
            CREATE TABLE public.t (id serial PRIMARY KEY CHECK (public.sneaky(id)), note text);
            INSERT INTO public.t (note) VALUES ('old');
            INSERT INTO public.armed VALUES (true);
        """, dbname="claims", user="mallory")
        code, message, _ = srv.error("SELECT zzz.snowflake_convert('public.t')", dbname="claims")
        assert code == "0A000" and "does not call snowflake_id's own snowflake_nextval()" in message, message
        # Undone whole: the column, its default, the schema.
        assert srv.sql("SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
                       " WHERE attrelid = 'public.t'::regclass AND attname = 'id'", dbname="claims") == [("integer",)]
        assert srv.one("SELECT count(*) FROM pg_namespace WHERE nspname = 'zzz_real'", dbname="claims") == 0
        srv.sql("TRUNCATE public.armed; INSERT INTO public.t (note) VALUES ('by a superuser')", dbname="claims")
        assert srv.sql("SELECT * FROM public.trap_log", dbname="claims") == []
        assert not superuser(srv, "mallory")


def test_a_database_lock_held_open_stalls_neither_shutdown_nor_issuance():
    """A rename of the claims database left in a prepared transaction holds
    the database's lock for good: the claims worker, sent away and back,
    waits for it. IDs are still issued, and a fast shutdown still ends."""
    with servers() as made:
        srv = claims_server(made, "sec_held", max_prepared_transactions=2)
        srv.sql("CREATE ROLE mallory LOGIN CREATEDB")
        srv.sql("CREATE DATABASE claims OWNER mallory")
        srv.sql("CREATE EXTENSION snowflake_id", dbname="claims")
        claims_kept(srv, "claims")
        oid = srv.one("SELECT oid FROM pg_database WHERE datname = 'claims'")
        conn = srv.connect(user="mallory", autocommit=False)
        conn.cursor().execute("ALTER DATABASE claims RENAME TO claims_x")
        conn.cursor().execute("PREPARE TRANSACTION 'hold'")
        conn.close()
        # The worker is back from being sent away, and waits for the lock
        # the prepared transaction holds on the database.
        # (Only the worker connects to it; waiting inside its connection,
        # it is not in pg_stat_activity yet.)
        srv.wait_for("SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'object'"
                     f" AND classid = 'pg_database'::regclass AND objid = {oid} AND NOT granted",
                     what="the claims worker never came back to wait for the database's lock")
        assert srv.one("SELECT snowflake_nextval() > 0") is True
        watch = Stopwatch()
        srv.stop()
        assert not os.path.exists(os.path.join(srv.data, "postmaster.pid")), \
            f"the fast shutdown did not end in {watch.seconds():.0f} s"
        srv.start()
        srv.sql("ROLLBACK PREPARED 'hold'")


def test_overloads_planted_by_any_role_where_public_is_open_never_run_as_the_worker():
    """The default before PostgreSQL 15, kept by clusters upgraded since."""
    with servers() as made:
        srv = claims_server(made, "sec_public", db="postgres")
        srv.sql("GRANT CREATE ON SCHEMA public TO PUBLIC")
        srv.sql("CREATE ROLE eve LOGIN")
        srv.sql(traps("eve"), user="eve")
        claims_kept(srv, "postgres")
        refreshes(srv, "postgres", WATCHED_REFRESHES)
        assert srv.sql("SELECT * FROM public.trap_log") == []
        assert not superuser(srv, "eve")


def test_snowflake_convert_by_a_superuser_runs_no_one_elses_code_with_its_rights():
    with servers() as made:
        srv = started(made, "sec_convert")
        srv.sql("CREATE ROLE mallory LOGIN")
        srv.sql("CREATE ROLE app LOGIN")
        srv.sql("CREATE DATABASE shop OWNER mallory")
        srv.sql("CREATE EXTENSION snowflake_id", dbname="shop")
        srv.sql("GRANT CREATE ON SCHEMA public TO app", dbname="shop")
        srv.sql(traps("mallory"), dbname="shop", user="mallory")
        # The table owner's own code, which the type change runs: it must
        # run as the table owner, not as whoever converts.
        srv.sql("""
            CREATE FUNCTION public.chk(bigint) RETURNS boolean LANGUAGE plpgsql AS $$
                BEGIN PERFORM public.trap('chk, as ' || current_user); RETURN true; END $$;
            CREATE TABLE orders (id serial PRIMARY KEY CHECK (public.chk(id::bigint)), note text);
            CREATE TABLE lines (order_id integer REFERENCES orders, n int);
            CREATE VIEW recent AS SELECT id FROM orders;
            INSERT INTO orders (note) SELECT 'x' FROM generate_series(1, 10);
        """, dbname="shop", user="app")
        srv.sql("DELETE FROM public.trap_log", dbname="shop", user="mallory")
        planned = srv.sql("SELECT snowflake_convert('orders', dry_run => true)", dbname="shop")
        assert planned, "the dry run planned nothing"
        done = [r[0] for r in srv.sql("SELECT snowflake_convert('orders')", dbname="shop")]
        assert any("TYPE bigint" in s for s in done), done
        assert srv.one("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                       "WHERE attrelid = 'lines'::regclass AND attname = 'order_id'", dbname="shop") == "bigint"
        ran = srv.sql("SELECT ran_as, what FROM public.trap_log", dbname="shop")
        # The CHECK ran during the rewrite, as its owner; nothing else ran.
        assert ran and all(r == ("app", "chk, as app") for r in ran), ran
        assert not superuser(srv, "mallory") and not superuser(srv, "app")
        assert srv.one("SELECT relowner::regrole::text FROM pg_class WHERE relname = 'recent'", dbname="shop") == "app"


def test_a_table_owner_converts_their_own_table_and_no_one_else_can():
    with servers() as made:
        srv = started(made, "sec_owner_converts")
        srv.sql("CREATE ROLE app LOGIN; CREATE ROLE other LOGIN")
        srv.sql("CREATE EXTENSION snowflake_id")
        srv.sql("GRANT CREATE ON SCHEMA public TO app")
        srv.sql("CREATE TABLE items (id serial PRIMARY KEY)", user="app")
        srv.sql("GRANT ALL ON items TO other", user="app")
        code, message, hint = srv.error("SELECT snowflake_convert('items')", user="other")
        assert code == "42501", (code, message)
        assert "owned by role app" in message and "other" in message, message
        assert "Run it as app" in hint, hint
        assert srv.one("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                       "WHERE attrelid = 'items'::regclass AND attname = 'id'") == "integer"
        srv.sql("SELECT snowflake_convert('items')", user="app")
        assert srv.one("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef "
                       "WHERE adrelid = 'items'::regclass") == "snowflake_nextval()"


def test_a_role_that_may_write_any_table_cannot_forge_or_remove_a_claim():
    with servers() as made:
        srv = claims_server(made, "sec_forge", db="postgres")
        srv.sql("CREATE ROLE writer LOGIN IN ROLE pg_write_all_data, pg_read_all_data")
        srv.sql("CREATE ROLE mallory LOGIN")
        # The claims database's owner, who may set its defaults and owns public there.
        srv.sql("CREATE ROLE dbowner LOGIN; ALTER DATABASE postgres OWNER TO dbowner")
        claims_kept(srv, "postgres")
        me = srv.sql("SELECT system_identifier, timeline, instance, worker_id FROM snowflake_id.snowflake_claims")[0]
        forged = ("INSERT INTO snowflake_id.snowflake_claims VALUES (1, 42, 1, 7, 'forged', now() - interval '1 day', now())")
        for role in ("writer", "mallory", "dbowner"):
            for statement in (forged, "UPDATE snowflake_id.snowflake_claims SET last_seen = now()",
                              "DELETE FROM snowflake_id.snowflake_claims", "TRUNCATE snowflake_id.snowflake_claims"):
                code, message, _ = srv.error(statement, user=role)
                assert code == "42501", (role, statement, code, message)
        with contextlib.closing(srv.connect(user="writer")) as conn, conn.cursor() as cur:
            with pytest.raises(psycopg2.errors.InsufficientPrivilege):
                cur.copy_expert("COPY snowflake_id.snowflake_claims (worker_id, system_identifier, timeline, instance, name, claimed_at, last_seen) FROM STDIN",
                                io.StringIO("1\t42\t1\t7\tforged\t2020-01-01\t2030-01-01\n"))
        code, message, hint = srv.error(forged, user="writer")
        assert message == "snowflake_id.snowflake_claims is written only by the claims worker and by replication", message
        assert "session_replication_role" in hint, hint
        assert srv.sql("SELECT system_identifier, timeline, instance, worker_id FROM snowflake_id.snowflake_claims") == [me]
        srv.sql("SELECT snowflake_nextval()", user="writer")
        srv.sql("SELECT snowflake_nextval()", user="dbowner")
        assert problem(srv) is None


def claim_writes(srv, start, rel):
    """How many rows the WAL since LSN `start` inserts into the claims
    table `rel` (its database's oid, its file node)."""
    end = srv.one("SELECT pg_current_wal_flush_lsn()")
    if not srv.one("SELECT %s::pg_lsn < %s::pg_lsn", (start, end)):
        return 0
    try:
        return srv.one("SELECT count(*) FROM pg_get_wal_records_info(%s, %s) WHERE resource_manager = 'Heap'"
                       " AND record_type LIKE 'INSERT%%' AND block_ref ~ %s",
                       (start, end, f"rel [0-9]+/{rel[0]}/{rel[1]}([^0-9]|$)"))
    except psycopg2.errors.InternalError_ as e:
        # The WAL flushed so far ends inside the first record after `start`
        # (one that crosses a page the flush has not reached): none whole yet.
        if "could not find a valid record" not in str(e):
            raise
        return 0


def test_a_database_owner_cannot_turn_claims_off_with_database_settings():
    with servers() as made:
        srv = claims_server(made, "sec_readonly")
        srv.sql("CREATE ROLE mallory LOGIN")
        srv.sql("CREATE DATABASE claims OWNER mallory")
        srv.sql("CREATE EXTENSION snowflake_id", dbname="claims")
        claims_kept(srv, "claims")
        # Where its claim's rows go, to see the worker write them in the WAL
        # while no one can connect to the database to look.
        srv.sql("CREATE EXTENSION pg_walinspect")
        rel = (srv.one("SELECT oid FROM pg_database WHERE datname = 'claims'"),
               srv.one("SELECT pg_relation_filenode('snowflake_id.snowflake_claims')", dbname="claims"))
        for setting in ("default_transaction_read_only = on", "statement_timeout = 1", "lock_timeout = 1",
                        "idle_in_transaction_session_timeout = 1", "default_transaction_isolation = serializable",
                        "search_path = nowhere"):
            srv.sql(f"ALTER DATABASE claims SET {setting}", user="mallory")
        srv.sql("ALTER DATABASE claims ALLOW_CONNECTIONS false", user="mallory")
        srv.restart()
        restarted = srv.one("SELECT now()")
        start = srv.one("SELECT pg_current_wal_flush_lsn()")
        wait_until(lambda: claim_writes(srv, start, rel) >= WATCHED_REFRESHES,
                   lambda: f"the claim was not written {WATCHED_REFRESHES} times: {problem(srv)}")
        # Kept while no one else could even connect...
        assert problem(srv) is None
        srv.sql("ALTER DATABASE claims ALLOW_CONNECTIONS true")
        assert own_claim_seen(srv, "claims") > restarted
        # ... and under the owner's settings, which are in force for everyone else.
        assert srv.one("SHOW default_transaction_read_only", dbname="claims", options=OWN_TIMEOUTS) == "on"
        claims_kept(srv, "claims")
        assert problem(srv) is None
        # IDs are issued in the read-only database too (a read-only
        # transaction may take one: no table is written), and elsewhere.
        # (The 1 ms statement_timeout would cancel any query there.)
        srv.sql("ALTER DATABASE claims RESET statement_timeout")
        ids = [srv.one("SELECT public.snowflake_nextval()", dbname=db) for db in ("claims", "postgres", "claims")]
        assert ids == sorted(set(ids)), ids


def test_settings_a_table_owners_code_changes_reach_neither_later_steps_nor_the_caller():
    """A CHECK that sets search_path (even with a plain SET, which outlives
    a function's own SET clause) to a schema with a planted operator: the
    view another role owns is made again calling the built-in, and the
    converting superuser's session keeps its own settings."""
    # 19 refuses standard_conforming_strings = off to everyone: there, a
    # setting that still changes how the session reads text stands in.
    leaked, planted, kept = (("standard_conforming_strings", "off", "on") if pg_major() < 19
                             else ("datestyle", "SQL, DMY", "ISO, MDY"))
    with servers() as made:
        srv = started(made, "sec_guc")
        srv.sql("CREATE ROLE mallory LOGIN; CREATE ROLE alice LOGIN")
        srv.sql("CREATE EXTENSION snowflake_id")
        srv.sql("CREATE SCHEMA m AUTHORIZATION mallory; CREATE SCHEMA a AUTHORIZATION alice")
        srv.sql("GRANT USAGE ON SCHEMA m TO PUBLIC")
        srv.sql(traps("mallory").replace("public.", "m."), user="mallory")
        srv.sql("""
            CREATE FUNCTION m.chk(bigint) RETURNS boolean LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_catalog.set_config('search_path', 'm, pg_catalog', false);
                PERFORM pg_catalog.set_config('%s', '%s', false);
                RETURN true;
            END $$;
            CREATE FUNCTION m.trap_int_eq(integer, integer) RETURNS boolean LANGUAGE plpgsql AS $$
                BEGIN PERFORM m.trap('=(integer, integer)'); RETURN $1 OPERATOR(pg_catalog.=) $2; END $$;
            CREATE OPERATOR m.= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = m.trap_int_eq);
            CREATE FUNCTION m.trap_big_eq(bigint, integer) RETURNS boolean LANGUAGE plpgsql AS $$
                BEGIN PERFORM m.trap('=(bigint, integer)'); RETURN $1 OPERATOR(pg_catalog.=) $2; END $$;
            CREATE OPERATOR m.= (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = m.trap_big_eq);
            CREATE TABLE m.orders (id serial PRIMARY KEY CHECK (m.chk(id::bigint)));
            INSERT INTO m.orders DEFAULT VALUES;
            GRANT SELECT ON m.orders TO alice;
        """.replace("'%s', '%s'", f"'{leaked}', '{planted}'"), user="mallory")
        srv.sql("CREATE VIEW a.first AS SELECT id FROM m.orders WHERE id = 1", user="alice")
        srv.sql("DELETE FROM m.trap_log", user="mallory")
        after = srv.sql("SELECT snowflake_convert('m.orders'); SHOW search_path")
        assert after == [("\"$user\", public",)], after
        with contextlib.closing(srv.connect()) as conn, conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM snowflake_convert('m.orders')")
            cur.execute(f"SHOW {leaked}")
            assert cur.fetchone() == (kept,)
        # The view calls the built-in = as before, nothing of m's.
        assert srv.sql("""SELECT d.refobjid::regoperator::text FROM pg_rewrite w JOIN pg_depend d ON d.objid = w.oid
                          WHERE w.ev_class = 'a.first'::regclass AND d.refclassid = 'pg_operator'::regclass
                            AND (SELECT oprnamespace FROM pg_operator WHERE oid = d.refobjid) <> 'pg_catalog'::regnamespace""") == []
        srv.sql("SELECT * FROM a.first")
        assert srv.sql("SELECT * FROM m.trap_log") == []
        assert not superuser(srv, "mallory")


def test_a_view_made_again_that_would_call_a_planted_overload_is_refused():
    with servers() as made:
        srv = started(made, "sec_overload", extension=True)
        srv.sql("""CREATE FUNCTION public.label(integer) RETURNS text LANGUAGE sql AS 'SELECT $1::text';
            CREATE TABLE t (id serial PRIMARY KEY); CREATE VIEW v AS SELECT id, public.label(id) FROM t;
            CREATE FUNCTION public.label(bigint) RETURNS text LANGUAGE sql AS 'SELECT ''planted''';""")
        code, message, hint = srv.error("SELECT snowflake_convert('t')")
        assert code == "0A000" and "would call public.label(bigint)" in message, (code, message)
        assert "create it again" in hint, hint
        assert srv.one("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                       "WHERE attrelid = 't'::regclass AND attname = 'id'") == "integer"


def test_a_constraint_or_index_rebuilt_with_a_planted_overload_is_refused():
    with servers() as made:
        srv = started(made, "sec_rebuilt", extension=True)
        for what, table in (("constraint", "CREATE TABLE t (id serial PRIMARY KEY CHECK (public.valid(id)))"),
                            ("index", "CREATE TABLE t (id serial PRIMARY KEY); CREATE INDEX t_f ON t (public.f(id))")):
            srv.sql("DROP TABLE IF EXISTS t; DROP FUNCTION IF EXISTS public.valid(bigint), public.f(bigint);"
                    "CREATE OR REPLACE FUNCTION public.valid(integer) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';"
                    "CREATE OR REPLACE FUNCTION public.f(integer) RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT $1';")
            srv.sql(table)
            srv.sql("CREATE FUNCTION public.valid(bigint) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';"
                    "CREATE FUNCTION public.f(bigint) RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT 0'")
            code, message, _ = srv.error("SELECT snowflake_convert('t')")
            assert code == "0A000" and message.startswith(what) and "(bigint)" in message, (what, code, message)
            assert srv.one("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                           "WHERE attrelid = 't'::regclass AND attname = 'id'") == "integer"


def test_a_partition_owned_by_another_role_is_refused():
    with servers() as made:
        srv = started(made, "sec_partition")
        srv.sql("CREATE EXTENSION snowflake_id; CREATE ROLE bob LOGIN; CREATE ROLE eve LOGIN; GRANT eve TO bob")
        srv.sql("GRANT CREATE ON SCHEMA public TO bob, eve")
        srv.sql("CREATE TABLE items (id serial PRIMARY KEY) PARTITION BY HASH (id)", user="bob")
        srv.sql("CREATE TABLE items_0 PARTITION OF items FOR VALUES WITH (MODULUS 1, REMAINDER 0)", user="bob")
        srv.sql("ALTER TABLE items_0 OWNER TO eve", user="bob")
        code, message, hint = srv.error("SELECT snowflake_convert('items')")
        assert code == "42501" and "public.items_0 is owned by role eve, not by bob" in message, (code, message)
        assert "ALTER TABLE public.items_0 OWNER TO bob" in hint, hint


def test_only_the_tables_owner_applies_replicated_claims():
    """session_replication_role can be granted (PostgreSQL 15+), and a
    subscription can run as its own non-superuser owner (16+): neither may
    write claims."""
    with servers() as made:
        srv = claims_server(made, "sec_replica", db="postgres")
        srv.sql("CREATE ROLE writer LOGIN IN ROLE pg_write_all_data")
        srv.sql("GRANT SET ON PARAMETER session_replication_role TO writer")
        claims_kept(srv, "postgres")
        code, message, _ = srv.error("SET session_replication_role = replica; "
                                     "INSERT INTO snowflake_id.snowflake_claims VALUES (1, 42, 1, 7, 'forged', now(), now())",
                                     user="writer")
        assert code == "42501", (code, message)
        assert srv.one("SELECT count(*) FROM snowflake_id.snowflake_claims") == 1


def test_a_database_owner_cannot_take_the_workers_identity_or_make_its_errors_fatal():
    with servers() as made:
        srv = claims_server(made, "sec_identity")
        srv.sql("CREATE ROLE mallory LOGIN CREATEDB")
        srv.sql("CREATE DATABASE claims OWNER mallory")
        srv.sql("CREATE EXTENSION snowflake_id", dbname="claims")
        claims_kept(srv, "claims")
        for setting in ("role = 'pg_monitor'", "session_authorization = 'mallory'", "exit_on_error = on"):
            srv.sql(f"ALTER DATABASE claims SET {setting}", user="mallory")
        srv.restart()
        restarted = srv.one("SELECT now()")
        claims_kept(srv, "claims")
        assert own_claim_seen(srv, "claims") > restarted
        assert problem(srv) is None, problem(srv)
        # An error in the worker (a lock it waits for past its lock_timeout)
        # is caught and reported, never its end (exit_on_error is off).
        pid = srv.one("SELECT pid FROM pg_stat_activity WHERE backend_type = 'snowflake_id claims'")
        holder = srv.connect(dbname="claims", autocommit=False, options=OWN_TIMEOUTS)
        # This session gets the owner's defaults too: set its own.
        holder.cursor().execute("SET exit_on_error = off; RESET SESSION AUTHORIZATION; SET ROLE NONE; "
                                "LOCK TABLE snowflake_id.snowflake_claims IN ACCESS EXCLUSIVE MODE")
        srv.wait_for("SELECT problem LIKE '%lock timeout%' FROM snowflake_id.snowflake_status")
        holder.rollback()
        holder.close()
        claims_kept(srv, "claims")
        assert srv.one("SELECT pid FROM pg_stat_activity WHERE backend_type = 'snowflake_id claims'") == pid
        # Made a template, it is left alone (and looked at again); a role
        # that may not send the worker away copies it.
        srv.sql("ALTER DATABASE claims IS_TEMPLATE true", user="mallory")
        srv.wait_for("SELECT problem LIKE '%names the template database \"claims\"%' FROM snowflake_id.snowflake_status")
        srv.sql("CREATE ROLE copier LOGIN CREATEDB")
        srv.sql("CREATE DATABASE copy TEMPLATE claims", user="copier")
        srv.sql("ALTER DATABASE claims IS_TEMPLATE false", user="mallory")
        claims_kept(srv, "claims")
        srv.wait_for("SELECT problem IS NULL FROM snowflake_id.snowflake_status", timeout=30)


def test_whoever_holds_the_claims_table_locked_is_named():
    with servers() as made:
        srv = claims_server(made, "sec_lock", db="postgres")
        srv.sql("CREATE ROLE writer LOGIN IN ROLE pg_write_all_data")
        claims_kept(srv, "postgres")
        holder = srv.connect(user="writer", autocommit=False)
        holder.cursor().execute("LOCK TABLE snowflake_id.snowflake_claims IN ACCESS EXCLUSIVE MODE")
        try:
            srv.wait_for("SELECT problem LIKE '%the table is held by process % (role writer%' FROM snowflake_id.snowflake_status")
        finally:
            holder.rollback()
            holder.close()
        srv.wait_for("SELECT problem IS NULL FROM snowflake_id.snowflake_status")
