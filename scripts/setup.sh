#!/usr/bin/env bash
# Installs everything snowflake_id needs to build, test and benchmark on
# Debian 12, as root: Debian packages, the Rust toolchain if missing,
# rustfmt and clippy, cargo-pgrx (versions.sh), PostgreSQL 13, 17, 18 and 19
# from Debian's source packages where their source can be had (19 from its
# binary packages where not)
# (scripts/postgres-builds.sh, cached outside the repository), and
# `cargo pgrx init` against the system PostgreSQL 15 and those builds.
# Safe to run again: it only installs what is missing.
#
#   scripts/setup.sh --packages    only the Debian packages: what the
#                                  PostgreSQL builds need, which the test
#                                  command starts beside everything else.
#   scripts/setup.sh --toolchain   only what the gates need (packages, Rust,
#                                  cargo-pgrx, pgrx pointed at the system's
#                                  PostgreSQL): the test command runs its
#                                  gates before the slow builds.
#   scripts/setup.sh --pgrx M...   only pgrx pointed at the system's
#                                  PostgreSQL and the cached builds of the
#                                  majors M (the test command, as each
#                                  build ends).
set -euo pipefail
mode=all
case ${1-} in
--packages | --toolchain | --pgrx) mode=${1#--}; shift ;;
esac

. "$(dirname "$0")/versions.sh"
PG_MAJOR=$SYSTEM_MAJOR
# pgrx's system major: the machine's PostgreSQL, or the test command's own
# copy of it (test.sh: the machine's own is never written to).
PG_CONFIG="${SNOWFLAKE_SYSTEM_PG_CONFIG:-/usr/lib/postgresql/$PG_MAJOR/bin/pg_config}"

say() { printf '\n==> %s\n' "$*"; }

if [[ $(id -u) -ne 0 ]]; then
    echo "setup.sh installs system packages: run it as root." >&2
    exit 1
fi

packages=(
    build-essential pkg-config clang libclang-dev libssl-dev ca-certificates curl git
    "postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR" libpq-dev
    sudo faketime libfaketime bison flex zlib1g-dev
    # A major run from Debian's binary packages (postgres-from-packages.sh).
    patchelf
    "postgresql-$PG_MAJOR-pglogical"
    python3 python3-psycopg2 python3-pytest python3-pytest-xdist python3-matplotlib
    python3-psycopg python3-venv
    # Citus, built for the cluster tests (scripts/citus-builds.sh); its
    # headers of Debian's 15 include GSSAPI's.
    libcurl4-openssl-dev liblz4-dev libzstd-dev libkrb5-dev
    # The Ruby and Java recipes of docs/applications.md (tests/clients/apps).
    ruby-activerecord ruby-pg libpostgresql-jdbc-java libjackson2-databind-java
    # And the Go recipe's compiler (its libraries' sources: below).
    golang-go
)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js for the client example: Debian's nodejs and npm unless the
# commands are there already (a NodeSource nodejs brings its own npm and
# conflicts with Debian's).
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
# A JDK for the Java recipe (run as a single source file): the one there, or
# Debian's.
command -v javac >/dev/null || missing+=(default-jdk-headless)
if ((${#missing[@]})); then
    say "Installing Debian packages: ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
[[ $mode == packages ]] && exit 0

export PATH="$HOME/.cargo/bin:$PATH"
# rustup, not just any cargo: the gates add rustfmt and clippy with it, and
# cargo-pgrx needs a newer Rust than Debian's own packages. A
# Debian cargo already on the PATH stays; rustup's comes first on it.
if ! command -v rustup >/dev/null; then
    say "Installing the Rust toolchain (rustup)"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
        RUSTUP_INIT_SKIP_PATH_CHECK=yes sh -s -- -y --profile minimal
fi

# The gates the test command runs first (cargo fmt, cargo clippy).
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    say "Installing rustfmt and clippy"
    rustup component add rustfmt clippy
fi

pgrx_flags
if ! cargo pgrx --version 2>/dev/null | grep -qF "$PGRX_VERSION"; then
    # Unoptimized, without debug information: cargo-pgrx only drives cargo
    # and copies files (the builds it starts are optimized as the project
    # says), and an optimized build of its 300 crates took 5 minutes of both
    # cores on a machine as it comes.
    say "Installing cargo-pgrx $PGRX_VERSION (takes about 2 minutes)"
    # (--ignore-rust-version where this Rust is older than pgrx declares: versions.sh.)
    CARGO_PROFILE_DEV_DEBUG=false cargo install cargo-pgrx --version "$PGRX_VERSION" --locked --debug "${PGRX_CARGO_FLAGS[@]}"
fi

# pgrx pointed at PostgreSQL majors given as "--pgNN pg_config" pairs,
# unless its configuration already names each.
pgrx_init() {
    local config="${PGRX_HOME:-$HOME/.pgrx}/config.toml" i key
    for ((i = 1; i <= $#; i += 2)); do
        key=${!i#--}
        local j=$((i + 1))
        if ! grep -qsF "$key = \"${!j}\"" "$config"; then
            say "Pointing pgrx at PostgreSQL: ${*//--pg/pg}"
            cargo pgrx init "$@"
            return
        fi
    done
}
pgrx_args=("--pg$PG_MAJOR" "$PG_CONFIG")
if [[ $mode == pgrx ]]; then
    for m in "$@"; do pgrx_args+=("--pg$m" "$PG_CACHE/$m/bin/pg_config"); done
fi
if [[ $mode != all ]]; then
    pgrx_init "${pgrx_args[@]}"
    exit 0
fi

# The client example's and the JavaScript recipes' packages (examples/node,
# tests/clients/apps/node), each pinned by its lock file; npm keeps what it
# downloaded in ~/.npm, so a second clone installs from there. No install
# scripts run (npm 11 here skips those its allowScripts does not name; npm 10
# would run them): none is needed, and Prisma's would try to download its
# engines.
for dir in examples/node tests/clients/apps/node; do
    here="$(dirname "$0")/../$dir"
    if [[ ! -f "$here/node_modules/.package-lock.json" || "$here/package-lock.json" -nt "$here/node_modules/.package-lock.json" ]]; then
        say "Installing the Node.js packages of $dir (npm ci)"
        (cd "$here" && npm ci --no-audit --no-fund --ignore-scripts)
    fi
done

# The client libraries and frameworks the tests drive (tests/drivers/requirements.txt:
# the drivers, and Django, SQLAlchemy and Alembic for tests/clients/apps/python),
# pinned, in a virtual environment outside the repository named after the
# requirements' checksum: a second run reuses it.
requirements="$(dirname "$0")/../tests/drivers/requirements.txt"
venv="${SNOWFLAKE_VENV:-/var/cache/snowflake_id/venv-$(sha256sum "$requirements" | cut -c1-12)}"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import psycopg, asyncpg, django, sqlalchemy, alembic" 2>/dev/null; then
    say "Installing the client libraries the tests drive (pip, into $venv)"
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
    chmod -R a+rX "$venv"
fi

# The Go recipe's libraries (tests/clients/apps/go): pgx v4 and what it
# imports, as Debian 12 packages their sources, unpacked into a GOPATH of
# their own outside the repository (the recipe builds in GOPATH mode, with
# no module download). Not installed as packages: pgx's package pulls in
# every logging library pgx has an adapter for, and through one of them
# libsystemd-dev, which would upgrade this machine's systemd.
gopath="${SNOWFLAKE_GOPATH:-/var/cache/snowflake_id/gopath-pgx-v4}"
go_sources=(golang-github-jackc-pgx-v4-dev golang-github-jackc-pgconn-dev golang-github-jackc-pgtype-dev
    golang-github-jackc-pgproto3-v2-dev golang-github-jackc-pgio-dev golang-github-jackc-chunkreader-v2-dev
    golang-github-jackc-pgpassfile-dev golang-github-jackc-pgservicefile-dev golang-github-jackc-puddle-dev
    golang-golang-x-crypto-dev golang-golang-x-text-dev)
# Complete when its VERSIONS (written last) names every package above.
go_complete() {
    local p
    for p in "${go_sources[@]}"; do grep -qs "^$p " "$gopath/VERSIONS" || return 1; done
}
if ! go_complete; then
    say "Unpacking pgx v4's sources for the Go recipe (apt-get download, into $gopath)"
    debs=$(mktemp -d)
    trap 'rm -rf "$debs"' EXIT
    chown _apt "$debs" 2>/dev/null || true
    # Package lists may be absent when every package above was there already.
    if ! (cd "$debs" && apt-get download -q "${go_sources[@]}"); then
        rm -f "$debs"/*.deb
        apt-get update -q
        (cd "$debs" && apt-get download -q "${go_sources[@]}")
    fi
    rm -rf "$gopath"
    mkdir -p "$debs/root"
    for deb in "$debs"/*.deb; do
        dpkg-deb -x "$deb" "$debs/root"
        dpkg-deb -W --showformat='${Package} ${Version}\n' "$deb" >>"$debs/VERSIONS"
    done
    mkdir -p "$gopath"
    mv "$debs/root/usr/share/gocode/src" "$gopath/src"
    chmod -R a+rX "$gopath"
    # Last: a GOPATH with its VERSIONS is complete.
    mv "$debs/VERSIONS" "$gopath/VERSIONS"
    chmod a+r "$gopath/VERSIONS"
    rm -rf "$debs"
    trap - EXIT
fi

# The other majors the extension is built and tested on (the demo and the
# benchmark need only the system's: they set SNOWFLAKE_OTHER_MAJORS=""). A
# major whose source cannot be had is reported and left out (see
# postgres-builds.sh); SNOWFLAKE_BUILDS_REPORT, if set, receives the report.
available=()
if [[ -n "$OTHER_MAJORS" ]]; then
    report="${SNOWFLAKE_BUILDS_REPORT:-$(mktemp)}"
    SNOWFLAKE_BUILDS_REPORT="$report" "$(dirname "$0")/postgres-builds.sh" $OTHER_MAJORS
    mapfile -t available < <(awk '$2 == "available" { print $1 }' "$report")
    [[ -n ${SNOWFLAKE_BUILDS_REPORT-} ]] || rm -f "$report"
fi

for m in "${available[@]}"; do
    pgrx_args+=("--pg$m" "$PG_CACHE/$m/bin/pg_config")
done
pgrx_init "${pgrx_args[@]}"
