#!/usr/bin/env bash
# PostgreSQL <major> from Debian's binary packages, for when no archive this
# machine reaches serves its source (postgres-builds.sh tries the source
# first). The packages come from newer suites than this machine's and need
# a newer C library than Debian 12's, so they run on their own: the
# packages and every shared library they need, as the same suites have
# them (the C library among them), are unpacked under one directory, and
# each of their programs is pointed at that directory's dynamic loader and
# libraries. Nothing is installed into the system.
#
#   scripts/postgres-from-packages.sh <major> <prefix> <archive> <suite>...
#
# <prefix> names the directory to unpack into, with {version} where the
# version goes: a version unpacked before is used again, a newer one listed
# (the release after its candidate) is unpacked beside it.
# The suites are asked in the order given: PostgreSQL's packages (those
# built from postgresql-<major>, libpq among them) at the newest version
# any suite lists; every other library from the first suite that lists it.
# apt checks each index's signature, against Debian's archive keys alone
# (not any other key this machine's apt trusts), and each package's
# checksum against the index. On success <prefix>/bin is the major's
# bindir, and the last line printed is "<version> <prefix>" (Debian's
# version, without its revision).
set -euo pipefail
m=$1 template=$2 uri=$3
shift 3
suites=("$@")

say() { printf '\n==> %s\n' "$*"; }
loud() { printf '\n!!! %s\n' "$*" >&2; }

APT="$(dirname "$template")/apt-binary-$m"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial"
: >"$APT/status"
apt_opts=(-o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null -o APT::Sandbox::User=root
    -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache" -o "Dir::State::status=$APT/status"
    -o "APT::Architecture=$(dpkg --print-architecture)" -o APT::Architectures::=)
: >"$APT/sources.list"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[[ -r $keyring ]] || { loud "$keyring is missing (Debian's package debian-archive-keyring): the packages' signatures cannot be checked"; exit 1; }
for s in "${suites[@]}"; do echo "deb [signed-by=$keyring] $uri $s main" >>"$APT/sources.list"; done
say "Reading Debian's binary package lists of ${suites[*]} (for PostgreSQL $m's packages)"
apt-get "${apt_opts[@]}" update -q 2>&1 | grep -v '^\(Hit\|Get\|Ign\|Reading\)' || true

# The Packages indexes, in the suites' order.
indexes=()
for s in "${suites[@]}"; do
    while IFS= read -r f; do [[ -n $f && -f $f ]] && indexes+=("$f"); done < <(
        apt-get "${apt_opts[@]}" indextargets --format '$(FILENAME)' "Created-By: Packages" "Release: $s" 2>/dev/null)
done
((${#indexes[@]})) || { loud "no binary package list of ${suites[*]} could be read from $uri"; exit 1; }

# What to fetch: "<package>=<version>" lines, then "version <upstream>".
# The libraries are the packages' library dependencies (lib* and zlib1g:
# the packages dpkg-shlibdeps names), followed to their own.
plan=$(for f in "${indexes[@]}"; do /usr/lib/apt/apt-helper cat-file "$f"; echo; echo "@@END-OF-INDEX@@"; echo; done |
    /usr/bin/python3 -c '
import re, subprocess, sys
major = sys.argv[1]
source_name = f"postgresql-{major}"
wanted = [f"postgresql-{major}", f"postgresql-client-{major}", f"postgresql-server-dev-{major}"]
suites, current = [], {}
for block in sys.stdin.read().split("\n\n"):
    if block.strip() == "@@END-OF-INDEX@@":
        suites.append(current)
        current = {}
        continue
    fields, key = {}, None
    for line in block.splitlines():
        if line[:1] in " \t" or ":" not in line:
            continue
        key, value = line.split(":", 1)
        fields[key] = value.strip()
    if "Package" in fields:
        current.setdefault(fields["Package"], []).append(fields)

def newer(a, b):
    return subprocess.run(["dpkg", "--compare-versions", a, "gt", b]).returncode == 0

def source_of(p):
    return p.get("Source", p["Package"]).split()[0]

# PostgreSQL'"'"'s own: the newest version of its source any suite lists.
ours = [p for s in suites for ps in s.values() for p in ps if source_of(p) == source_name]
if not ours:
    sys.exit(f"no suite lists binary packages of {source_name}")
version = None
for p in ours:
    if p["Package"] == wanted[0] and (version is None or newer(p["Version"], version)):
        version = p["Version"]
if version is None:
    sys.exit(f"no suite lists {wanted[0]}")
ours = {p["Package"]: p for p in ours if p["Version"] == version}

def pick(name):
    if name in ours:
        return ours[name]
    for s in suites:
        if name in s:
            return s[name][0]
    return None

chosen, todo = {}, list(wanted)
while todo:
    name = todo.pop()
    if name in chosen:
        continue
    p = pick(name)
    if p is None:
        sys.exit(f"{name} is needed but no suite lists it")
    chosen[name] = p
    for dep in (p.get("Pre-Depends", "") + "," + p.get("Depends", "")).split(","):
        first = dep.split("|")[0].strip()
        if not first:
            continue
        dep_name = first.split()[0].split(":")[0]
        if (dep_name.startswith("lib") and not dep_name.endswith("-dev") and not dep_name.endswith("-perl")) or dep_name == "zlib1g":
            todo.append(dep_name)
for name, p in sorted(chosen.items()):
    print(f"{name}={p['"'"'Version'"'"']}")
print("version", re.sub(r"-[^-]*$", "", re.sub(r"^\d+:", "", version)))
' "$m")
version=$(awk '$1 == "version" { print $2 }' <<<"$plan")
mapfile -t packages < <(grep '=' <<<"$plan")
# Only the major asked for: 19, 19.1, 19~rc1, never 190 or 20.
[[ $version =~ ^$m([.~]|$) ]] || { loud "the newest postgresql-$m listed is $version: not PostgreSQL $m"; exit 1; }
prefix=${template//\{version\}/$version}
if [[ -x $prefix/bin/pg_config ]] && [[ $("$prefix/bin/pg_config" --version) == "PostgreSQL ${version//\~/} "* ]]; then
    echo "PostgreSQL $version: unpacked before, in $prefix"
    echo "$version $prefix"
    exit 0
fi

say "PostgreSQL $version from Debian's binary packages: ${#packages[@]} packages (PostgreSQL's and the libraries they need)"
work="$prefix.part"
rm -rf "$work"
mkdir -p "$work/debs" "$work/root"
chown _apt "$work/debs" 2>/dev/null || true
(cd "$work/debs" && apt-get "${apt_opts[@]}" download -q "${packages[@]}" 2>&1 | grep -v '^\(Get\|Fetched\)' || true)
for p in "${packages[@]}"; do
    ls "$work/debs/${p%%=*}_"*.deb >/dev/null 2>&1 || { loud "${p} could not be downloaded from $uri"; exit 1; }
done
for deb in "$work/debs"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
rm -rf "$work/debs"

root="$work/root"
final_root="$prefix/root"
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
loader=$(cd "$root" && { find usr/lib/"$multiarch" lib/"$multiarch" -maxdepth 1 -name 'ld-linux*.so.*' 2>/dev/null || true; } | head -n 1)
[[ -n $loader ]] || { loud "no dynamic loader in the C library's package"; exit 1; }
# Where the programs will find their libraries once moved into place: as
# DT_RPATH (not RUNPATH), which also holds for the libraries' own
# dependencies and for modules the server loads.
libs="$final_root/usr/lib/$multiarch:$final_root/lib/$multiarch:$final_root/usr/lib/$multiarch/krb5"
bindir="usr/lib/postgresql/$m/bin"
programs=()
while IFS= read -r -d '' f; do
    if readelf -l "$f" 2>/dev/null | grep -q 'program interpreter'; then programs+=("$f"); fi
done < <(find "$root/$bindir" "$root/usr/lib/postgresql/$m/lib/pgxs" -type f -perm -u+x -print0)
for f in "${programs[@]}"; do
    patchelf --set-interpreter "$final_root/$loader" --force-rpath --set-rpath "$libs" "$f"
done
rm -rf "$prefix"
mv "$work" "$prefix"
ln -s "root/$bindir" "$prefix/bin"

# Every library a program links resolves inside the directory, or it is
# not used (asked of its loader as nobody: root runs nothing of it before).
for f in "${programs[@]}"; do
    f="$prefix/root/${f#"$root/"}"
    out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$prefix/root/$loader" --list "$f" 2>&1) ||
        { loud "$f does not load: $out"; exit 1; }
    outside=$(awk '/=>/ && $3 !~ "^'"$prefix/root"'/" { print $1 " => " $3 }' <<<"$out")
    [[ -z $outside ]] || { loud "$f would load libraries from outside $prefix/root: $outside"; exit 1; }
done
echo "$version $prefix"
