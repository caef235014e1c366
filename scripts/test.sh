#!/usr/bin/env bash
# Sets up this machine (scripts/setup.sh) and runs every test:
#   1. gates: cargo fmt --check, cargo clippy -D warnings (every target),
#      run once the toolchain is in, before the slow PostgreSQL builds
#   2. the pure-Rust core: unit and property tests (cargo test)
#   3. that a PostgreSQL major nobody serves is skipped, said, and does not
#      fail the run, and that a required one does (tests/packaging/test_builds.py),
#      that META.json is valid (tests/packaging/test_meta.py), and that the
#      sources' layers import only downward (tests/packaging/test_layers.py)
#   4. #[pg_test] tests inside a real PostgreSQL (cargo pgrx test)
#   5. that sql/ holds the install script the code generates
#   6. against real servers started for the purpose: pg_regress files and
#      the update from 0.1.0 (tests/packaging), then one server's behaviour
#      (tests/server: concurrency, crashes with kill -9, clock steps with
#      libfaketime, settings, security, snowflake_convert under load),
#      replication and copies between clusters (tests/replication), and
#      what applications run (tests/clients: the examples and the recipes),
#      and a real Citus cluster (tests/citus: Citus built from ../shared/vendor
#      by scripts/citus-builds.sh; skipped, and said, where those sources are
#      absent)
#   7. the same on the other PostgreSQL majors (scripts/versions.sh) whose
#      source could be had: the #[pg_test] tests, the regression files and
#      the update on each, and every real-server test on the newest
#   8. the Debian packages (scripts/package.sh): their fields and files,
#      each installed with apt and used by a fresh server
# It ends with a table of what ran on which major, and why anything was
# skipped. Safe to run again. Servers run as the postgres user under
# $SNOWFLAKE_TEST_DIR.
#
# SNOWFLAKE_TEST_LAYERS (default: all) runs only the layers it names, from:
# gates core fallback pg_test schema regress update server citus package.
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="$HOME/.cargo/bin:$PATH"
# Every initdb of the run (pgrx's, pg_regress's, the tests') gets UTF-8 and
# the C collation whatever locale the machine's root has, or lacks.
export LC_ALL=C.UTF-8
export SNOWFLAKE_TEST_DIR="${SNOWFLAKE_TEST_DIR:-/tmp/snowflake_id-tests}"
LAYERS=" ${SNOWFLAKE_TEST_LAYERS:-gates core fallback pg_test schema regress update server citus package} "
started=$SECONDS

step() { printf '\n==> %s (%ds)\n' "$1" $((SECONDS - started)); }
wanted() { [[ $LAYERS == *" $1 "* ]]; }

# What each layer did on each major, for the table at the end.
declare -A result=()
declare -a notes=()
majors=()
current=""
# Runs one layer on one major ("all" where the major does not matter).
layer() {
    local major=$1 name=$2 title=$3
    shift 3
    wanted "$name" || return 0
    step "$title"
    current="$major $name"
    "$@"
    result[$major $name]=passed
    current=""
}
skip() { result[$1 $2]="skipped ($3)"; }

summary() {
    local status=$?
    [[ -n $current ]] && result[$current]=FAILED
    local rows=(gates core fallback pg_test schema regress update server citus package)
    declare -A title=([gates]="gates: fmt, clippy" [fallback]="fallback of sources" [core]="core: cargo test"
        [pg_test]="#[pg_test]" [schema]="sql/ install script" [regress]="regression files"
        [update]="update, pg_upgrade" [server]="real-server tests" [citus]="Citus cluster" [package]="Debian package")
    printf '\n==> Summary (%ds): each test layer on each PostgreSQL major\n\n' $((SECONDS - started))
    printf '%-22s' "layer"
    for m in "${majors[@]}"; do printf '%-22s' "$m"; done
    printf '\n'
    for r in "${rows[@]}"; do
        printf '%-22s' "${title[$r]}"
        for m in "${majors[@]}"; do
            local v=${result[$m $r]-${result[all $r]-}}
            if [[ -z $v ]]; then
                if ! wanted "$r"; then v="not asked"; elif ((status)); then v="not run"; else v="-"; fi
            fi
            printf '%-22s' "$v"
        done
        printf '\n'
    done
    printf '\n'
    for n in "${notes[@]}"; do printf '%s\n' "$n"; done
    if ((status)); then
        printf '\nFAILED (exit status %d)%s\n' "$status" "${current:+ in: $current}"
    else
        printf '\nAll tests that could run passed.\n'
    fi
}
trap summary EXIT
. scripts/versions.sh
majors=("$SYSTEM_MAJOR")

pytest() { /usr/bin/python3 -m pytest -v -s -p no:cacheprovider "$@"; }
gates() {
    cargo fmt --all --check
    # The same code the tests build: the shell with its #[pg_test] tests
    # (pgrx's feature of the system major), and the core.
    cargo clippy --workspace --all-targets --features "pg$SYSTEM_MAJOR pg_test" -- -D warnings
}
# What the gates and the core need first: a failing gate stops the run in
# minutes, not after the PostgreSQL builds.
scripts/setup.sh --toolchain
layer all gates "Gates: cargo fmt --check, cargo clippy -D warnings" gates
layer all core "Core: unit and property tests" cargo test -p snowflake_id_core

report="$(mktemp)"
SNOWFLAKE_BUILDS_REPORT="$report" scripts/setup.sh
PG_CONFIG="/usr/lib/postgresql/$SYSTEM_MAJOR/bin/pg_config"
# The majors this machine could have; the rest are said here and at the end.
available=""
majors=("$SYSTEM_MAJOR")
for m in $OTHER_MAJORS; do
    majors+=("$m")
    if grep -q "^$m available" "$report"; then
        available="$available $m"
        continue
    fi
    why=$(sed -n "s/^$m unavailable //p" "$report")
    for r in pg_test regress update server citus package; do skip "$m" "$r" "no source"; done
    notes+=("!!! PostgreSQL $m was NOT tested: ${why:-no build}")
done
rm -f "$report"
export SNOWFLAKE_AVAILABLE_MAJORS="${available# }"
# The newest major besides the system's gets every real-server test.
newest=$(tr ' ' '\n' <<<"$SNOWFLAKE_AVAILABLE_MAJORS" | sort -n | tail -n 1)
for m in $SNOWFLAKE_AVAILABLE_MAJORS; do
    [[ $m == "$newest" ]] || { skip "$m" server "newest only"; skip "$m" citus "newest only"; }
done
for m in "${majors[@]}"; do
    [[ $m == "$SYSTEM_MAJOR" ]] || result[$m schema]="-"
done
for n in "${notes[@]}"; do printf '\n%s\n' "$n" >&2; done

# Servers left running by an interrupted earlier run would hold ports and files.
if [[ -d "$SNOWFLAKE_TEST_DIR" ]]; then
    for pid_file in "$SNOWFLAKE_TEST_DIR"/*/data/postmaster.pid "$SNOWFLAKE_TEST_DIR"/pgrx*/postmaster.pid; do
        [[ -f "$pid_file" ]] && sudo -u postgres "/usr/lib/postgresql/$SYSTEM_MAJOR/bin/pg_ctl" -D "$(dirname "$pid_file")" -m immediate stop || true
    done
    rm -rf "$SNOWFLAKE_TEST_DIR"
fi
mkdir -p "$SNOWFLAKE_TEST_DIR"
chown postgres "$SNOWFLAKE_TEST_DIR"
if wanted package; then
    # What an interrupted package test left: its cluster, its packages (any
    # postgresql-NN-snowflake-id is purged), the stand-ins; the installs below
    # put the development files back.
    dpkg --configure -a >/dev/null 2>&1 || true
    pg_dropcluster --stop "$SYSTEM_MAJOR" snowflake_pkg 2>/dev/null || true
    /usr/bin/python3 tests/packaging/test_packages.py --remove-stand-ins
fi

schema() {
    local version
    version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
    cargo pgrx schema "pg$SYSTEM_MAJOR" -o "$SNOWFLAKE_TEST_DIR/schema.sql"
    # pgrx orders the items by a dependency walk that is not stable, and notes the
    # source line of each: compare the SQL lines alone.
    sql_lines() { grep -v '^-- src/' "$1" | sort; }
    if ! diff <(sql_lines "sql/snowflake_id--$version.sql") <(sql_lines "$SNOWFLAKE_TEST_DIR/schema.sql"); then
        echo "sql/snowflake_id--$version.sql is stale: run cargo pgrx schema pg$SYSTEM_MAJOR -o sql/snowflake_id--$version.sql" >&2
        return 1
    fi
}
server_tests=(tests/server tests/replication tests/clients)
# A real Citus cluster on the major whose pg_config is $2: Citus built (or
# taken from the cache) and installed, then tests/citus; where Citus cannot
# be had, skipped with the reason, here and in the summary.
citus_layer() {
    local m=$1 pg_config=$2 out rc=0
    wanted citus || return 0
    step "PostgreSQL $m: Citus for the cluster tests"
    out=$(scripts/citus-builds.sh "$pg_config") || rc=$?
    printf '%s\n' "$out"
    if ((rc == 3)); then
        skip "$m" citus "no Citus"
        notes+=("!!! The Citus cluster tests did NOT run on PostgreSQL $m: ${out##*unavailable: }")
        return 0
    fi
    ((rc == 0)) || { current="$m citus"; return "$rc"; }
    layer "$m" citus "PostgreSQL $m: a real Citus cluster (coordinator and two workers)" pytest tests/citus
}

layer all fallback "A major nobody serves is skipped and said; a required one fails the run; META.json; layers" \
    pytest tests/packaging/test_builds.py tests/packaging/test_meta.py tests/packaging/test_layers.py

m=$SYSTEM_MAJOR
layer "$m" pg_test "PostgreSQL $m: #[pg_test] tests in a real PostgreSQL" \
    cargo pgrx test "pg$m" --runas postgres --pgdata "$SNOWFLAKE_TEST_DIR/pgrx"
layer "$m" schema "sql/: the committed install script matches what the code generates" schema
if wanted regress || wanted update || wanted server; then
    step "Installing the extension into the system PostgreSQL"
    cargo pgrx install --pg-config "$PG_CONFIG"
fi
layer "$m" regress "PostgreSQL $m: regression files" pytest tests/packaging/test_regress.py
layer "$m" update "PostgreSQL $m: the update from 0.1.0" pytest tests/packaging/test_upgrade.py
layer "$m" server "PostgreSQL $m: real servers: one server, replication and copies, clients" \
    pytest "${server_tests[@]}"
citus_layer "$m" "$PG_CONFIG"

upgrade_from=""
for m in $(tr ' ' '\n' <<<"$SNOWFLAKE_AVAILABLE_MAJORS" | sort -n); do
    bin="$PG_CACHE/$m/bin"
    layer "$m" pg_test "PostgreSQL $m: #[pg_test] tests" \
        cargo pgrx test "pg$m" --runas postgres --pgdata "$SNOWFLAKE_TEST_DIR/pgrx$m"
    if wanted regress || wanted update || wanted server; then
        step "PostgreSQL $m: installing the extension into its build"
        cargo pgrx install --pg-config "$bin/pg_config"
        chmod -R a+rX "$PG_CACHE/$m/"
    fi
    # pg_regress sits beside PGXS, wherever configure put the library
    # directory (prefix/lib, or prefix/lib/postgresql).
    export PG_BIN="$bin" PG_REGRESS="$(dirname "$("$bin/pg_config" --pgxs)")/../test/regress/pg_regress"
    layer "$m" regress "PostgreSQL $m: regression files" pytest tests/packaging/test_regress.py
    if [[ -n $upgrade_from ]]; then
        # pg_upgrade from the oldest major built here, which has the extension
        # installed by now. Not from the system's: Debian's 15.20 gives every
        # table a reloption (pg_attver) that builds of an earlier release
        # round, as the pinned ones are, do not know.
        SNOWFLAKE_UPGRADE_FROM_BIN="$PG_CACHE/$upgrade_from/bin" \
            layer "$m" update "PostgreSQL $m: the update from 0.1.0, pg_upgrade from $upgrade_from" \
            pytest tests/packaging/test_upgrade.py tests/packaging/test_pg_upgrade.py
    else
        layer "$m" update "PostgreSQL $m: the update from 0.1.0" pytest tests/packaging/test_upgrade.py
        if wanted update; then upgrade_from=$m; fi
    fi
    if [[ $m == "$newest" ]]; then
        layer "$m" server "PostgreSQL $m: every real-server test" pytest "${server_tests[@]}"
        citus_layer "$m" "$bin/pg_config"
    fi
    unset PG_BIN PG_REGRESS
done

package() {
    scripts/package.sh "$SYSTEM_MAJOR" $SNOWFLAKE_AVAILABLE_MAJORS
    pytest tests/packaging/test_packages.py
    for m in $SNOWFLAKE_AVAILABLE_MAJORS; do result[$m package]=passed; done
}
layer "$SYSTEM_MAJOR" package "Packages: a release .deb per major, installed with apt and used" package
