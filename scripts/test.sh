#!/usr/bin/env bash
# Sets up this machine (scripts/setup.sh) and runs every test:
#   1. the pure-Rust core: unit and property tests (cargo test)
#   2. #[pg_test] tests inside a real PostgreSQL (cargo pgrx test)
#   3. that sql/ holds the install script the code generates
#   4. against real servers started for the purpose: pg_regress files,
#      concurrency, crashes (kill -9), restarts, clock steps (libfaketime),
#      bulk throttling, settings, replication between clusters (streaming,
#      logical, pglogical), snowflake_convert under load, and the client
#      examples in examples/ (Node.js, Python) (pytest, tests/*.py)
#   5. the same on the other PostgreSQL majors (scripts/versions.sh): the
#      #[pg_test] tests, the regression files and the update from 0.1.0 on
#      each, and every real-server test on the newest
#   6. the Debian packages (scripts/package.sh): their fields and files,
#      each installed with apt and used by a fresh server (the other majors'
#      beside a stand-in for postgresql-NN)
# Safe to run again. Servers run as the postgres user under $SNOWFLAKE_TEST_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
. scripts/versions.sh
export PATH="$HOME/.cargo/bin:$PATH"
export SNOWFLAKE_TEST_DIR="${SNOWFLAKE_TEST_DIR:-/tmp/snowflake_id-tests}"
PG_CONFIG="/usr/lib/postgresql/$SYSTEM_MAJOR/bin/pg_config"
started=$SECONDS

step() { printf '\n==> %s (%ds)\n' "$1" $((SECONDS - started)); }

# Servers left running by an interrupted earlier run would hold ports and files.
if [[ -d "$SNOWFLAKE_TEST_DIR" ]]; then
    for pid_file in "$SNOWFLAKE_TEST_DIR"/*/data/postmaster.pid "$SNOWFLAKE_TEST_DIR"/pgrx*/postmaster.pid; do
        [[ -f "$pid_file" ]] && sudo -u postgres "/usr/lib/postgresql/$SYSTEM_MAJOR/bin/pg_ctl" -D "$(dirname "$pid_file")" -m immediate stop || true
    done
    rm -rf "$SNOWFLAKE_TEST_DIR"
fi
mkdir -p "$SNOWFLAKE_TEST_DIR"
chown postgres "$SNOWFLAKE_TEST_DIR"
# What an interrupted package test left: its cluster, its packages (any
# postgresql-NN-snowflake-id is purged), the stand-ins; the installs below
# put the development files back.
dpkg --configure -a >/dev/null 2>&1 || true
pg_dropcluster --stop "$SYSTEM_MAJOR" snowflake_pkg 2>/dev/null || true
/usr/bin/python3 tests/test_packages.py --remove-stand-ins

step "Core: unit and property tests"
cargo test -p snowflake_id_core

step "Extension: #[pg_test] tests in a real PostgreSQL"
cargo pgrx test "pg$SYSTEM_MAJOR" --runas postgres --pgdata "$SNOWFLAKE_TEST_DIR/pgrx"

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
step "sql/: the committed install script of $version matches what the code generates"
cargo pgrx schema "pg$SYSTEM_MAJOR" -o "$SNOWFLAKE_TEST_DIR/schema.sql"
# pgrx orders the items by a dependency walk that is not stable, and notes the
# source line of each: compare the SQL lines alone.
sql_lines() { grep -v '^-- src/' "$1" | sort; }
if ! diff <(sql_lines "sql/snowflake_id--$version.sql") <(sql_lines "$SNOWFLAKE_TEST_DIR/schema.sql"); then
    echo "sql/snowflake_id--$version.sql is stale: run cargo pgrx schema pg$SYSTEM_MAJOR -o sql/snowflake_id--$version.sql" >&2
    exit 1
fi

step "Installing the extension into the system PostgreSQL"
cargo pgrx install --pg-config "$PG_CONFIG"

step "Real servers: regression files, concurrency, crashes, clock steps, settings"
/usr/bin/python3 -m pytest -v -s -p no:cacheprovider --ignore=tests/test_packages.py tests/

for major in $OTHER_MAJORS; do
    bin="$PG_CACHE/$major/bin"
    step "PostgreSQL $major: #[pg_test] tests"
    cargo pgrx test "pg$major" --runas postgres --pgdata "$SNOWFLAKE_TEST_DIR/pgrx$major"
    step "PostgreSQL $major: installing the extension into its build"
    cargo pgrx install --pg-config "$bin/pg_config"
    chmod -R a+rX "$PG_CACHE/$major/"
    # pg_regress sits beside PGXS, wherever configure put the library
    # directory (prefix/lib, or prefix/lib/postgresql).
    export PG_BIN="$bin" PG_REGRESS="$(dirname "$("$bin/pg_config" --pgxs)")/../test/regress/pg_regress"
    if [[ $major == "$NEWEST_MAJOR" ]]; then
        step "PostgreSQL $major: every real-server test"
        /usr/bin/python3 -m pytest -v -s -p no:cacheprovider --ignore=tests/test_packages.py tests/
    else
        step "PostgreSQL $major: regression files, the update from 0.1.0"
        /usr/bin/python3 -m pytest -v -s -p no:cacheprovider tests/test_regress.py tests/test_upgrade.py
    fi
    unset PG_BIN PG_REGRESS
done

step "Packages: a release .deb per major"
scripts/package.sh "$SYSTEM_MAJOR" $OTHER_MAJORS
step "Packages: installed and used"
/usr/bin/python3 -m pytest -v -s -p no:cacheprovider tests/test_packages.py

step "All tests passed"
