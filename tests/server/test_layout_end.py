"""The end of a layout's time range: a WARNING a year ahead, then an error,
never an ID that wraps around. The server's clock is set where each test
needs it (libfaketime): how long the machine takes to start a server or
send a batch decides nothing."""

import contextlib
import datetime

import psycopg2
from harness import Deadline, server, servers, started, wall_clock

UTC = datetime.timezone.utc


def layout_ending_at(end, time_bits):
    """Settings for a custom layout with 1-second ticks whose last tick ends
    at `end` (an aware datetime, whole seconds)."""
    epoch = end - datetime.timedelta(seconds=2**time_bits)
    return {
        "snowflake_id.layout": f"'time={time_bits},worker=10,sequence=12,unit=1s'",
        "snowflake_id.epoch": f"'{epoch:%Y-%m-%d %H:%M:%S}+00'",
    }


def test_a_layout_near_its_end_warns_each_session_once_and_the_server_log_daily():
    # 22 bits of seconds is 48.5 days; this one has about 8.5 days left, by
    # the real clock the server runs on (days of margin: any start is quick).
    end = datetime.datetime.fromtimestamp(int(wall_clock() + 8.5 * 86400), UTC)
    with server("end-warning", conf=layout_ending_at(end, 22)) as srv:
        conn = srv.connect()
        cur = conn.cursor()
        for _ in range(3):
            cur.execute("SELECT snowflake_nextval()")
        cur.execute("SELECT snowflake_nextval_batch(10)")
        warnings = [n for n in conn.notices if "runs out of time" in n]
        assert len(warnings) == 1, conn.notices
        assert warnings[0].startswith("WARNING:  ") and "runs out of time in 8 days" in warnings[0], warnings[0]
        # A new session is told again.
        other = srv.connect()
        other.cursor().execute("SELECT snowflake_nextval()")
        assert any("runs out of time in 8 days" in n for n in other.notices), other.notices
        left = srv.one("SELECT extract(epoch FROM time_left)::float8 FROM snowflake_id.snowflake_status")
        assert 8 * 86400 < left < 9 * 86400, left
        srv.wait_for_log("runs out of time in 8 days", "the background worker did not log the warning")


def server_clock(cur):
    cur.execute("SELECT clock_timestamp()")
    return cur.fetchone()[0]


def test_the_last_tick_ends_generation_with_an_error_never_a_wrap():
    # 12 bits of seconds: the whole layout spans 68 minutes, and ends half an
    # hour after the real time at which the server starts, however long its
    # initdb and start take. Then its clock is moved to `lead` seconds before
    # the end; max_lead (1 h) lets callers borrow every tick up to the end at
    # once, so the loop below meets the end after lead * 4096 IDs whatever
    # real time passes meanwhile.
    end = datetime.datetime.fromtimestamp(int(wall_clock()) + 1800, UTC)
    conf = {**layout_ending_at(end, 12), "snowflake_id.max_lead": "'1h'"}
    with servers() as made:
        srv = started(made, "end-error", conf=conf, faketime=True, extension=True)
        lead = 20
        conn = srv.connect()
        cur = conn.cursor()
        while True:
            # The offset that puts the server's clock `lead` s before the end.
            srv.set_clock(int((end.timestamp() - lead) - wall_clock()))
            before = server_clock(cur)
            ids = []
            error = None
            clock_after_first = None
            deadline = Deadline(f"no error from a layout {lead} s from its end")
            while error is None:
                deadline.check()
                try:
                    cur.execute("SELECT i FROM snowflake_nextval_batch(4096) i")
                    ids.extend(r[0] for r in cur.fetchall())
                    clock_after_first = clock_after_first or server_clock(cur)
                except psycopg2.Error as e:
                    error = e
            if ids:
                break
            # The machine stalled for `lead` s between the clock's move and
            # the first batch, which met the end at once: nothing was issued,
            # so nothing is lost by trying again further from the end.
            assert before >= end - datetime.timedelta(seconds=lead), (before, end)
            lead *= 2
            assert lead < 1800, "the end was met before any ID, again and again"
        assert error.pgcode == "2200H", (error.pgcode, error.pgerror)
        assert "has run out of time" in error.diag.message_primary, error.diag.message_primary
        assert "Changing the layout" in (error.diag.message_hint or "")
        assert ids == sorted(set(ids)), "IDs repeated or out of order before the end"
        assert max(ids) < 2**34, "an ID beyond the layout's 34 bits"
        last_ts, first_ts = srv.sql("SELECT snowflake_timestamp(%s), snowflake_timestamp(%s)", (max(ids), min(ids)))[0]
        assert last_ts < end, (last_ts, end)
        # The last ticks were used up: every ID up to the end was handed out.
        assert last_ts == end - datetime.timedelta(seconds=1), (last_ts, end)
        # The first IDs were made at the clock, not borrowed from its future.
        assert before.replace(microsecond=0) <= first_ts <= clock_after_first, (before, first_ts, clock_after_first)
        # Past the end: still an error, never a small ID again.
        srv.set_clock(int(end.timestamp() + 5 - wall_clock()))
        for query in ("SELECT snowflake_nextval()", "SELECT snowflake_nextval_batch(1)"):
            with contextlib.closing(srv.connect()) as c, c.cursor() as cur2:
                try:
                    cur2.execute(query)
                    raise AssertionError(f"{query} returned {cur2.fetchall()} after the layout's end")
                except psycopg2.Error as e:
                    assert e.pgcode == "2200H", (e.pgcode, e.pgerror)
        errors = srv.one("SELECT errors FROM snowflake_id.snowflake_status")
        assert errors >= 3
