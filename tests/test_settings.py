"""Bad settings and changed settings on a real server: a clear error naming
the setting, never a silent fallback, and never a stopped server."""

import os
import time

import pytest
from harness import Server, server


def restart_with(srv, **conf):
    srv.stop()
    srv.set_conf(**conf)
    srv.start()


def expect(srv, sql, state, message_part, hint_part=""):
    got_state, message, hint = srv.error(sql)
    assert got_state == state, (sql, got_state, message)
    assert message_part in message, (sql, message)
    assert hint_part in hint, (sql, hint)
    assert "panicked" not in message and ".rs" not in message
    return message


def test_settings_problems_are_errors_on_use_and_logged_at_start():
    with server("settings-bad", conf={"snowflake_id.worker_id": None}) as srv:
        expect(srv, "SELECT snowflake_nextval()", "55000", "snowflake_id.worker_id is not set",
               "ALTER SYSTEM SET snowflake_id.worker_id = 1; then restart PostgreSQL")
        assert srv.one("SELECT problem FROM snowflake_status") == "snowflake_id.worker_id is not set"
        # Decoding needs no worker id.
        assert srv.one("SELECT worker_id FROM snowflake_decode(4198400)") == 1

        cases = [
            ({"snowflake_id.worker_id": 5000}, "22023", "snowflake_id.worker_id = 5000 does not fit the 10 worker bits", "0 to 1023"),
            ({"snowflake_id.worker_id": "'abc'"}, "22023", "snowflake_id.worker_id = 'abc' in the configuration is invalid", ""),
            ({"snowflake_id.worker_id": 1, "snowflake_id.layout": "'twiter'"}, "22023",
             "invalid snowflake_id.layout: unknown layout 'twiter'", "'twitter'"),
            ({"snowflake_id.layout": "'time=41,worker=10,sequence=13,unit=1ms'"}, "22023", "63 bits", "custom layout is written as"),
            ({"snowflake_id.layout": None, "snowflake_id.epoch": "'2025-01-01'"}, "22023",
             "invalid snowflake_id.epoch: '2025-01-01' has no UTC offset", ""),
            ({"snowflake_id.epoch": "'2099-01-01 00:00:00+00'"}, "22023", "before the epoch", "snowflake_id.epoch"),
            ({"snowflake_id.epoch": "'2020-01-01 00:00:00+00'", "snowflake_id.layout": "'twitter'"}, "22023",
             "snowflake_id.epoch cannot be combined with the twitter layout", "ALTER SYSTEM RESET snowflake_id.epoch"),
            ({"snowflake_id.epoch": None, "snowflake_id.layout": "'baidu'"}, "2200H", "the baidu layout has run out of time", "Changing the layout"),
            ({"snowflake_id.layout": "'js53'", "snowflake_id.max_wait": "'100ms'"}, "22023",
             "snowflake_id.max_wait (100 ms) is shorter than one tick of the js53 layout", "max_wait = '1000ms'"),
            ({"snowflake_id.layout": None, "snowflake_id.max_wait": None, "snowflake_id.max_lead": "'1hour'"}, "22023",
             "snowflake_id.max_lead = '1hour' in the configuration is invalid", "pg_reload_conf"),
        ]
        for conf, state, message, hint in cases:
            restart_with(srv, **conf)
            expect(srv, "SELECT snowflake_nextval()", state, message, hint)
            # The server stays up and says what is wrong in its status too.
            assert message in srv.one("SELECT problem FROM snowflake_status")

        # A fixed wait setting takes effect on reload, without a restart.
        srv.set_conf(**{"snowflake_id.max_lead": "'1h'"})
        srv.reload()
        time.sleep(1)
        assert srv.one("SELECT snowflake_nextval()") > 0
        log = srv.log_text()
        assert "WARNING:  snowflake_id.worker_id is not set" in log
        for bad in ["FATAL", "PANIC", "terminated by signal"]:
            assert bad not in log, bad


def test_a_changed_layout_or_epoch_is_refused_until_adopted():
    with server("settings-change") as srv:
        old = [r[0] for r in srv.sql("SELECT snowflake_nextval_batch(1000)")]

        restart_with(srv, **{"snowflake_id.layout": "'twitter'"})
        msg = expect(srv, "SELECT snowflake_nextval()", "55000",
                     "this server's IDs were issued under the snowflake_id layout (epoch 2025-01-01 00:00:00+00), "
                     "but it now runs with the twitter layout", "SELECT snowflake_adopt_settings();")
        assert srv.one("SELECT problem FROM snowflake_status") == msg
        expect(srv, "SELECT snowflake_nextval_batch(5)", "55000", "were issued under")

        # Back to the old settings: generation resumes where it was.
        restart_with(srv, **{"snowflake_id.layout": None})
        assert srv.one("SELECT snowflake_nextval()") > max(old)

        # An epoch change is refused the same way; adopting it moves on for good.
        restart_with(srv, **{"snowflake_id.epoch": "'2020-01-01 00:00:00+00'"})
        expect(srv, "SELECT snowflake_nextval()", "55000", "with epoch 2020-01-01 00:00:00+00")
        adopted = srv.one("SELECT snowflake_adopt_settings()")
        assert adopted.startswith("adopted layout 'time=41,worker=10,sequence=12,unit=1ms' with epoch 2020-01-01"), adopted
        new = [r[0] for r in srv.sql("SELECT snowflake_nextval_batch(1000)")]
        assert min(new) > max(old), "IDs under the adopted settings must be above every earlier ID"
        restart_with(srv)
        assert srv.one("SELECT snowflake_nextval()") > max(new)
        assert srv.one("SELECT snowflake_adopt_settings()").startswith("nothing to adopt")


def test_a_changed_worker_id_is_allowed_and_logged():
    with server("settings-worker") as srv:
        old = srv.one("SELECT max(i) FROM snowflake_nextval_batch(1000) i")
        restart_with(srv, **{"snowflake_id.worker_id": 9})
        new = srv.one("SELECT snowflake_nextval()")
        assert new > old
        assert srv.one(f"SELECT worker_id FROM snowflake_decode({new})") == 9
        assert "worker id changed from 1 to 9" in srv.log_text()


def test_a_damaged_state_file_is_refused_until_adopted():
    with server("settings-damaged") as srv:
        old = srv.one("SELECT max(i) FROM snowflake_nextval_batch(1000) i")
        srv.stop()
        path = os.path.join(srv.data, "snowflake_id.state")
        with open(path, "r+b") as f:
            f.write(b"\xff" * 1024)
        srv.start()
        expect(srv, "SELECT snowflake_nextval()", "XX001", "snowflake_id.state\" is damaged: neither of its two records",
               "snowflake_adopt_settings()")
        assert srv.one("SELECT snowflake_adopt_settings()").startswith("adopted the snowflake_id layout")
        assert [n for n in os.listdir(srv.data) if n.startswith("snowflake_id.state.damaged-")], "the damaged file was not kept"
        # The clock is right here, so new IDs are above the old ones.
        assert srv.one("SELECT snowflake_nextval()") > old


def test_adopt_is_refused_to_non_superusers():
    with server("settings-privilege") as srv:
        srv.sql("CREATE ROLE app LOGIN")
        conn = srv.connect()
        cur = conn.cursor()
        cur.execute("SET ROLE app")
        with pytest.raises(Exception) as e:
            cur.execute("SELECT snowflake_adopt_settings()")
        assert e.value.pgcode == "42501"
        conn.close()
        assert Server  # the harness module is what starts these servers
