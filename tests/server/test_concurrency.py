"""Many sessions at once on one server: no duplicate, every session's IDs increasing."""

import random
import threading

from harness import Stopwatch, server

SESSIONS = 8
PER_SESSION = 100_000


def take(srv, seed, out, errors):
    """Takes at least PER_SESSION IDs, mixing single calls, per-row calls and batches."""
    rnd = random.Random(seed)
    try:
        conn = srv.connect()
        cur = conn.cursor()
        ids = []
        while len(ids) < PER_SESSION:
            kind = rnd.choice(["single", "rows", "batch", "batch", "uuid"])
            if kind == "single":
                for _ in range(rnd.randint(1, 50)):
                    cur.execute("SELECT snowflake_nextval()")
                    ids.append(cur.fetchone()[0])
            elif kind == "rows":
                cur.execute("SELECT snowflake_nextval() FROM generate_series(1, %s)", (rnd.randint(1, 3000),))
                ids.extend(r[0] for r in cur.fetchall())
            elif kind == "uuid":
                # UUIDs come from the same generator: their IDs join the
                # others, and the UUIDs themselves must increase as the IDs.
                cur.execute("SELECT u::text, snowflake_uuid_to_id(u) FROM"
                            " (SELECT snowflake_uuidv7() u FROM generate_series(1, %s)) s", (rnd.randint(1, 3000),))
                rows = cur.fetchall()
                uuids = [r[0] for r in rows]
                assert all(a < b for a, b in zip(uuids, uuids[1:])), "UUIDs of one statement out of order"
                ids.extend(r[1] for r in rows)
            else:
                cur.execute("SELECT snowflake_nextval_batch(%s)", (rnd.randint(1, 5000),))
                ids.extend(r[0] for r in cur.fetchall())
        out[seed] = ids
        conn.close()
    except Exception as e:  # reported by the main thread
        errors.append(e)


def test_eight_sessions_never_collide_and_each_sees_its_ids_increase():
    with server("concurrency") as srv:
        out, errors = {}, []
        threads = [threading.Thread(target=take, args=(srv, s, out, errors)) for s in range(SESSIONS)]
        # The server's clock around the load: every ID's time lies between.
        clock_before = srv.one("SELECT clock_timestamp()")
        watch = Stopwatch()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = watch.seconds()
        clock_after = srv.one("SELECT clock_timestamp()")
        assert not errors, errors
        total = sum(len(ids) for ids in out.values())
        everything = set()
        for seed, ids in out.items():
            assert len(ids) >= PER_SESSION
            bad = next((i for i in range(1, len(ids)) if ids[i] <= ids[i - 1]), None)
            assert bad is None, f"session {seed}: {ids[bad - 1]} then {ids[bad]}"
            everything.update(ids)
        assert len(everything) == total, f"{total - len(everything)} duplicate IDs"
        # Every ID carries this server's worker id and decodes to a time of
        # the load: from the tick the clock was in when it began to at most
        # max_lead (10 s, the default) past the clock when it ended.
        sample = random.Random(0).sample(sorted(everything), 1000)
        rows = srv.sql(
            "SELECT bool_and(worker_id = 1),"
            " bool_and(ts >= date_trunc('milliseconds', %s::timestamptz) AND ts <= %s::timestamptz + interval '10 s'),"
            " min(ts), max(ts)"
            " FROM unnest(%s::bigint[]) i, snowflake_decode(i)",
            (clock_before, clock_after, sample),
        )
        assert rows[0][0] is True
        assert rows[0][1] is True, (clock_before, clock_after, rows)
        status = srv.sql("SELECT ids_issued, errors FROM snowflake_id.snowflake_status")[0]
        # This server issued these IDs and no others.
        assert status == (total, 0), status
        print(f"{total} IDs from {SESSIONS} sessions in {elapsed:.1f} s, all unique and per-session increasing")
