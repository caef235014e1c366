"""The Debian packages scripts/package.sh builds: what each declares and holds,
the system major's installed with apt into a cluster made the Debian way
(pg_createcluster, conf.d), and every other major's files put where that
major's build looks and used there.

Run after scripts/package.sh (test.sh does both); it replaces the installed
extension files for a while and puts them back.
"""

import glob
import os
import shutil
import subprocess
import tempfile

import pytest

import harness
from harness import Server

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _shell(script):
    return subprocess.run(["bash", "-c", script], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


VERSION = _shell("sed -n 's/^version = \"\\(.*\\)\"/\\1/p' Cargo.toml | head -n 1")
SYSTEM_MAJOR, *OTHER_MAJORS = _shell(". scripts/versions.sh; echo $SYSTEM_MAJOR $OTHER_MAJORS").split()
PG_CACHE = _shell(". scripts/versions.sh; echo $PG_CACHE")
ARCH = _shell("dpkg --print-architecture")
PACKAGES = os.environ.get("SNOWFLAKE_PACKAGE_DIR") or os.path.join(
    os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target"), "debian")


def name_of(major):
    return f"postgresql-{major}-snowflake-id"


def deb_of(major):
    path = os.path.join(PACKAGES, f"{name_of(major)}_{VERSION}-1_{ARCH}.deb")
    assert os.path.exists(path), f"{path} is missing: run scripts/package.sh first"
    return path


def field(deb, name):
    return subprocess.run(["dpkg-deb", "--field", deb, name], check=True, capture_output=True, text=True).stdout.strip()


def apt(*args, check=True):
    return subprocess.run(["apt-get", "-q", "-y", *args], env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
                          check=check, capture_output=True, text=True)


def files_in(deb):
    listing = subprocess.run(["dpkg-deb", "--fsys-tarfile", deb], check=True, capture_output=True).stdout
    names = subprocess.run(["tar", "-t"], input=listing, check=True, capture_output=True).stdout.decode().split()
    return sorted(n.lstrip(".") for n in names if not n.endswith("/"))


@pytest.mark.parametrize("major", [SYSTEM_MAJOR, *OTHER_MAJORS])
def test_each_package_declares_its_postgresql_and_holds_the_extension_in_debian_paths(major):
    deb = deb_of(major)
    assert field(deb, "Package") == name_of(major)
    assert field(deb, "Version") == f"{VERSION}-1"
    assert field(deb, "Architecture") == ARCH
    depends = [d.strip() for d in field(deb, "Depends").split(",")]
    assert depends[0] == f"postgresql-{major}", depends
    assert any(d.startswith("libc6 (>= ") for d in depends), depends
    lib, ext, doc = f"/usr/lib/postgresql/{major}/lib", f"/usr/share/postgresql/{major}/extension", \
        f"/usr/share/doc/{name_of(major)}"
    updates = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "sql", "snowflake_id--*--*.sql")))
    assert files_in(deb) == sorted([
        f"{lib}/snowflake_id.so", f"{ext}/snowflake_id.control", f"{ext}/snowflake_id--{VERSION}.sql",
        *(f"{ext}/{u}" for u in updates), f"{doc}/copyright", f"{doc}/changelog.gz"])


def test_a_package_for_a_postgresql_this_machine_lacks_is_refused_for_that_reason():
    """Its Depends is what apt checks: the packages of the majors Debian 12 does
    not ship cannot be installed here without apt.postgresql.org's."""
    for major in OTHER_MAJORS:
        r = apt("install", "--simulate", deb_of(major), check=False)
        assert r.returncode != 0
        assert f"postgresql-{major}" in r.stdout + r.stderr, r.stdout + r.stderr


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
    assert sql("SELECT worker_id FROM snowflake_status") == [(7,)]


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
        assert status.stdout == f"install ok installed {VERSION}-1"
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


@pytest.mark.parametrize("major", OTHER_MAJORS)
def test_each_other_package_works_on_its_major(major):
    """Debian 12 has no postgresql-13/17/18 to install these next to, so their
    files go where this project's build of that major looks (pg_config), and
    a fresh server there preloads and uses them: the release library, built
    against that major, loads and generates."""
    deb = deb_of(major)
    bin_dir = os.path.join(PG_CACHE, major, "bin")

    def config(what):
        return subprocess.run([f"{bin_dir}/pg_config", what], check=True, capture_output=True, text=True).stdout.strip()

    lib, ext = config("--pkglibdir"), os.path.join(config("--sharedir"), "extension")
    keep, unpacked = tempfile.mkdtemp(), tempfile.mkdtemp()
    saved = _save(_installed_extension_files(lib, ext), keep)
    srv = None
    try:
        for p in _installed_extension_files(lib, ext):
            os.remove(p)
        subprocess.run(["dpkg-deb", "--extract", deb, unpacked], check=True)
        shutil.copy(os.path.join(unpacked, f"usr/lib/postgresql/{major}/lib/snowflake_id.so"), lib)
        for f in glob.glob(os.path.join(unpacked, f"usr/share/postgresql/{major}/extension/*")):
            shutil.copy(f, ext)
        srv = Server(f"package{major}", bin=bin_dir, conf={"snowflake_id.worker_id": 7})
        srv.start()
        _check_generates(lambda q: [tuple(r) for r in srv.sql(q)], major)
    finally:
        if srv is not None:
            srv.destroy()
        for p in _installed_extension_files(lib, ext):
            os.remove(p)
        _restore(saved, keep)
        shutil.rmtree(keep)
        shutil.rmtree(unpacked)
