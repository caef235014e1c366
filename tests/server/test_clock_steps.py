"""The system clock stepping backwards under a running server (libfaketime)."""

import re
import threading
import time

import pytest
from harness import server

STEP_SETTLE = 2.0  # every process re-reads the faked clock within about a second


class Load:
    """One session taking IDs in a loop until stopped; keeps every ID and error."""

    def __init__(self, srv):
        self.srv, self.ids, self.errors, self.stop = srv, [], [], threading.Event()
        self.uuids = []
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        conn = self.srv.connect()
        cur = conn.cursor()
        uuids = False
        while not self.stop.is_set():
            try:
                # Every other statement draws UUIDs of the same generator:
                # their IDs must increase with the others, and they as UUIDs.
                uuids = not uuids
                if uuids:
                    cur.execute("SELECT snowflake_uuid_to_id(u), u::text FROM"
                                " (SELECT snowflake_uuidv7() u FROM generate_series(1, 200)) s")
                else:
                    cur.execute("SELECT snowflake_nextval() FROM generate_series(1, 200)")
                rows = cur.fetchall()
                self.ids.extend(r[0] for r in rows)
                self.uuids.extend(r[1] for r in rows if len(r) > 1)
            except Exception as e:
                self.errors.append(e)
        conn.close()

    def finish(self):
        self.stop.set()
        self.thread.join()
        return self.ids


def counters(srv):
    return srv.sql("SELECT waits, extract(epoch FROM wait_time)::float8, errors FROM snowflake_id.snowflake_status")[0]


def assert_increasing(ids):
    bad = next((i for i in range(1, len(ids)) if ids[i] <= ids[i - 1]), None)
    assert bad is None, f"{ids[bad - 1]} then {ids[bad]}"


@pytest.fixture
def clocked():
    conf = {"snowflake_id.max_lead": "'10s'", "snowflake_id.max_wait": "'3s'"}
    with server("clock-steps", faketime=True, conf=conf) as srv:
        yield srv


def test_a_step_back_within_max_lead_is_absorbed_without_wait_or_error(clocked):
    srv = clocked
    load = Load(srv)
    time.sleep(1)
    waits_before = counters(srv)[0]
    srv.set_clock(-5)
    time.sleep(STEP_SETTLE + 1)
    ids = load.finish()
    assert not load.errors, load.errors[:3]
    assert counters(srv)[0] == waits_before, "a caller waited"
    assert_increasing(ids)
    assert load.uuids and all(a < b for a, b in zip(load.uuids, load.uuids[1:])), "UUIDs out of order"
    steps = srv.one("SELECT clock_steps_back FROM snowflake_id.snowflake_status")
    assert steps >= 1, "the reserver did not see the step"
    lead = srv.one("SELECT extract(epoch FROM lead)::float8 FROM snowflake_id.snowflake_status")
    print(f"{len(ids)} IDs across a 5 s step back; IDs now lead the clock by {lead:.2f} s")


def test_a_step_back_beyond_max_lead_waits_or_errors_as_documented(clocked):
    srv = clocked
    conn = srv.connect()
    cur = conn.cursor()
    cur.execute("SELECT snowflake_nextval()")
    first = cur.fetchone()[0]

    # 14 s back, of which ~2 s pass while the step settles: the IDs lead the
    # clock by ~12 s, max_lead allows 10 s, so the next call waits ~2 s.
    srv.set_clock(-14)
    time.sleep(STEP_SETTLE)
    waits, wait_s, _ = counters(srv)
    started = time.time()
    cur.execute("SELECT snowflake_nextval()")
    second = cur.fetchone()[0]
    took = time.time() - started
    waits2, wait_s2, _ = counters(srv)
    assert second > first
    assert waits2 > waits, "no wait was counted"
    assert took >= 0.5, f"returned after {took:.2f} s without waiting for the clock"
    print(f"step 14 s back: the call waited {took:.2f} s (counted {wait_s2 - wait_s:.2f} s)")

    # 60 s back: waiting would take 50 s, more than max_wait: an error at once.
    srv.set_clock(-60)
    time.sleep(STEP_SETTLE)
    started = time.time()
    state, message, hint = srv.error("SELECT snowflake_nextval()")
    took = time.time() - started
    assert state == "55000", (state, message)
    assert "behind the time of the next ID" in message and "snowflake_id.max_lead (10.0 s)" in message, message
    assert "IDs resume by themselves in" in hint and "ALTER SYSTEM SET snowflake_id.max_lead" in hint, hint
    assert counters(srv)[0] == waits2, "the call waited instead of failing at once"
    print(f"step 60 s back: error after {took:.3f} s: {message}")

    # The operator's way out: a larger max_lead, on reload, no restart.
    srv.sql("ALTER SYSTEM SET snowflake_id.max_lead = '2min'")
    srv.sql("SELECT pg_reload_conf()")
    time.sleep(0.5)
    cur = srv.connect().cursor()
    cur.execute("SELECT snowflake_nextval()")
    third = cur.fetchone()[0]
    assert third > second


def test_a_forward_jump_of_forty_days_has_a_way_out_that_works(clocked):
    """An int setting in ms ends at 24.8 days; the hint must be one the
    setting takes, however far the clock went."""
    srv = clocked
    srv.set_clock(40 * 86400)
    time.sleep(STEP_SETTLE)
    ahead = srv.one("SELECT snowflake_nextval()")
    srv.set_clock(0)
    time.sleep(STEP_SETTLE)
    state, message, hint = srv.error("SELECT snowflake_nextval()")
    assert state == "55000", (state, message)
    # Days: more than an int of milliseconds (24.8 days) can hold.
    assert re.search(r"snowflake_id.max_lead = '4[01]d'", hint), hint
    assert srv.one("SELECT problem FROM snowflake_id.snowflake_status") == message
    # Follow the hint to the letter.
    statement = hint[hint.index("ALTER SYSTEM"):]
    srv.sql(statement.split(";")[0])
    srv.reload_and_wait()
    assert srv.one("SHOW snowflake_id.max_lead") in ("40d", "41d")
    after = srv.one("SELECT snowflake_nextval()")
    assert after > ahead
    assert srv.one("SELECT problem FROM snowflake_id.snowflake_status") is None
