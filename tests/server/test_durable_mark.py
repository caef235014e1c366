"""The durable mark itself: an idle server writes nothing (no state-file
write, no WAL record), the WAL it adds under load is small, one damaged slot
of the state file never sends generation back, and the operator's floor for
data that arrived without the mark (pg_upgrade, a logical dump) holds.
"""

import os

from harness import TIMEOUT, Deadline, Stopwatch, Window, let_run, server

STATE = "snowflake_id.state"


def writes(srv):
    return srv.sql("SELECT mark_writes, mark_writes_by_callers FROM snowflake_id.snowflake_status")[0]


def test_an_idle_server_writes_nothing_and_load_adds_little_wal():
    with server("idle") as srv:
        srv.sql("CREATE EXTENSION pg_walinspect")
        # Under load: a few small records a second, written by the reserver.
        lsn0 = srv.one("SELECT pg_current_wal_flush_lsn()")
        w0 = writes(srv)
        # Where the mark starts: none is written before the first ID, which
        # the load takes at the server's clock.
        mark0 = srv.one("SELECT coalesce(durable_mark, clock_timestamp()) FROM snowflake_id.snowflake_status")
        watch = Stopwatch()
        window = Window(3)
        batches = 0
        deadline = Deadline("the writer never wrote the mark under load")
        with srv.connect() as conn, conn.cursor() as cur:
            # Three seconds of load, and on until the writer has written the
            # mark ahead of it at least once (a starved writer only makes
            # the load longer).
            while window.open() or batches == 0 or writes(srv)[0] == w0[0]:
                deadline.check()
                cur.execute("SELECT count(*) FROM snowflake_nextval_batch(20000)")
                batches += 1
        seconds = watch.seconds()
        # The writer may still be writing for the load's last IDs: its
        # counters first, then the end of the WAL to read, so that every
        # write counted (logged and flushed before it is counted) is in it,
        # and at most one more.
        w1 = writes(srv)
        lsn1 = srv.one("SELECT pg_current_wal_flush_lsn()")
        records, nbytes = srv.mark_wal(lsn0, lsn1)
        by_writer, by_callers = w1[0] - w0[0], w1[1] - w0[1]
        print(f"under load, {seconds:.1f} s: {records} mark records, {nbytes} bytes of WAL; "
              f"mark writes {by_writer} by the writer, {by_callers} by callers")
        # Each write of the mark is one small record, and nothing else of
        # the mark's is logged. How many writes a second the load causes,
        # and how few of them callers make (a writer starved of CPU leaves
        # them to callers, which is right), are the benchmark's to measure.
        assert by_writer >= 1
        assert by_writer + by_callers <= records <= by_writer + by_callers + 1, (records, by_writer, by_callers)
        # 138 bytes of record (with no past worker ids to list) and the
        # record's header.
        assert nbytes <= 168 * records, (nbytes, records)
        # A few a second of the IDs' time: each write moves the mark a part of a
        # second ahead, so the writes are bounded by how far the mark moved
        # (in the server's time, whatever real time the load took).
        mark1 = srv.one("SELECT durable_mark FROM snowflake_id.snowflake_status")
        moved = (mark1 - mark0).total_seconds()
        assert records <= 4 * moved + 4, f"{records} mark records while the mark moved {moved:.1f} s"
        # The writer's last look at the load: the last mark it wrote for it
        # is about a second ahead of the clock. Once the server's clock has
        # passed it, a checkpoint makes the writer log the mark again at its
        # next round: a round after the load, which has seen the load's
        # last ID, so that no later round finds anything new.
        srv.wait_for("SELECT durable_mark < clock_timestamp() FROM snowflake_id.snowflake_status",
                     what="the server's clock never passed the durable mark")
        relogged = writes(srv)[0]
        srv.sql("CHECKPOINT")
        srv.wait_for(f"SELECT mark_writes > {relogged} FROM snowflake_id.snowflake_status",
                     what="the writer did not log the mark again after a checkpoint")
        # Idle: nothing at all for 10 s (a slow machine only looks at fewer
        # of the writer's rounds; what is asserted holds for any number).
        lsn0, w0 = srv.one("SELECT pg_current_wal_flush_lsn()"), writes(srv)
        mtime0 = os.stat(os.path.join(srv.data, STATE)).st_mtime_ns
        let_run(10)
        lsn1, w1 = srv.one("SELECT pg_current_wal_flush_lsn()"), writes(srv)
        assert srv.mark_wal(lsn0, lsn1) == (0, 0), "an idle server logged its mark"
        assert w1 == w0, "an idle server wrote its mark"
        assert os.stat(os.path.join(srv.data, STATE)).st_mtime_ns == mtime0
        # The first call after the idle spell works; it writes the mark itself.
        assert srv.one("SELECT snowflake_nextval()") > 0
        assert writes(srv)[1] == w0[1] + 1


def test_one_damaged_slot_never_leads_to_a_reissue():
    # js53: one-second ticks of 65,536 IDs, so a burst runs seconds ahead of the
    # clock; resuming from any older mark would reissue part of it.
    conf = {"snowflake_id.layout": "'js53'", "snowflake_id.max_lead": "'60s'"}
    with server("damaged-slot", conf=conf) as srv:
        for slot in (0, 512):
            old = [r[0] for r in srv.sql("SELECT snowflake_nextval_batch(300000)")]
            lead = srv.one("SELECT extract(epoch FROM largest_lead) FROM snowflake_id.snowflake_status")
            assert lead > 2, f"the burst ran only {lead} s ahead"
            # A clean stop: nothing is replayed at start, the file alone decides.
            srv.stop("fast")
            path = os.path.join(srv.data, STATE)
            data = bytearray(open(path, "rb").read())
            # Damage the slot with the newest record (either, when both hold it).
            gens = [int.from_bytes(data[at + 8:at + 16], "little") for at in (0, 512)]
            if gens[0] != gens[1]:
                slot = 0 if gens[0] > gens[1] else 512
            data[slot + 41] ^= 0x01  # inside the mark tick
            open(path, "wb").write(bytes(data))
            srv.start()
            new = [r[0] for r in srv.sql("SELECT snowflake_nextval_batch(300000)")]
            assert min(new) > max(old), f"slot at {slot} damaged: {len(set(old) & set(new))} IDs reissued"


def test_resume_above_puts_new_ids_above_data_that_came_without_the_mark():
    with server("resume-above") as srv:
        srv.sql("CREATE TABLE t (id bigint PRIMARY KEY)")
        # Rows from a dump whose IDs ran two minutes ahead of this server's clock.
        srv.sql("INSERT INTO t SELECT snowflake_from_timestamp(now() + interval '2 min') + 5")
        srv.sql("CREATE ROLE app LOGIN")
        with srv.connect() as conn, conn.cursor() as cur:
            cur.execute("SET ROLE app")
            try:
                cur.execute("SELECT snowflake_resume_above(1)")
                raise AssertionError("a non-superuser raised the floor")
            except Exception as e:  # noqa: BLE001 - checked just below
                assert getattr(e, "pgcode", None) == "42501", e
        text = srv.one("SELECT snowflake_resume_above(max(id)) FROM t")
        # Two minutes is more than max_lead, and within the hour copied IDs
        # are continued from: no error, no wait, through a crash restart
        # too (the floor is in the database's record).
        assert "IDs continue from there" in text, text
        top = srv.one("SELECT max(id) FROM t")
        assert srv.one("SELECT snowflake_nextval()") > top
        srv.restart("immediate")
        assert srv.one("SELECT min(x) FROM snowflake_nextval_batch(1000) x") > top
        # Two hours ahead is more than that: a clear 55000 whose HINT is safe here.
        srv.sql("INSERT INTO t SELECT snowflake_from_timestamp(now() + interval '2 hours') + 5")
        text = srv.one("SELECT snowflake_resume_above(max(id)) FROM t")
        assert "more than the hour" in text, text
        code, _, hint = srv.error("SELECT snowflake_nextval()")
        assert code == "55000" and "max_lead" in hint, (code, hint)
        srv.sql("ALTER SYSTEM SET snowflake_id.max_lead = '3h'")
        srv.reload_and_wait()
        top = srv.one("SELECT max(id) FROM t")
        assert srv.one("SELECT snowflake_nextval()") > top
        # Never back down.
        srv.one("SELECT snowflake_resume_above(1)")
        assert srv.one("SELECT snowflake_nextval()") > top
        code, msg, _ = srv.error("SELECT snowflake_resume_above(-1)")
        assert code == "22003", msg


def test_a_synchronous_standby_that_never_answers_bounds_the_wait_and_shows():
    with server("sync-ghost", conf={"snowflake_id.max_wait": "'500ms'"}) as srv:
        srv.sql("ALTER SYSTEM SET synchronous_standby_names = 'ghost'")
        srv.reload_and_wait()
        # A wait without end would meet the statement timeout (57014) instead.
        state, message, hint = srv.error(f"SET statement_timeout = '{int(TIMEOUT)}s'; SELECT snowflake_nextval()")
        assert state == "55000" and message.startswith("no synchronous standby confirmed"), (state, message)
        assert "synchronous_standby_names" in hint, hint
        assert srv.one("SELECT problem FROM snowflake_id.snowflake_status") == message
        # Dropping the standby from the settings is the way out; no restart.
        srv.sql("ALTER SYSTEM RESET synchronous_standby_names")
        srv.reload_and_wait()
        assert srv.one("SELECT problem FROM snowflake_id.snowflake_status") is None
        assert srv.one("SELECT snowflake_nextval()") > 0
