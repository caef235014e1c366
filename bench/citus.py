"""Inserts into tables Citus distributes by their key, on a cluster of a
coordinator and two workers on this machine: `snowflake_nextval()` against
`bigserial` (Citus's distributed sequence) and `gen_random_uuid()`, measured
in the same run, as ratios.

Cases, each through the coordinator:
- single-row INSERTs (pgbench, 2 clients);
- 100-row INSERT ... VALUES statements (pgbench, 2 clients);
- one INSERT ... SELECT of a million rows from a table distributed by
  another column, which Citus repartitions: by its source, it keeps only
  nextval() on the coordinator (CanPushDownExpression in
  planner/multi_logical_optimizer.c) and evaluates other volatile functions
  in each source shard's SELECT on the workers.

Each case runs `--reps` times per competitor, the competitors alternating;
the median is reported. Prints a table and writes bench/results/citus.md;
nothing here is a pass/fail threshold.

    Run through bench/run.sh citus (it installs the release build and Citus).
"""

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from citus_cluster import start_cluster  # noqa: E402
from harness import PG_BIN, servers  # noqa: E402

COMPETITORS = {
    "snowflake_nextval()": "bigint PRIMARY KEY DEFAULT snowflake_nextval()",
    "bigserial": "bigserial PRIMARY KEY",
    "gen_random_uuid()": "uuid PRIMARY KEY DEFAULT gen_random_uuid()",
}
TABLE = {"snowflake_nextval()": "t_snowflake", "bigserial": "t_bigserial", "gen_random_uuid()": "t_uuid"}


def pgbench(c, script, seconds, clients=2):
    """Statements per second of `script` through the coordinator."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
    os.chmod(f.name, 0o644)
    out = subprocess.run(
        ["sudo", "-u", "postgres", f"{PG_BIN}/pgbench", "-n", "-h", c.dir, "-p", str(c.port), "-U", "postgres",
         "-c", str(clients), "-j", str(clients), "-T", str(seconds), "-f", f.name, "postgres"],
        capture_output=True, text=True, check=True).stdout
    os.unlink(f.name)
    for line in out.splitlines():
        if line.startswith("tps = "):
            return float(line.split()[2])
    raise RuntimeError(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=10, help="seconds per pgbench run")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the INSERT ... SELECT")
    args = ap.parse_args()
    with servers() as made:
        c, _ = start_cluster(made, "bench-citus", **{"citus.shard_count": 8, "max_connections": 200})
        for name, column in COMPETITORS.items():
            c.sql(f"CREATE TABLE {TABLE[name]} (id {column}, v int);"
                  f"SELECT create_distributed_table('{TABLE[name]}', 'id')")
        c.sql("CREATE TABLE src (v int); SELECT create_distributed_table('src', 'v');"
              f"INSERT INTO src SELECT g FROM generate_series(1, {args.rows}) g")
        values = ", ".join(["(1)"] * 100)
        cases = {
            "single-row INSERT (rows/s)": ("INSERT INTO {t} (v) VALUES (1);\n", 1),
            "100-row INSERT ... VALUES (rows/s)": (f"INSERT INTO {{t}} (v) VALUES {values};\n", 100),
        }
        results = {case: {n: [] for n in COMPETITORS} for case in list(cases) + ["INSERT ... SELECT (s)"]}
        for rep in range(args.reps):
            order = list(COMPETITORS) if rep % 2 == 0 else list(reversed(COMPETITORS))
            for case, (script, rows) in cases.items():
                for n in order:
                    results[case][n].append(pgbench(c, script.format(t=TABLE[n]), args.seconds) * rows)
            for n in order:
                c.sql(f"TRUNCATE {TABLE[n]}")
                started = time.perf_counter()
                c.sql(f"INSERT INTO {TABLE[n]} (v) SELECT v FROM src")
                results["INSERT ... SELECT (s)"][n].append(time.perf_counter() - started)
        # Where the DEFAULT ran in the INSERT ... SELECT: the worker ids it left.
        where = c.sql("SELECT (snowflake_decode(id)).worker_id, count(*) FROM t_snowflake GROUP BY 1 ORDER BY 1")
        version = c.one("SELECT extversion FROM pg_extension WHERE extname = 'citus'")
        pg = c.one("SHOW server_version")

    lines = [
        "# snowflake_id on Citus: inserts into distributed tables",
        "",
        f"`bench/run.sh citus`, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: Citus {version} on "
        f"PostgreSQL {pg}, a coordinator and two workers on one 2-core machine, 8 shards per table, "
        f"each table distributed by its key; medians of {args.reps} runs, competitors alternating; "
        f"pgbench runs of {args.seconds} s with 2 clients through the coordinator.",
        "",
        "| case | snowflake_nextval() | bigserial | gen_random_uuid() | snowflake / bigserial | snowflake / uuid |",
        "|---|---|---|---|---|---|",
    ]
    for case, by in results.items():
        m = {n: statistics.median(v) for n, v in by.items()}
        s, b, u = m["snowflake_nextval()"], m["bigserial"], m["gen_random_uuid()"]
        if case.endswith("(s)"):
            # Time: lower is better; the ratio is speed, as for the rates.
            lines.append(f"| {case} of {args.rows:,} rows | {s:.2f} | {b:.2f} | {u:.2f} | {b / s:.2f}x | {u / s:.2f}x |")
        else:
            lines.append(f"| {case} | {s:,.0f} | {b:,.0f} | {u:,.0f} | {s / b:.2f}x | {s / u:.2f}x |")
    lines += [
        "",
        "Ratios are speed: above 1.00x, snowflake_nextval() was faster.",
        "",
        "Where the INSERT ... SELECT evaluated snowflake_nextval() (worker id: rows): "
        + ", ".join(f"{w}: {n:,}" for w, n in where) + " (0 is the coordinator).",
    ]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "citus.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
