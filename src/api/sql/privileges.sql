-- These move this server's generation for good: superusers only (each also
-- checks for itself, in case a superuser grants EXECUTE by mistake).
-- snowflake_convert stays open to all: it runs each statement as the owner
-- of what it changes, and only for a caller with that owner's privileges.
REVOKE ALL ON FUNCTION @extschema@.snowflake_adopt_settings() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.snowflake_resume_above(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.snowflake_resume_above(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.snowflake_resume_above() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.snowflake_vouch_backfill_worker_id(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.snowflake_release_worker_id() FROM PUBLIC;
-- Makes a database a registry, owned by the role that runs it: for the role a
-- superuser grants it to (see "A fleet's worker ids from a registry" in
-- docs/operators.md), so that no role squats the registry's names.
REVOKE ALL ON FUNCTION @extschema@.snowflake_registry_init(regrole) FROM PUBLIC;

-- IDs for past times: for the roles an operator grants them to. Each lease
-- costs a durable write and a row in the database's record, and numbers at
-- a past time, once handed out, are gone for good: a role that may call
-- them at will could use up what an import needs.
REVOKE ALL ON FUNCTION @extschema@.snowflake_nextval_at(timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.snowflake_nextval_at_array(timestamptz, integer) FROM PUBLIC;

-- The status shows the server's identity, its durable mark and its counters:
-- for monitoring roles, as Postgres does with other sessions' statistics.
-- pg_read_all_stats is one of the roles pg_monitor holds, so members of
-- either may read the function and the view alike.
REVOKE ALL ON FUNCTION @extschema@.snowflake_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.snowflake_status() TO pg_read_all_stats;
GRANT SELECT ON snowflake_id.snowflake_status TO pg_read_all_stats;
