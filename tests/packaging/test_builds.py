"""The test command on a machine where a PostgreSQL major's source cannot be
had: the run goes on without it, says so at that point and in its summary,
and exits 0; a major listed in SNOWFLAKE_REQUIRED_MAJORS fails it instead,
saying why.

Made real: scripts/test.sh itself runs (only its core layer, with a build
cache of its own that holds no build of 17), its builds script asks Debian's
real mirror for a suite that does not exist, and no pinned source is
offered, which is what a machine sees when every suite that carries a major
has moved on or is served late.
"""

import glob
import os
import shutil
import subprocess
import tempfile

import pytest
from harness import PROGRAM_TIMEOUT, TIMEOUT

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_tests(tmp, **overrides):
    """scripts/test.sh with 17 as the only other major, unavailable. What
    the run around this one set for itself is not inherited unless given
    here again (None removes a variable)."""
    env = {
        **os.environ,
        "SNOWFLAKE_OTHER_MAJORS": "17",
        "SNOWFLAKE_PG_SUITES_17": "no-such-suite",
        "SNOWFLAKE_PG_PINS": "/dev/null",
        "SNOWFLAKE_PG_CACHE": os.path.join(tmp, "cache"),
        "SNOWFLAKE_TEST_DIR": os.path.join(tmp, "tests"),
        "SNOWFLAKE_TEST_LAYERS": "core",
        # pgrx pointed at the system's major in a configuration of its own:
        # the run around this one points its own at every major meanwhile.
        "SNOWFLAKE_PGRX_HOME": os.path.join(tmp, "pgrx"),
        # Its own copy of the system's PostgreSQL, should a layer want one:
        # the run around this one runs its servers from its own.
        "SNOWFLAKE_OWN_SYSTEM_PG": os.path.join(tmp, "own-postgres"),
    }
    for k in ("SNOWFLAKE_AVAILABLE_MAJORS", "SNOWFLAKE_REQUIRED_MAJORS", "PG_BIN", "PG_REGRESS", "SNOWFLAKE_TEST_LOAD",
              "SNOWFLAKE_SYSTEM_PG_BIN", "SNOWFLAKE_SYSTEM_PG_CONFIG", "PGRX_HOME"):
        env.pop(k, None)
    env.update({k: v for k, v in overrides.items() if v is not None})
    for k in [k for k, v in overrides.items() if v is None]:
        env.pop(k, None)
    return subprocess.run([os.path.join(REPO, "scripts", "test.sh")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=PROGRAM_TIMEOUT)


def summary_of(out):
    assert "==> Summary" in out, out[-3000:]
    return out[out.index("==> Summary"):]


@pytest.fixture
def tmp():
    with tempfile.TemporaryDirectory(prefix="snowflake_id-builds-") as d:
        yield d


def test_an_unavailable_major_is_skipped_said_and_the_run_passes(tmp):
    r = run_tests(tmp, SNOWFLAKE_REQUIRED_MAJORS=None)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    # Loudly where it was found out, with what was asked.
    assert "PostgreSQL 17 is UNAVAILABLE" in r.stderr, r.stderr[-3000:]
    assert "no-such-suite" in r.stderr
    summary = summary_of(r.stdout)
    header = next(line for line in summary.splitlines() if line.startswith("layer"))
    assert header.split()[1:] == ["15", "17"], header
    # Columns 22 characters wide: the layer, then one per major.
    rows = {line[:22].strip(): [line[i:i + 22].strip() for i in range(22, len(line), 22)]
            for line in summary.splitlines()[3:] if line[:22].strip()}
    cells = lambda row: rows[row]
    assert cells("core: cargo test") == ["passed", "passed"], summary
    for row in ("#[pg_test]", "regression files", "update, pg_upgrade", "Debian package"):
        assert cells(row) == ["not asked", "skipped (no source)"], (row, summary)
    # Again at the end, with the reason.
    assert "!!! PostgreSQL 17 was NOT tested: no source of PostgreSQL 17 could be had" in summary, summary
    assert summary.rstrip().endswith("All tests that could run passed."), summary


def test_a_required_major_that_cannot_be_had_fails_the_run(tmp):
    r = run_tests(tmp, SNOWFLAKE_REQUIRED_MAJORS="17")
    assert r.returncode != 0, (r.stdout + r.stderr)[-3000:]
    assert ("PostgreSQL 17 is required (SNOWFLAKE_REQUIRED_MAJORS=\"17\") but could not be had"
            in r.stderr), r.stderr[-3000:]
    summary = summary_of(r.stdout)
    assert "FAILED" in summary and "All tests that could run passed." not in summary, summary


def machines_archive(suite):
    """The archive URI this machine's own apt configuration serves `suite` from."""
    out = subprocess.run(["apt-get", "indextargets", "--no-release-info", "--format", "$(RELEASE) $(REPO_URI)"],
                         capture_output=True, text=True, check=True).stdout
    return next(line.split()[1].rstrip("/") for line in out.splitlines() if line.split()[0] == suite)


def test_postgresql_sources_are_asked_of_the_mirror_apt_is_configured_with(tmp):
    """A machine behind its own mirror: its apt configuration (here through
    APT_CONFIG, as a company's sources.list would) names a mirror on this
    machine, which passes every request on to the real archive and notes
    it. The builds script reads Debian's source lists through it, and asks
    nothing of an archive apt was not pointed at."""
    import http.server
    import threading
    import urllib.request

    upstream = machines_archive("bookworm")
    asked = []

    class Mirror(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server interface
            asked.append(self.path)
            try:
                with urllib.request.urlopen(upstream + self.path.removeprefix("/debian"), timeout=TIMEOUT) as r:
                    body, status = r.read(), r.status
            except urllib.error.HTTPError as e:
                body, status = b"", e.code
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Mirror)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sources = os.path.join(tmp, "sources.list")
        with open(sources, "w") as f:
            f.write(f"deb http://127.0.0.1:{server.server_port}/debian bookworm main\n")
        conf = os.path.join(tmp, "apt.conf")
        with open(conf, "w") as f:
            f.write(f'Dir::Etc::SourceList "{sources}";\nDir::Etc::SourceParts "/dev/null";\n')
        env = {**os.environ, "APT_CONFIG": conf, "SNOWFLAKE_PG_CACHE": os.path.join(tmp, "cache"),
               "SNOWFLAKE_PG_PINS": "/dev/null", "SNOWFLAKE_PG_SUITES_17": "bookworm-updates",
               "SNOWFLAKE_BUILDS_REPORT": os.path.join(tmp, "report")}
        r = subprocess.run([os.path.join(REPO, "scripts", "postgres-builds.sh"), "17"], env=env,
                           capture_output=True, text=True, timeout=PROGRAM_TIMEOUT)
    finally:
        server.shutdown()
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert f"from http://127.0.0.1:{server.server_port}/debian" in out, out[-3000:]
    assert any(p.startswith("/debian/dists/bookworm-updates/") for p in asked), asked
    # bookworm-updates carries no PostgreSQL 17: said as such, from that mirror's lists.
    with open(os.path.join(tmp, "report")) as f:
        assert f.read().startswith("17 unavailable no source of PostgreSQL 17"), out[-3000:]


def test_a_major_whose_source_is_not_served_runs_from_debians_binary_packages_on_their_own_libraries(tmp):
    """What the builds fall back to where no archive serves a major's source
    (experimental's 19 on this machine's mirror): Debian's binary packages
    of it, unpacked with every library they link into one directory. Every
    program there loads its libraries, the C library among them, from that
    directory alone (asked of its own loader, not of the script that set it
    up), nothing is written outside it, and the server it holds starts and
    answers."""
    cache = os.path.join(tmp, "cache")
    os.makedirs(cache)
    # Its check runs as nobody, as the servers run as postgres.
    os.chmod(tmp, 0o755)
    r = subprocess.run([os.path.join(REPO, "scripts", "postgres-from-packages.sh"), "19",
                        os.path.join(cache, "19-{version}-deb1"), machines_archive("bookworm"), "sid", "forky",
                        "experimental"], capture_output=True, text=True, timeout=PROGRAM_TIMEOUT)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    version, prefix = r.stdout.splitlines()[-1].split()
    assert prefix == os.path.join(cache, f"19-{version}-deb1") and version.startswith("19"), out[-3000:]
    root = os.path.join(prefix, "root")
    loaders = glob.glob(os.path.join(root, "usr/lib/*/ld-linux*.so.*"))
    assert len(loaders) == 1, loaders
    def elf(path):
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    programs = [p for p in glob.glob(os.path.join(prefix, "bin", "*")) if os.access(p, os.X_OK) and elf(p)]
    assert {"postgres", "initdb", "pg_ctl", "pg_upgrade", "pg_dump", "psql", "pg_config"} <= {os.path.basename(p) for p in programs}
    for p in programs:
        listed = subprocess.run([loaders[0], "--list", p], capture_output=True, text=True, check=True).stdout
        resolved = [line.split("=>")[1].split()[0] for line in listed.splitlines() if "=>" in line]
        assert resolved, listed
        outside = [lib for lib in resolved if not os.path.realpath(lib).startswith(root + os.sep)]
        assert outside == [], f"{p} loads {outside}"
    # Unpacked, not installed: dpkg knows none of it.
    assert subprocess.run(["dpkg-query", "-W", "postgresql-19"], capture_output=True).returncode != 0
    pg_config = os.path.join(prefix, "bin", "pg_config")
    # Moved with its directory: its paths are the directory's.
    assert subprocess.run([pg_config, "--pkglibdir"], capture_output=True, text=True,
                          check=True).stdout.startswith(root + os.sep)
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    shutil.chown(tmp, "postgres")
    shutil.chown(data, "postgres")
    as_postgres = ["sudo", "-u", "postgres", "env", "LC_ALL=C.UTF-8"]
    subprocess.run([*as_postgres, os.path.join(prefix, "bin", "initdb"), "-D", data, "-A", "trust"],
                   capture_output=True, check=True)
    r = subprocess.run([*as_postgres, os.path.join(prefix, "bin", "postgres"), "--single", "-D", data, "postgres"],
                       input="SELECT 'answer:' || version();\n", capture_output=True, text=True, timeout=120)
    assert f"answer:PostgreSQL {version.replace('~', '')}" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
