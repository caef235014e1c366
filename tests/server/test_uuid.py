"""snowflake_uuidv7(), the mappings between IDs and UUIDs, UUID time bounds,
and snowflake_lastval(), on a real server, as an application role.

The UUID's fields are read here from its bytes (RFC 9562, section 5.7:
48-bit Unix milliseconds, version 7, 12 bits, variant 0b10, 62 bits), not
through the extension, so that a mapping wrong in both directions alike
cannot pass.
"""

import threading
import uuid

from harness import application_role, server, wait_until

SESSIONS = 4
PER_SESSION = 20_000
# The default layout: 2025-01-01 epoch, 1 ms ticks, 10 worker and 12 sequence bits.
EPOCH_MS = 1_735_689_600_000
LOW_BITS = 22


def fields(text):
    """(unix_ms, version, variant, 74 bits of rand_a | rand_b) of a UUID."""
    v = uuid.UUID(text).int
    rand = (((v >> 64) & 0xFFF) << 62) | (v & ((1 << 62) - 1))
    return v >> 80, (v >> 76) & 0xF, (v >> 62) & 0b11, rand


def id_of(text):
    """The ID a UUID of the default layout holds, by the bits alone."""
    ms, _, _, rand = fields(text)
    return ((ms - EPOCH_MS) << LOW_BITS) | (rand >> (74 - LOW_BITS))


def draw(srv, out, errors, key):
    try:
        conn = srv.connect(dbname="appdb", user="app")
        cur = conn.cursor()
        got = []
        while len(got) < PER_SESSION:
            cur.execute("SELECT clock_timestamp(), snowflake_uuidv7()::text, clock_timestamp() FROM generate_series(1, 500)")
            got.extend(cur.fetchall())
            cur.execute("SELECT snowflake_uuidv7()::text")
            got.append((None, cur.fetchone()[0], None))
        out[key] = got
    except Exception as e:  # reported by the main thread
        errors.append(e)


def test_concurrent_sessions_draw_distinct_increasing_version_7_uuids():
    with server("uuid-concurrent") as srv:
        application_role(srv)
        out, errors = {}, []
        threads = [threading.Thread(target=draw, args=(srv, out, errors, k)) for k in range(SESSIONS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        every = []
        for k, got in out.items():
            texts = [u for _, u, _ in got]
            # Each session's UUIDs strictly increase, compared as Postgres
            # compares uuid values (bytes, which the text's order is).
            bad = next((i for i in range(1, len(texts)) if texts[i] <= texts[i - 1]), None)
            assert bad is None, f"session {k}: {texts[bad - 1]} then {texts[bad]}"
            for before, u, after in got:
                ms, version, variant, _ = fields(u)
                assert (version, variant) == (7, 0b10), u
                if before is not None:
                    # The time field is the clock at the draw (1 ms ticks).
                    assert before.timestamp() * 1000 - 1 <= ms <= after.timestamp() * 1000 + 1, (before, u, after)
            every.extend(texts)
        assert len(set(every)) == len(every), f"{len(every) - len(set(every))} UUIDs drawn twice"
        # Across sessions the UUIDs order exactly as their IDs, which carry
        # this server's worker id (1) and are distinct.
        ids = [id_of(u) for u in every]
        assert len(set(ids)) == len(ids)
        assert sorted(every) == [u for _, u in sorted(zip(ids, every))]
        assert {(i >> 12) & 1023 for i in ids} == {1}
        # Both mappings agree with the bits, in SQL, over a sample.
        sample = every[:: len(every) // 500]
        rows = srv.sql(
            "SELECT u::text, snowflake_uuid_to_id(u), snowflake_id_to_uuid(snowflake_uuid_to_id(u))::text,"
            " snowflake_uuid_to_id(snowflake_id_to_uuid(snowflake_uuid_to_id(u))),"
            " snowflake_id_to_uuid(snowflake_uuid_to_id(u), 'snowflake_id') = snowflake_id_to_uuid(snowflake_uuid_to_id(u))"
            " FROM unnest(%s::uuid[]) u",
            (sample,),
            dbname="appdb",
            user="app",
        )
        for u, i, back, again, same in rows:
            assert i == id_of(u)
            assert again == i and same
            # The deterministic UUID of an ID is the drawn one with its
            # random bits zero: same time, same ID bits, not above it.
            assert fields(back)[:3] == fields(u)[:3] and back <= u
            # (Below the ID's 22 bits, 16 check it; the 36 random ones are zero.)
            assert fields(back)[3] == (fields(u)[3] >> 36) << 36


def test_uuid_key_with_the_default_decodes_and_counts_a_time_range_by_index():
    with server("uuid-table") as srv:
        env = application_role(srv)
        assert env["PGUSER"] == "app"
        app = srv.connect(dbname="appdb", user="app")
        cur = app.cursor()
        cur.execute("CREATE TABLE orders (id uuid PRIMARY KEY DEFAULT snowflake_uuidv7(), n int)")
        cur.execute("SELECT clock_timestamp()")
        start = cur.fetchone()[0]
        cur.execute("INSERT INTO orders (n) SELECT g FROM generate_series(1, 3000) g")
        # A tick of its own between the two inserts: the bound is a tick's,
        # and rows of the first must not share it. Waited for on the
        # server's clock: past the tick of the first insert's last row.
        cur.execute("SELECT snowflake_timestamp(snowflake_uuid_to_id(id)) + interval '1 ms'"
                    " FROM orders ORDER BY id DESC LIMIT 1")
        tick_after = cur.fetchone()[0]

        def clock_past_the_first_insert():
            cur.execute("SELECT clock_timestamp()")
            now = cur.fetchone()[0]
            return now if now >= tick_after else None

        middle = wait_until(clock_past_the_first_insert, "the server's clock never passed the first insert's tick")
        # (Rows of the second insert are at middle's tick or later: the clock
        # only moves on, and IDs never go below it.)
        cur.execute("INSERT INTO orders (n) SELECT g FROM generate_series(3001, 5000) g RETURNING id")
        later = [r[0] for r in cur.fetchall()]
        cur.execute("ANALYZE orders")
        # Rows in insertion order are rows in key order.
        cur.execute("SELECT count(*) FROM (SELECT n, lag(n) OVER (ORDER BY id) AS before FROM orders) s WHERE n < before")
        assert cur.fetchone()[0] == 0
        # The ID inside decodes as the bigint form does: this server's worker
        # id, and the time of the first insert (on the server's clock).
        cur.execute(
            "SELECT (d).worker_id, (d).ts >= date_trunc('milliseconds', %s::timestamptz) AND (d).ts < %s "
            "FROM (SELECT snowflake_decode(snowflake_uuid_to_id(id)) d FROM orders ORDER BY id LIMIT 1) s",
            (start, middle),
        )
        assert cur.fetchone() == (1, True)
        # A time range on the uuid key: exact, and by the index.
        q = "SELECT count(*) FROM orders WHERE id >= snowflake_uuid_from_timestamp(%s)"
        cur.execute(q, (middle,))
        assert cur.fetchone()[0] == len(later)
        cur.execute("SET enable_seqscan = off")
        cur.execute("EXPLAIN " + q, (middle,))
        plan = "\n".join(r[0] for r in cur.fetchall())
        assert "orders_pkey" in plan, plan
        # The bound of the tick is below every UUID of it and above the tick before.
        cur.execute(
            "SELECT snowflake_uuid_from_timestamp(snowflake_timestamp(snowflake_uuid_to_id(%s)))"
            " <= %s::uuid", (later[0], later[0]))
        assert cur.fetchone()[0]


def test_foreign_uuids_and_out_of_range_ids_are_refused_with_the_reason():
    with server("uuid-refusals") as srv:
        application_role(srv)
        code, msg, hint = srv.error("SELECT snowflake_uuid_to_id(gen_random_uuid())", dbname="appdb", user="app")
        assert code == "22023" and "is not a version 7 UUID" in msg, (code, msg)
        assert "snowflake_uuidv7()" in hint, hint
        # A version 7 UUID from before the layout's epoch (2024-01-01).
        code, msg, _ = srv.error(
            "SELECT snowflake_uuid_to_id('018cc251-f400-7000-8000-000000000000')", dbname="appdb", user="app")
        assert code == "22023" and "before the layout's epoch" in msg, (code, msg)
        # Under Sonyflake's 10 ms ticks a UUID of another millisecond is none of its.
        code, msg, _ = srv.error(
            "SELECT snowflake_uuid_to_id(snowflake_id_to_uuid(snowflake_nextval()), 'sonyflake')", dbname="appdb", user="app")
        assert code == "22023" and ("10 ms ticks" in msg or "do not check it" in msg), (code, msg)
        code, msg, _ = srv.error("SELECT snowflake_id_to_uuid(-1)", dbname="appdb", user="app")
        assert code == "22003", (code, msg)
        code, msg, hint = srv.error("SELECT snowflake_uuid_from_timestamp('2020-01-01+00')", dbname="appdb", user="app")
        assert code == "22008" and "outside the time range" in msg, (code, msg)
        # UUIDv7s made elsewhere (PostgreSQL 18's uuidv7() where there is one;
        # the same layout built from random bits otherwise) hold no ID of ours:
        # their check bits fail but once in 65,536.
        native = ("uuidv7()" if int(srv.one("SHOW server_version_num")) >= 180000 else
                  "(lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') || '7'"
                  " || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid")
        refused = 0
        conn = srv.connect(dbname="appdb", user="app")
        cur = conn.cursor()
        for _ in range(200):
            try:
                cur.execute(f"SELECT snowflake_uuid_to_id({native})")
            except Exception as e:
                assert e.pgcode == "22023" and "do not check it" in e.diag.message_primary, e
                refused += 1
        assert refused >= 199, f"{200 - refused} of 200 foreign UUIDv7s read as IDs"


def test_named_layouts_round_trip_in_sql_and_uuid_extract_timestamp_agrees():
    with server("uuid-layouts") as srv:
        rows = srv.sql(
            "SELECT name, bool_and(snowflake_uuid_to_id(snowflake_id_to_uuid(i, name), name) = i),"
            " bool_and(uuid_extract_timestamp(snowflake_id_to_uuid(i, name)) = snowflake_timestamp(i, name))"
            " FROM snowflake_layouts(), LATERAL (VALUES (snowflake_from_timestamp(least(now(), ends - interval '1 day'), name)),"
            "   (snowflake_from_timestamp(least(now(), ends - interval '1 day'), name) + 12345), (snowflake_from_timestamp(epoch, name))) v(i)"
            " GROUP BY name ORDER BY name"
            if int(srv.one("SHOW server_version_num")) >= 170000 else
            "SELECT name, bool_and(snowflake_uuid_to_id(snowflake_id_to_uuid(i, name), name) = i), true"
            " FROM snowflake_layouts(), LATERAL (VALUES (snowflake_from_timestamp(least(now(), ends - interval '1 day'), name)),"
            "   (snowflake_from_timestamp(least(now(), ends - interval '1 day'), name) + 12345), (snowflake_from_timestamp(epoch, name))) v(i)"
            " GROUP BY name ORDER BY name")
        assert len(rows) == 8 and all(r[1] and r[2] for r in rows), rows


def test_lastval_per_session_and_its_refusal():
    with server("lastval") as srv:
        application_role(srv)
        code, msg, hint = srv.error("SELECT snowflake_lastval()", dbname="appdb", user="app")
        assert code == "55000" and msg == "snowflake_lastval is not yet defined in this session", (code, msg)
        assert "snowflake_nextval()" in hint, hint
        ca = srv.connect(dbname="appdb", user="app").cursor()
        cb = srv.connect(dbname="appdb", user="app").cursor()
        ca.execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), v text)")
        ca.execute("INSERT INTO t (v) VALUES ('x')")
        ca.execute("SELECT snowflake_lastval() = (SELECT id FROM t)")
        assert ca.fetchone()[0]
        cb.execute("SELECT snowflake_nextval()")
        theirs = cb.fetchone()[0]
        ca.execute("SELECT snowflake_lastval() < %s", (theirs,))
        assert ca.fetchone()[0], "another session's draw changed this one's lastval"
        ca.execute("SELECT max(i) = snowflake_lastval() FROM snowflake_nextval_batch(1000) i")
        assert ca.fetchone()[0]
        ca.execute("SELECT (snowflake_nextval_array(10))[10] = snowflake_lastval()")
        assert ca.fetchone()[0]
        ca.execute("SELECT snowflake_uuid_to_id(snowflake_uuidv7()) = snowflake_lastval()")
        assert ca.fetchone()[0]
        # Kept through a rollback, as lastval() keeps it.
        ca.execute("BEGIN")
        ca.execute("SELECT snowflake_nextval()")
        drawn = ca.fetchone()[0]
        ca.execute("ROLLBACK")
        ca.execute("SELECT snowflake_lastval()")
        assert ca.fetchone()[0] == drawn
        # Forgotten by DISCARD ALL and DISCARD SEQUENCES, as lastval() is (a
        # pooler's reset between clients); not by a DISCARD refused in a block.
        ca.execute("BEGIN")
        try:
            ca.execute("DISCARD ALL")
        except Exception as e:
            assert e.pgcode == "25001", e
        ca.execute("ROLLBACK")
        ca.execute("SELECT snowflake_lastval()")
        assert ca.fetchone()[0] == drawn
        for discard in ("DISCARD SEQUENCES", "DISCARD ALL"):
            ca.execute("SELECT snowflake_nextval()")
            ca.execute(discard)
            try:
                ca.execute("SELECT snowflake_lastval()")
                raise AssertionError(f"lastval survived {discard}")
            except Exception as e:
                assert e.pgcode == "55000", e


def test_lastval_after_security_definer_code_answers_only_a_role_that_may_draw():
    """An ID drawn inside a SECURITY DEFINER function is drawn as its owner. As
    lastval() asks the caller for the privilege on the sequence, snowflake_lastval()
    answers it to a caller that may draw IDs itself (EXECUTE on a generating function)
    or has the owner's privileges; to any other, 42501 with a HINT."""
    with server("lastval-definer") as srv:
        application_role(srv)
        srv.sql("CREATE ROLE clerk LOGIN")
        app = srv.connect(dbname="appdb", user="app").cursor()
        app.execute("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), v text)")
        app.execute(
            "CREATE FUNCTION place_order(v text) RETURNS void SECURITY DEFINER"
            " SET search_path = public, pg_catalog LANGUAGE sql AS $$ INSERT INTO public.orders (v) VALUES ($1) $$")
        app.execute(
            "CREATE FUNCTION place_order_id(v text) RETURNS bigint SECURITY DEFINER"
            " SET search_path = public, pg_catalog LANGUAGE plpgsql"
            " AS $$ BEGIN INSERT INTO public.orders (v) VALUES (v); RETURN snowflake_lastval(); END $$")
        clerk = srv.connect(dbname="appdb", user="clerk").cursor()

        def newest():
            app.execute("SELECT max(id) FROM orders")
            return app.fetchone()[0]

        # Inside the function, its own draw.
        clerk.execute("SELECT place_order_id('a')")
        assert clerk.fetchone()[0] == newest()
        # After it, to a caller that may draw IDs itself (PUBLIC may, by default).
        clerk.execute("SELECT place_order('b')")
        clerk.execute("SELECT snowflake_lastval()")
        assert clerk.fetchone()[0] == newest()
        # A caller that may not draw IDs is not told the ones drawn for it.
        for f in ("snowflake_nextval()", "snowflake_nextval_batch(integer)",
                  "snowflake_nextval_array(integer)", "snowflake_uuidv7()"):
            srv.sql(f"REVOKE EXECUTE ON FUNCTION {f} FROM PUBLIC", dbname="appdb")
            srv.sql(f"GRANT EXECUTE ON FUNCTION {f} TO app", dbname="appdb")
        clerk.execute("SELECT place_order('c')")
        try:
            clerk.execute("SELECT snowflake_lastval()")
            answered = clerk.fetchone()
        except Exception as e:
            answered = None
            assert e.pgcode == "42501", e
            assert "SECURITY DEFINER" in e.diag.message_primary, e.diag.message_primary
            assert "RETURNING" in e.diag.message_hint and "GRANT EXECUTE" in e.diag.message_hint, e.diag.message_hint
        assert answered is None, f"lastval answered {answered} to a role that may not draw IDs"
        # Inside the function it still answers: the owner drew it.
        clerk.execute("SELECT place_order_id('d')")
        assert clerk.fetchone()[0] == newest()
        # A member of the owner's role has its privileges: answered.
        srv.sql("GRANT app TO clerk")
        clerk.execute("SELECT place_order('e')")
        clerk.execute("SELECT snowflake_lastval()")
        assert clerk.fetchone()[0] == newest()
