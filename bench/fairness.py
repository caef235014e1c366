"""Single calls beside sessions that take batches as fast as they can: how
long one `snowflake_nextval()` waits when the layout's capacity is used up,
against the same calls on an idle server and against a built-in (`random()`)
measured in the same run.

The layout is `js53` (one-second ticks of 65,536 IDs, so four sessions of
batches of 20,000 ask for more than it has), with the default max_lead (10 s) and
max_wait (1 s). When the capacity is used up, every caller waits for the
clock; the point is that a single call waits for the next tick at most (its
place in line), never for the batch sessions' demand, and never longer than
max_wait in all. Prints a table; nothing here is a pass/fail threshold.

    Run as root after scripts/setup.sh and cargo pgrx install, e.g.
    /usr/bin/python3 bench/fairness.py
"""

import argparse
import os
import statistics
import sys
import threading
import time

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from harness import Server  # noqa: E402


def latencies(srv, query, n):
    """Seconds per call of `query`, n calls in one session; errors counted apart."""
    cur = srv.connect().cursor()
    took, errors = [], 0
    for _ in range(n):
        started = time.perf_counter()
        try:
            cur.execute(query)
            cur.fetchall()
            took.append(time.perf_counter() - started)
        except psycopg2.Error:
            errors += 1
    return took, errors


def hogs(srv, batch, sessions, stop, got):
    def run():
        cur = srv.connect().cursor()
        while not stop.is_set():
            try:
                cur.execute(f"SELECT count(*) FROM snowflake_nextval_batch({batch})")
                got.append(cur.fetchone()[0])
            except psycopg2.Error:
                got.append(0)

    threads = [threading.Thread(target=run) for _ in range(sessions)]
    for t in threads:
        t.start()
    return threads


def row(name, took, errors):
    q = statistics.quantiles(took, n=100, method="inclusive") if len(took) > 1 else took * 99
    return f"| {name} | {len(took)} | {errors} | {statistics.median(took) * 1000:.2f} | {q[98] * 1000:.2f} | {max(took) * 1000:.2f} |"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=100, help="single calls measured beside the batch sessions")
    p.add_argument("--idle-calls", type=int, default=2000)
    p.add_argument("--batch", type=int, default=20_000)
    p.add_argument("--sessions", type=int, default=4)
    a = p.parse_args()

    srv = Server("bench-fairness", conf={"snowflake_id.layout": "'js53'", "max_connections": a.sessions + 20})
    srv.start()
    try:
        srv.sql("CREATE EXTENSION snowflake_id")
        builtin, _ = latencies(srv, "SELECT random()", a.idle_calls)
        idle, idle_errors = latencies(srv, "SELECT snowflake_nextval()", a.idle_calls)
        big = srv.error("SELECT count(*) FROM snowflake_nextval_batch(1000000)")
        stop, got = threading.Event(), []
        threads = hogs(srv, a.batch, a.sessions, stop, got)
        try:
            srv.wait_for("SELECT lead > interval '9 s' FROM snowflake_id.snowflake_status", timeout=60)
            waits_before = srv.one("SELECT waits FROM snowflake_id.snowflake_status")
            beside, errors = latencies(srv, "SELECT snowflake_nextval()", a.calls)
        finally:
            stop.set()
            for t in threads:
                t.join()
        batches = sum(1 for g in got if g)
        print(f"js53, max_lead 10 s, max_wait 1 s; {a.sessions} sessions looping snowflake_nextval_batch({a.batch})")
        print(f"(they got {batches} batches, {len(got) - batches} refused); a batch of 1,000,000: {big[0]} {big[1]}")
        print()
        print("| calls | n | errors | median ms | p99 ms | max ms |")
        print("|---|---:|---:|---:|---:|---:|")
        print(row("`SELECT random()`, idle server", builtin, 0))
        print(row("`snowflake_nextval()`, idle server", idle, idle_errors))
        print(row("`snowflake_nextval()` beside the batch sessions", beside, errors))
        print()
        print(f"idle snowflake_nextval() / random(): {statistics.median(idle) / statistics.median(builtin):.2f}x (median)")
        print(f"beside the batches: longest call {max(beside):.3f} s = {max(beside) / 1.0:.2f} x max_wait, "
              f"{max(beside) / 1.0:.2f} x one js53 tick; {errors} of {a.calls} failed; "
              f"{srv.one('SELECT waits FROM snowflake_id.snowflake_status') - waits_before} waits counted server-wide")
    finally:
        srv.destroy()


if __name__ == "__main__":
    main()
