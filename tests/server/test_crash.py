"""Crashes and restarts with the clock stepped back: no ID is ever issued twice.

Shared memory does not survive a restart or a backend crash (the postmaster
reinitialises it), so these tests prove the durable high-water mark.
"""

import os
import random
import signal
import threading
import time

import psycopg2
from harness import server

# One-second ticks of 4096 IDs: a few hundred thousand IDs cover minutes of
# ticks, so the load below is sure to revisit every tick issued before the
# crash if the generator restarted from the (stepped-back) clock alone.
COARSE = "time=41,worker=10,sequence=12,unit=1s"


class Load:
    """Sessions taking IDs until a target count, reconnecting across crashes."""

    def __init__(self, srv, sessions, target):
        self.srv, self.target = srv, target
        self.ids = {s: [] for s in range(sessions)}
        self.uuids = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(s,)) for s in range(sessions)]
        for t in self.threads:
            t.start()

    def total(self):
        with self.lock:
            return sum(len(v) for v in self.ids.values())

    def run(self, session):
        rnd = random.Random(session)
        conn = None
        while self.total() < self.target:
            try:
                if conn is None:
                    conn = self.srv.connect_retry()
                cur = conn.cursor()
                draw = rnd.random()
                if draw < 0.4:
                    cur.execute("SELECT snowflake_nextval_batch(%s)", (rnd.randint(1, 3000),))
                elif draw < 0.8:
                    cur.execute("SELECT snowflake_nextval() FROM generate_series(1, %s)", (rnd.randint(1, 500),))
                else:
                    # UUIDs from the same generator: their IDs join the
                    # others; the UUIDs are checked as UUIDs too.
                    cur.execute("SELECT snowflake_uuid_to_id(u), u::text FROM"
                                " (SELECT snowflake_uuidv7() u FROM generate_series(1, %s)) s", (rnd.randint(1, 500),))
                rows = cur.fetchall()
                with self.lock:
                    self.ids[session].extend(r[0] for r in rows)
                    self.uuids.extend(r[1] for r in rows if len(r) > 1)
            except psycopg2.Error:
                # The crash ended this session; IDs it did not receive were never handed out.
                conn = None
                time.sleep(0.05)

    def join(self):
        for t in self.threads:
            t.join()
        return [i for ids in self.ids.values() for i in ids]


def assert_unique(ids):
    dupes = len(ids) - len(set(ids))
    assert dupes == 0, f"{dupes} IDs were issued twice"


def test_kill_9_of_a_backend_under_load_then_the_clock_60_s_back():
    conf = {"snowflake_id.layout": f"'{COARSE}'", "snowflake_id.max_lead": "'10min'"}
    with server("crash-kill9", faketime=True, conf=conf) as srv:
        # No target until a victim is killed: the load cannot end before it.
        load = Load(srv, sessions=4, target=10**12)
        victims = []
        while not victims:
            time.sleep(0.05)
            if load.total() >= 100_000:
                victims = srv.sql(
                    "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() LIMIT 1"
                )
        srv.kill9(victims[0][0])
        load.target = load.total() + 100_000
        before = load.join()
        deadline = time.time() + 60
        while "reinitializing" not in srv.log_text():
            assert time.time() < deadline, "the postmaster did not restart after the crash"
            time.sleep(0.1)
        srv.set_clock(-60)
        time.sleep(2)
        later = Load(srv, sessions=4, target=400_000)
        after = later.join()
        assert_unique(before + after)
        assert min(after) > max(before), "an ID after the crash is below one from before it"
        # UUIDs compared as Postgres compares them, without any mapping.
        assert load.uuids and later.uuids
        assert_unique(load.uuids + later.uuids)
        assert min(later.uuids) > max(load.uuids), "a UUID after the crash is below one from before it"
        steps = srv.one("SELECT clock_steps_back FROM snowflake_id.snowflake_status")
        print(f"{len(before)} IDs before the crash, {len(after)} after it and a 60 s step back: all unique; steps seen: {steps}")


def test_immediate_stop_clock_one_hour_back_restart():
    with server("crash-immediate", faketime=True) as srv:
        before = Load(srv, sessions=2, target=50_000).join()
        srv.stop("immediate")
        srv.set_clock(-3600)
        srv.start()
        # The clock is an hour behind the issued IDs; max_lead (10 s) does not
        # cover that, so generation refuses rather than repeat or wait an hour.
        state, message, hint = srv.error("SELECT snowflake_nextval()")
        assert state == "55000" and ("59 min" in message or "1 h 0 min" in message), (state, message)
        assert "ALTER SYSTEM SET snowflake_id.max_lead" in hint, hint
        # The documented way out: let IDs run ahead of the clock.
        srv.sql("ALTER SYSTEM SET snowflake_id.max_lead = '2h'")
        srv.sql("SELECT pg_reload_conf()")
        time.sleep(0.5)
        first = srv.one("SELECT snowflake_nextval()")
        assert first > max(before), f"first ID after restart {first} is not above {max(before)}"
        after = Load(srv, sessions=2, target=50_000).join()
        assert_unique(before + [first] + after)
        assert min(after) > first


def test_clean_restart_with_the_clock_stepped_back():
    conf = {"snowflake_id.max_lead": "'1h'"}
    with server("crash-clean", faketime=True, conf=conf) as srv:
        before = Load(srv, sessions=2, target=50_000).join()
        srv.stop("fast")
        srv.set_clock(-600)
        srv.start()
        after = Load(srv, sessions=2, target=50_000).join()
        assert_unique(before + after)
        assert min(after) > max(before)
        lead = srv.one("SELECT extract(epoch FROM lead)::float8 FROM snowflake_id.snowflake_status")
        assert 500 < lead <= 3600, f"IDs should run ~10 min ahead of the stepped-back clock, not {lead} s"


def test_the_background_writer_comes_back_after_sigterm_and_its_absence_shows():
    with server("reserver-term") as srv:
        old = srv.one("SELECT reserver_pid FROM snowflake_id.snowflake_status")
        assert old and srv.one("SELECT problem FROM snowflake_id.snowflake_status") is None
        os.kill(old, signal.SIGTERM)
        # Absent: the status says so while it is (the postmaster waits a
        # second before it starts the writer again), and IDs still come.
        srv.wait_for("SELECT reserver_pid IS NULL FROM snowflake_id.snowflake_status", timeout=10)
        problem = srv.one("SELECT problem FROM snowflake_id.snowflake_status")
        assert problem.startswith("the reserver (snowflake_id reserver) is not running"), problem
        assert srv.one("SELECT snowflake_nextval()") > 0
        srv.wait_for("SELECT reserver_pid IS NOT NULL FROM snowflake_id.snowflake_status", timeout=30,
                     what="the postmaster did not restart the reserver")
        new = srv.one("SELECT reserver_pid FROM snowflake_id.snowflake_status")
        assert new != old and os.path.exists(f"/proc/{new}")
        assert srv.one("SELECT problem FROM snowflake_id.snowflake_status") is None
        assert f"(PID {old}) exited with exit code 1" in srv.log_text()
