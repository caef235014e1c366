"""Throwaway PostgreSQL servers for the integration tests.

Every test here runs against a real server started from the system's
PostgreSQL 15 binaries with the installed snowflake_id library: real shared
memory, real crashes (kill -9), real clock steps (libfaketime), real restarts.
Postgres refuses to run as root, so servers run as the `postgres` user.
"""

import contextlib
import hashlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import time

import psycopg2

# The system major's programs: the test command's own copy of the machine's
# PostgreSQL 15 (scripts/versions.sh, own_system_postgres), where it installs
# the extension; Debian's own where run by hand.
SYSTEM_PG_BIN = os.environ.get("SNOWFLAKE_SYSTEM_PG_BIN", "/usr/lib/postgresql/15/bin")
PG_BIN = os.environ.get("PG_BIN", SYSTEM_PG_BIN)


def pg_major(bin_dir=PG_BIN):
    """The major of the PostgreSQL in bin_dir: 18 for "PostgreSQL 18.6", 19
    for a pre-release's "PostgreSQL 19rc1"."""
    out = subprocess.run([f"{bin_dir}/pg_config", "--version"], capture_output=True, text=True, check=True).stdout
    return int(re.match(r"\d+", out.split()[1]).group())
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

# Time in the tests. No outcome may depend on how fast the machine is: a test
# whose subject is time sets the servers' clocks it needs (libfaketime,
# Server.set_clock), and every wait is for a condition, bounded by one
# timeout for the whole run, as PostgreSQL's TAP tests bound theirs with
# PG_TEST_TIMEOUT_DEFAULT. Only a machine that cannot meet a condition in
# this many seconds fails a wait; SNOWFLAKE_TEST_TIMEOUT raises it on a slow
# one. The helpers below are the only place the tests read the real clock or
# sleep (tests/source/test_timing.py checks it).
TIMEOUT = float(os.environ.get("SNOWFLAKE_TEST_TIMEOUT", "180"))


# The bound on one run of a program the tests start (an application's test
# suite, a migration tool): a whole program, not a wait, so ten waits' worth.
PROGRAM_TIMEOUT = 10 * TIMEOUT


def wait_until(check, what, timeout=None, interval=0.1):
    """Calls check() until it returns a true value, and returns that value.
    `what` (a text, or a function giving one) says what never happened; a
    check that raises is not caught."""
    deadline = Deadline(what, timeout)
    while True:
        value = check()
        if value:
            return value
        deadline.check()
        time.sleep(interval)


class Deadline:
    """The harness-wide bound on a loop that waits for a condition while it
    does work of its own (sends IDs, retries a statement): check() fails the
    test once TIMEOUT (or `timeout`) has passed; nap() is the loop's pause
    between two looks."""

    def __init__(self, what, timeout=None):
        self.what = what
        self.timeout = TIMEOUT if timeout is None else max(timeout, TIMEOUT)
        self.at = time.monotonic() + self.timeout

    def passed(self):
        return time.monotonic() >= self.at

    def check(self):
        if self.passed():
            what = self.what() if callable(self.what) else self.what
            raise AssertionError(f"not within {self.timeout:.0f} s: {what}")

    @staticmethod
    def nap(seconds=0.1):
        time.sleep(seconds)


def let_run(seconds):
    """Lets load that runs beside the test go on for a while. How much it
    does in that time decides no outcome: what is asserted afterwards holds
    for any amount (no repeat, order kept). Never a wait for a condition."""
    time.sleep(seconds)


class Window:
    """A stretch of real time during which load runs, for loops of the form
    `while window.open(): ...`: how much work fits in it decides no outcome,
    and the loop stops by itself."""

    def __init__(self, seconds):
        self.until = time.monotonic() + seconds

    def open(self):
        return time.monotonic() < self.until


class Stopwatch:
    """Seconds since it was made. For lower bounds (a call waited at least
    the clock step it had to wait out) and for what a test prints; an upper
    bound on how long something took is a timing threshold, never asserted."""

    def __init__(self):
        self.start = time.monotonic()

    def seconds(self):
        return time.monotonic() - self.start


def wall_clock():
    """The machine's real time (seconds since the epoch), for comparing with
    a server's clock that libfaketime moves."""
    return time.time()
RUN_AS = "postgres"

# Test processes run side by side (scripts/test.sh runs a lane per major, and
# pytest-xdist several workers in a lane): each gets its own scratch directory
# and its own range of 100 ports, below SNOWFLAKE_TEST_PORT's lane base.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_WORKER_INDEX = int(_XDIST_WORKER[2:]) if _XDIST_WORKER.startswith("gw") else 0
WORK = os.path.join(os.environ.get("SNOWFLAKE_TEST_DIR", "/tmp/snowflake_id-tests"), _XDIST_WORKER)
os.makedirs(WORK, exist_ok=True)
# Some servers listen on TCP (Citus nodes, the JDBC recipe's), where a port in
# Linux's ephemeral range (32768 to 60999) can be taken at any moment by the
# client end of some connection: every lane's ports are moved below it.
_base_port = int(os.environ.get("SNOWFLAKE_TEST_PORT", "55400"))
if _base_port >= 32768:
    _base_port -= 30000
_next_port = [_base_port + 100 * _WORKER_INDEX]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def drivers_python():
    """The Python of the virtual environment scripts/setup.sh fills with the
    pinned client libraries of tests/drivers/requirements.txt."""
    with open(os.path.join(REPO, "tests", "drivers", "requirements.txt"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    return os.path.join(os.environ.get("SNOWFLAKE_VENV") or f"/var/cache/snowflake_id/venv-{digest}", "bin", "python")


def go_path():
    """The GOPATH scripts/setup.sh fills with the sources of pgx v4 and what it
    imports, as Debian packages them (its VERSIONS names each package)."""
    return os.environ.get("SNOWFLAKE_GOPATH") or "/var/cache/snowflake_id/gopath-pgx-v4"


def _as_postgres(cmd, env=None, check=True, host_name=None, **kw):
    """Runs `cmd` as the postgres user (directly if we already are it);
    with host_name, in a UTS namespace of its own where the host is called
    that (root only), so a server started so keeps that name."""
    if os.geteuid() == 0:
        envs = [f"{k}={v}" for k, v in (env or {}).items()]
        cmd = ["sudo", "-u", RUN_AS, "env", *envs, *cmd]
    else:
        assert host_name is None, "a host name of its own needs root"
        kw["env"] = {**os.environ, **(env or {})}
    if host_name is not None:
        cmd = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host_name, *cmd]
    return subprocess.run(cmd, check=check, capture_output=True, text=True, **kw)


def _chown(path):
    if os.geteuid() == 0:
        pw = pwd.getpwnam(RUN_AS)
        os.chown(path, pw.pw_uid, pw.pw_gid)


# The servers' user makes directories of its own here too (pg_basebackup's target).
_chown(WORK)


class Server:
    """One PostgreSQL server in its own directory, on its own port.

    conf: extra postgresql.conf lines as a dict.
    faketime: run it under libfaketime, its clock offset set by set_clock().
    """

    def __init__(self, name, conf=None, preload=True, faketime=False, copy_of=None, standby=False, copy_with=None,
                 env=None, bin=None, host_name=None, initdb_args=()):
        """copy_of: a running Server to base-backup instead of running initdb
        (standby=True makes the copy a streaming standby of it; copy_with(data_dir)
        makes the copy itself instead of pg_basebackup). env: extra environment
        variables for the server's processes. bin: the PostgreSQL binaries'
        directory, PG_BIN by default. host_name: what gethostname(2) says in the
        server's processes. initdb_args: more options for initdb."""
        self.name = name
        self.bin = bin or PG_BIN
        self.host_name = host_name
        self.extra_env = dict(env or {})
        self.dir = os.path.join(WORK, name)
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        self.port = _next_port[0]
        _next_port[0] += 1
        self.faketime = faketime
        self.clock_file = os.path.join(self.dir, "faketime.rc")
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self.stop("immediate")  # left running by an interrupted run
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        _chown(self.dir)
        if copy_with is not None:
            copy_with(self.data)
            inherited = copy_of.harness_settings()
        elif copy_of is not None:
            self._base_backup(copy_of, standby)
            inherited = copy_of.harness_settings()
        else:
            _as_postgres([f"{self.bin}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync",
                          *initdb_args])
            inherited = {}
        base = {
            "port": self.port,
            "listen_addresses": "''",
            "unix_socket_directories": f"'{self.dir}'",
            "fsync": "on",
            "logging_collector": "off",
            "log_line_prefix": "'%m [%p] '",
            "max_connections": 40,
        }
        if preload:
            base["shared_preload_libraries"] = "'snowflake_id'"
            base["snowflake_id.worker_id"] = 1
        base.update({k: v for k, v in inherited.items() if k not in ("port", "unix_socket_directories")})
        base.update(conf or {})
        self.write_conf(base)
        if faketime:
            self.set_clock(0, settle=False)  # no process reads it yet

    def _base_backup(self, source, standby):
        """pg_basebackup of `source` into this server's data directory."""
        cmd = [f"{self.bin}/pg_basebackup", "-h", source.dir, "-p", str(source.port), "-U", "postgres",
               "-D", self.data, "-X", "stream", "-c", "fast", "--no-sync"]
        if standby:
            cmd.append("-R")
        _as_postgres(cmd)

    def harness_settings(self):
        path = os.path.join(self.data, "postgresql.conf")
        with open(path) as f:
            block = f.read().split("# --- harness ---")[1]
        return dict(line.split(" = ", 1) for line in block.strip().splitlines())

    def write_conf(self, settings):
        """Replaces the settings block this harness owns in postgresql.conf."""
        path = os.path.join(self.data, "postgresql.conf")
        with open(path) as f:
            text = f.read().split("# --- harness ---")[0]
        lines = [f"{k} = {v}" for k, v in settings.items() if v is not None]
        with open(path, "w") as f:
            f.write(text + "# --- harness ---\n" + "\n".join(lines) + "\n")

    def set_conf(self, **changes):
        """Changes harness settings (None removes one); takes effect on restart/reload."""
        settings = self.harness_settings()
        for k, v in changes.items():
            k = k.replace("__", ".")
            if v is None:
                settings.pop(k, None)
            else:
                settings[k] = v
        self.write_conf(settings)

    def set_clock(self, offset_seconds, settle=True):
        """Moves this server's clock to real time + offset (libfaketime).
        Each process re-reads the file at its first clock read whose whole
        second of real time is more than FAKETIME_CACHE_DURATION (1) past
        that of its last re-read (libfaketime 0.9.10's fake_clock_gettime,
        src/libfaketime.c): settle (the default) returns once the second two past
        the write's has begun, after which every clock read of every
        process of the server has the new offset."""
        assert self.faketime
        with open(self.clock_file, "w") as f:
            f.write(f"{offset_seconds:+d}\n")
        os.chmod(self.clock_file, 0o644)
        written = time.time()
        # A new second of mtime for every write, for tools that look at it.
        self._clock_mtime = max(getattr(self, "_clock_mtime", 0) + 1, int(written))
        os.utime(self.clock_file, (self._clock_mtime, self._clock_mtime))
        if settle:
            time.sleep(max(0.0, int(written) + 2.05 - time.time()))

    def env(self):
        if not self.faketime:
            return dict(self.extra_env)
        return {
            **self.extra_env,
            "LD_PRELOAD": FAKETIME_LIB,
            "FAKETIME_TIMESTAMP_FILE": self.clock_file,
            "FAKETIME_CACHE_DURATION": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    def start(self, check=True):
        r = _as_postgres(
            [f"{self.bin}/pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", str(int(TIMEOUT)), "start"],
            env=self.env(),
            check=False,
            host_name=self.host_name,
        )
        if check and r.returncode != 0:
            raise RuntimeError(f"server {self.name} did not start:\n{r.stdout}{r.stderr}\n{self.log_text()[-3000:]}")
        return r

    def stop(self, mode="fast"):
        _as_postgres([f"{self.bin}/pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", str(int(TIMEOUT)), "stop"],
                     check=False)

    def promote(self):
        _as_postgres([f"{self.bin}/pg_ctl", "-D", self.data, "-w", "-t", str(int(TIMEOUT)), "promote"])

    def wait_for(self, query, timeout=None, what=None):
        """Polls `query` until it returns a true first value (a server that
        is not accepting connections yet counts as false)."""

        def check():
            try:
                return self.one(query)
            except psycopg2.OperationalError:
                return False

        wait_until(check, what or f"waiting for: {query}", timeout)

    def wait_for_log(self, text, what=None):
        """Waits until the server's log holds `text`."""
        wait_until(lambda: text in self.log_text(), what or f"{self.name}: the log never said {text!r}")

    def mark_wal(self, start, end):
        """(records, bytes) of snowflake_id's WAL resource manager between two
        LSNs (needs the pg_walinspect extension)."""
        if not self.one("SELECT %s::pg_lsn < %s::pg_lsn", (start, end)):
            return 0, 0
        return self.sql(
            "SELECT count(*), coalesce(sum(record_length), 0) FROM pg_get_wal_records_info(%s, %s)"
            " WHERE resource_manager = 'snowflake_id'", (start, end))[0]

    def children(self):
        """PIDs of the postmaster's child processes."""
        pid = self.postmaster_pid()
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def kill9_all(self):
        """kill -9 of the postmaster, then of every process it left behind."""
        kids = self.children()
        postmaster = self.postmaster_pid()
        os.kill(postmaster, signal.SIGKILL)
        for k in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(k, signal.SIGKILL)
        # The postmaster too, until it is reaped: a new one finds its pid in
        # postmaster.pid and refuses to start while that process exists.
        wait_until(lambda: not any(os.path.exists(f"/proc/{k}") for k in kids + [postmaster]),
                   "children of the killed postmaster did not exit", interval=0.05)

    def restart(self, mode="fast"):
        self.stop(mode)
        self.start()

    def reload(self):
        _as_postgres([f"{self.bin}/pg_ctl", "-D", self.data, "reload"])

    def reload_and_wait(self):
        """Reloads the configuration and waits until new sessions have it:
        the load time differs (a server whose clock libfaketime stepped back
        notes an earlier one)."""
        before = self.one("SELECT pg_conf_load_time()")
        self.reload()
        self.wait_for(f"SELECT pg_conf_load_time() <> '{before}'")

    def connect(self, dbname="postgres", autocommit=True, user="postgres", options=None):
        """options: settings of the session from its start (`-c name=value ...`),
        in force before the first statement, over the database's and role's."""
        conn = psycopg2.connect(host=self.dir, port=self.port, user=user, dbname=dbname,
                                **({"options": options} if options else {}))
        conn.autocommit = autocommit
        return conn

    def connect_retry(self, timeout=None):
        """Connects, waiting out a crash-restart in progress."""
        deadline = Deadline(f"{self.name} did not take connections", timeout)
        while True:
            try:
                return self.connect()
            except psycopg2.OperationalError:
                if deadline.passed():
                    raise
                deadline.nap()

    def sql(self, query, args=None, dbname="postgres", user="postgres", options=None):
        """Runs one statement in a fresh session; returns all rows."""
        with contextlib.closing(self.connect(dbname=dbname, user=user, options=options)) as conn, conn.cursor() as cur:
            cur.execute(query, args)
            return cur.fetchall() if cur.description else []

    def one(self, query, args=None, dbname="postgres", user="postgres", options=None):
        return self.sql(query, args, dbname=dbname, user=user, options=options)[0][0]

    def error(self, query, dbname="postgres", user="postgres"):
        """Runs `query` expecting an error; returns (sqlstate, message, hint)."""
        with contextlib.closing(self.connect(dbname=dbname, user=user)) as conn, conn.cursor() as cur:
            try:
                cur.execute(query)
            except psycopg2.Error as e:
                d = e.diag
                return d.sqlstate, d.message_primary, d.message_hint or ""
        raise AssertionError(f"no error from {query}")

    def postmaster_pid(self):
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            return int(f.readline())

    def kill9(self, pid):
        os.kill(pid, signal.SIGKILL)

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def destroy(self):
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


def install_0_1_0_script(bin_dir=None):
    """The released 0.1.0 install script, as a server that had 0.1.0
    installed holds it, for a test that creates the extension at 0.1.0: each
    such test installs it itself, whatever ran before it on this major."""
    share = subprocess.run([f"{bin_dir or PG_BIN}/pg_config", "--sharedir"], capture_output=True, text=True,
                           check=True).stdout.strip()
    shutil.copy(os.path.join(REPO, "sql", "snowflake_id--0.1.0.sql"), os.path.join(share, "extension"))


def write_opaque_keys(s, text, mode=0o600, inside=False):
    """Writes an opaque ID key file for `s` as its operator would: outside the
    data directory unless `inside`, owned by postgres, written whole and
    renamed into place. Returns its path."""
    path = os.path.join(s.data if inside else s.dir, "opaque.keys")
    with open(path + ".new", "w") as f:
        f.write(text)
    _chown(path + ".new")
    os.chmod(path + ".new", mode)
    os.replace(path + ".new", path)
    return path


def use_opaque_keys(s, text):
    """A key file for `s` (see write_opaque_keys), named in its configuration
    with ALTER SYSTEM and reloaded."""
    path = write_opaque_keys(s, text)
    s.sql(f"ALTER SYSTEM SET snowflake_id.opaque_keys_file = '{path}'")
    s.reload_and_wait()
    return path


def application_role(s, createdb=False):
    """Makes `s` hold what an application has: role `app`, no superuser, the
    owner of database `appdb`, where it creates the (trusted) extension itself.
    Returns the PG* variables that connect as it."""
    s.sql(f"CREATE ROLE app LOGIN{' CREATEDB' if createdb else ''}")
    s.sql("CREATE DATABASE appdb OWNER app")
    s.sql("CREATE EXTENSION snowflake_id", dbname="appdb", user="app")
    assert s.one("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'") is False
    return {"PGHOST": s.dir, "PGPORT": str(s.port), "PGUSER": "app", "PGDATABASE": "appdb"}


@contextlib.contextmanager
def servers():
    """A list to put servers in: their logs are printed if the block fails,
    and every one is destroyed afterwards."""
    made = []
    try:
        yield made
    except BaseException:
        for s in made:
            print(f"--- last lines of {s.log} ---\n{s.log_text()[-3000:]}")
        raise
    finally:
        for s in made:
            s.destroy()


def started(made, name, extension=False, **kw):
    """A Server (`Server(name, **kw)`), put in `made` (a `servers()` list,
    which prints its log if the block fails and destroys it afterwards) and
    started; with `extension`, with the extension created in it."""
    s = Server(name, **kw)
    made.append(s)
    s.start()
    if extension:
        s.sql("CREATE EXTENSION snowflake_id")
    return s


@contextlib.contextmanager
def server(name, **kw):
    """A started server with the extension created, destroyed afterwards."""
    s = Server(name, **kw)
    s.start()
    try:
        s.sql("CREATE EXTENSION snowflake_id")
        yield s
    except BaseException:
        print(f"--- last lines of {s.log} ---\n{s.log_text()[-4000:]}")
        raise
    finally:
        s.destroy()
