"""IDs for past times on copies of a server's data: a standby promoted after
backfills on its primary, and a restored base backup, each with its clock an
hour behind, backfill the very times the original did and repeat none of its
IDs. (Dumps, logical copies and pg_upgrade: tests/copies.py, run by
tests/replication/test_copies.py and tests/packaging/test_pg_upgrade.py.)"""

import random
import threading

import psycopg2
from harness import PROGRAM_TIMEOUT, Deadline, Server, Window, servers, started, wait_until

BACKFILL = {"snowflake_id.backfill_worker_id": 1023}
HIST = "CREATE TABLE hist (id bigint PRIMARY KEY, at timestamptz NOT NULL)"
# The times every server here backfills: 100 s of 2025, a row every 2 ms.
TIMES = "SELECT timestamptz '2025-02-01' + g * interval '2 ms' AS t FROM generate_series({lo}, {hi}) g"
SPAN = 50_000


class Backfills:
    """Sessions backfilling random stretches of TIMES: rows (each statement
    commits) and bare arrays, each session for `seconds` and at least one
    statement (the first of session 1 writes rows), or with seconds=None
    until stop() or until the server goes away. Every ID received is kept."""

    def __init__(self, srv, seconds=None, sessions=2):
        self.srv = srv
        self.window = Window(seconds) if seconds is not None else None
        self.stopped = threading.Event()
        self.statements = 0
        self.ids, self.errors = [], []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(k,)) for k in range(sessions)]
        for t in self.threads:
            t.start()

    def run(self, k):
        rnd = random.Random(k)
        try:
            conn = self.srv.connect()
        except psycopg2.Error as e:
            self.errors.append(str(e))
            return
        cur = conn.cursor()
        deadline = Deadline(f"backfills on {self.srv.name}", PROGRAM_TIMEOUT)  # through several waits
        ran = 0
        while not self.stopped.is_set() and (self.window is None or self.window.open() or not ran):
            if deadline.passed():
                self.errors.append("the backfills were not stopped within the harness timeout")
                return
            ran += 1
            lo = rnd.randint(1, SPAN - 2000)
            try:
                if rnd.random() < 0.7:
                    cur.execute(f"INSERT INTO hist SELECT snowflake_nextval_at(t), t FROM"
                                f" ({TIMES.format(lo=lo, hi=lo + 2000)}) v ON CONFLICT DO NOTHING RETURNING id")
                else:
                    cur.execute("SELECT unnest(snowflake_nextval_at_array("
                                "timestamptz '2025-02-01' + %s * interval '2 ms', 50))", (lo,))
                got = [r[0] for r in cur.fetchall()]
            except psycopg2.Error as e:
                if e.pgcode is None or conn.closed:
                    return  # the server went away: IDs not received were not handed out
                self.errors.append(f"{e.pgcode}: {e.pgerror}")
                return
            with self.lock:
                self.ids.extend(got)
                self.statements += 1

    def stop(self):
        self.stopped.set()

    def join(self):
        for t in self.threads:
            t.join()
        return self.ids


def primary(made, name):
    p = started(made, name, conf=BACKFILL, extension=True)
    p.sql(HIST)
    return p


def backfill_everything(s):
    """The copy backfills every time of TIMES, each once, and bare arrays:
    every ID it hands out."""
    ids = [r[0] for r in s.sql(f"SELECT snowflake_nextval_at(t) FROM ({TIMES.format(lo=1, hi=SPAN)}) v")]
    for lo in range(1, SPAN, 2500):
        ids += s.one(f"SELECT snowflake_nextval_at_array(timestamptz '2025-02-01' + {lo} * interval '2 ms', 50)")
    assert len(ids) == len(set(ids))
    return ids


def test_a_standby_promoted_after_backfills_on_its_primary_repeats_none():
    with servers() as made:
        p = primary(made, "bfr-primary")
        first = Backfills(p, seconds=2).join()
        s = Server("bfr-standby", copy_of=p, standby=True, faketime=True)
        made.append(s)
        s.set_clock(-3600)
        s.start()
        p.wait_for("SELECT count(*) = 1 FROM pg_stat_replication WHERE state = 'streaming'")
        # Until the primary goes away, mid-load: once IDs were received from
        # two statements.
        load = Backfills(p)
        wait_until(lambda: load.ids and load.statements >= 2, "the backfills on the primary did not start")
        p.stop("immediate")
        later = load.join()
        assert first and later and not load.errors, load.errors[:3]
        code, _, _ = s.error("SELECT snowflake_nextval_at('2025-02-01')")
        assert code == "25006"
        s.promote()
        s.wait_for("SELECT NOT pg_is_in_recovery()")
        replayed = [r[0] for r in s.sql("SELECT id FROM hist")]
        new = backfill_everything(s)
        # Every row the standby replayed, and every ID handed out before it
        # started streaming; later bare IDs that never reached it are counted.
        assert not set(new) & set(replayed), "an ID of a replayed row was issued again"
        assert not set(new) & set(first), "an ID handed out before the standby existed was issued again"
        print(f"replayed {len(replayed)} rows; after the primary's last stream:"
              f" {len(set(new) & set(later))} of {len(later)} repeated")


def test_a_restored_base_backup_repeats_none():
    with servers() as made:
        p = primary(made, "bfr-bb")
        before = Backfills(p, seconds=2).join()
        load = Backfills(p)  # until the backup is done
        wait_until(lambda: load.ids and load.statements >= 2, "the backfills on the primary did not start")
        b = Server("bfr-bb-copy", copy_of=p, faketime=True)  # pg_basebackup while it backfills
        made.append(b)
        load.stop()
        after = load.join()
        p.stop("immediate")
        b.set_clock(-3600)
        b.start()
        replayed = [r[0] for r in b.sql("SELECT id FROM hist")]
        assert replayed
        new = backfill_everything(b)
        assert not set(new) & set(replayed), "an ID of a replayed row was issued again"
        assert not set(new) & set(before), "an ID handed out before the backup was issued again"
        print(f"replayed {len(replayed)} rows; after the backup: {len(set(new) & set(after))} of {len(after)} repeated")


def test_a_standby_promoted_keeps_the_worker_ids_its_primary_issued_live_under():
    """The history of live worker ids travels in the marks' WAL: a standby
    promoted with worker 1, then 2, retired on its primary refuses to
    backfill under either at the times it was live, its clock an hour behind."""
    with servers() as made:
        p = started(made, "bfr-live-primary", extension=True)
        p.sql("CREATE TABLE old AS SELECT i AS id FROM snowflake_nextval_batch(2000) i")
        s = Server("bfr-live-standby", copy_of=p, standby=True, faketime=True)
        made.append(s)
        s.set_clock(-3600)
        s.start()
        p.set_conf(**{"snowflake_id.worker_id": 2})
        p.restart()
        p.sql("INSERT INTO old SELECT i FROM snowflake_nextval_batch(2000) i")
        end = p.one("SELECT pg_current_wal_flush_lsn()")
        s.wait_for(f"SELECT pg_last_wal_replay_lsn() >= '{end}'")
        p.stop("immediate")
        s.set_conf(**{"snowflake_id.worker_id": 3, "snowflake_id.backfill_worker_id": 1})
        s.restart()
        s.promote()
        s.wait_for("SELECT NOT pg_is_in_recovery()")
        s.sql("""CREATE FUNCTION try_at(t timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
                 BEGIN RETURN snowflake_nextval_at(t);
                 EXCEPTION WHEN object_not_in_prerequisite_state THEN RETURN NULL; END $$""")
        tried = """SELECT count(*) FILTER (WHERE b IS NULL), count(*) FILTER (WHERE b IN (SELECT id FROM old))
                     FROM (SELECT try_at(snowflake_timestamp(id)) AS b FROM old
                            WHERE (snowflake_decode(id)).worker_id = {w}) x"""
        assert s.sql(tried.format(w=1))[0] == (2000, 0)
        s.set_conf(**{"snowflake_id.backfill_worker_id": 2})
        s.reload_and_wait()
        assert s.sql(tried.format(w=2))[0] == (2000, 0)
        code, msg, hint = s.error("SELECT snowflake_nextval_at(snowflake_timestamp(max(id))) FROM old")
        assert code == "55000" and "backfill_worker_id = 2 issued live IDs" in msg, msg
        assert "live here before: 1, 2; now: 3" in hint, hint
