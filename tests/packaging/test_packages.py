"""The Debian packages scripts/package.sh builds: what each declares and holds,
each installed with apt and used by a server:

- the system major's (15) next to Debian's postgresql-15, in a cluster made
  the Debian way (pg_createcluster, conf.d);
- every other major's next to this project's build of that major, which a
  stand-in package (Provides: postgresql-NN) and two directories of links
  at Debian's paths (/usr/lib/postgresql/NN/{bin,lib},
  /usr/share/postgresql/NN/extension) make look as apt.postgresql.org's
  postgresql-NN does.

Run after scripts/package.sh (test.sh does both). It replaces the installed
extension files for a while and puts them back; `python3
tests/packaging/test_packages.py --remove-stand-ins` clears what an interrupted run left.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

# Run as a script too (--remove-stand-ins), where tests/conftest.py is not read.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import Server

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _shell(script):
    return subprocess.run(["bash", "-c", script], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


VERSION = _shell("sed -n 's/^version = \"\\(.*\\)\"/\\1/p' Cargo.toml | head -n 1")
# The majors this run has builds of (test.sh leaves out those whose source
# could not be had).
SYSTEM_MAJOR, *OTHER_MAJORS = _shell(". scripts/versions.sh; echo $SYSTEM_MAJOR $AVAILABLE_MAJORS").split()
PG_CACHE = _shell(". scripts/versions.sh; echo $PG_CACHE")
ARCH = _shell("dpkg --print-architecture")
PACKAGES = os.environ.get("SNOWFLAKE_PACKAGE_DIR") or os.path.join(
    os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target"), "debian")


def pg_config(bin_dir, what):
    """What the pg_config in `bin_dir` says about `what` (e.g. --pkglibdir)."""
    return subprocess.run([f"{bin_dir}/pg_config", what], check=True, capture_output=True, text=True).stdout.strip()


def debian_version(bin_dir):
    """The version of the PostgreSQL in bin_dir, the Debian way: a beta or
    release candidate sorts before its release (19rc1 is 19~rc1)."""
    return re.sub(r"^([0-9.]+)(alpha|beta|rc|devel)", r"\1~\2", pg_config(bin_dir, "--version").split()[1])


def name_of(major):
    return f"postgresql-{major}-snowflake-id"


def deb_of(major):
    found = glob.glob(os.path.join(PACKAGES, f"{name_of(major)}_{VERSION}*-1_{ARCH}.deb"))
    assert len(found) == 1, f"want one package of {name_of(major)} {VERSION} in {PACKAGES}, found {found}: run scripts/package.sh"
    return found[0]


def package_version():
    """What scripts/package.sh names this tree (a release, or a snapshot of
    the commit), asked of it so the two cannot disagree."""
    return _shell("scripts/package.sh --print-version")


def field(deb, name):
    return subprocess.run(["dpkg-deb", "--field", deb, name], check=True, capture_output=True, text=True).stdout.strip()


def apt(*args, check=True):
    # LC_ALL=C: the refusal is checked by apt's words.
    return subprocess.run(["apt-get", "-q", "-y", *args],
                          env={**os.environ, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"},
                          check=check, capture_output=True, text=True)


def files_in(deb):
    listing = subprocess.run(["dpkg-deb", "--fsys-tarfile", deb], check=True, capture_output=True).stdout
    names = subprocess.run(["tar", "-t"], input=listing, check=True, capture_output=True).stdout.decode().split()
    return sorted(n.lstrip(".") for n in names if not n.endswith("/"))


@pytest.mark.parametrize("major", [SYSTEM_MAJOR, *OTHER_MAJORS])
def test_each_package_declares_its_postgresql_and_holds_the_extension_in_debian_paths(major):
    deb = deb_of(major)
    assert field(deb, "Package") == name_of(major)
    assert field(deb, "Version") == package_version()
    assert os.path.basename(deb) == f"{name_of(major)}_{package_version()}_{ARCH}.deb"
    assert field(deb, "Architecture") == ARCH
    depends = [d.strip() for d in field(deb, "Depends").split(",")]
    bin_dir = "/usr/lib/postgresql/15/bin" if major == SYSTEM_MAJOR else os.path.join(PG_CACHE, major, "bin")
    server = debian_version(bin_dir)
    if "~" in server:
        # Built against a beta or release candidate: that one alone.
        assert depends[:2] == [f"postgresql-{major} (>= {server})", f"postgresql-{major} (<< {server}.)"], depends
    else:
        assert depends[0] == f"postgresql-{major}", depends
    assert any(d.startswith("libc6 (>= ") for d in depends), depends
    lib, ext, doc = f"/usr/lib/postgresql/{major}/lib", f"/usr/share/postgresql/{major}/extension", \
        f"/usr/share/doc/{name_of(major)}"
    updates = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "sql", "snowflake_id--*--*.sql")))
    assert files_in(deb) == sorted([
        f"{lib}/snowflake_id.so", f"{ext}/snowflake_id.control", f"{ext}/snowflake_id--{VERSION}.sql",
        *(f"{ext}/{u}" for u in updates), f"{doc}/copyright", f"{doc}/changelog.gz", f"{doc}/changelog.Debian.gz"])


def test_a_package_for_a_postgresql_this_machine_lacks_is_refused_for_that_reason():
    """Its Depends is what apt checks: without a postgresql-NN, apt will not
    install the package for NN, and says that is why."""
    for major in OTHER_MAJORS:
        policy = subprocess.run(["apt-cache", "policy", f"postgresql-{major}"], capture_output=True, text=True).stdout
        if "Candidate:" in policy and "Candidate: (none)" not in policy:
            pytest.skip(f"postgresql-{major} is installable here (apt.postgresql.org?): nothing to refuse")
        r = apt("install", "--simulate", deb_of(major), check=False)
        assert r.returncode != 0
        out = r.stdout + r.stderr
        assert re.search(rf"Depends: postgresql-{major}( \([^)]*\))? but it is not installable", out), out


def _save(paths, into):
    """Copies `paths` into `into`; returns them."""
    saved = list(paths)
    for p in saved:
        shutil.copy2(p, os.path.join(into, p.replace("/", "%")))
    return saved


def _restore(saved, into):
    for p in saved:
        shutil.copy2(os.path.join(into, p.replace("/", "%")), p)


def _installed_extension_files(lib, ext):
    return [p for p in [os.path.join(lib, "snowflake_id.so"), *glob.glob(os.path.join(ext, "snowflake_id*"))]
            if os.path.exists(p)]


def _check_generates(sql, major):
    """The quick start on a fresh server, `sql(query) -> rows` on it."""
    sql("CREATE EXTENSION snowflake_id")
    assert sql("SELECT extversion FROM pg_extension WHERE extname = 'snowflake_id'") == [(VERSION,)]
    assert sql("SELECT current_setting('server_version_num')::int / 10000")[0][0] == int(major)
    sql("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), n int)")
    sql("INSERT INTO orders (n) SELECT g FROM generate_series(1, 1000) g")
    rows = sql("SELECT count(DISTINCT id), min(id) > 0, bool_and((snowflake_decode(id)).worker_id = 7),"
               " bool_and(snowflake_timestamp(id) BETWEEN now() - interval '1 minute' AND clock_timestamp())"
               " FROM orders")
    assert rows == [(1000, True, True, True)]
    assert sql("SELECT worker_id FROM snowflake_id.snowflake_status") == [(7,)]


def test_the_system_package_installs_with_apt_and_serves_a_cluster_made_the_debian_way():
    major = SYSTEM_MAJOR
    deb, name = deb_of(major), name_of(major)
    cluster, port = "snowflake_pkg", harness._next_port[0]
    harness._next_port[0] += 1
    lib, ext = f"/usr/lib/postgresql/{major}/lib", f"/usr/share/postgresql/{major}/extension"
    subprocess.run(["pg_dropcluster", "--stop", major, cluster], capture_output=True)  # an interrupted run's
    apt("remove", name, check=False)
    keep = tempfile.mkdtemp()
    saved = _save(_installed_extension_files(lib, ext), keep)
    try:
        # As on a server that never had it: no file of an earlier install.
        for p in _installed_extension_files(lib, ext):
            os.remove(p)
        apt("install", deb)
        status = subprocess.run(["dpkg-query", "-W", "-f=${Status} ${Version}", name], capture_output=True, text=True)
        assert status.stdout == f"install ok installed {package_version()}"
        # Every file on disk is the one the package shipped.
        verify = subprocess.run(["dpkg", "--verify", name], capture_output=True, text=True)
        assert verify.returncode == 0 and verify.stdout == "", verify.stdout
        owner = subprocess.run(["dpkg-query", "-S", f"{lib}/snowflake_id.so"], capture_output=True, text=True)
        assert owner.stdout.startswith(f"{name}:"), owner.stdout

        subprocess.run(["pg_createcluster", major, cluster, "-p", str(port)], check=True, capture_output=True)
        with open(f"/etc/postgresql/{major}/{cluster}/conf.d/snowflake_id.conf", "w") as f:
            f.write("shared_preload_libraries = 'snowflake_id'\nsnowflake_id.worker_id = 7\n")
        subprocess.run(["pg_ctlcluster", major, cluster, "start"], check=True, capture_output=True)

        def sql(query):
            out = subprocess.run(["sudo", "-u", "postgres", "psql", "-X", "-q", "-A", "-t", "-F", "|", "-p", str(port),
                                  "-v", "ON_ERROR_STOP=1", "-c", query], check=True, capture_output=True, text=True)
            return [tuple(_typed(v) for v in line.split("|")) for line in out.stdout.splitlines() if line]

        _check_generates(sql, major)

        subprocess.run(["pg_dropcluster", "--stop", major, cluster], check=True, capture_output=True)
        apt("remove", name)
        assert not os.path.exists(f"{lib}/snowflake_id.so")
        assert not glob.glob(os.path.join(ext, "snowflake_id*"))
    finally:
        subprocess.run(["pg_dropcluster", "--stop", major, cluster], capture_output=True)
        apt("remove", name, check=False)
        _restore(saved, keep)
        shutil.rmtree(keep)


def _typed(value):
    """psql's text back into what psycopg2 would give for these queries."""
    if value.lstrip("-").isdigit():
        return int(value)
    return {"t": True, "f": False}.get(value, value)


STAND_IN_MARK = ".snowflake_id-test-stand-in"


def _debian_paths(major):
    return f"/usr/lib/postgresql/{major}", f"/usr/share/postgresql/{major}"


def _make_stand_in(major, bin_dir, version=None):
    """Debian's paths of postgresql-NN, as links into this project's build of
    NN, and a package that provides postgresql-NN, so that apt and dpkg treat
    the package for NN as they would next to apt.postgresql.org's."""
    lib_root, share_root = _debian_paths(major)
    for d in (lib_root, share_root):
        assert not os.path.exists(d), f"{d} exists: a real postgresql-{major}? This test needs it absent."
        os.makedirs(d)
        open(os.path.join(d, STAND_IN_MARK), "w").close()
    os.symlink(pg_config(bin_dir, "--bindir"), os.path.join(lib_root, "bin"))
    os.symlink(pg_config(bin_dir, "--pkglibdir"), os.path.join(lib_root, "lib"))
    os.symlink(os.path.join(pg_config(bin_dir, "--sharedir"), "extension"), os.path.join(share_root, "extension"))

    stage = tempfile.mkdtemp()
    os.makedirs(os.path.join(stage, "DEBIAN"))
    upstream = version or debian_version(bin_dir)
    with open(os.path.join(stage, "DEBIAN", "control"), "w") as f:
        f.write(f"Package: snowflake-id-test-postgresql-{major}\nVersion: {upstream}-0\nArchitecture: all\n"
                f"Maintainer: snowflake_id tests <root@localhost>\nProvides: postgresql-{major} (= {upstream}-0)\n"
                f"Description: stands in for postgresql-{major} in snowflake_id's package test\n"
                f" The PostgreSQL {upstream} build in {bin_dir}, linked at Debian's paths.\n")
    stand_in = os.path.join(stage, f"snowflake-id-test-postgresql-{major}.deb")
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", stage, stand_in], check=True, capture_output=True)
    apt("install", stand_in)
    shutil.rmtree(stage)


def remove_stand_ins():
    """Takes away every stand-in this test made, for any major (also after an
    interrupted run, and of majors no longer tested)."""
    listed = subprocess.run(["dpkg-query", "-W", "-f=${Package}\\n", "postgresql-*-snowflake-id",
                             "snowflake-id-test-postgresql-*"], capture_output=True, text=True).stdout.split()
    if listed:
        subprocess.run(["dpkg", "--purge", *listed], capture_output=True)
    for mark in glob.glob(f"/usr/lib/postgresql/*/{STAND_IN_MARK}") + glob.glob(f"/usr/share/postgresql/*/{STAND_IN_MARK}"):
        d = os.path.dirname(mark)
        for entry in os.listdir(d):
            path = os.path.join(d, entry)
            # Only the marker and links are ours; dpkg may already have removed a link.
            if os.path.isdir(path) and not os.path.islink(path):
                raise RuntimeError(f"{path} is a real directory inside a stand-in: remove {d} by hand")
            os.remove(path)
        os.rmdir(d)


@pytest.mark.parametrize("major", OTHER_MAJORS)
def test_each_other_package_installs_with_apt_and_serves_its_major(major):
    """Debian 12 has no postgresql-13/17/18: next to the stand-in, apt
    installs the package, dpkg puts its files at Debian's paths (through the
    links, into the build), and a fresh server of that major preloads the
    release library and generates."""
    deb, name = deb_of(major), name_of(major)
    bin_dir = os.path.join(PG_CACHE, major, "bin")

    lib_root, share_root = _debian_paths(major)
    build_lib, build_ext = pg_config(bin_dir, "--pkglibdir"), os.path.join(pg_config(bin_dir, "--sharedir"), "extension")
    remove_stand_ins()
    keep = tempfile.mkdtemp()
    saved = _save(_installed_extension_files(build_lib, build_ext), keep)
    srv = None
    try:
        for p in saved:
            os.remove(p)
        _make_stand_in(major, bin_dir)
        apt("install", deb)
        verify = subprocess.run(["dpkg", "--verify", name], capture_output=True, text=True)
        assert verify.returncode == 0 and verify.stdout == "", verify.stdout
        # dpkg wrote at Debian's paths; the build of that major sees the files.
        assert os.path.exists(os.path.join(build_lib, "snowflake_id.so"))
        srv = Server(f"package{major}", bin=os.path.join(lib_root, "bin"), conf={"snowflake_id.worker_id": 7})
        srv.start()
        _check_generates(lambda q: [tuple(r) for r in srv.sql(q)], major)
        srv.destroy()
        srv = None
        apt("remove", name)
        assert _installed_extension_files(build_lib, build_ext) == []
    finally:
        if srv is not None:
            srv.destroy()
        remove_stand_ins()
        for p in _installed_extension_files(build_lib, build_ext):
            os.remove(p)
        _restore(saved, keep)
        shutil.rmtree(keep)


def test_a_package_built_against_a_prerelease_refuses_any_other_version_of_its_major():
    """The ABI of a major holds from its release on, not between a release
    candidate and the release: the package built against 19~rc1 is refused
    next to a 19.0, for that reason."""
    pre = [m for m in OTHER_MAJORS if "~" in debian_version(os.path.join(PG_CACHE, m, "bin"))]
    if not pre:
        pytest.skip("no major here is a beta or release candidate")
    for major in pre:
        remove_stand_ins()
        try:
            _make_stand_in(major, os.path.join(PG_CACHE, major, "bin"), version=f"{major}.0")
            r = apt("install", "--simulate", deb_of(major), check=False)
            out = r.stdout + r.stderr
            assert r.returncode != 0, out
            # apt writes the bound that fails; "<<" as "<".
            assert re.search(rf"Depends: postgresql-{major} \(<<? {re.escape(debian_version(os.path.join(PG_CACHE, major, 'bin')))}\.\)",
                             out), out
        finally:
            remove_stand_ins()


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--remove-stand-ins"]:
        remove_stand_ins()
    else:
        sys.exit("usage: tests/packaging/test_packages.py --remove-stand-ins (the tests run under pytest)")
