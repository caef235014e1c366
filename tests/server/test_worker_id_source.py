"""The worker id taken from the host name (snowflake_id.worker_id_source =
'hostname'): each server runs in a UTS namespace of its own whose host name
the test chooses, so gethostname(2) in the server says what a Kubernetes
StatefulSet pod or a CloudNativePG instance would."""

from harness import server

HOSTNAME_SOURCE = {"snowflake_id.worker_id": None, "snowflake_id.worker_id_source": "'hostname'"}


def server_named(name, host_name, **conf):
    return server(name, conf={**HOSTNAME_SOURCE, **conf}, host_name=host_name)


def test_the_worker_id_is_the_number_ending_the_host_name_plus_the_offset():
    for host, offset, want in [("pg-3", 100, 103), ("orders-db-12", 0, 12)]:
        with server_named(f"host{want}", host, **{"snowflake_id.worker_id_offset": offset}) as srv:
            assert srv.one("SELECT current_setting('snowflake_id.worker_id')") == "-1"
            status = srv.sql("SELECT worker_id, worker_id_source, problem FROM snowflake_id.snowflake_status")[0]
            origin = f'host name "{host}"' + (f" ({want - offset} + snowflake_id.worker_id_offset {offset})" if offset else "")
            assert status == (want, origin, None)
            workers = srv.sql("SELECT DISTINCT (snowflake_decode(snowflake_nextval())).worker_id FROM generate_series(1, 100)")
            assert workers == [(want,)]


def test_a_host_name_without_a_number_refuses_generation_and_says_why():
    with server_named("hostbad", "db-primary") as srv:
        state, message, hint = srv.error("SELECT snowflake_nextval()")
        assert state == "22023"
        assert message == ("the host name \"db-primary\" does not end in \"-<number>\", so "
                           "snowflake_id.worker_id_source = 'hostname' cannot take a worker id from it")
        assert "StatefulSet" in hint and "snowflake_id.worker_id" in hint
        # No fallback: no worker id at all, and the status says why.
        assert srv.sql("SELECT worker_id, worker_id_source, problem FROM snowflake_id.snowflake_status") == [(None, None, message)]
        assert message in srv.log_text()
        # Decoding does not need a worker id.
        assert srv.one("SELECT (snowflake_decode(4096)).worker_id") == 1


def test_settings_that_contradict_each_other_are_refused():
    cases = [
        ("hostboth", "pg-1", {"snowflake_id.worker_id": 4},
         "snowflake_id.worker_id = 4 is set, but snowflake_id.worker_id_source = 'hostname' takes the worker id from the host name"),
        ("hostrange", "pg-1024", {}, 'the worker id 1024 from the host name "pg-1024" does not fit the 10 worker bits'),
        ("hostsource", "pg-1", {"snowflake_id.worker_id_source": "'k8s'"}, "invalid snowflake_id.worker_id_source: 'k8s'"),
        ("hostoffset", "pg-1", {"snowflake_id.worker_id_source": "'setting'", "snowflake_id.worker_id": 2,
                                "snowflake_id.worker_id_offset": 5},
         "snowflake_id.worker_id_offset = 5 is set, but the worker id comes from neither the host name nor Citus"),
        ("hostbadoffset", "pg-1", {"snowflake_id.worker_id_offset": "'ten'"},
         "snowflake_id.worker_id_offset = 'ten' in the configuration is invalid"),
    ]
    for name, host, conf, expected in cases:
        with server_named(name, host, **conf) as srv:
            state, message, hint = srv.error("SELECT snowflake_nextval()")
            assert (state, message[:len(expected)]) == ("22023", expected), message
            assert "restart PostgreSQL" in hint, hint
