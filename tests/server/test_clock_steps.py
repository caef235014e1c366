"""The system clock stepping backwards under a running server (libfaketime)."""

import re
import threading

import pytest
from harness import Deadline, Stopwatch, let_run, server, wait_until

# The fixture's wait policy.
MAX_LEAD = 10
MAX_WAIT = 8


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
    conf = {"snowflake_id.max_lead": f"'{MAX_LEAD}s'", "snowflake_id.max_wait": f"'{MAX_WAIT}s'"}
    with server("clock-steps", faketime=True, conf=conf) as srv:
        yield srv


def issued(load, at_least):
    """Waits until the load has taken at_least IDs (or met an error)."""
    wait_until(lambda: len(load.ids) >= at_least or load.errors, lambda: f"the load took only {len(load.ids)} IDs")


def test_a_step_back_within_max_lead_is_absorbed_without_wait_or_error(clocked):
    srv = clocked
    load = Load(srv)
    try:
        issued(load, 1)
        waits_before = counters(srv)[0]
        srv.set_clock(-5)
        # Every process of the server reads the stepped clock now: the load
        # goes on across the step a while, and for some IDs at least.
        srv.wait_for("SELECT clock_steps_back >= 1 FROM snowflake_id.snowflake_status",
                     what="the reserver did not see the step")
        let_run(1)
        issued(load, len(load.ids) + 2000)
    finally:
        ids = load.finish()
    assert not load.errors, load.errors[:3]
    assert counters(srv)[0] == waits_before, "a caller waited"
    assert_increasing(ids)
    assert load.uuids and all(a < b for a, b in zip(load.uuids, load.uuids[1:])), "UUIDs out of order"
    steps = srv.one("SELECT clock_steps_back FROM snowflake_id.snowflake_status")
    assert steps >= 1, "the reserver did not see the step"
    lead = srv.one("SELECT extract(epoch FROM lead)::float8 FROM snowflake_id.snowflake_status")
    print(f"{len(ids)} IDs across a 5 s step back; IDs now lead the clock by {lead:.2f} s")


def lead(srv):
    """How far the last ID leads the server's clock, in seconds."""
    return srv.one("SELECT extract(epoch FROM lead)::float8 FROM snowflake_id.snowflake_status")


def test_a_step_back_beyond_max_lead_waits_or_errors_as_documented(clocked):
    srv = clocked
    conn = srv.connect()
    cur = conn.cursor()
    cur.execute("SELECT snowflake_nextval()")
    first = cur.fetchone()[0]

    def on_session(query, args=None):
        cur.execute(query, args)
        return cur.fetchone()

    def lead_here():
        return on_session("SELECT extract(epoch FROM lead)::float8 FROM snowflake_id.snowflake_status")[0]

    def counters_here():
        return on_session("SELECT waits, extract(epoch FROM wait_time)::float8 FROM snowflake_id.snowflake_status")

    # A step back that leaves the IDs about 5 s beyond max_lead (10 s): the
    # next call waits for the clock, for less than max_wait (8 s). Everything
    # is read on the test's own session, just before the call; a machine so
    # slow that the clock caught up before the call (no wait was needed,
    # none was made) steps again, from where the lead then is.
    offset = 0
    deadline = Deadline("a call that had to wait for the clock")
    while True:
        # set_clock settles for one to two seconds of real time after the
        # step: step that much further (the wait is then 5 to 6 s).
        offset -= max(1, round(MAX_LEAD + 5 + 2 - lead_here()))
        srv.set_clock(offset)
        ahead_before = lead_here()
        waits, wait_s = counters_here()
        watch = Stopwatch()
        cur.execute("SELECT snowflake_nextval()")
        second = cur.fetchone()[0]
        took = watch.seconds()
        waits2, wait_s2 = counters_here()
        assert second > first
        # Whether it waited or not, it returned an ID within max_lead of the clock.
        ahead = on_session("SELECT extract(epoch FROM snowflake_timestamp(%s) - clock_timestamp())::float8",
                           (second,))[0]
        assert ahead <= MAX_LEAD + 0.001, f"an ID {ahead:.3f} s ahead of the clock: the call did not wait for it"
        if waits2 > waits:
            break
        deadline.check()
        first = second
    assert wait_s2 > wait_s, "a wait of no time was counted"
    # The call lasted at least the wait it counted.
    assert took >= wait_s2 - wait_s, f"returned after {took:.2f} s, but counted a wait of {wait_s2 - wait_s:.2f} s"
    print(f"step {-offset} s back, IDs {ahead_before:.2f} s ahead: the call waited {took:.2f} s"
          f" (counted {wait_s2 - wait_s:.2f} s)")

    # Ten minutes back: waiting would take minutes, more than max_wait: an
    # error at once (unless more than 9 minutes passed since the step).
    srv.set_clock(offset - 600)
    watch = Stopwatch()
    state, message, hint = srv.error("SELECT snowflake_nextval()")
    took = watch.seconds()
    assert state == "55000", (state, message)
    assert "behind the time of the next ID" in message and "snowflake_id.max_lead (10.0 s)" in message, message
    assert "IDs resume by themselves in" in hint and "ALTER SYSTEM SET snowflake_id.max_lead" in hint, hint
    assert counters(srv)[0] == waits2, "the call waited instead of failing at once"
    print(f"step 600 s back: error after {took:.3f} s: {message}")

    # The operator's way out: a larger max_lead, on reload, no restart.
    srv.sql("ALTER SYSTEM SET snowflake_id.max_lead = '15min'")
    srv.reload_and_wait()
    cur = srv.connect().cursor()
    cur.execute("SELECT snowflake_nextval()")
    third = cur.fetchone()[0]
    assert third > second


def test_a_forward_jump_of_forty_days_has_a_way_out_that_works(clocked):
    """An int setting in ms ends at 24.8 days; the hint must be one the
    setting takes, however far the clock went."""
    srv = clocked
    srv.set_clock(40 * 86400)
    ahead = srv.one("SELECT snowflake_nextval()")
    srv.set_clock(0)
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
