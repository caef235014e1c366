"""What the durable mark in WAL costs: WAL volume under full load and when
idle, and the cost of waiting for a synchronous standby, measured in one run
against the same server without a standby.

Runs real servers (the test harness's): a primary alone, then the same
primary with a synchronous streaming standby. Each case runs sessions doing
`SELECT snowflake_nextval() FROM generate_series(1, 1000)` for a few seconds;
medians of rounds. Prints a table; nothing here is a pass/fail threshold.

    sudo -u postgres is used for the servers; run as root after scripts/setup.sh
    and cargo pgrx install, e.g. /usr/bin/python3 bench/replication.py
"""

import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from harness import Server  # noqa: E402


def load(srv, seconds, sessions):
    """IDs per second over `seconds` with `sessions` sessions."""
    counts = [0] * sessions
    deadline = time.time() + seconds

    def run(i):
        with srv.connect() as conn, conn.cursor() as cur:
            while time.time() < deadline:
                cur.execute("SELECT count(snowflake_nextval()) FROM generate_series(1, 1000)")
                counts[i] += cur.fetchone()[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(sessions)]
    started = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.time() - started)


def status(srv):
    return srv.sql("SELECT mark_writes + mark_writes_by_callers, standby_waits,"
                   " extract(epoch FROM standby_wait_time) * 1e3 FROM snowflake_id.snowflake_status")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=2)
    ap.add_argument("--idle", type=float, default=10)
    a = ap.parse_args()

    p = Server("bench-repl-primary")
    p.start()
    s = None
    try:
        p.sql("CREATE EXTENSION snowflake_id")
        p.sql("CREATE EXTENSION pg_walinspect")
        load(p, 1, 1)  # the first mark, written by a caller

        def measured(label):
            rates, recs, nbytes, waits, wait_ms, writes = [], [], [], [], [], []
            for _ in range(a.rounds):
                lsn0, st0 = p.one("SELECT pg_current_wal_flush_lsn()"), status(p)
                rates.append(load(p, a.seconds, a.sessions))
                lsn1, st1 = p.one("SELECT pg_current_wal_flush_lsn()"), status(p)
                r, b = p.mark_wal(lsn0, lsn1)
                recs.append(r / a.seconds)
                nbytes.append(b / a.seconds)
                writes.append(st1[0] - st0[0])
                waits.append(st1[1] - st0[1])
                wait_ms.append(float(st1[2] - st0[2]) / max(st1[1] - st0[1], 1))
            return {"label": label, "ids_per_s": statistics.median(rates),
                    "records_per_s": statistics.median(recs), "bytes_per_s": statistics.median(nbytes),
                    "mark_writes": statistics.median(writes), "standby_waits": statistics.median(waits),
                    "wait_ms": statistics.median(wait_ms)}

        alone = measured("primary alone")
        time.sleep(1)
        lsn0, st0 = p.one("SELECT pg_current_wal_flush_lsn()"), status(p)
        time.sleep(a.idle)
        lsn1, st1 = p.one("SELECT pg_current_wal_flush_lsn()"), status(p)
        idle_records, idle_bytes = p.mark_wal(lsn0, lsn1)

        s = Server("bench-repl-standby", copy_of=p, standby=True)
        s.start()
        p.wait_for("SELECT count(*) = 1 FROM pg_stat_replication WHERE state = 'streaming'")
        p.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        p.sql("SELECT pg_reload_conf()")
        p.wait_for("SELECT sync_state = 'sync' FROM pg_stat_replication")
        sync = measured("synchronous standby")

        print(f"\n{a.sessions} sessions, {a.seconds:g} s per round, median of {a.rounds} rounds\n")
        print("| case | IDs/s | ratio | mark records/s | mark WAL bytes/s | mark writes/round | standby waits/round | ms per wait |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for c in (alone, sync):
            print(f"| {c['label']} | {c['ids_per_s']:,.0f} | {c['ids_per_s'] / alone['ids_per_s']:.2f} | "
                  f"{c['records_per_s']:.1f} | {c['bytes_per_s']:.0f} | {c['mark_writes']:g} | "
                  f"{c['standby_waits']:g} | {c['wait_ms']:.2f} |")
        print(f"\nidle {a.idle:g} s: {idle_records} mark records, {idle_bytes} bytes of WAL, "
              f"{st1[0] - st0[0]} mark writes")
    finally:
        for srv in (p, s):
            if srv is not None:
                srv.destroy()


if __name__ == "__main__":
    main()
