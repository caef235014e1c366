"""Waiting for the clock is interruptible and sleeps: statement_timeout and
pg_cancel_backend end it, and a waiting backend uses no CPU."""

import threading
import time

import psycopg2
import psycopg2.errors
from harness import server

# Four IDs a second and no lead: a batch of 1000 has to wait about 250 s.
CONF = {
    "snowflake_id.layout": "'time=31,worker=10,sequence=2,unit=1s'",
    "snowflake_id.max_lead": "'0'",
    "snowflake_id.max_wait": "'1h'",
}


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime, fields 14 and 15 of the whole line.
    return (int(fields[11]) + int(fields[12])) / 100


def test_statement_timeout_and_cancel_end_a_wait_for_the_clock_which_sleeps():
    with server("waits", conf=CONF) as srv:
        before = srv.one("SELECT snowflake_nextval()")

        conn = srv.connect()
        cur = conn.cursor()
        cur.execute("SET statement_timeout = '1s'")
        started = time.monotonic()
        try:
            cur.execute("SELECT count(*) FROM snowflake_nextval_batch(1000)")
            raise AssertionError("a 250 s wait finished inside statement_timeout")
        except psycopg2.errors.QueryCanceled as e:
            assert "statement timeout" in str(e), e
        took = time.monotonic() - started
        assert 0.9 < took < 5, f"statement_timeout of 1 s ended the wait after {took:.2f} s"

        cur.execute("RESET statement_timeout")
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
        outcome = {}

        def wait_for_ids():
            try:
                cur.execute("SELECT count(*) FROM snowflake_nextval_batch(1000)")
                outcome["rows"] = cur.fetchall()
            except psycopg2.Error as e:
                outcome["error"] = e

        waiter = threading.Thread(target=wait_for_ids)
        waiter.start()
        time.sleep(0.5)
        cpu_before = cpu_seconds(pid)
        time.sleep(2)
        cpu_used = cpu_seconds(pid) - cpu_before
        assert srv.one("SELECT pg_cancel_backend(%s)", (pid,))
        waiter.join(10)
        assert not waiter.is_alive(), "pg_cancel_backend did not end the wait"
        assert isinstance(outcome.get("error"), psycopg2.errors.QueryCanceled), outcome
        assert cpu_used < 0.3, f"a backend waiting for the clock used {cpu_used:.2f} s of CPU in 2 s"

        # Interrupted waits cost nothing but time: generation goes on above.
        after = srv.one("SELECT snowflake_nextval()")
        assert after > before
        waits = srv.one("SELECT waits FROM snowflake_status")
        assert waits >= 2
        print(f"waited and cancelled: statement_timeout after {took:.2f} s; {cpu_used:.3f} s CPU in 2 s of waiting")
