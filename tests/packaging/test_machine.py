"""tests/packaging/machine.py, the test command's check that the machine's
own PostgreSQL is left as found, can fail: run in a private copy of /usr,
/etc and /var (scripts/private-system.sh, as the package test), where the
extension the test command built is put at Debian's paths as a user's
install would be, a server of the machine's PostgreSQL loads it, and each
way of breaking a user's server the check exists for is done to it."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest
from harness import wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
MACHINE = os.path.join(HERE, "machine.py")
OWN = os.environ.get("SNOWFLAKE_SYSTEM_PG_BIN", "")
LIB, EXT = "/usr/lib/postgresql/15/lib", "/usr/share/postgresql/15/extension"


def in_private_system():
    """Whether this runs in scripts/private-system.sh: it says so, and /usr
    is an overlay here."""
    with open("/proc/self/mounts") as f:
        usr_overlay = any(line.split()[1] == "/usr" and line.split()[2] == "overlay" for line in f)
    return os.environ.get("SNOWFLAKE_PRIVATE_SYSTEM") == "1" and usr_overlay


pytestmark = pytest.mark.skipif(not in_private_system(), reason="needs scripts/private-system.sh")


def machine(cmd, work):
    return subprocess.run([sys.executable, MACHINE, cmd], env={**os.environ, "SNOWFLAKE_TEST_DIR": work,
                                                                "SNOWFLAKE_TEST_PORT": "59800"},
                          capture_output=True, text=True)


@pytest.fixture
def user_server():
    """The extension at Debian's paths (copied from the test command's own
    PostgreSQL, where the run installed it), and the machine's server
    started with it by machine.py."""
    assert OWN, "SNOWFLAKE_SYSTEM_PG_BIN names the test command's own PostgreSQL"
    def pg_config(what):
        return subprocess.run([f"{OWN}/pg_config", what], check=True, capture_output=True, text=True).stdout.strip()

    own_lib, own_ext = pg_config("--pkglibdir"), os.path.join(pg_config("--sharedir"), "extension")
    placed = []
    for src_dir, dst_dir in ((own_lib, LIB), (own_ext, EXT)):
        for name in os.listdir(src_dir):
            if name.startswith("snowflake_id"):
                shutil.copy(os.path.join(src_dir, name), os.path.join(dst_dir, name))
                placed.append(os.path.join(dst_dir, name))
    work = tempfile.mkdtemp(prefix="snowflake_id-machine-")
    shutil.chown(work, "postgres")
    r = machine("start", work)
    assert r.returncode == 0 and "the extension loaded" in r.stdout, r.stdout + r.stderr
    try:
        yield work
    finally:
        machine("stop", work)
        shutil.rmtree(work, ignore_errors=True)
        for path in placed:
            os.remove(path)


def test_a_server_left_alone_passes(user_server):
    r = machine("check", user_server)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_library_changed_in_place_fails_the_check(user_server):
    with open(os.path.join(LIB, "snowflake_id.so"), "ab") as f:
        f.write(b"\0")
    r = machine("check", user_server)
    assert r.returncode == 1 and "snowflake_id.so" in r.stderr, r.stdout + r.stderr


def test_a_library_rewritten_in_place_with_the_same_bytes_fails_the_check(user_server):
    # What `cargo pgrx install` of the same build does: the bytes are the
    # same, but a server that has the file mapped sees it truncated first.
    path = os.path.join(LIB, "snowflake_id.so")
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "r+b") as f:
        f.write(data)
    r = machine("check", user_server)
    assert r.returncode == 1 and "snowflake_id.so" in r.stderr, r.stdout + r.stderr


def test_a_library_replaced_by_rename_fails_the_check(user_server):
    path = os.path.join(LIB, "snowflake_id.so")
    shutil.copy(path, path + ".new")
    os.replace(path + ".new", path)
    r = machine("check", user_server)
    assert r.returncode == 1 and "snowflake_id.so" in r.stderr, r.stdout + r.stderr


def test_a_process_of_the_server_killed_fails_the_check(user_server):
    pid = int(open(os.path.join(user_server, "machine", "data", "postmaster.pid")).readline())
    out = subprocess.run(["ps", "-o", "pid=,cmd=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    reserver = [int(line.split()[0]) for line in out.splitlines() if "snowflake_id reserver" in line]
    assert reserver, out
    os.kill(reserver[0], signal.SIGSEGV)
    log = os.path.join(user_server, "machine", "server.log")
    wait_until(lambda: "terminated by signal" in open(log, errors="replace").read(), "the postmaster saw no crash")
    r = machine("check", user_server)
    assert r.returncode == 1 and "terminated by signal" in r.stderr, r.stdout + r.stderr
