# The PostgreSQL majors snowflake_id is built and tested on, read by
# setup.sh, test.sh and package.sh. 15 is Debian 12's own, and required:
# without it nothing is tested. The others are built from Debian's source
# packages by postgres-builds.sh (14 and 16 have none there; 13 is
# end-of-life but cheap to keep), or, where no source is served (19's
# release candidate, here), run from Debian's binary packages; each is
# tested where it can be had, and a run that could not have one says so (SNOWFLAKE_REQUIRED_MAJORS
# makes that a failure instead).
SYSTEM_MAJOR=15
OTHER_MAJORS="${SNOWFLAKE_OTHER_MAJORS-13 17 18 19}"
# Those of OTHER_MAJORS this machine has builds of (test.sh sets it after
# setup; by default all of them).
AVAILABLE_MAJORS="${SNOWFLAKE_AVAILABLE_MAJORS-$OTHER_MAJORS}"
PG_CACHE="${SNOWFLAKE_PG_CACHE:-/var/cache/snowflake_id/postgres}"
# pgrx: 0.19.3 is the first release that knows PostgreSQL 19, and it
# declares Rust 1.96. It builds on 1.95 (the toolchain these machines
# have), but cargo refuses a crate whose declared Rust is newer than the
# toolchain unless told. Where the toolchain is older, pgrx_flags (called
# once Rust is installed) tells every build: PGRX_CARGO_FLAGS for cargo
# itself (cargo install, cargo clippy), PGRX_BUILD_FLAGS (exported) for the
# builds cargo pgrx install, package and schema run, and pgrx_test runs
# `cargo pgrx test` with a cargo that passes the flag to `cargo test`.
PGRX_VERSION=0.19.3
PGRX_RUST_VERSION=1.96
PGRX_CARGO_FLAGS=()
pgrx_flags() {
    local have
    have=$(rustc --version 2>/dev/null | awk '{print $2}')
    PGRX_CARGO_FLAGS=()
    if [[ -n $have && $(printf '%s\n%s\n' "$have" "$PGRX_RUST_VERSION" | sort -V | head -n 1) != "$PGRX_RUST_VERSION" ]]; then
        PGRX_CARGO_FLAGS=(--ignore-rust-version)
        [[ " ${PGRX_BUILD_FLAGS-} " == *" --ignore-rust-version "* ]] ||
            export PGRX_BUILD_FLAGS="${PGRX_BUILD_FLAGS:+$PGRX_BUILD_FLAGS }--ignore-rust-version"
    fi
}
pgrx_test() {
    if ((${#PGRX_CARGO_FLAGS[@]})); then
        REAL_CARGO=$(command -v cargo) CARGO="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cargo-ignoring-rust-version" \
            cargo-pgrx pgrx test "$@"
    else
        cargo pgrx test "$@"
    fi
}
# Whether a PostgreSQL version is a beta or release candidate, written
# either way: Debian's 19~rc1 or PostgreSQL's own 19rc1.
is_prerelease() { [[ $1 =~ ^[0-9.]+(~|alpha|beta|rc|devel) ]]; }
# The version of the PostgreSQL whose pg_config is $1, the Debian way: a
# beta or release candidate sorts before its release (19rc1 is 19~rc1).
debian_pg_version() {
    "$1" --version | awk '{print $2}' | sed -E 's/^([0-9.]+)(alpha|beta|rc|devel)/\1~\2/'
}
# The test command's own PostgreSQL of the system's major: a copy of
# Debian's install (its programs, libraries, modules, shared files and
# server headers) under OWN_SYSTEM_PG, where the test command installs the
# extension and runs its servers. The machine's own PostgreSQL is never
# written to: replacing a library in place kills every running server that
# has it loaded (SIGSEGV, SIGBUS), and a user's server with the extension
# must outlive the tests. PostgreSQL finds its share and library
# directories relative to where its programs are (make_relative_path in
# src/port/path.c), so the copy at another prefix is a whole installation.
OWN_SYSTEM_PG="${SNOWFLAKE_OWN_SYSTEM_PG:-/var/cache/snowflake_id/own-postgres-$SYSTEM_MAJOR}"
OWN_SYSTEM_PG_CONFIG="$OWN_SYSTEM_PG/usr/lib/postgresql/$SYSTEM_MAJOR/bin/pg_config"
# Makes the copy anew (about 60 MB, a second or two): from whatever
# Debian's packages installed since (pglogical, a point release), without
# any snowflake_id file the machine had.
own_system_postgres() {
    local m=$SYSTEM_MAJOR new="$OWN_SYSTEM_PG.new"
    rm -rf "$new"
    mkdir -p "$new/usr/lib/postgresql" "$new/usr/share/postgresql" "$new/usr/include"
    cp -a "/usr/lib/postgresql/$m" "$new/usr/lib/postgresql/"
    cp -a "/usr/share/postgresql/$m" "$new/usr/share/postgresql/"
    cp -a /usr/include/postgresql "$new/usr/include/"
    find "$new" -name 'snowflake_id*' -exec rm -rf {} +
    chmod -R a+rX "$new"
    rm -rf "$OWN_SYSTEM_PG"
    mv "$new" "$OWN_SYSTEM_PG"
}
