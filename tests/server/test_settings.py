"""Bad settings and changed settings on a real server: a clear error naming
the setting, never a silent fallback, and never a stopped server."""

import os
import re

import pytest
import psycopg2
from harness import server


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
               "ALTER SYSTEM SET snowflake_id.worker_id = <that number>; then restart PostgreSQL")
        # No number is suggested: whichever it were, another server may hold it.
        assert not re.search(r"worker_id = \d", srv.error("SELECT snowflake_nextval()")[2])
        assert srv.one("SELECT problem FROM snowflake_id.snowflake_status") == "snowflake_id.worker_id is not set"
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
            assert message in srv.one("SELECT problem FROM snowflake_id.snowflake_status")

        # A fixed wait setting takes effect on reload, without a restart.
        srv.set_conf(**{"snowflake_id.max_lead": "'1h'"})
        srv.reload_and_wait()
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
        assert srv.one("SELECT problem FROM snowflake_id.snowflake_status") == msg
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


def test_the_status_is_for_monitoring_roles_through_view_and_function_alike():
    with server("settings-status-privilege") as srv:
        srv.sql("CREATE ROLE watcher LOGIN IN ROLE pg_monitor")
        srv.sql("CREATE ROLE app LOGIN")
        srv.one("SELECT snowflake_nextval()")
        for role, allowed in [("watcher", True), ("app", False)]:
            for query in ["SELECT worker_id FROM snowflake_id.snowflake_status", "SELECT worker_id FROM snowflake_status()"]:
                conn = srv.connect()
                cur = conn.cursor()
                cur.execute(f"SET ROLE {role}")
                try:
                    cur.execute(query)
                    assert allowed, f"{role} read {query}"
                    assert cur.fetchone()[0] == 1
                except psycopg2.Error as e:
                    assert not allowed and e.pgcode == "42501", (role, query, e.pgcode, e)
                conn.close()


def test_misspelt_settings_are_reported_at_start_and_removed():
    conf = {"snowflake_id.layuot": "'js53'", "snowflake_id.max_leed": "'1h'", "Snowflake_ID.Max_Wiat": "'5s'",
            "SNOWFLAKE_ID.Layout": "'js53'"}
    with server("settings-misspelt", conf=conf) as srv:
        log = srv.log_text()
        for name in ["snowflake_id.layuot", "snowflake_id.max_leed"]:
            assert f'WARNING:  invalid configuration parameter name "{name}", removing it' in log, log[-2000:]
        # Postgres reserves the prefix as written; names are case-insensitive.
        assert 'WARNING:  invalid configuration parameter name "Snowflake_ID.Max_Wiat": snowflake_id has no such setting' in log, log[-2000:]
        # A real setting in another case is that setting.
        assert "SNOWFLAKE_ID.Layout" not in log
        assert srv.one("SHOW snowflake_id.layout") == "js53"
        srv.set_conf(**{"SNOWFLAKE_ID.Layout": None})
        srv.restart()
        assert srv.one("SHOW snowflake_id.layout") == "snowflake_id"
        state, message, _ = srv.error("SHOW snowflake_id.layuot")
        assert state == "42704", (state, message)
        # Nobody can create one later either.
        state, message, _ = srv.error("SET snowflake_id.anything = 1")
        assert state == "42602" and "invalid configuration parameter name" in message, (state, message)


def test_a_bad_wait_setting_is_refused_until_a_reload_fixes_it():
    with server("settings-reload", conf={"snowflake_id.max_lead": "'garbage'"}) as srv:
        expect(srv, "SELECT snowflake_nextval()", "22023", "snowflake_id.max_lead = 'garbage' in the configuration is invalid")
        # A reload that leaves it (or another bad value) in place changes nothing.
        srv.reload_and_wait()
        expect(srv, "SELECT snowflake_nextval()", "22023", "snowflake_id.max_lead = 'garbage'")
        srv.set_conf(**{"snowflake_id.max_lead": "'junk'"})
        srv.reload_and_wait()
        expect(srv, "SELECT snowflake_nextval()", "22023", "snowflake_id.max_lead = 'junk'")
        assert "'junk'" in srv.one("SELECT problem FROM snowflake_id.snowflake_status")
        # Removing the line and reloading is enough: the default is what remains.
        srv.set_conf(**{"snowflake_id.max_lead": None})
        srv.reload_and_wait()
        assert srv.one("SHOW snowflake_id.max_lead") == "10s"
        assert srv.one("SELECT snowflake_nextval()") > 0
        assert srv.one("SELECT problem FROM snowflake_id.snowflake_status") is None
        # A bad value after a good one: every session, old or new, refuses alike.
        old = srv.connect().cursor()
        old.execute("SELECT snowflake_nextval()")
        srv.set_conf(**{"snowflake_id.max_lead": "'junk2'"})
        srv.reload_and_wait()
        expect(srv, "SELECT snowflake_nextval()", "22023", "snowflake_id.max_lead = 'junk2'")
        with pytest.raises(psycopg2.Error) as e:
            old.execute("SELECT snowflake_nextval()")
        assert e.value.pgcode == "22023" and "'junk2'" in e.value.diag.message_primary
        srv.set_conf(**{"snowflake_id.max_lead": None})
        srv.reload_and_wait()
        # A bad value given through ALTER SYSTEM, fixed through ALTER SYSTEM.
        srv.stop()
        with open(f"{srv.data}/postgresql.auto.conf", "a") as f:
            f.write("snowflake_id.max_wait = 'forever'\n")
        srv.start()
        expect(srv, "SELECT snowflake_nextval()", "22023", "snowflake_id.max_wait = 'forever'")
        srv.sql("ALTER SYSTEM SET snowflake_id.max_wait = '2s'")
        srv.reload_and_wait()
        assert srv.one("SELECT snowflake_nextval()") > 0


def test_problem_is_the_error_the_next_call_raises():
    with server("settings-problem") as srv:
        srv.one("SELECT max(i) FROM snowflake_nextval_batch(1000) i")
        for conf, state, part in [
            ({"snowflake_id.layout": "'baidu'"}, "2200H", "has run out of time"),
            ({"snowflake_id.layout": None, "snowflake_id.epoch": "'2099-01-01 00:00:00+00'"}, "22023", "before the epoch"),
            ({"snowflake_id.epoch": "'-9223372036854775808'"}, "22023", "before the earliest time a timestamptz can hold"),
            ({"snowflake_id.epoch": None, "snowflake_id.layout": "'twitter'"}, "55000", "were issued under"),
        ]:
            restart_with(srv, **conf)
            problem = srv.one("SELECT problem FROM snowflake_id.snowflake_status")
            got, message, _ = srv.error("SELECT snowflake_nextval()")
            # The same error, but for the clock reading some messages quote.
            clock = re.compile(r"the system clock reads [^,]*,")
            assert (got, clock.sub("", message)) == (state, clock.sub("", problem)), (conf, got, message, problem)
            assert part in message, message

        # A state file that cannot be written: the problem shows at once, and
        # is what the first call that must move the mark raises.
        restart_with(srv, **{"snowflake_id.layout": None})
        srv.one("SELECT snowflake_nextval()")
        path = f"{srv.data}/snowflake_id.state"
        os.chmod(path, 0o444)
        try:
            # While the mark is ahead, the next call needs no write: no problem
            # yet. (The mark is about a second ahead: on a machine so slow
            # that the clock has passed it already, only what follows is seen.)
            problem, ahead = srv.sql("SELECT problem, durable_mark > clock_timestamp() + interval '200 ms'"
                                     " FROM snowflake_id.snowflake_status")[0]
            assert problem is None or not ahead, problem
            srv.wait_for("SELECT durable_mark < clock_timestamp() FROM snowflake_id.snowflake_status")
            problem = srv.one("SELECT problem FROM snowflake_id.snowflake_status")
            assert problem.startswith('could not write the durable state file'), problem
            got, message, _ = srv.error("SELECT snowflake_nextval()")
            assert (got, message) == ("58030", problem)
        finally:
            os.chmod(path, 0o600)
        assert srv.one("SELECT snowflake_nextval()") > 0
        assert srv.one("SELECT problem FROM snowflake_id.snowflake_status") is None
