"""Servers that claim worker ids and exchange their claims by logical
replication, for the tests of claims (tests/replication/test_claims.py) and
of claims under hostile data (tests/server/test_robustness.py): a writer
with a table filled through the DEFAULT, publications that carry a server's
own claims, and waits on what the status and the claims table say."""

import threading

import psycopg2
from harness import PROGRAM_TIMEOUT, Deadline, Server, Stopwatch, Window, pg_major, wait_until

LOAD_S = 3


def writer(made, name, worker_id, conf=None, **kw):
    """A started server that claims `worker_id` in database postgres and has
    a table t filled through the DEFAULT."""
    s = Server(name, conf={
        "wal_level": "logical",
        "cluster_name": f"'{name}'",
        "snowflake_id.claims_database": "'postgres'",
        "snowflake_id.worker_id": worker_id,
        **(conf or {}),
    }, **kw)
    made.append(s)
    s.start()
    s.sql("CREATE EXTENSION snowflake_id")
    s.sql("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), origin text)")
    return s


def sysid(s):
    return s.one("SELECT system_identifier FROM pg_control_system()")


def dsn(s):
    return f"host={s.dir} port={s.port} user=postgres dbname=postgres"


def publish(s, name, tables="t, "):
    """The README's publication: the data, and this server's own claim rows
    only (so that no server passes on a claim it received: no loops)."""
    s.sql(f"CREATE PUBLICATION {name} FOR TABLE {tables}snowflake_id.snowflake_claims WHERE (system_identifier = {sysid(s)})"
          " WITH (publish = 'insert, update, delete')")


def subscribe(s, name, source, publication, copy_data=True):
    s.sql(f"CREATE SUBSCRIPTION {name} CONNECTION '{dsn(source)}' PUBLICATION {publication}"
          f" WITH (copy_data = {str(copy_data).lower()})")


def problem(s):
    return s.one("SELECT problem FROM snowflake_id.snowflake_status")


def wait_problem(s, text, timeout=None):
    """Waits until `problem` contains `text` (None: until it is empty);
    returns the seconds it took (for printing only)."""
    took = Stopwatch()
    seen = []

    def check():
        p = problem(s)
        seen[:] = [p]
        return (p is None) if text is None else (p is not None and text in p)

    wait_until(check, lambda: f"{s.name}: problem is {seen[0]!r}, expected {text!r}", timeout)
    return took.seconds()


def own_claims_seen(s):
    """The newest last_seen of this server's own claim rows: it changes at
    each refresh of its claims worker."""
    return s.one("SELECT max(last_seen) FROM snowflake_id.snowflake_claims"
                 f" WHERE system_identifier = {sysid(s)}")


def wait_refreshes(s, n=3, each=None):
    """Waits until the claims worker of `s` has refreshed its claim `n`
    times from now (its last_seen took n new values), calling each() at
    every look. A refresh writes the claim, reads the others' and judges
    them in one pass, and the passes follow one another: after three
    refreshes, a pass that began after this call has judged and published
    what it read (the first may have begun before, the third begins only
    once the second is done)."""
    seen = [own_claims_seen(s)]

    def check():
        if each is not None:
            each()
        now = own_claims_seen(s)
        if now != seen[-1]:
            seen.append(now)
        return len(seen) > n

    wait_until(check, lambda: f"{s.name}: its claims worker refreshed {len(seen) - 1} of {n} times",
               interval=0.25)


class Load:
    """Inserts rows through the DEFAULT from `sessions` sessions, each until
    `seconds` have passed and it has run at least one statement, or, with
    seconds=None, until stop(). ids and errors (sqlstate, message, hint)
    grow as it runs."""

    def __init__(self, s, seconds=LOAD_S, sessions=2):
        self.s = s
        self.ids, self.errors, self.lock = [], [], threading.Lock()
        self.window = Window(seconds) if seconds is not None else None
        self.stopped = threading.Event()
        self.threads = [threading.Thread(target=self.run) for _ in range(sessions)]
        for t in self.threads:
            t.start()

    def going(self, ran):
        if self.stopped.is_set():
            return False
        if self.window is None:
            return True
        return self.window.open() or not ran

    def run(self):
        # A load lives through several waits of the test: ten waits' worth.
        deadline = Deadline(f"load on {self.s.name}", PROGRAM_TIMEOUT)
        conn = self.s.connect()
        cur = conn.cursor()
        ran = 0
        while self.going(ran):
            if deadline.passed():
                with self.lock:
                    self.errors.append((None, "the load was not stopped within the harness timeout", None))
                break
            ran += 1
            try:
                cur.execute("INSERT INTO t (origin) SELECT %s FROM generate_series(1, 50) RETURNING id",
                            (self.s.name,))
                got = [r[0] for r in cur.fetchall()]
            except psycopg2.Error as e:
                with self.lock:
                    self.errors.append((e.pgcode, e.diag.message_primary, e.diag.message_hint))
                Deadline.nap(0.02)
                continue
            with self.lock:
                self.ids.extend(got)
        conn.close()

    def stop(self):
        self.stopped.set()

    def join(self):
        for t in self.threads:
            t.join()
        return self.ids, self.errors


def load(s, seconds=LOAD_S, sessions=2):
    """Inserts rows through the DEFAULT from `sessions` sessions for
    `seconds` (each session runs at least one statement, however slow the
    machine); returns (ids inserted, errors as (sqlstate, message, hint))."""
    return Load(s, seconds, sessions).join()


class load_both:
    """`Load` on two servers at once (seconds=None: until stop()); join()
    gives each one's (ids, errors)."""

    def __init__(self, a, b, seconds=LOAD_S):
        self.loads = [Load(a, seconds), Load(b, seconds)]

    def stop(self):
        for one in self.loads:
            one.stop()

    def join(self):
        return [one.join() for one in self.loads]


def apply_errors(s):
    # 19 counts the errors of table and sequence synchronization apart.
    sync = "sync_table_error_count + sync_seq_error_count" if pg_major() >= 19 else "sync_error_count"
    return s.one(f"SELECT coalesce(sum(apply_error_count + {sync}), 0) FROM pg_stat_subscription_stats")


def wait_claims(s, n, what, timeout=None):
    """Waits until snowflake_id.snowflake_claims holds `n` rows; says what it holds and
    what the server's processes wait on if it does not."""
    try:
        s.wait_for(f"SELECT count(*) = {n} FROM snowflake_id.snowflake_claims", timeout=timeout)
    except AssertionError:
        rows = s.sql("SELECT * FROM snowflake_id.snowflake_claims")
        procs = s.sql("SELECT pid, backend_type, state, wait_event_type, wait_event, left(query, 80)"
                      " FROM pg_stat_activity")
        raise AssertionError(f"{what}; claims: {rows}; processes: {procs}") from None


def wait_rows(s, n, what, timeout=None):
    s.wait_for(f"SELECT count(*) = {n} FROM t", timeout=timeout, what=lambda: f"{what}: {s.one('SELECT count(*) FROM t')} of {n} rows")


