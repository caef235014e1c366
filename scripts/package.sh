#!/usr/bin/env bash
# Builds one Debian package per PostgreSQL major from `cargo pgrx package`:
#   postgresql-<major>-snowflake-id_<version>-<revision>_<arch>.deb
# laid out as Debian's and apt.postgresql.org's PostgreSQL packages expect
# (/usr/lib/postgresql/<major>/lib, /usr/share/postgresql/<major>/extension)
# and depending on postgresql-<major>, whatever prefix the PostgreSQL it was
# built against lives in.
#
# usage: scripts/package.sh [major...]   (default: every major in versions.sh)
#        scripts/package.sh --print-version  (the package version, and nothing else)
# Output: $SNOWFLAKE_PACKAGE_DIR, by default target/debian. Needs setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/versions.sh
export PATH="$HOME/.cargo/bin:$PATH"
pgrx_flags

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
maintainer=$(sed -n 's/^authors = \["\(.*\)"\]/\1/p' Cargo.toml | head -n 1)
# The Debian revision: raised when the packaging changes and the code does not.
revision=1
# One package version, one content: a release only from a commit tagged
# v<version>; anything else is a snapshot named after its commit (time and
# hash, sorting before the release), marked when the tree has changes.
if ! commit_time=$(git log -1 --format=%ct 2>/dev/null); then
    echo "package.sh: needs a git checkout, to name the package after its commit" >&2
    exit 1
fi
if git describe --exact-match --tags --match "v$version" HEAD >/dev/null 2>&1 && [[ -z $(git status --porcelain) ]]; then
    upstream=$version
else
    upstream="$version~dev$(TZ=UTC date -d "@$commit_time" +%Y%m%d%H%M%S).g$(git rev-parse --short=12 HEAD)"
    [[ -z $(git status --porcelain) ]] || upstream="$upstream.dirty"
fi
if [[ ${1-} == --print-version ]]; then
    echo "$upstream-$revision"
    exit 0
fi
# Reproducible archives: every timestamp in them is the commit's. Given
# to dpkg-deb alone: in cargo's environment it would make the build a new
# one, not the release build the test command installed a moment before.
arch=$(dpkg --print-architecture)
out="${SNOWFLAKE_PACKAGE_DIR:-${CARGO_TARGET_DIR:-$PWD/target}/debian}"
majors="${*:-$SYSTEM_MAJOR $AVAILABLE_MAJORS}"
mkdir -p "$out"

pg_config_of() {
    if [[ $1 == "$SYSTEM_MAJOR" ]]; then
        echo "/usr/lib/postgresql/$1/bin/pg_config"
    else
        echo "$PG_CACHE/$1/bin/pg_config"
    fi
}

# Debian's machine-readable copyright file, from the project's license.
copyright() {
    printf 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n'
    printf 'Upstream-Name: snowflake_id\n\nFiles: *\nCopyright: 2026 the snowflake_id developers\nLicense: MIT\n'
    tail -n +5 LICENSE | sed -e 's/^$/./' -e 's/^/ /'
}

for major in $majors; do
    pg_config=$(pg_config_of "$major")
    if [[ ! -x $pg_config ]]; then
        echo "package.sh: no PostgreSQL $major at $pg_config (run scripts/setup.sh)" >&2
        exit 1
    fi
    name="postgresql-$major-snowflake-id"
    deb="$out/${name}_$upstream-${revision}_$arch.deb"
    rm -f "$out/${name}_"*.deb
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT

    printf '\n==> %s\n' "$(basename "$deb")"
    cargo pgrx package --pg-config "$pg_config" --out-dir "$stage/pgrx"
    built_lib="$stage/pgrx$("$pg_config" --pkglibdir)"
    built_ext="$stage/pgrx$("$pg_config" --sharedir)/extension"

    root="$stage/root"
    lib="$root/usr/lib/postgresql/$major/lib"
    ext="$root/usr/share/postgresql/$major/extension"
    doc="$root/usr/share/doc/$name"
    install -d "$lib" "$ext" "$doc" "$root/DEBIAN"
    # Debian installs shared objects 0644 and stripped of what the dynamic
    # linker does not use; the exported symbols Postgres looks up stay.
    install -m 0644 "$built_lib/snowflake_id.so" "$lib/"
    strip --strip-unneeded --remove-section=.comment --remove-section=.note "$lib/snowflake_id.so"
    install -m 0644 "$built_ext"/snowflake_id.control "$built_ext"/snowflake_id--*.sql "$ext/"
    copyright > "$doc/copyright"
    gzip -9n < CHANGELOG.md > "$doc/changelog.gz"
    {
        printf '%s (%s-%s) unstable; urgency=medium\n\n' "$name" "$upstream" "$revision"
        printf '  * snowflake_id %s for PostgreSQL %s, built by scripts/package.sh.\n\n' "$upstream" "$major"
        printf ' -- %s  %s\n' "$maintainer" "$(LC_ALL=C date -R -u -d "@$commit_time")"
    } | gzip -9n > "$doc/changelog.Debian.gz"
    chmod 0644 "$doc"/*

    # The server: any of its major, whose ABI holds from the release on; a
    # build against a beta or release candidate, that one alone (the ABI
    # may still change before the release).
    server_version=$(debian_pg_version "$pg_config")
    if is_prerelease "$server_version"; then
        server_depends="postgresql-$major (>= $server_version), postgresql-$major (<< $server_version.)"
    else
        server_depends="postgresql-$major"
    fi
    # The C library and unwinder versions the library needs, the Debian way.
    mkdir -p "$stage/debian"
    printf 'Source: snowflake-id\n\nPackage: %s\nArchitecture: any\n' "$name" > "$stage/debian/control"
    shlibs=$(cd "$stage" && dpkg-shlibdeps -O "$lib/snowflake_id.so" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
    [[ -n $shlibs ]] || { echo "package.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

    (cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum > DEBIAN/md5sums)
    cat > "$root/DEBIAN/control" <<EOF
Package: $name
Version: $upstream-$revision
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(du -k -s --apparent-size --exclude=DEBIAN "$root" | cut -f 1)
Depends: $server_depends, $shlibs
Source: snowflake-id
Section: database
Priority: optional
Description: trend-increasing 64-bit snowflake IDs for PostgreSQL $major
 snowflake_id generates unique, time-ordered bigint IDs inside PostgreSQL
 (id bigint PRIMARY KEY DEFAULT snowflake_nextval()), decodes them in SQL,
 and keeps them unique across backends, crashes, clock steps, failovers and
 servers with distinct worker ids.
 .
 The library must be preloaded: shared_preload_libraries = 'snowflake_id'.
EOF
    SOURCE_DATE_EPOCH=$commit_time dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
    echo "$deb"
    rm -rf "$stage"
    trap - EXIT
done
