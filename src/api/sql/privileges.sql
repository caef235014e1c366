-- These move this server's generation for good: superusers only (each also
-- checks for itself, in case a superuser grants EXECUTE by mistake).
-- snowflake_convert stays open to all: it runs each statement as the owner
-- of what it changes, and only for a caller with that owner's privileges.
REVOKE ALL ON FUNCTION @extschema@.snowflake_adopt_settings() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.snowflake_resume_above(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.snowflake_resume_above(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.snowflake_resume_above() FROM PUBLIC;

-- The status shows the server's identity, its durable mark and its counters:
-- for monitoring roles, as Postgres does with other sessions' statistics.
-- pg_read_all_stats is one of the roles pg_monitor holds, so members of
-- either may read the function and the view alike.
REVOKE ALL ON FUNCTION @extschema@.snowflake_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.snowflake_status() TO pg_read_all_stats;
GRANT SELECT ON snowflake_id.snowflake_status TO pg_read_all_stats;
