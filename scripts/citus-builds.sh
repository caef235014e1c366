#!/usr/bin/env bash
# Builds Citus for the tests that run a real Citus cluster, from the sources
# kept beside the project (../shared/vendor: no registry here serves them),
# and installs it into a PostgreSQL. Each build is cached outside the
# repository, keyed by the Citus version, the PostgreSQL version it was
# built against, where that PostgreSQL lives, and the recipe, as an install image; a second run only
# copies the image in.
#
#   scripts/citus-builds.sh <pg_config>
#
# Citus 14 supports PostgreSQL 16 to 18, Citus 13 15 to 17 (its sources need
# a one-line patch to compile against 15.20 and later 15.x, kept beside them).
# No Citus release supports 19: the newest, 14.0.1, refuses it at configure,
# and so does Citus's main branch as of May 2026 (configure.ac accepts 16,
# 17 and 18), though it has begun naming 19 (pg_version_constants.h).
# Prints one line and exits 0 when Citus is installed; when it cannot be (no
# sources, a checksum that does not match, no Citus for that major, a failed
# build), prints "unavailable: <why>" as its last line and exits 3. Run as
# root; safe to run again.
set -euo pipefail

PG_CONFIG=$1
VENDOR="${SNOWFLAKE_VENDOR_DIR:-$(cd "$(dirname "$0")/.." && pwd)/../shared/vendor}"
CACHE="${SNOWFLAKE_CITUS_CACHE:-/var/cache/snowflake_id/citus}"
RECIPE=r1

unavailable() {
    printf '\n!!! Citus is UNAVAILABLE for %s: %s\n' "$("$PG_CONFIG" --version)" "$1" >&2
    echo "unavailable: $1"
    exit 3
}

major=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
pg_version=$("$PG_CONFIG" --version | awk '{print $2}')
case "$major" in
    15) citus=13.2.2 ;;
    16 | 17 | 18) citus=14.0.1 ;;
    19) unavailable "no Citus release supports PostgreSQL 19 yet (the newest, 14.0.1, supports 16 to 18)" ;;
    *) unavailable "no Citus release here supports PostgreSQL $major" ;;
esac
# The checksums the vendor folder's README gives.
declare -A sha=(
    [citus-14.0.1-src.tar.gz]=a4186382a5e010f792b4e8d5e9f261652d11f1d0f4b653e720b24fbab5751185
    [citus-13.2.2-src.tar.gz]=456ddc859cbbbe5fa5de0e16f30ef1b701892834ab1dbeded3596d3f14a0ef24
    [citus-13.2.2-pg15.20.patch]=3c00eb5bd118409186e027f779cccdd6ae75b48dd28fb39467537a0372dfdb48
)
tarball="citus-$citus-src.tar.gz"
patches=()
[[ $citus == 13.2.2 ]] && patches=(citus-13.2.2-pg15.20.patch)

# The image holds its files at the paths of the PostgreSQL it was built
# against: keyed by where that PostgreSQL is too (two builds of one version,
# as the benchmark's and the tests' builds of 18 are, each get their own).
where=$(cd "$(dirname "$PG_CONFIG")" && pwd -P)
key="$CACHE/$citus-pg$pg_version-$RECIPE-$(printf '%s' "$where" | sha256sum | cut -c1-12)"
image="$key/image"
if [[ ! -f "$key/complete" ]]; then
    [[ -d $VENDOR ]] || unavailable "its sources are not here ($VENDOR does not exist: a clone without ../shared)"
    for f in "$tarball" "${patches[@]}"; do
        [[ -f "$VENDOR/$f" ]] || unavailable "$VENDOR/$f is missing"
        echo "${sha[$f]}  $VENDOR/$f" | sha256sum -c --status || unavailable "$VENDOR/$f does not match its sha256"
    done
    printf '\n==> Building Citus %s for PostgreSQL %s (about a minute on 2 cores)\n' "$citus" "$pg_version"
    work=$(mktemp -d)
    build() {
        cd "$work"
        tar -xzf "$VENDOR/$tarball"
        cd "citus-$citus"
        for p in "${patches[@]}"; do patch -s -p1 <"$VENDOR/$p"; done
        ./configure -q PG_CONFIG="$PG_CONFIG" >/dev/null
        make -s -j"$(nproc)" >/dev/null
        rm -rf "$image"
        make -s install DESTDIR="$image" >/dev/null
        touch "$key/complete"
    }
    # In the background so that set -e stops the build at its first failing step.
    build &
    if ! wait $!; then
        rm -rf "$work" "$key"
        unavailable "Citus $citus did not build against PostgreSQL $pg_version (see above)"
    fi
    rm -rf "$work"
fi
# The image holds the files at their absolute paths under the PostgreSQL
# it was built for. Each file is copied beside its place and renamed into
# it, and no directory that is there is touched: tar -x into / made / itself
# unreadable to every other user for a moment while it extracted (its
# delayed directory modes), and the test command's other lanes run servers
# as postgres meanwhile; a server that has Citus loaded keeps the old file.
(cd "$image" && find . ! -type d -print0) | while IFS= read -r -d '' f; do
    dest="/${f#./}"
    mkdir -p "$(dirname "$dest")"
    cp -P --preserve=mode,timestamps "$image/$f" "$dest.new.$$"
    mv -f "$dest.new.$$" "$dest"
done
echo "Citus $citus installed into PostgreSQL $pg_version (from $image)"
