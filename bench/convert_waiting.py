"""What inserts into a table meet while `snowflake_convert` waits for its
locks behind a long transaction, against the same inserts with no conversion
waiting, and against a plain `ALTER TABLE` waiting in the same place (what a
hand-written migration does).

One session holds a transaction open on the table (ACCESS SHARE, as a long
report would) for the whole window; one session inserts through the
`serial` default as fast as it can; in the second and third windows a third
session starts the conversion (or the ALTER) and waits behind the report. The
report ends with the window, so the conversion then completes. Prints each
window's inserts and their latencies (median, p99, max); nothing here is a
pass/fail threshold.

    Run as root after scripts/setup.sh and cargo pgrx install, e.g.
    /usr/bin/python3 bench/convert_waiting.py --window 10
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


def window(srv, seconds, waiter_sql):
    """Inserts for `seconds` beside a transaction holding the table; with
    `waiter_sql`, a session runs it once the window has begun. Returns the
    insert latencies in ms and the waiter's own seconds."""
    srv.sql("DROP TABLE IF EXISTS orders; CREATE TABLE orders (id serial PRIMARY KEY, note text)")
    srv.sql("INSERT INTO orders (note) SELECT 'old' FROM generate_series(1, 1000)")
    report = srv.connect()
    report.autocommit = False
    report.cursor().execute("SELECT count(*) FROM orders")  # holds ACCESS SHARE until rollback
    stop = threading.Event()
    took = []

    def insert():
        conn = srv.connect()
        conn.autocommit = True
        cur = conn.cursor()
        while not stop.is_set():
            started = time.perf_counter()
            cur.execute("INSERT INTO orders (note) VALUES ('new')")
            took.append((time.perf_counter() - started) * 1000)
        conn.close()

    waited = []

    def wait():
        conn = srv.connect()
        conn.autocommit = True
        started = time.perf_counter()
        conn.cursor().execute(waiter_sql)
        waited.append(time.perf_counter() - started)
        conn.close()

    inserter = threading.Thread(target=insert)
    inserter.start()
    time.sleep(0.5)
    waiter = threading.Thread(target=wait) if waiter_sql else None
    if waiter:
        waiter.start()
    time.sleep(seconds)
    stop.set()
    # The report ends first: an insert queued behind a waiting ALTER only
    # finishes once the ALTER has had its turn.
    report.rollback()
    report.close()
    inserter.join()
    if waiter:
        waiter.join()
    return took, (waited[0] if waited else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--window", type=float, default=10.0, help="seconds the long transaction lasts")
    args = ap.parse_args()
    srv = Server("bench_convert_waiting", conf={"deadlock_timeout": "'1s'"})
    srv.start()
    try:
        srv.sql("CREATE EXTENSION snowflake_id")
        cases = [
            ("no conversion waiting", None),
            ("snowflake_convert waiting", "SELECT count(*) FROM snowflake_convert('orders')"),
            ("ALTER TABLE waiting (by hand)", "ALTER TABLE orders ALTER id TYPE bigint"),
        ]
        rows = []
        for name, sql in cases:
            took, waited = window(srv, args.window, sql)
            q = statistics.quantiles(took, n=100)
            rows.append((name, len(took), statistics.median(took), q[98], max(took), waited))
        base = rows[0][1]
        print(f"\nInserts beside a {args.window:g} s transaction holding the table (one inserting session):\n")
        print(f"{'case':32} {'inserts':>8} {'vs none':>8} {'median ms':>10} {'p99 ms':>8} {'max ms':>8}  waiter took")
        for name, n, med, p99, mx, waited in rows:
            w = "-" if waited is None else f"{waited:.1f} s"
            print(f"{name:32} {n:8d} {n / base:8.2f} {med:10.2f} {p99:8.1f} {mx:8.1f}  {w}")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
