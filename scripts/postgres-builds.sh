#!/usr/bin/env bash
# Builds the PostgreSQL majors Debian 12 does not package (13, 17, 18) from
# the upstream tarballs Debian's source packages hold (13 in bullseye, 17 in
# trixie, 18 in sid; binary packages of those suites need a newer C library
# than Debian 12's), into a cache outside the repository keyed by the exact
# version, so a second run reuses them.
#
#   scripts/postgres-builds.sh [MAJOR...]      (default: 13 17 18)
#
# Afterwards $SNOWFLAKE_PG_CACHE/<major>/bin/pg_config (default cache:
# /var/cache/snowflake_id/postgres) points at each build. Run as root; safe
# to run again.
set -euo pipefail

CACHE="${SNOWFLAKE_PG_CACHE:-/var/cache/snowflake_id/postgres}"
majors=("$@")
((${#majors[@]})) || majors=(13 17 18)

say() { printf '\n==> %s\n' "$*"; }

suite_of() {
    case "$1" in
        13) echo bullseye ;;
        17) echo trixie ;;
        18) echo sid ;;
        *) echo "postgres-builds.sh: no Debian source package is used for PostgreSQL $1" >&2; exit 1 ;;
    esac
}

# A private apt configuration: deb-src lines for other suites must not reach
# the system's own sources.
APT="$CACHE/apt"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$CACHE/src"
: >"$APT/sources.list"
for m in "${majors[@]}"; do
    echo "deb-src http://deb.debian.org/debian $(suite_of "$m") main" >>"$APT/sources.list"
done
apt_opts=(-o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null -o APT::Sandbox::User=root
    -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache")

# Built once per version; the lists are refreshed only when a build is missing.
version_of() {
    apt-cache "${apt_opts[@]}" showsrc "postgresql-$1" 2>/dev/null |
        sed -n 's/^Version: \(.*\)-[^-]*$/\1/p' | sed 's/^[0-9]*://' | sort -V | tail -n 1
}
# Complete once contrib is in: configure puts the libraries in prefix/lib, or
# in prefix/lib/postgresql when the prefix names no "postgres" or "pgsql".
built() { [[ -x "$1/bin/pg_config" && -f "$("$1/bin/pg_config" --pkglibdir)/pg_stat_statements.so" ]]; }
updated=false
for m in "${majors[@]}"; do
    if built "$CACHE/$m"; then
        echo "PostgreSQL $m: $("$CACHE/$m/bin/pg_config" --version) (cached in $CACHE/$m)"
        continue
    fi
    if ! $updated; then
        say "Reading Debian's source package lists"
        apt-get "${apt_opts[@]}" update -q
        updated=true
    fi
    version=$(version_of "$m")
    [[ -n "$version" ]] || { echo "no source package postgresql-$m found" >&2; exit 1; }
    prefix="$CACHE/$m-$version"
    if ! built "$prefix"; then
        say "Building PostgreSQL $version (about 5 minutes on 2 cores)"
        (
            cd "$CACHE/src"
            apt-get "${apt_opts[@]}" source --download-only -q "postgresql-$m" >/dev/null
            tarball=$(ls "postgresql-${m}_${version}.orig.tar."* | head -n 1)
            rm -rf "postgresql-$version"
            tar -xf "$tarball"
            cd "postgresql-$version"
            # Only what the extension's build and tests need: no ICU, no readline.
            ./configure --prefix="$prefix" --without-icu --without-readline --with-zlib -q
            make -s -j"$(nproc)"
            make -s install
            # What the tests load besides the extension: pg_stat_statements (a
            # second preloaded library) and pg_walinspect (15+: counts the
            # mark's WAL records).
            for module in pg_stat_statements pg_walinspect; do
                if [[ -d "contrib/$module" ]]; then
                    make -s -C "contrib/$module" install
                fi
            done
            cd .. && rm -rf "postgresql-$version"
        )
    fi
    ln -sfn "$prefix" "$CACHE/$m"
    echo "PostgreSQL $m: $("$CACHE/$m/bin/pg_config" --version) (in $CACHE/$m)"
done
# The servers of the tests run as postgres and load libraries from here.
chmod -R a+rX "$CACHE"
