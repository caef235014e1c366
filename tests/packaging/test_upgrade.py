"""ALTER EXTENSION snowflake_id UPDATE from 0.1.0: generation continues
above the IDs issued under 0.1.0, and what 0.2.0 adds works."""

from harness import install_0_1_0_script, servers, started


def test_update_from_0_1_0_keeps_ids_increasing_and_adds_the_new_surface():
    install_0_1_0_script()
    with servers() as made:
        srv = started(made, "upgrade")
        srv.sql("CREATE EXTENSION snowflake_id VERSION '0.1.0'")
        srv.sql("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), n int)")
        # IDs 0.1.0 issued (this library does not issue under a 0.1.0
        # catalog: see below), the newest a second ahead of the clock.
        srv.sql("INSERT INTO t (id, n) SELECT snowflake_from_timestamp(now() + interval '1 s') + g, g"
                " FROM generate_series(1, 1000) g")
        # Until the update, this database cannot tell whether its data came
        # from another cluster: IDs are refused, saying what to run.
        code, message, hint = srv.error("SELECT snowflake_nextval()")
        assert code == "55000" and "is not updated" in message, message
        assert hint == "Run ALTER EXTENSION snowflake_id UPDATE; in this database."
        assert srv.one("SELECT count(*) FROM information_schema.columns WHERE table_name = 'snowflake_status' AND column_name = 'mark_source'") == 0
        # The upgrade procedure: the new library is in place, restart, update.
        srv.stop()
        srv.start()
        srv.sql("ALTER EXTENSION snowflake_id UPDATE")
        assert srv.one("SELECT extversion FROM pg_extension WHERE extname = 'snowflake_id'") == "0.2.0"
        top = srv.one("SELECT max(id) FROM t")
        # The update leaves the record empty: the first ID floors above the
        # IDs already there.
        srv.sql("INSERT INTO t (n) SELECT g FROM generate_series(1, 1000) g")
        assert srv.one("SELECT count(*) FROM snowflake_id.snowflake_floors WHERE floor IS NOT NULL") == 1
        assert srv.one("SELECT min(id) FROM t WHERE id > %s", (top,)) is not None
        assert srv.one("SELECT count(*) FROM t WHERE id > %s", (top,)) == 1000
        assert srv.one("SELECT mark_source FROM snowflake_id.snowflake_status") == "written here"
        assert "every new ID is above" in srv.one("SELECT snowflake_resume_above(max(id)) FROM t")
        assert srv.one("SELECT has_function_privilege('public', 'snowflake_resume_above(bigint)', 'EXECUTE')") is False
        # An updated extension is the same as a fresh install: functions, their
        # attributes and who may use them, and the status view's privileges.
        srv.sql("CREATE DATABASE fresh")
        fresh = srv.connect(dbname="fresh")
        fresh.cursor().execute("CREATE EXTENSION snowflake_id")
        fresh.close()
        # Functions with their whole signature (OUT columns included), and
        # the view with its columns.
        catalog = """
            SELECT p.oid::regprocedure::text, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
                   provolatile::text, proisstrict, proparallel::text, coalesce(proacl::text, ''),
                   coalesce(proconfig::text, '')
            FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
            JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake_id'
            UNION ALL SELECT c.oid::regclass::text, relkind::text,
                             (SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod)
                                                || CASE WHEN attnotnull THEN ' NOT NULL' ELSE '' END, ', '
                                                ORDER BY attnum)
                              FROM pg_attribute WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped),
                             (SELECT string_agg(pg_get_constraintdef(k.oid), '; ' ORDER BY 1)
                              FROM pg_constraint k WHERE k.conrelid = c.oid),
                             false, '', coalesce(relacl::text, ''),
                             -- its triggers, and when they fire
                             coalesce((SELECT string_agg(t.tgenabled::text || ' ' || pg_get_triggerdef(t.oid), '; '
                                                         ORDER BY t.tgname)
                                       FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal), '')
            FROM pg_class c JOIN pg_depend d ON d.objid = c.oid AND d.classid = 'pg_class'::regclass AND d.deptype = 'e'
            JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake_id'
            -- the extension's own schema, who owns it and who may use it
            UNION ALL SELECT 'schema ' || nspname, pg_get_userbyid(nspowner)::text, '', '', e.extrelocatable, '',
                             coalesce(nspacl::text, ''), ''
            FROM pg_namespace n JOIN pg_depend d ON d.objid = n.oid AND d.classid = 'pg_namespace'::regclass AND d.deptype = 'e'
            JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake_id'
            ORDER BY 1"""
        updated = srv.sql(catalog)
        with srv.connect(dbname="fresh") as conn, conn.cursor() as cur:
            cur.execute(catalog)
            assert updated == cur.fetchall()
        assert any("pg_read_all_stats" in row[6] for row in updated), updated
        # The extension's table and view are out of the application's schema.
        assert "schema snowflake_id" in {row[0] for row in updated}, updated
        assert dict((r[0], r[4]) for r in updated)["schema snowflake_id"] is False  # not relocatable
        assert "pg_read_all_stats=U/" in dict((r[0], r[6]) for r in updated)["schema snowflake_id"]
        assert srv.one("SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace"
                       " AND relname LIKE 'snowflake%'") == 0
        assert {row[0] for row in updated} >= {"snowflake_id.snowflake_status", "snowflake_id.snowflake_claims"}, updated
        assert "PRIMARY KEY (system_identifier, timeline, instance, worker_id)" in dict((r[0], r[3]) for r in updated)["snowflake_id.snowflake_claims"]
        assert "A CREATE TRIGGER snowflake_claims_guard BEFORE" in dict((r[0], r[7]) for r in updated)["snowflake_id.snowflake_claims"]
        # snowflake_convert pins its search path and turns row security off.
        assert dict((r[0], r[7]) for r in updated)["snowflake_convert(regclass,name,boolean,boolean,boolean)"] \
            == "{\"search_path=pg_catalog, pg_temp\",row_security=off}"


def test_a_schema_named_snowflake_id_is_said_with_a_hint_that_works():
    """The habit CREATE SCHEMA x; CREATE EXTENSION x SCHEMA x, and a schema of
    the application's of that name: the install and the update from 0.1.0
    stop with 42P06 and a HINT whose statements, run as written by the
    application's role, get through."""
    install_0_1_0_script()
    with servers() as made:
        srv = started(made, "schema-clash")
        srv.sql("CREATE ROLE app LOGIN")
        for db, version in (("fresh_into", None), ("fresh_beside", None), ("update_into", "0.1.0"),
                            ("update_beside", "0.1.0")):
            srv.sql(f"CREATE DATABASE {db} OWNER app")
            app = {"dbname": db, "user": "app"}
            srv.sql("CREATE SCHEMA snowflake_id", **app)
            target = "snowflake_id" if db.endswith("_into") else "public"
            if version:
                srv.sql(f"CREATE EXTENSION snowflake_id VERSION '{version}' SCHEMA {target}", **app)
                srv.sql(f"CREATE TABLE t (id bigint PRIMARY KEY DEFAULT {target}.snowflake_nextval())", **app)
                srv.sql("INSERT INTO t VALUES (1)", **app)
                statement = "ALTER EXTENSION snowflake_id UPDATE"
            else:
                statement = f"CREATE EXTENSION snowflake_id SCHEMA {target}"
            code, message, hint = srv.error(statement, **app)
            assert code == "42P06" and 'schema "snowflake_id" already exists' in message, (db, message)
            assert ": ALTER SCHEMA snowflake_id RENAME TO " in hint, (db, hint)
            fix = hint[hint.index("ALTER SCHEMA snowflake_id RENAME TO "):]
            srv.sql(fix, **app)
            assert srv.one("SELECT extversion FROM pg_extension WHERE extname = 'snowflake_id'", dbname=db) == "0.2.0"
            assert srv.one("SELECT count(*) FROM snowflake_id.snowflake_status", dbname=db) == 1
            if version:
                # The column default follows its function into the renamed schema.
                srv.sql("INSERT INTO t DEFAULT VALUES", **app)
                assert srv.one("SELECT count(*) FROM t", dbname=db) == 2
