"""Waiting for the clock is interruptible and sleeps: statement_timeout and
pg_cancel_backend end it, and a waiting backend uses no CPU."""

import threading

import psycopg2
import psycopg2.errors
import pytest
from harness import PROGRAM_TIMEOUT, Stopwatch, let_run, server, wait_until

# Four IDs a second and no lead: a batch of BATCH IDs has to wait ten times
# the harness's timeout for them, so a wait deaf to statement_timeout or to
# a cancel, which would end only with the batch, fails the waits for its end
# below (each bounded by that timeout), however slow the machine.
CONF = {
    "snowflake_id.layout": "'time=31,worker=10,sequence=2,unit=1s'",
    "snowflake_id.max_lead": "'0'",
    "snowflake_id.max_wait": "'100h'",
}
BATCH = int(4 * PROGRAM_TIMEOUT)


def in_thread(cur, query):
    """Runs `query` on `cur` in a thread; returns the thread and a dict that
    gets its rows or its error."""
    outcome = {}

    def run():
        try:
            cur.execute(query)
            outcome["rows"] = cur.fetchall()
        except psycopg2.Error as e:
            outcome["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, outcome


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime, fields 14 and 15 of the whole line.
    return (int(fields[11]) + int(fields[12])) / 100


def issued(srv):
    return srv.one("SELECT ids_issued FROM snowflake_id.snowflake_status")


def test_statement_timeout_and_cancel_end_a_wait_for_the_clock_which_sleeps():
    with server("waits", conf=CONF) as srv:
        before = srv.one("SELECT snowflake_nextval()")
        issued_before = issued(srv)

        conn = srv.connect()
        cur = conn.cursor()
        cur.execute("SET statement_timeout = '1s'")
        watch = Stopwatch()
        waiter, outcome = in_thread(cur, f"SELECT count(*) FROM snowflake_nextval_batch({BATCH})")
        wait_until(lambda: not waiter.is_alive(), "statement_timeout did not end the wait for the clock")
        took = watch.seconds()
        error = outcome.get("error")
        assert isinstance(error, psycopg2.errors.QueryCanceled) and "statement timeout" in str(error), outcome
        assert took >= 0.9, f"statement_timeout of 1 s ended the wait after {took:.2f} s"
        # Ended by the timeout, not by the batch's end.
        assert issued(srv) - issued_before < BATCH, "the batch ran to its end through statement_timeout"

        cur.execute("RESET statement_timeout")
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
        issued_before = issued(srv)
        waiter, outcome = in_thread(cur, f"SELECT count(*) FROM snowflake_nextval_batch({BATCH})")
        # Asleep in the wait for the clock (the extension's wait event).
        srv.wait_for(f"SELECT wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = {pid}",
                     what="the batch never slept waiting for the clock (wait event Extension)")
        cpu_before = cpu_seconds(pid)
        # Safe on any machine: a backend that sleeps uses no CPU however
        # long it is watched; a busy one only makes a spinning backend
        # show less than it would, never a sleeping one more.
        let_run(2)
        cpu_used = cpu_seconds(pid) - cpu_before
        assert srv.one("SELECT pg_cancel_backend(%s)", (pid,))
        wait_until(lambda: not waiter.is_alive(), "pg_cancel_backend did not end the wait")
        assert isinstance(outcome.get("error"), psycopg2.errors.QueryCanceled), outcome
        assert issued(srv) - issued_before < BATCH, "the batch ran to its end through pg_cancel_backend"
        assert cpu_used < 0.3, f"a backend waiting for the clock used {cpu_used:.2f} s of CPU in 2 s"

        # Interrupted waits cost nothing but time: generation goes on above.
        after = srv.one("SELECT snowflake_nextval()")
        assert after > before
        waits = srv.one("SELECT waits FROM snowflake_id.snowflake_status")
        assert waits >= 2
        print(f"waited and cancelled: statement_timeout after {took:.2f} s; {cpu_used:.3f} s CPU in 2 s of waiting")


def test_no_rust_backtrace_reaches_a_client_whatever_the_servers_environment():
    # Four IDs a second, no lead: a batch of 5 waits for the next second.
    env = {"RUST_BACKTRACE": "1", "RUST_LIB_BACKTRACE": "1"}
    with server("waits-backtrace", conf=CONF, env=env) as srv:
        conn = srv.connect()
        cur = conn.cursor()
        cur.execute("SET statement_timeout = '200ms'")
        with pytest.raises(psycopg2.errors.QueryCanceled) as e:
            cur.execute("SELECT count(*) FROM snowflake_nextval_batch(20)")
        assert e.value.diag.message_detail is None, e.value.diag.message_detail
        # An error of the extension's own, raised from Rust, keeps its own DETAIL only.
        cur.execute("RESET statement_timeout")
        srv.sql("ALTER SYSTEM SET snowflake_id.max_wait = '1s'")
        srv.reload_and_wait()
        cur = srv.connect().cursor()
        with pytest.raises(psycopg2.Error) as e:
            cur.execute("SELECT count(*) FROM snowflake_nextval_batch(100)")
        assert e.value.pgcode == "55000", e.value
        detail = e.value.diag.message_detail
        assert detail.endswith("Nothing was taken."), detail
        for frame_text in ["backtrace", ".rs:", "at /", "pgrx"]:
            assert frame_text not in detail, detail


# js53: one-second ticks of 65,536 IDs, IDs at most 10 s ahead, 1 s wait.
JS53 = {"snowflake_id.layout": "'js53'"}


def singles_beside_batches(srv, sessions, batch, calls):
    """Starts `sessions` sessions looping snowflake_nextval_batch(batch), waits
    until they have used up the lead, makes `calls` single calls, and stops
    them. Returns the single calls' IDs and errors, and the batches got."""
    stop = threading.Event()
    got, unexpected = [], []

    def batches():
        c = srv.connect().cursor()
        while not stop.is_set():
            try:
                c.execute(f"SELECT count(*) FROM snowflake_nextval_batch({batch})")
                got.append(c.fetchone()[0])
            except psycopg2.Error as e:
                if e.pgcode != "55000":  # waited max_wait in vain: as documented
                    unexpected.append(f"{e.pgcode} {e.diag.message_primary}")
    crowd = [threading.Thread(target=batches) for _ in range(sessions)]
    for t in crowd:
        t.start()
    ids, errors = [], []
    try:
        srv.wait_for("SELECT lead > interval '9 s' FROM snowflake_id.snowflake_status")
        cur = srv.connect().cursor()
        for _ in range(calls):
            try:
                cur.execute("SELECT snowflake_nextval()")
                ids.append(cur.fetchone()[0])
            except psycopg2.Error as e:
                errors.append(f"{e.pgcode} {e.diag.message_primary}")
    finally:
        stop.set()
        for t in crowd:
            t.join()
    assert not unexpected, unexpected[:3]
    assert got, "the batch sessions never got a batch: they did not compete"
    return ids, errors, got


def test_single_calls_are_served_in_turn_beside_a_session_taking_batches():
    with server("waits-hog", conf=JS53) as srv:
        # A batch larger than the lead and max_wait allow is refused at once
        # and takes nothing.
        before = srv.one("SELECT ids_issued FROM snowflake_id.snowflake_status")
        state, message, hint = srv.error("SELECT count(*) FROM snowflake_nextval_batch(1000000)")
        assert state == "55000" and message.startswith("a batch of 1000000 IDs would have to wait"), (state, message)
        assert "Ask for at most" in hint, hint
        assert srv.one("SELECT ids_issued FROM snowflake_id.snowflake_status") == before

        ids, errors, got = singles_beside_batches(srv, sessions=2, batch=50000, calls=15)
        assert not errors, errors[:3]
        assert ids == sorted(set(ids))
        print(f"{len(ids)} single calls beside two batch sessions ({len(got)} batches of 50000): none failed")


def test_single_calls_find_room_beside_a_crowd_of_batch_sessions():
    """70 sessions each claiming a 64th of a js53 tick ahead would fill the
    whole line for the next tick; batches may claim only the first half of it."""
    with server("waits-crowd", conf={**JS53, "max_connections": 100}) as srv:
        ids, errors, got = singles_beside_batches(srv, sessions=70, batch=1024, calls=10)
        assert not errors, errors[:3]
        print(f"{len(ids)} single calls beside 70 batch sessions ({len(got)} batches of 1024): none failed")
