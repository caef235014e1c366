-- What this server's generator is doing. VOLATILE: every call reads live
-- counters. Who may call it is set in privileges.sql.
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
    OUT backfill_worker_id integer,
    OUT backfill_leases bigint,
    OUT layout_ends timestamptz,
    OUT time_left interval,
    OUT reserver_pid integer,
    OUT started_at timestamptz,
    OUT registry text)
RETURNS record VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_status';

-- The view beside the claims, in the extension's own schema (see claims.sql).
CREATE VIEW snowflake_id.snowflake_status AS SELECT * FROM @extschema@.snowflake_status();
