#!/usr/bin/env bash
# Sets up this machine (scripts/setup.sh) and runs every test:
#   1. gates: cargo fmt --check, cargo clippy -D warnings (every target),
#      run once the toolchain is in, before the slow PostgreSQL builds
#   2. the pure-Rust core: unit and property tests (cargo test)
#   3. that a PostgreSQL major nobody serves is skipped, said, and does not
#      fail the run, and that a required one does, and that PostgreSQL's
#      sources come from the mirror apt is configured with
#      (tests/packaging/test_builds.py), that META.json is valid
#      (tests/packaging/test_meta.py), and that the sources' layers import
#      only downward and the docs hold together (tests/source)
#   4. #[pg_test] tests inside a real PostgreSQL (cargo pgrx test)
#   5. that sql/ holds the install script the code generates
#   6. against real servers started for the purpose: pg_regress files and
#      the update from 0.1.0 (tests/regress, tests/packaging), then one server's behaviour
#      (tests/server: concurrency, crashes with kill -9, clock steps with
#      libfaketime, settings, security, snowflake_convert under load),
#      replication and copies between clusters (tests/replication), and
#      what applications run (tests/clients: the examples and the recipes),
#      and a real Citus cluster (tests/citus: Citus built from ../shared/vendor
#      by scripts/citus-builds.sh; skipped, and said, where those sources are
#      absent)
#   7. the same on the other PostgreSQL majors (scripts/versions.sh) whose
#      source could be had: the #[pg_test] tests, the regression files and
#      the update on each, and every real-server test and Citus on the
#      newest, and on the newest release too where the newest is a beta or
#      release candidate (19rc1 and 18, today: there all but the client
#      recipes, which 15 and the newest run); pg_upgrade into each, from
#      the oldest, and into the newest from the major before it
#   8. the Debian packages (scripts/package.sh): their fields and files,
#      each installed with apt and used by a fresh server
# It ends with a table of what ran on which major, and why anything was
# skipped. Safe to run again. Servers run as the postgres user under
# $SNOWFLAKE_TEST_DIR.
#
# Most of the real-server tests wait (for clocks, claims refreshes,
# failovers) rather than compute, so they do not wait in turn: the builds
# run here, one after another, and as soon as a major's extension is
# installed, the tests of that major start beside them in a lane of their
# own (a background job with its own log, scratch directory and ports;
# pytest-xdist spreads the real-server files over workers within it).
# Each lane's log is printed whole when the lane ends. Cargo builds in
# $CARGO_TARGET_DIR (by default /var/cache/snowflake_id/target, outside the
# clone), so a fresh clone compiles the project's own crates and nothing else.
#
# SNOWFLAKE_TEST_LAYERS (default: all) runs only the layers it names, from:
# gates core fallback pg_test schema regress update server citus package.
# SNOWFLAKE_TEST_WORKERS (default 4) is the number of pytest-xdist workers
# a lane of real-server tests runs. SNOWFLAKE_TEST_TIMEOUT (default 180) is
# the one bound on every wait of the tests (tests/harness.py): no test
# waits for real time to pass, so only a machine too slow to meet a
# condition in that many seconds fails one; raise it on such a machine.
# SNOWFLAKE_TEST_LOAD=N runs N CPU hogs beside the whole run, as a busy
# machine would (CONTRIBUTING.md, "Under load").
#
# The machine is left as it was found. The extension is installed into the
# test command's own copy of the system's PostgreSQL (own_system_postgres,
# scripts/versions.sh), never into the machine's, where replacing a loaded
# library kills the servers that use it; the packages are installed with
# apt in a private copy of /usr, /etc and /var (scripts/private-system.sh);
# and a server of the machine's PostgreSQL, started before anything else
# with the extension the machine has (if any), must answer at the end with
# the machine's extension files unchanged (tests/packaging/machine.py).
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="$HOME/.cargo/bin:$PATH"
# Every initdb of the run (pgrx's, pg_regress's, the tests') gets UTF-8 and
# the C collation whatever locale the machine's root has, or lacks.
export LC_ALL=C.UTF-8
export SNOWFLAKE_TEST_DIR="${SNOWFLAKE_TEST_DIR:-/tmp/snowflake_id-tests}"
# Set inside a lane only (a run of this script inside the fallback lane
# keeps its own table).
unset LANE_RESULTS LANE_NOTES
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/snowflake_id/target}"
LAYERS=" ${SNOWFLAKE_TEST_LAYERS:-machine gates core fallback pg_test schema regress update server citus package} "
WORKERS="${SNOWFLAKE_TEST_WORKERS:-4}"
started=$SECONDS

step() { printf '\n==> %s (%ds)\n' "$1" $((SECONDS - started)); }
wanted() { [[ $LAYERS == *" $1 "* ]]; }

# What each layer did on each major, for the table at the end.
declare -A result=()
declare -a notes=()
majors=()
current=""
# Runs one layer on one major ("all" where the major does not matter). In
# a lane, its result goes to the lane's file and a failure is returned (the
# lane goes on); here, a failure ends the run.
layer() {
    local major=$1 name=$2 title=$3
    shift 3
    wanted "$name" || return 0
    step "$title"
    if [[ -n ${LANE_RESULTS-} ]]; then
        local verdict=passed
        "$@" || verdict=FAILED
        echo "$major $name $verdict" >>"$LANE_RESULTS"
        [[ $verdict == passed ]]
        return
    fi
    current="$major $name"
    "$@"
    result[$major $name]=passed
    current=""
}
skip() { result[$1 $2]="skipped ($3)"; }

# Lanes: tests that run beside the builds. Each writes its results
# ("<major> <layer> <result>") and notes to files the summary reads.
LOGS="$SNOWFLAKE_TEST_DIR/logs"
declare -A lane_pid=()
lanes=()
lane_failed=""
lane_skip() { echo "$1 $2 skipped ($3)" >>"$LANE_RESULTS"; }
lane_note() { echo "$1" >>"$LANE_NOTES"; }
# Starts a lane: `$3...` in the background with its own scratch directory
# and ports from $2 (100 for each pytest-xdist worker). Lanes run niced
# (SNOWFLAKE_LANE_NICE, 5): they mostly wait, and what they compute (Citus's
# build, their servers) has time to spare, while the foreground's builds,
# one major after another, are what the whole run waits for. (The
# PostgreSQL builds stay at the foreground's priority: each major's builds
# wait for its PostgreSQL.)
start_lane() {
    local name=$1 port=$2
    shift 2
    local dir="$SNOWFLAKE_TEST_DIR/$name"
    mkdir -p "$dir"
    chown postgres "$dir"
    (
        renice -n "${SNOWFLAKE_LANE_NICE:-5}" -p "$BASHPID" >/dev/null 2>&1 || true
        export SNOWFLAKE_TEST_PORT=$port SNOWFLAKE_TEST_DIR=$dir
        export LANE_RESULTS="$LOGS/$name.results" LANE_NOTES="$LOGS/$name.notes"
        : >"$LANE_RESULTS"
        : >"$LANE_NOTES"
        "$@"
    ) >"$LOGS/$name.log" 2>&1 &
    lane_pid[$name]=$!
    lanes+=("$name")
    step "Lane $name started beside the builds (log: $LOGS/$name.log)"
}
# Reads what a lane wrote into the summary's table and notes.
collect_lane() {
    local name=$1 major layer_name value
    while read -r major layer_name value; do
        result[$major $layer_name]=$value
    done <"$LOGS/$name.results"
    while IFS= read -r value; do
        [[ -n $value ]] && notes+=("$value")
    done <"$LOGS/$name.notes"
}
# Waits for a lane, prints its log whole, and keeps its results.
finish_lane() {
    local name=$1 rc=0
    [[ -n ${lane_pid[$name]-} ]] || return 0
    wait "${lane_pid[$name]}" || rc=$?
    unset "lane_pid[$name]"
    printf '\n==> Lane %s ended (%ds, exit status %d); its log:\n' "$name" $((SECONDS - started)) "$rc"
    sed 's/^/  | /' "$LOGS/$name.log"
    collect_lane "$name"
    if ((rc)); then
        lane_failed="$lane_failed $name"
    fi
}
finish_lanes() {
    local name
    for name in "${lanes[@]}"; do finish_lane "$name"; done
    if [[ -n $lane_failed ]]; then
        current="lanes:$lane_failed"
        return 1
    fi
}

# Servers left running (by an interrupted run, or by a lane stopped below)
# would hold ports and files: each postmaster under the scratch directory
# is ended at once.
# (With "but-machine", the machine's own server is left for its check.)
stop_servers() {
    local pid_file pid
    [[ -d $SNOWFLAKE_TEST_DIR ]] || return 0
    while IFS= read -r pid_file; do
        [[ ${1-} == but-machine && $pid_file == "$SNOWFLAKE_TEST_DIR/machine/"* ]] && continue
        pid=$(head -n 1 "$pid_file" 2>/dev/null) || continue
        # Only the postmaster of that data directory (a stale file may name
        # a pid some other process has now).
        [[ $pid =~ ^[0-9]+$ && $(readlink "/proc/$pid/cwd" 2>/dev/null) == "$(dirname "$pid_file")" ]] || continue
        kill -9 "$pid" 2>/dev/null || true
    done < <(find "$SNOWFLAKE_TEST_DIR" -name postmaster.pid 2>/dev/null)
}

# A process and all its descendants, children first stopped from forking.
kill_tree() {
    local child
    kill -STOP "$1" 2>/dev/null || true
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$child"; done
    kill -9 "$1" 2>/dev/null || true
}
# A busy machine, on request: N processes that keep a core each busy for
# the whole run (at the run's own priority), ended with it.
load_pids=()
stop_load() {
    local pid
    for pid in "${load_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    load_pids=()
}
# Whether the machine's own server was started (and so is checked and
# stopped at the end).
machine_started=""
summary() {
    local status=$?
    # Whatever fails here, the rest (the machine's check, the table) runs.
    set +e
    [[ -n $current ]] && result[$current]=FAILED
    # A lane still running when the run failed elsewhere: stopped, its
    # servers with it, and what it finished kept.
    local name
    for name in "${!lane_pid[@]}"; do
        kill -- "${lane_pid[$name]}" 2>/dev/null || true
        pkill -P "${lane_pid[$name]}" 2>/dev/null || true
        wait "${lane_pid[$name]}" 2>/dev/null || true
        printf '\n==> Lane %s stopped: the run failed elsewhere; its log so far:\n' "$name"
        sed 's/^/  | /' "$LOGS/$name.log"
        collect_lane "$name"
        stop_servers but-machine
    done
    if [[ -n ${builds_pid-} ]] && ! builds_ended; then
        kill_tree "$builds_pid"
    fi
    stop_load
    # The machine's own server: still answering, its files as they were.
    if [[ -n $machine_started ]]; then
        local machine_rc=0
        if [[ -n ${result[all machine]-} ]]; then
            step "The machine's own PostgreSQL: its server still answers, its extension files unchanged"
            /usr/bin/python3 tests/packaging/machine.py check || machine_rc=$?
            result[all machine]=$([[ $machine_rc == 0 ]] && echo passed || echo FAILED)
        fi
        /usr/bin/python3 tests/packaging/machine.py stop || true
        if ((machine_rc && !status)); then status=$machine_rc; fi
    fi
    local rows=(machine gates core fallback pg_test schema regress update server citus package)
    declare -A title=([machine]="machine left as found" [gates]="gates: fmt, clippy" [fallback]="fallback of sources" [core]="core: cargo test"
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
    # (In the EXIT trap: the run's exit status, the machine's check included.)
    exit "$status"
}
trap summary EXIT
. scripts/versions.sh
majors=("$SYSTEM_MAJOR")

pytest() { /usr/bin/python3 -m pytest -v -s -p no:cacheprovider "$@"; }
# Real-server test files spread over pytest-xdist workers, a file to a
# worker (a file's tests share what its fixtures start).
pytest_spread() {
    /usr/bin/python3 -m pytest -v -p no:cacheprovider -n "$WORKERS" --dist loadfile --durations=15 "$@"
}
gates() {
    cargo fmt --all --check
    # The same code the tests build: the shell with its #[pg_test] tests
    # (pgrx's feature of the system major), and the core.
    cargo clippy "${PGRX_CARGO_FLAGS[@]}" --workspace --all-targets --features "pg$SYSTEM_MAJOR pg_test" -- -D warnings
}
stop_servers
rm -rf "$SNOWFLAKE_TEST_DIR"
mkdir -p "$SNOWFLAKE_TEST_DIR" "$LOGS"
chown postgres "$SNOWFLAKE_TEST_DIR"

# The other majors' PostgreSQL, built from source in the background from
# the start (compiling PostgreSQL takes minutes on a machine as it comes),
# beside everything else here (at the same priority: a build niced below
# the lanes' tests left the foreground waiting for it for minutes). The
# two newest first (their lanes are the longest), then the oldest
# (pg_upgrade starts from it), then the rest; each major is tested as soon
# as its build is in
# ($BUILDS_REPORT says so, a line per major, as postgres-builds.sh goes).
BUILDS_REPORT="$LOGS/builds.report"
builds_ended() { [[ -s "$LOGS/builds.rc" ]]; }
builds_order=$(tr ' ' '\n' <<<"$OTHER_MAJORS" | sed '/^$/d' | sort -rn | awk '
    { m[NR] = $1 } END { for (i = 1; i <= NR && i <= 2; i++) print m[i]; if (NR > 2) print m[NR]; for (i = 3; i < NR; i++) print m[i] }' | xargs)
scripts/setup.sh --packages

if [[ ${SNOWFLAKE_TEST_LOAD:-0} =~ ^[1-9][0-9]*$ ]]; then
    step "Load: $SNOWFLAKE_TEST_LOAD CPU hogs beside the whole run (SNOWFLAKE_TEST_LOAD)"
    # Each ends by itself once this run is gone, however it ended.
    for ((i = 0; i < SNOWFLAKE_TEST_LOAD; i++)); do
        bash -c 'while kill -0 "$1" 2>/dev/null; do :; done' hog $$ &
        load_pids+=($!)
    done
fi

# The machine's own PostgreSQL, as its user may run it: a server started
# from it before anything else here, with the extension it has loaded (if
# it has it), checked at the end (in summary).
if wanted machine; then
    step "The machine's own PostgreSQL: a server of it started beside the run, its extension files noted"
    machine_started=yes
    current="all machine"
    SNOWFLAKE_TEST_PORT=59900 /usr/bin/python3 tests/packaging/machine.py start
    current=""
    result[all machine]="running"
fi

# The test command's own copy of the system's PostgreSQL, where every
# install of this run goes (versions.sh), and pgrx's configuration of its
# own pointing at it: the user's (~/.pgrx, which the demo uses) stays.
# (Every run makes it, a second or two: pgrx's configuration names it even
# where no layer runs a server.) A PGRX_HOME of the user's is not used:
# `cargo pgrx init` would point its pg15 at this copy.
step "The test command's own PostgreSQL $SYSTEM_MAJOR: a copy of the machine's, at $OWN_SYSTEM_PG"
own_system_postgres
export SNOWFLAKE_SYSTEM_PG_CONFIG="$OWN_SYSTEM_PG_CONFIG"
export SNOWFLAKE_SYSTEM_PG_BIN="$(dirname "$OWN_SYSTEM_PG_CONFIG")"
export PGRX_HOME="${SNOWFLAKE_PGRX_HOME:-/var/cache/snowflake_id/pgrx-home}"
mkdir -p "$PGRX_HOME"
: >"$BUILDS_REPORT"
builds_pid=""
if [[ -n $builds_order ]]; then
    step "PostgreSQL $builds_order: built from source in the background, or unpacked from Debian's packages where no source is served (log: $LOGS/postgres-builds.log)"
    (
        rc=0
        SNOWFLAKE_BUILDS_REPORT="$BUILDS_REPORT" scripts/postgres-builds.sh $builds_order || rc=$?
        echo "$rc" >"$LOGS/builds.rc"
    ) >"$LOGS/postgres-builds.log" 2>&1 &
    builds_pid=$!
else
    echo 0 >"$LOGS/builds.rc"
fi

# What the gates and the core need first: a failing gate stops the run in
# minutes, not after the PostgreSQL builds.
scripts/setup.sh --toolchain
pgrx_flags
layer all gates "Gates: cargo fmt --check, cargo clippy -D warnings" gates
layer all core "Core: unit and property tests" cargo test -p snowflake_id_core

# The fallback tests run test.sh itself and ask Debian's mirror: beside
# the builds.
fallback_lane() {
    layer all fallback "A major nobody serves is skipped and said; a required one fails the run; the machine's mirror; META.json; layers" \
        pytest tests/packaging/test_builds.py tests/packaging/test_meta.py tests/source
}

# What the system's major needs besides: the client libraries.
SNOWFLAKE_OTHER_MAJORS="" scripts/setup.sh
# After the setup: the run of test.sh inside it checks the same packages.
wanted fallback && start_lane fallback 59400 fallback_lane
PG_CONFIG="$OWN_SYSTEM_PG_CONFIG"

schema() {
    local version
    version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
    # The release build the installs and the packages use: built once.
    cargo pgrx schema --release "pg$SYSTEM_MAJOR" -o "$SNOWFLAKE_TEST_DIR/schema.sql"
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
        lane_skip "$m" citus "no Citus"
        lane_note "!!! The Citus cluster tests did NOT run on PostgreSQL $m: ${out##*unavailable: }"
        return 0
    fi
    ((rc == 0)) || { echo "$m citus FAILED" >>"$LANE_RESULTS"; return "$rc"; }
    layer "$m" citus "PostgreSQL $m: a real Citus cluster (coordinator and two workers)" \
        pytest tests/citus
}
# Installs the release build into a PostgreSQL, and makes its Debian
# package from the same build, right away: pgrx's build of the next major
# would have to be redone for a package made later.
install_into() {
    step "PostgreSQL $1: installing the extension (release build)"
    cargo pgrx install --release --pg-config "$2"
    if wanted package; then
        step "PostgreSQL $1: its Debian package, from the same build"
        current="$1 package"
        scripts/package.sh "$1"
        current=""
    fi
}

# The system's major: its lane starts once the extension is installed.
m=$SYSTEM_MAJOR
layer "$m" pg_test "PostgreSQL $m: #[pg_test] tests in a real PostgreSQL" \
    pgrx_test "pg$m" --runas postgres --pgdata "$SNOWFLAKE_TEST_DIR/pgrx"
layer "$m" schema "sql/: the committed install script matches what the code generates" schema
# A lane goes on after a failed layer (each layer starts servers of its
# own), so that one run says everything that fails; it fails at its end.
system_lane() {
    local rc=0
    export PG_BIN="$SNOWFLAKE_SYSTEM_PG_BIN" PG_REGRESS="$(dirname "$("$PG_CONFIG" --pgxs)")/../test/regress/pg_regress"
    layer "$m" regress "PostgreSQL $m: regression files" pytest tests/regress/test_regress.py || rc=1
    layer "$m" update "PostgreSQL $m: the update from 0.1.0" pytest tests/packaging/test_upgrade.py || rc=1
    layer "$m" server "PostgreSQL $m: real servers: one server, replication and copies, clients" \
        pytest_spread "${server_tests[@]}" || rc=1
    return $rc
}
# The Citus cluster tests of a major are a lane of their own, beside its
# real-server tests: both mostly wait (claims refreshes, clocks, nodes
# added), and Citus's build runs while they do.
if wanted regress || wanted update || wanted server || wanted citus || wanted package; then
    install_into "$m" "$PG_CONFIG"
    start_lane "pg$m" 55400 system_lane
    # Citus lanes take their ports from 61000 up (a lane's 100 per
    # cluster's worth, 400 apart), above every other lane's.
    if wanted citus; then start_lane "citus$m" 61000 citus_layer "$m" "$PG_CONFIG"; fi
fi

# The other majors, each as soon as its build is in: its #[pg_test] tests,
# its install and package, then its lane. A major whose source could not
# be had is said here and at the end.
# The builds' log, once they end: where a major could not be had, with
# the errors.
builds_said=false
say_builds() {
    $builds_said && return 0
    builds_said=true
    if [[ $(cat "$LOGS/builds.rc") != 0 ]] || grep -q '^!!!' "$LOGS/postgres-builds.log"; then
        sed 's/^/  | /' "$LOGS/postgres-builds.log" >&2
    else
        sed 's/^/  | /' "$LOGS/postgres-builds.log"
    fi
}
# Waits until the builds have said whether major $1 could be had; a
# failure of the builds (a required major that cannot be had) ends the run.
wait_build() {
    until grep -q "^$1 " "$BUILDS_REPORT"; do
        builds_ended && { builds_over; return; }
        sleep 1
    done
}
# The builds' end, their log said; their failure ends the run.
builds_over() {
    until builds_ended; do sleep 1; done
    say_builds
    local rc
    rc=$(cat "$LOGS/builds.rc")
    if ((rc)); then
        current="all setup"
        exit "$rc"
    fi
}
available_build() { wait_build "$1" && grep -q "^$1 available " "$BUILDS_REPORT"; }
# The newest available major gets every real-server test: known once every
# major above it has been said.
newest=""
find_newest() {
    local n
    for n in $(tr ' ' '\n' <<<"$OTHER_MAJORS" | sort -rn); do
        if available_build "$n"; then
            newest=$n
            return
        fi
    done
}
# Whether a major's build is a beta or release candidate: 19~rc1 (Debian's
# version, from a fresh build) or 19rc1 (pg_config's, from the cache).
prerelease() { is_prerelease "$(awk -v m="$1" '$1 == m && $2 == "available" { print $3 }' "$BUILDS_REPORT")"; }
# Every real-server test and Citus run on the newest major, and where that
# is a pre-release, on the newest release as well: what most servers run
# keeps every test while the next major is tried.
full_tests() {
    local m=$1 n
    [[ $m == "$newest" ]] && return 0
    prerelease "$newest" && ! prerelease "$m" || return 1
    for n in $OTHER_MAJORS; do
        if ((n > m && n < newest)) && available_build "$n" && ! prerelease "$n"; then return 1; fi
    done
}
# The major pg_upgrade into $1 starts from: for the newest, the available
# major just before it (the upgrade its first users make); for the others,
# the oldest (the longest jump). Nothing for the oldest itself.
upgrade_source() {
    local m=$1 oldest n from=""
    oldest=$(oldest_available)
    [[ $m == "$oldest" ]] && return 0
    if [[ $m == "$newest" ]]; then
        for n in $(awk '$2 == "available" { print $1 }' "$BUILDS_REPORT" | sort -n); do
            ((n < m)) && from=$n
        done
        echo "$from"
    else
        echo "$oldest"
    fi
}
# The oldest available major, for pg_upgrade from it: a lane asks once
# every build has ended.
oldest_available() {
    until builds_ended; do sleep 1; done
    awk '$2 == "available" { print $1 }' "$BUILDS_REPORT" | sort -n | head -n 1
}
# What the build lane has installed: "installed-<major>" in $LOGS.
installed() { [[ -f "$LOGS/installed-$1" ]]; }
# Each other major's lane, with its PostgreSQL: pg_regress sits beside PGXS,
# wherever configure put the library directory (prefix/lib, or
# prefix/lib/postgresql). The real-server tests come first: pg_upgrade
# needs the older major installed, which the build lane does meanwhile.
# (Citus tests are a lane of their own.)
other_lane() {
    local m=$1 bin=$2 rc=0 from
    export PG_BIN="$bin" PG_REGRESS="$(dirname "$("$bin/pg_config" --pgxs)")/../test/regress/pg_regress"
    if [[ $m == "$newest" ]]; then
        layer "$m" server "PostgreSQL $m: every real-server test" pytest_spread "${server_tests[@]}" || rc=1
    elif full_tests "$m"; then
        # The newest release beside a pre-release: every test of one server
        # and of replication. Not the client recipes, which drive the
        # applications' libraries through the same SQL on every major, and
        # are the costliest files (run on 15 and on the newest).
        layer "$m" server "PostgreSQL $m: every real-server test but the client recipes" \
            pytest_spread tests/server tests/replication || rc=1
    fi
    layer "$m" regress "PostgreSQL $m: regression files" pytest tests/regress/test_regress.py || rc=1
    from=$(upgrade_source "$m")
    if [[ -n $from ]] && wanted update; then
        # pg_upgrade from an older major built here, once it has the
        # extension. Not from the system's: Debian's 15.20 gives every
        # table a reloption (pg_attver) that builds of an earlier release
        # round, as the pinned ones are, do not know. (A build lane that
        # fails stops this lane: the wait ends with the run.)
        until installed "$from"; do sleep 1; done
        SNOWFLAKE_UPGRADE_FROM_BIN="$PG_CACHE/$from/bin" \
            layer "$m" update "PostgreSQL $m: the update from 0.1.0, pg_upgrade from $from" \
            pytest tests/packaging/test_upgrade.py tests/packaging/test_pg_upgrade.py || rc=1
    else
        layer "$m" update "PostgreSQL $m: the update from 0.1.0" pytest tests/packaging/test_upgrade.py || rc=1
    fi
    return $rc
}
# The Citus lane of a major with every test, with its PostgreSQL.
other_citus_lane() {
    export PG_BIN="$2"
    citus_layer "$1" "$2/pg_config"
}
port=56400
citus_port=61400
available=""
majors=("$SYSTEM_MAJOR" $OTHER_MAJORS)
for m in $builds_order; do
    step "PostgreSQL $m: waiting for its build"
    if ! available_build "$m"; then
        why=$(sed -n "s/^$m unavailable //p" "$BUILDS_REPORT")
        for r in pg_test regress update server citus package; do skip "$m" "$r" "no source"; done
        notes+=("!!! PostgreSQL $m was NOT tested: ${why:-no build}")
        printf '\n%s\n' "${notes[-1]}" >&2
        # A required one fails the run (the builds say so as they end).
        [[ " ${SNOWFLAKE_REQUIRED_MAJORS-} " == *" $m "* ]] && builds_over
        continue
    fi
    available="$available $m"
    [[ -n $newest ]] || find_newest
    if ! full_tests "$m"; then
        skip "$m" server "newest only"
        skip "$m" citus "newest only"
    fi
    result[$m schema]="-"
    scripts/setup.sh --pgrx $available
    bin="$PG_CACHE/$m/bin"
    layer "$m" pg_test "PostgreSQL $m: #[pg_test] tests" \
        pgrx_test "pg$m" --runas postgres --pgdata "$SNOWFLAKE_TEST_DIR/pgrx$m"
    wanted regress || wanted update || wanted server || wanted citus || wanted package || continue
    install_into "$m" "$bin/pg_config"
    chmod -R a+rX "$PG_CACHE/$m/"
    touch "$LOGS/installed-$m"
    start_lane "pg$m" "$port" other_lane "$m" "$bin"
    if full_tests "$m" && wanted citus; then
        start_lane "citus$m" "$citus_port" other_citus_lane "$m" "$bin"
        citus_port=$((citus_port + 400))
    fi
    port=$((port + 500))
done
builds_over
export SNOWFLAKE_AVAILABLE_MAJORS="${available# }"

step "Waiting for the lanes"
# A lane that failed does not keep the packages from being tried: one run
# says everything, and the run fails at its end.
lanes_ok=true
finish_lanes || lanes_ok=false
current=""
# The packages made above are installed with apt once every lane is over:
# installing them takes each major's development files away from under
# its servers. With apt, in a private copy of /usr, /etc and /var that
# ends with the test: the machine's own PostgreSQL keeps the files it had.
# Their cluster listens on TCP: on a port below Linux's ephemeral range,
# which the lanes' own connections may hold a moment.
package() {
    local rc=0
    # (Stand-ins an interrupted run of an older version of this script left
    # on the machine are purged first, in the private copy alone.)
    SNOWFLAKE_TEST_PORT=30400 scripts/private-system.sh bash -c '
        /usr/bin/python3 tests/packaging/test_packages.py --remove-stand-ins &&
        exec /usr/bin/python3 -m pytest -v -s -p no:cacheprovider tests/packaging/test_packages.py tests/packaging/test_machine.py' ||
        rc=$?
    for m in "$SYSTEM_MAJOR" $SNOWFLAKE_AVAILABLE_MAJORS; do result[$m package]=$([[ $rc == 0 ]] && echo passed || echo FAILED); done
    return $rc
}
package_rc=0
if wanted package; then
    step "Packages: each installed with apt and used"
    package || package_rc=$?
fi
if ! $lanes_ok; then
    current="lanes:$lane_failed"
    exit 1
fi
((package_rc == 0)) || exit "$package_rc"
