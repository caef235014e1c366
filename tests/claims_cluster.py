"""Servers that claim worker ids and exchange their claims by logical
replication, for the tests of claims (tests/replication/test_claims.py) and
of claims under hostile data (tests/server/test_robustness.py): a writer
with a table filled through the DEFAULT, publications that carry a server's
own claims, and waits on what the status and the claims table say."""

import threading
import time

import psycopg2
from harness import Server, pg_major

LOAD_S = 3
DETECT_TIMEOUT_S = 30


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


def wait_problem(s, text, timeout=DETECT_TIMEOUT_S):
    """Waits until `problem` contains `text` (None: until it is empty);
    returns the seconds it took."""
    start = time.time()
    while True:
        p = problem(s)
        if (p is None) if text is None else (p is not None and text in p):
            return time.time() - start
        assert time.time() - start < timeout, f"{s.name}: problem is {p!r}, expected {text!r}"
        time.sleep(0.1)


def load(s, seconds=LOAD_S, sessions=2):
    """Inserts rows through the DEFAULT from `sessions` sessions; returns
    (ids inserted, errors as (sqlstate, message, hint))."""
    ids, errors, lock = [], [], threading.Lock()
    deadline = time.time() + seconds

    def run():
        conn = s.connect()
        cur = conn.cursor()
        while time.time() < deadline:
            try:
                cur.execute("INSERT INTO t (origin) SELECT %s FROM generate_series(1, 50) RETURNING id", (s.name,))
                got = [r[0] for r in cur.fetchall()]
            except psycopg2.Error as e:
                with lock:
                    errors.append((e.pgcode, e.diag.message_primary, e.diag.message_hint))
                time.sleep(0.02)
                continue
            with lock:
                ids.extend(got)
        conn.close()

    threads = [threading.Thread(target=run) for _ in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ids, errors


class load_both:
    """`load` on two servers at once; join() gives each one's result."""

    def __init__(self, a, b, seconds=LOAD_S):
        self.results = [None, None]

        def run(i, s):
            self.results[i] = load(s, seconds)

        self.threads = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate((a, b))]
        for t in self.threads:
            t.start()

    def join(self):
        for t in self.threads:
            t.join()
        return self.results


def apply_errors(s):
    # 19 counts the errors of table and sequence synchronization apart.
    sync = "sync_table_error_count + sync_seq_error_count" if pg_major() >= 19 else "sync_error_count"
    return s.one(f"SELECT coalesce(sum(apply_error_count + {sync}), 0) FROM pg_stat_subscription_stats")


def wait_claims(s, n, what, timeout=60):
    """Waits until snowflake_id.snowflake_claims holds `n` rows; says what it holds and
    what the server's processes wait on if it does not."""
    try:
        s.wait_for(f"SELECT count(*) = {n} FROM snowflake_id.snowflake_claims", timeout=timeout)
    except AssertionError:
        rows = s.sql("SELECT * FROM snowflake_id.snowflake_claims")
        procs = s.sql("SELECT pid, backend_type, state, wait_event_type, wait_event, left(query, 80)"
                      " FROM pg_stat_activity")
        raise AssertionError(f"{what}; claims: {rows}; processes: {procs}") from None


def wait_rows(s, n, what, timeout=60):
    s.wait_for(f"SELECT count(*) = {n} FROM t", timeout=timeout, what=f"{what}: {s.one('SELECT count(*) FROM t')} of {n} rows")


