"""A server that did not preload the library: a clear error, no crash."""

from harness import let_run, server


def test_without_preloading_generation_says_how_to_fix_it():
    with server("not-preloaded", preload=False, conf={"shared_preload_libraries": "'pg_stat_statements'"}) as srv:
        for call in ["SELECT snowflake_nextval()", "SELECT snowflake_nextval_batch(10)", "SELECT * FROM snowflake_id.snowflake_status"]:
            state, message, hint = srv.error(call)
            assert state == "55000", (call, state, message)
            assert "shared_preload_libraries" in message, message
            assert hint == (
                "Add this line to postgresql.conf and restart PostgreSQL: "
                "shared_preload_libraries = 'pg_stat_statements,snowflake_id'"
            ), hint
        # The server is up and well, and decoding does not need shared memory.
        assert srv.one("SELECT worker_id FROM snowflake_decode(175928847299117063, 'discord')") == 32
        assert srv.one("SELECT snowflake_from_timestamp('2025-01-01 00:00:00.001+00')") == 1 << 22
        # The sessions above are gone; what the postmaster says of them (a
        # backend that crashed as it exited) follows as it reaps them. A
        # slow machine can only make this miss such a line, not fail.
        srv.wait_for("SELECT count(*) = 0 FROM pg_stat_activity"
                     " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()")
        let_run(0.2)
        log = srv.log_text()
        for bad in ["FATAL", "PANIC", "terminated by signal", "panicked"]:
            assert bad not in log, f"{bad!r} in the server log:\n{log}"
