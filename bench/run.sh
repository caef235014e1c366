#!/usr/bin/env bash
# The benchmark, in one go: sets up this machine (scripts/setup.sh), builds
# and installs snowflake_id in release mode, starts a throwaway server with it
# preloaded (fsync on, defaults otherwise), runs every case against every
# competitor, and writes bench/results/{results.md,results.json,*.png}.
# Takes about 25 minutes on 2 cores. Arguments go to bench/bench.py
# (e.g. --only per_call --reps 3); see bench/bench.py --help.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

printf '\n==> Building and installing snowflake_id (release)\n'
cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config

export SNOWFLAKE_TEST_DIR="${SNOWFLAKE_BENCH_DIR:-/tmp/snowflake_id-bench}"
export SNOWFLAKE_TEST_PORT="${SNOWFLAKE_BENCH_PORT:-55300}"
mkdir -p "$SNOWFLAKE_TEST_DIR"
chown postgres "$SNOWFLAKE_TEST_DIR"

printf '\n==> Benchmark\n'
exec /usr/bin/python3 bench/bench.py "$@"
