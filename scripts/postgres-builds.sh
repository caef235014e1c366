#!/usr/bin/env bash
# Builds the PostgreSQL majors Debian 12 does not package (13, 17, 18, 19) from
# the upstream tarballs Debian's source packages hold, into a cache outside
# the repository keyed by the exact version and build recipe, so a second
# run reuses them. (Binary packages of the newer suites need a newer C
# library than Debian 12's, hence source.)
#
#   scripts/postgres-builds.sh [MAJOR...]      (default: 13 17 18 19)
#
# Mirrors lag behind their own indexes, and suites move on, so for each
# major every suite that carries it is asked (newest version first), the
# tarball is fetched from the archive that serves it and checked against the
# sha256 of the signed index (apt verifies the index's signature), and where
# no index entry is served, the tarballs pinned in
# scripts/postgres-sources.pinned (checksums from Debian's signed .dsc files)
# are tried. Where no source is served (this machine's mirror serves no
# source of experimental's 19, only its binary packages), Debian's binary
# packages of the major, from the same suites, are unpacked with every
# library they need, the C library among them, and run on those
# (scripts/postgres-from-packages.sh). A major none of them serves is
# reported as unavailable and skipped, unless it is listed in SNOWFLAKE_REQUIRED_MAJORS: then the script
# fails, saying why.
#
# Afterwards $SNOWFLAKE_PG_CACHE/<major>/bin/pg_config (default cache:
# /var/cache/snowflake_id/postgres) points at each build, and
# $SNOWFLAKE_BUILDS_REPORT (if set) holds one line per major asked:
#   <major> available <version>
#   <major> unavailable <reason>
#
# Overrides, for tests of this script: SNOWFLAKE_PG_SUITES_<major> (the
# suites to ask), SNOWFLAKE_PG_PINS (the pinned list). Run as root; safe to
# run again.
set -euo pipefail

CACHE="${SNOWFLAKE_PG_CACHE:-/var/cache/snowflake_id/postgres}"
PINS="${SNOWFLAKE_PG_PINS:-$(dirname "$0")/postgres-sources.pinned}"
REPORT="${SNOWFLAKE_BUILDS_REPORT:-/dev/null}"
REQUIRED=" ${SNOWFLAKE_REQUIRED_MAJORS-} "
# The archives this machine's apt is pointed at (Debian's own mirror, a
# company's mirror or proxy), read from apt's own configuration, whatever
# form it takes (sources.list, deb822 .sources files, APT_CONFIG): the one
# that serves this machine's Debian release, and the one that serves its
# security updates. Every other suite is asked of the same two.
codename=$(. /etc/os-release && echo "${VERSION_CODENAME-}")
archive_uri() {
    apt-get indextargets --no-release-info --format '$(RELEASE) $(REPO_URI)' 2>/dev/null |
        awk -v suite="$1" '$1 == suite { sub(/\/+$/, "", $2); print $2; exit }'
}
DEBIAN_URI=$(archive_uri "$codename")
SECURITY_URI=$(archive_uri "$codename-security")
# The build recipe of a major: raised when the way it is built below
# changes, so that a cached build made the old way is not taken for one made
# the new way. For the benchmark (SNOWFLAKE_PG_FOR_BENCH=1, bench/run.sh),
# its major (18) is built as distributions build it: -O2, every part. For
# the tests, without ecpg (embedded SQL in C, which nothing here uses): the
# two newest majors of versions.sh at -O1 (they may run every real-server
# test), the others at -O0 (their tests are few and light: #[pg_test],
# the regression files, the update); each step takes about a third off a
# compile on a machine as it comes, where the compiles share its two cores
# with the extension's builds. Both builds of 18 stay in the cache; the
# link $CACHE/18 names the one asked for last.
BENCH_MAJOR=18
. "$(dirname "$0")/versions.sh"
FULL_BUILDS=" $(tr ' ' '\n' <<<"$OTHER_MAJORS" | sed '/^$/d' | sort -rn | head -n 2 | xargs) "
recipe_of() {
    if [[ $1 == "$BENCH_MAJOR" && -n ${SNOWFLAKE_PG_FOR_BENCH-} ]]; then
        echo r2
    elif [[ $FULL_BUILDS == *" $1 "* ]]; then
        echo r3-tests
    else
        echo r4-light
    fi
}
majors=("$@")
((${#majors[@]})) || majors=(13 17 18 19)

say() { printf '\n==> %s\n' "$*"; }
loud() { printf '\n!!! %s\n' "$*" >&2; }

# Every suite that has carried the major, newest first; the security
# suites live in the security archive.
suites_of() {
    local override="SNOWFLAKE_PG_SUITES_$1"
    if [[ -n ${!override+set} ]]; then
        echo "${!override}"
        return
    fi
    case "$1" in
        13) echo "bullseye-security bullseye" ;;
        17) echo "trixie-security trixie-updates trixie forky sid" ;;
        18) echo "sid forky trixie-backports" ;;
        # Until its final release reaches unstable, only experimental
        # carries 19 (a beta or release candidate); the newest version any
        # of them lists is taken.
        19) echo "sid forky experimental" ;;
        *) echo "" ;;
    esac
}
uri_of() { [[ $1 == *-security ]] && echo "$SECURITY_URI" || echo "$DEBIAN_URI"; }

# Complete once contrib is in: configure puts the libraries in prefix/lib, or
# in prefix/lib/postgresql when the prefix names no "postgres" or "pgsql".
built() { [[ -x "$1/bin/pg_config" && -f "$("$1/bin/pg_config" --pkglibdir)/pg_stat_statements.so" ]]; }
# A cached build of this major made by this recipe, whatever its version;
# but not a beta or release candidate, which gives way to a newer one (the
# release, once a suite lists it): for those the lists are read again.
# Where no source can be had, Debian's binary packages unpacked (see below).
PACKAGES_RECIPE=deb1
cached() {
    [[ -L "$CACHE/$1" ]] || return 1
    local target
    target=$(readlink "$CACHE/$1")
    [[ $target == *"-$(recipe_of "$1")" || $target == *"-$PACKAGES_RECIPE" ]] && built "$CACHE/$1" &&
        ! is_prerelease "$("$CACHE/$1/bin/pg_config" --version | awk '{print $2}')"
}

# A private apt configuration: deb-src lines for other suites must not reach
# the system's own sources. apt checks each index's signature against the
# Debian archive keys the system trusts.
APT="$CACHE/apt"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$CACHE/src"
apt_opts=(-o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null -o APT::Sandbox::User=root
    -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache")

# "<version> <sha256> <size> <archive path>" of each orig tarball the indexes
# list for the major, newest version first.
indexed() {
    apt-cache "${apt_opts[@]}" showsrc "postgresql-$1" 2>/dev/null | awk -v pkg="postgresql-$1" '
        function flush() {
            if (p == pkg && orig != "") {
                u = v; sub(/^[0-9]+:/, "", u); sub(/-[^-]*$/, "", u)
                print u, orig, d "/" name
            }
            p = ""; orig = ""; d = ""; sha = 0
        }
        /^Package: / { p = $2 }
        /^Version: / { v = $2 }
        /^Directory: / { d = $2 }
        /^[A-Za-z0-9-]+:/ { sha = ($1 == "Checksums-Sha256:") }
        sha && length($1) == 64 && $3 ~ /\.orig\.tar\./ { orig = $1 " " $2; name = $3 }
        /^$/ { flush() }
        END { flush() }' | sort -u | sort -t' ' -k1,1Vr
}

# The same from the pinned list: "<major> <version> <sha256> <size> <path>".
pinned() {
    [[ -r $PINS ]] || return 0
    awk -v m="$1" '$1 == m && $0 !~ /^#/ { print $2, $3, $4, $5 }' "$PINS" | sort -t' ' -k1,1Vr
}

# Fetches one tarball, from whichever archive serves it, and checks it.
# Prints the local file; fails (quietly) when no archive serves it intact.
fetch() {
    local sha=$1 size=$2 path=$3 file
    file="$CACHE/src/$(basename "$path")"
    if [[ -f $file ]] && echo "$sha  $file" | sha256sum -c --status; then
        echo "$file"
        return 0
    fi
    for uri in $DEBIAN_URI $SECURITY_URI; do
        if curl -fsSL --retry 2 --max-time 600 -o "$file.part" "$uri/$path" 2>/dev/null; then
            if [[ $(stat -c %s "$file.part") == "$size" ]] && echo "$sha  $file.part" | sha256sum -c --status; then
                mv "$file.part" "$file"
                echo "$file"
                return 0
            fi
            loud "$uri/$path does not match its checksum (sha256 $sha, $size bytes): not used"
        fi
    done
    rm -f "$file.part"
    return 1
}

build() {
    local m=$1 version=$2 tarball=$3 prefix=$4
    say "Building PostgreSQL $version (about 5 minutes on 2 cores)"
    (
        # Unpacked where nothing else is: the tree's name is upstream's
        # (postgresql-19rc1 for Debian's 19~rc1), whatever Debian calls it.
        local tree="$CACHE/src/build-$m"
        rm -rf "$tree"
        mkdir -p "$tree"
        tar -xf "$tarball" -C "$tree"
        cd "$tree"/postgresql-*/
        # What the extension's build and tests need, and OpenSSL, as
        # distribution packages have it (gen_random_uuid() and uuidv7() draw
        # their randomness from it; the benchmark compares with them). No ICU,
        # no readline.
        local cflags=()
        if [[ $(recipe_of "$m") != r2 ]]; then
            cflags=(CFLAGS=-O1)
            [[ $(recipe_of "$m") == r4-light ]] && cflags=(CFLAGS=-O0)
            sed -i 's/^SUBDIRS = libpq ecpg$/SUBDIRS = libpq/' src/interfaces/Makefile
            grep -q '^SUBDIRS = libpq$' src/interfaces/Makefile || { loud "src/interfaces/Makefile of $version: ecpg not found where expected"; return 1; }
        fi
        ./configure --prefix="$prefix" --without-icu --without-readline --with-zlib --with-openssl -q "${cflags[@]}"
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
        cd / && rm -rf "$tree"
    )
}

: >"$REPORT"
report() { echo "$*" >>"$REPORT"; }
updated=false
missing_required=()
for m in "${majors[@]}"; do
    if cached "$m"; then
        echo "PostgreSQL $m: $("$CACHE/$m/bin/pg_config" --version) (cached in $CACHE/$m)"
        report "$m available $("$CACHE/$m/bin/pg_config" --version | awk '{print $2}')"
        continue
    fi
    if ! $updated; then
        if [[ -z $DEBIAN_URI ]]; then
            loud "apt on this machine has no source for Debian ${codename:-(no VERSION_CODENAME in /etc/os-release)} (apt-get indextargets): PostgreSQL's sources are asked of the archive apt uses; add it to /etc/apt/sources.list or /etc/apt/sources.list.d/"
            exit 1
        fi
        # Built once per version; the lists are read only when a build is missing.
        say "Reading Debian's source package lists (from $DEBIAN_URI${SECURITY_URI:+ and $SECURITY_URI})"
        : >"$APT/sources.list"
        # The indexes whose checksums the tarballs are checked against are
        # checked in turn against Debian's archive keys alone, not any other
        # key this machine's apt trusts.
        signed_by=/usr/share/keyrings/debian-archive-keyring.gpg
        [[ -r $signed_by ]] || signed_by=""
        for n in "${majors[@]}"; do
            for s in $(suites_of "$n"); do
                uri=$(uri_of "$s")
                # No security archive in apt's configuration: its suites are not asked.
                [[ -n $uri ]] || continue
                line="deb-src${signed_by:+ [signed-by=$signed_by]} $uri $s main"
                grep -qxF "$line" "$APT/sources.list" || echo "$line" >>"$APT/sources.list"
            done
        done
        # A suite that is gone (or misspelt) fails its own lines only: the
        # others are still read, and the candidates below say what is left.
        apt-get "${apt_opts[@]}" update -q 2>&1 | grep -v '^\(Hit\|Get\|Ign\|Reading\)' || true
        updated=true
    fi
    tried=()
    found=""
    while read -r version sha size path; do
        [[ -n $version ]] || continue
        prefix="$CACHE/$m-$version-$(recipe_of "$m")"
        if built "$prefix"; then
            found=$version
            break
        fi
        if tarball=$(fetch "$sha" "$size" "$path"); then
            # In the background so that set -e still stops the build at its
            # first failing step (an `if` around it would switch that off);
            # a major that does not build is skipped like one nobody serves.
            build "$m" "$version" "$tarball" "$prefix" &
            if wait $!; then
                found=$version
                break
            fi
            rm -rf "$prefix"
            tried+=("$version (did not build)")
            loud "PostgreSQL $version was fetched but did not build (see above); trying the next source"
            continue
        fi
        tried+=("$version ($path)")
        echo "PostgreSQL $version: $(basename "$path") is listed but no archive serves it intact; trying the next source"
    done < <(indexed "$m"; pinned "$m")
    if [[ -z $found ]]; then
        # No source: Debian's binary packages of the same suites, on a C
        # library of their own (postgres-from-packages.sh), unpacked once
        # per version.
        if [[ -n $(suites_of "$m") ]]; then
            say "No source of PostgreSQL $m could be had: trying Debian's binary packages of it"
            out="$CACHE/$m-packages.log"
            if "$(dirname "$0")/postgres-from-packages.sh" "$m" "$CACHE/$m-{version}-$PACKAGES_RECIPE" "$DEBIAN_URI" \
                $(suites_of "$m" | tr ' ' '\n' | grep -v -- '-security$') >"$out" 2>&1 &&
                read -r version prefix < <(tail -n 1 "$out") && built "$prefix"; then
                cat "$out"
                found=$version
            else
                cat "$out"
                tried+=("its binary packages (see above)")
            fi
        fi
    fi
    if [[ -z $found ]]; then
        why="no source of PostgreSQL $m could be had (suites asked: $(suites_of "$m" | sed 's/ /, /g')${tried:+; listed but not had: ${tried[*]}})"
        [[ -n $(suites_of "$m") ]] || why="no Debian suite is known to carry PostgreSQL $m"
        loud "PostgreSQL $m is UNAVAILABLE: $why"
        report "$m unavailable $why"
        [[ $REQUIRED == *" $m "* ]] && missing_required+=("$m")
        continue
    fi
    if built "$CACHE/$m-$found-$(recipe_of "$m")"; then
        ln -sfn "$CACHE/$m-$found-$(recipe_of "$m")" "$CACHE/$m"
    else
        ln -sfn "$CACHE/$m-$found-$PACKAGES_RECIPE" "$CACHE/$m"
    fi
    echo "PostgreSQL $m: $("$CACHE/$m/bin/pg_config" --version) (in $CACHE/$m)"
    report "$m available $found"
done
# The servers of the tests run as postgres and load libraries from here.
chmod -R a+rX "$CACHE"
if ((${#missing_required[@]})); then
    loud "PostgreSQL ${missing_required[*]} is required (SNOWFLAKE_REQUIRED_MAJORS=\"${SNOWFLAKE_REQUIRED_MAJORS-}\") but could not be had; see above. Drop it from SNOWFLAKE_REQUIRED_MAJORS to test the other majors without it."
    exit 1
fi
