"""The end of a layout's time range: a WARNING a year ahead, then an error,
never an ID that wraps around."""

import contextlib
import datetime
import time

import psycopg2
from harness import server


def layout_ending_in(seconds, time_bits):
    """Settings for a custom layout with 1-second ticks whose last tick ends
    `seconds` from now."""
    span = 2**time_bits
    epoch = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=span - seconds)
    return {
        "snowflake_id.layout": f"'time={time_bits},worker=10,sequence=12,unit=1s'",
        "snowflake_id.epoch": f"'{epoch:%Y-%m-%d %H:%M:%S}+00'",
    }


def test_a_layout_near_its_end_warns_each_session_once_and_the_server_log_daily():
    # 22 bits of seconds is 48.5 days; this one has about 8.5 days left.
    with server("end-warning", conf=layout_ending_in(8.5 * 86400, 22)) as srv:
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
        deadline = time.time() + 5
        while "runs out of time" not in srv.log_text() and time.time() < deadline:
            time.sleep(0.1)
        assert "runs out of time in 8 days" in srv.log_text(), "the background worker did not log the warning"


def test_the_last_tick_ends_generation_with_an_error_never_a_wrap():
    # 12 bits of seconds: the whole layout spans 68 minutes; 10 seconds are
    # left when the settings are written (the server's initdb and start take
    # a few of them on a busy machine).
    left = 10
    ends_at = time.time() + left
    with server("end-error", conf=layout_ending_in(left, 12)) as srv:
        conn = srv.connect()
        cur = conn.cursor()
        ids = []
        error = None
        # The last ticks hold 4096 IDs each; max_lead (10 s) lets callers borrow
        # them all at once, then the layout is used up.
        for _ in range(60):
            try:
                cur.execute("SELECT i FROM snowflake_nextval_batch(1000) i")
                ids.extend(r[0] for r in cur.fetchall())
            except psycopg2.Error as e:
                error = e
                break
        assert error is not None, f"{len(ids)} IDs and no error from a layout {left} s from its end"
        assert error.pgcode == "2200H", (error.pgcode, error.pgerror)
        assert "has run out of time" in error.diag.message_primary, error.diag.message_primary
        assert "Changing the layout" in (error.diag.message_hint or "")
        assert ids == sorted(set(ids)), "IDs repeated or out of order before the end"
        assert max(ids) < 2**34, "an ID beyond the layout's 34 bits"
        last_ts, first_ts = srv.sql(
            "SELECT snowflake_timestamp(%s) - clock_timestamp(), snowflake_timestamp(%s) - clock_timestamp()",
            (max(ids), min(ids)),
        )[0]
        assert last_ts < datetime.timedelta(seconds=left), last_ts
        # The first IDs were made at the clock, not borrowed from its future.
        assert datetime.timedelta(seconds=-60) < first_ts <= datetime.timedelta(0), first_ts
        # Past the end: still an error, never a small ID again.
        time.sleep(max(0.0, ends_at - time.time()) + 1.5)
        for query in ("SELECT snowflake_nextval()", "SELECT snowflake_nextval_batch(1)"):
            with contextlib.closing(srv.connect()) as c, c.cursor() as cur2:
                try:
                    cur2.execute(query)
                    raise AssertionError(f"{query} returned {cur2.fetchall()} after the layout's end")
                except psycopg2.Error as e:
                    assert e.pgcode == "2200H", (e.pgcode, e.pgerror)
        errors = srv.one("SELECT errors FROM snowflake_id.snowflake_status")
        assert errors >= 3
