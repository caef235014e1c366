"""Crashes and restarts with the clock stepped back: no ID is ever issued twice.

Shared memory does not survive a restart or a backend crash (the postmaster
reinitialises it), so these tests prove the durable high-water mark.
"""

import contextlib
import os
import random
import re
import signal
import threading

import psycopg2
from harness import Deadline, server, wait_until, wall_clock

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
        self.errors = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(s,)) for s in range(sessions)]
        for t in self.threads:
            t.start()

    def total(self):
        with self.lock:
            return sum(len(v) for v in self.ids.values())

    def run(self, session):
        try:
            self.take(session)
        except Exception as e:  # reported by join()
            self.errors.append(e)

    def take(self, session):
        rnd = random.Random(session)
        conn = None
        # Failing since when: a session that only fails (a server that
        # never comes back) ends the test at the harness-wide timeout.
        failing = None
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
                failing = None
            except psycopg2.Error:
                # The crash ended this session; IDs it did not receive were never handed out.
                conn = None
                failing = failing or Deadline(f"session {session} got no ID back after an error")
                failing.check()
                Deadline.nap(0.05)

    def join(self):
        for t in self.threads:
            t.join()
        assert not self.errors, self.errors
        return [i for ids in self.ids.values() for i in ids]


def assert_unique(ids):
    dupes = len(ids) - len(set(ids))
    assert dupes == 0, f"{dupes} IDs were issued twice"


def test_kill_9_of_a_backend_under_load_then_the_clock_60_s_back():
    conf = {"snowflake_id.layout": f"'{COARSE}'", "snowflake_id.max_lead": "'10min'"}
    with server("crash-kill9", faketime=True, conf=conf) as srv:
        # No target until a victim is killed: the load cannot end before it.
        load = Load(srv, sessions=4, target=10**12)

        def victim():
            if load.errors:
                raise load.errors[0]
            if load.total() < 100_000:
                return None
            return srv.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'"
                           " AND pid <> pg_backend_pid() LIMIT 1")

        try:
            victims = wait_until(victim, lambda: f"the load took only {load.total()} IDs")
        except BaseException:
            load.target = 0  # its sessions stop
            raise
        srv.kill9(victims[0][0])
        load.target = load.total() + 100_000
        before = load.join()
        srv.wait_for_log("reinitializing", "the postmaster did not restart after the crash")
        # 60 s before the first ID of the load, however long the load took:
        # the IDs after the restart would revisit every tick issued before
        # the crash if the generator restarted from the clock alone.
        with contextlib.closing(srv.connect_retry()) as conn, conn.cursor() as cur:
            cur.execute("SELECT extract(epoch FROM snowflake_timestamp(%s))::float8", (min(before),))
            first_at = cur.fetchone()[0]
        srv.set_clock(int(first_at - wall_clock()) - 60)
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


def behind_in(message):
    """(seconds, precision) of "the system clock is ... behind" in a refusal,
    read as core/src/timefmt.rs's format_duration writes it."""
    said = re.search(r"the system clock is (.+?) behind the time of the next ID", message).group(1)
    for pattern, seconds, unit in (
            (r"(\d+) h (\d+) min", lambda h, m: 3600 * int(h) + 60 * int(m), 60),
            (r"(\d+) min (\d+) s", lambda m, s: 60 * int(m) + int(s), 1),
            (r"([\d.]+) s", lambda s: float(s), 0.1),
            (r"(\d+) ms", lambda ms: int(ms) / 1000, 0.001)):
        m = re.fullmatch(pattern, said)
        if m:
            return seconds(*m.groups()), unit
    raise AssertionError(f"no duration in {message!r}")


def id_time(srv, i):
    """The time in ID i, in seconds since the epoch."""
    return srv.one("SELECT extract(epoch FROM snowflake_timestamp(%s))::float8", (i,))


def test_immediate_stop_clock_one_hour_back_restart():
    with server("crash-immediate", faketime=True) as srv:
        before = Load(srv, sessions=2, target=50_000).join()
        # An hour behind the last ID issued, however long the load took.
        last_at = id_time(srv, max(before))
        srv.stop("immediate")
        srv.set_clock(int(last_at - wall_clock()) - 3600)
        srv.start()
        # The clock is an hour behind the issued IDs; max_lead (10 s) does not
        # cover that, so generation refuses rather than repeat or wait an hour.
        clock_before = srv.one("SELECT extract(epoch FROM clock_timestamp())::float8")
        state, message, hint = srv.error("SELECT snowflake_nextval()")
        mark, lead, clock_after = srv.sql(
            "SELECT extract(epoch FROM durable_mark)::float8, extract(epoch FROM lead)::float8,"
            " extract(epoch FROM clock_timestamp())::float8 FROM snowflake_id.snowflake_status")[0]
        assert state == "55000", (state, message)
        # The mark the restart read covers every ID issued, and is not far
        # beyond them (the reserver keeps it about a second ahead) ...
        assert last_at <= mark < last_at + 60, (last_at, mark)
        # ... and the refusal states how far the server's clock was behind
        # the next ID at the call: as far as the status's lead says (read
        # after the call, so less by the seconds between), give or take a tick.
        behind, unit = behind_in(message)
        assert lead - unit - 0.01 <= behind <= lead + (clock_after - clock_before) + 0.01, \
            (message, lead, clock_after - clock_before)
        assert behind > 10, message
        assert "ALTER SYSTEM SET snowflake_id.max_lead" in hint, hint
        # The documented way out: let IDs run ahead of the clock.
        srv.sql("ALTER SYSTEM SET snowflake_id.max_lead = '2h'")
        srv.reload_and_wait()
        first = srv.one("SELECT snowflake_nextval()")
        assert first > max(before), f"first ID after restart {first} is not above {max(before)}"
        after = Load(srv, sessions=2, target=50_000).join()
        assert_unique(before + [first] + after)
        assert min(after) > first


def test_clean_restart_with_the_clock_stepped_back():
    conf = {"snowflake_id.max_lead": "'1h'"}
    with server("crash-clean", faketime=True, conf=conf) as srv:
        before = Load(srv, sessions=2, target=50_000).join()
        # Ten minutes behind the last ID issued, however long the load took.
        last_at = id_time(srv, max(before))
        srv.stop("fast")
        srv.set_clock(int(last_at - wall_clock()) - 600)
        srv.start()
        after = Load(srv, sessions=2, target=50_000).join()
        assert_unique(before + after)
        assert min(after) > max(before)
        # Read on the server's clock in one statement: how far the IDs lead
        # it, and how far the last ID from before the restart still does.
        lead, behind = srv.sql(
            "SELECT extract(epoch FROM lead)::float8, extract(epoch FROM snowflake_timestamp(%s) - clock_timestamp())::float8"
            " FROM snowflake_id.snowflake_status", (max(before),))[0]
        # Ten minutes less the seconds since the step: the clock is still
        # behind the IDs from before the restart (else the step proved nothing).
        assert behind > 0, behind
        assert behind - 0.01 <= lead <= 3600, f"IDs should run ahead of the stepped-back clock as far as before the restart ({behind} s), not {lead} s"


def test_the_background_writer_comes_back_after_sigterm_and_its_absence_shows():
    with server("reserver-term") as srv:
        old = srv.one("SELECT reserver_pid FROM snowflake_id.snowflake_status")
        assert old and srv.one("SELECT problem FROM snowflake_id.snowflake_status") is None
        # The postmaster restarts the writer a second after it exits; it is
        # stopped (SIGSTOP) while the absence is looked at, so that a slow
        # look cannot miss it. A session opened before needs no postmaster.
        with contextlib.closing(srv.connect()) as conn, conn.cursor() as cur:
            def status():
                cur.execute("SELECT reserver_pid, problem FROM snowflake_id.snowflake_status")
                return cur.fetchone()

            postmaster = srv.postmaster_pid()
            os.kill(postmaster, signal.SIGSTOP)
            try:
                os.kill(old, signal.SIGTERM)
                # Absent: the status says so while it is, and IDs still come.
                problem = wait_until(lambda: (lambda pid, problem: pid is None and problem)(*status()),
                                     "the reserver did not exit on SIGTERM, or its absence did not show")
                assert problem.startswith("the reserver (snowflake_id reserver) is not running"), problem
                cur.execute("SELECT snowflake_nextval()")
                assert cur.fetchone()[0] > 0
            finally:
                os.kill(postmaster, signal.SIGCONT)
        srv.wait_for("SELECT reserver_pid IS NOT NULL FROM snowflake_id.snowflake_status",
                     what="the postmaster did not restart the reserver")
        new = srv.one("SELECT reserver_pid FROM snowflake_id.snowflake_status")
        assert new != old and os.path.exists(f"/proc/{new}")
        assert srv.one("SELECT problem FROM snowflake_id.snowflake_status") is None
        assert f"(PID {old}) exited with exit code 1" in srv.log_text()
