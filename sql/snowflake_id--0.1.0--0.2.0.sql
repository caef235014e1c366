-- snowflake_id 0.1.0 -> 0.2.0: the durable mark travels in WAL.
-- The status gains where the mark came from (state file, WAL replay, written
-- here), the server and timeline it belongs to, marks replayed, and waits for
-- a synchronous standby; snowflake_resume_above(id) raises the floor above
-- data that arrived without the mark. The status becomes readable by
-- monitoring roles (pg_read_all_stats, and so pg_monitor) instead of by all.

\echo Use "ALTER EXTENSION snowflake_id UPDATE TO '0.2.0'" to load this file. \quit

DROP VIEW snowflake_status;
DROP FUNCTION snowflake_status();

CREATE FUNCTION snowflake_status(
    OUT worker_id integer,
    OUT worker_id_source text,
    OUT layout text,
    OUT epoch timestamptz,
    OUT problem text,
    OUT last_id bigint,
    OUT last_id_time timestamptz,
    OUT lead interval,
    OUT largest_lead interval,
    OUT durable_mark timestamptz,
    OUT durable_mark_written_at timestamptz,
    OUT mark_source text,
    OUT mark_system_identifier bigint,
    OUT mark_timeline bigint,
    OUT marks_replayed bigint,
    OUT ids_issued bigint,
    OUT ticks_borrowed bigint,
    OUT clock_steps_back bigint,
    OUT largest_clock_step_back interval,
    OUT waits bigint,
    OUT wait_time interval,
    OUT errors bigint,
    OUT mark_writes bigint,
    OUT mark_writes_by_callers bigint,
    OUT standby_waits bigint,
    OUT standby_wait_time interval,
    OUT layout_ends timestamptz,
    OUT time_left interval,
    OUT reserver_pid integer,
    OUT started_at timestamptz)
RETURNS record VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_status';

CREATE VIEW snowflake_status AS SELECT * FROM snowflake_status();

-- Puts every later ID of this server above id, durably. Superuser only.
CREATE FUNCTION snowflake_resume_above(id bigint) RETURNS text
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_resume_above_wrapper';
REVOKE ALL ON FUNCTION snowflake_resume_above(bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION snowflake_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_status() TO pg_read_all_stats;
GRANT SELECT ON snowflake_status TO pg_read_all_stats;
