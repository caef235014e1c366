#!/usr/bin/env bash
# The benchmark, in one go: sets up this machine (scripts/setup.sh, which
# builds PostgreSQL 18 from source with OpenSSL, as distributions build it,
# into its cache), builds and installs snowflake_id in release mode into
# that server, starts a throwaway server with it preloaded (fsync on,
# defaults otherwise), runs every case against every competitor, and writes
# bench/results/{results.md,results.json,*.png}. PostgreSQL 18 because the
# comparison that matters now is with its own uuidv7(). Then measures what
# counting issued IDs costs (core/examples/counter_cost.rs). Takes about 25
# minutes on 2 cores. Arguments go to bench/bench.py (e.g. --only per_call
# --reps 3); see bench/bench.py --help.
#
#   bench/run.sh --pg 19 [args] another major: 19 is Debian's own binary
#                               build (a distribution's, as users get it),
#                               15 the machine's own (Debian's; no uuidv7()
#                               there, so its cases are left out)
#   bench/run.sh --ab <commit> [args]
#                               also an earlier commit's library, in a server
#                               of its own beside this one's, measured in the
#                               same rounds (bench/ab_build.sh builds it)
#   bench/run.sh citus [args]   the Citus case instead (bench/citus.py, about
#                               10 minutes): Citus 14 built from
#                               ../shared/vendor into the same PostgreSQL 18,
#                               results in bench/results/citus.md
set -euo pipefail
cd "$(dirname "$0")/.."

major=18 ab=""
while [[ ${1-} == --pg || ${1-} == --ab ]]; do
    case $1 in
    --pg) major=$2 ;;
    --ab) ab=$2 ;;
    esac
    shift 2
done
. scripts/versions.sh
if [[ $major == "$SYSTEM_MAJOR" ]]; then
    SNOWFLAKE_OTHER_MAJORS="" scripts/setup.sh
    export PG_BIN="$OWN_SYSTEM_PG/usr/lib/postgresql/$major/bin"
else
    SNOWFLAKE_PG_FOR_BENCH=1 SNOWFLAKE_OTHER_MAJORS="$major" SNOWFLAKE_REQUIRED_MAJORS="$major" scripts/setup.sh
    export PG_BIN="$PG_CACHE/$major/bin"
fi
export PATH="$HOME/.cargo/bin:$PATH"
pgrx_flags

printf '\n==> Building and installing snowflake_id (release) into PostgreSQL %s\n' "$major"
cargo pgrx install --release --pg-config "$PG_BIN/pg_config"
chmod -R a+rX "$("$PG_BIN/pg_config" --pkglibdir)" "$("$PG_BIN/pg_config" --sharedir)"
if [[ -n $ab ]]; then
    printf '\n==> The library of %s, for the A/B\n' "$ab"
    # In a directory of its own under its own file name: the A/B server
    # finds it first through dynamic_library_path, its workers too.
    lib=$(bench/ab_build.sh "$ab" "$PG_BIN/pg_config")
    ab_dir="${SNOWFLAKE_AB_CACHE:-/var/cache/snowflake_id/ab}/lib-$(git rev-parse --short=10 "$ab^{commit}")-pg$major"
    mkdir -p "$ab_dir"
    cp "$lib" "$ab_dir/snowflake_id.so"
    chmod -R a+rX "$ab_dir"
    set -- "$@" --ab-dir "$ab_dir" --ab-commit "$(git rev-parse --short=10 "$ab^{commit}")"
fi

export SNOWFLAKE_TEST_DIR="${SNOWFLAKE_BENCH_DIR:-/tmp/snowflake_id-bench}"
export SNOWFLAKE_TEST_PORT="${SNOWFLAKE_BENCH_PORT:-55300}"
mkdir -p "$SNOWFLAKE_TEST_DIR"
chown postgres "$SNOWFLAKE_TEST_DIR"

if [[ ${1-} == citus ]]; then
    shift
    scripts/citus-builds.sh "$PG_BIN/pg_config"
    printf '\n==> Benchmark: Citus\n'
    exec /usr/bin/python3 bench/citus.py "$@"
fi

printf '\n==> Benchmark\n'
/usr/bin/python3 bench/bench.py "$@"

# What counting issued IDs would cost if every ID bumped one shared counter,
# against the per-process slots the extension uses (no server involved).
if [[ " $* " != *" --only "* ]]; then
    printf '\n==> Counter cost\n'
    cargo build --release -q -p snowflake_id_core --example counter_cost
    {
        printf '\n## 5. Counting issued IDs: one shared counter against per-process slots\n\n'
        printf 'Threads taking IDs from one shared generator word, as backends do (`core/examples/counter_cost.rs`).\n\n'
        "${CARGO_TARGET_DIR:-target}/release/examples/counter_cost"
    } | tee -a bench/results/results.md
fi
