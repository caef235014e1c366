-- snowflake_id 0.1.0 -> 0.2.0: the durable mark travels in WAL.
-- The status gains where the mark came from (state file, WAL replay, written
-- here), the server and timeline it belongs to, marks replayed, and waits for
-- a synchronous standby; snowflake_resume_above(id) raises the floor above
-- data that arrived without the mark; snowflake_nextval_array(n) hands out a
-- batch as one array. The status becomes readable by
-- monitoring roles (pg_read_all_stats, and so pg_monitor) instead of by all.
-- Each server can claim its worker id in snowflake_id.snowflake_claims, which
-- travels with replicated data, so that two live servers with one worker id
-- are found. The claims and the status view live in the schema snowflake_id,
-- apart from the application's tables; so the extension is no longer
-- relocatable, and a role with CREATE on a database may install it (trusted).
-- Everything here is qualified: the script runs as the bootstrap superuser.

\echo Use "ALTER EXTENSION snowflake_id UPDATE TO '0.2.0'" to load this file. \quit

DROP VIEW @extschema@.snowflake_status;
DROP FUNCTION @extschema@.snowflake_status();

CREATE FUNCTION @extschema@.snowflake_status(
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



-- Puts every later ID of this server above id, durably. Superuser only.
CREATE FUNCTION @extschema@.snowflake_resume_above(id bigint) RETURNS text
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_resume_above_wrapper';
REVOKE ALL ON FUNCTION @extschema@.snowflake_resume_above(bigint) FROM PUBLIC;

-- n IDs as one bigint[]: a batch without a row per ID.
CREATE FUNCTION @extschema@.snowflake_nextval_array(n integer) RETURNS bigint[]
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_nextval_array_wrapper';

REVOKE ALL ON FUNCTION @extschema@.snowflake_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.snowflake_status() TO pg_read_all_stats;

-- Keeps snowflake_claims to the rows the claims worker and replication write.
CREATE FUNCTION @extschema@.snowflake_claims_guard() RETURNS trigger
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_claims_guard_wrapper';

-- Which worker id each server issues IDs under: one row per server (system
-- identifier), timeline and start (instance, random), kept by the claims
-- worker of every server whose snowflake_id.claims_database names this
-- database. Replicated along with the data (see "Many writers" in the
-- README), it lets every server that receives another live server's claim
-- on its own worker id know.
-- Not dumped: a claim belongs to the server that wrote it.
--
-- The table and the status view live in a schema of the extension's own, not
-- in the application's: schema tools (Alembic, drizzle-kit, ...) compare the
-- application's schema with their models and would otherwise try to drop
-- them. Created here, the schema is the extension's member: CREATE EXTENSION
-- fails if a schema of that name exists already, so no role can own it.
CREATE SCHEMA snowflake_id;
-- Monitoring roles read the claims and the status there.
GRANT USAGE ON SCHEMA snowflake_id TO pg_read_all_stats;
CREATE TABLE snowflake_id.snowflake_claims (
    worker_id integer NOT NULL,
    system_identifier bigint NOT NULL,
    timeline bigint NOT NULL,
    instance bigint NOT NULL,
    name text NOT NULL,
    claimed_at timestamptz NOT NULL,
    last_seen timestamptz NOT NULL,
    PRIMARY KEY (system_identifier, timeline, instance, worker_id)
);

-- Written by the claims worker and by replication alone (see
-- snowflake_claims_guard); readable by monitoring roles, as the status is.
REVOKE ALL ON snowflake_id.snowflake_claims FROM PUBLIC;
GRANT SELECT ON snowflake_id.snowflake_claims TO pg_read_all_stats;
CREATE TRIGGER snowflake_claims_guard BEFORE INSERT OR UPDATE OR DELETE ON snowflake_id.snowflake_claims
    FOR EACH ROW EXECUTE FUNCTION @extschema@.snowflake_claims_guard();
CREATE TRIGGER snowflake_claims_guard_truncate BEFORE TRUNCATE ON snowflake_id.snowflake_claims
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.snowflake_claims_guard();
-- Both fire for what replication applies as well: a claim arriving again
-- replaces the copy held here, and a role that may only set
-- session_replication_role writes nothing.
ALTER TABLE snowflake_id.snowflake_claims ENABLE ALWAYS TRIGGER snowflake_claims_guard;
ALTER TABLE snowflake_id.snowflake_claims ENABLE ALWAYS TRIGGER snowflake_claims_guard_truncate;
-- Called by its triggers alone (which need no EXECUTE).
REVOKE ALL ON FUNCTION @extschema@.snowflake_claims_guard() FROM PUBLIC;

-- The status view, beside the claims.
CREATE VIEW snowflake_id.snowflake_status AS SELECT * FROM @extschema@.snowflake_status();
GRANT SELECT ON snowflake_id.snowflake_status TO pg_read_all_stats;

-- IDs as fixed-width text that sorts like the numbers (base62, Crockford
-- base32, hex), and back.
CREATE FUNCTION @extschema@.snowflake_to_text(id bigint, encoding text) RETURNS text
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_to_text_wrapper';

CREATE FUNCTION @extschema@.snowflake_from_text(text text, encoding text) RETURNS bigint
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_from_text_wrapper';

-- Moves an existing table's key column to snowflake IDs, each statement as
-- the owner of what it changes.
CREATE FUNCTION @extschema@.snowflake_convert(
    tbl regclass,
    col name DEFAULT 'id',
    dry_run boolean DEFAULT false,
    drop_sequence boolean DEFAULT false,
    subscribers_widened boolean DEFAULT false
) RETURNS SETOF text
VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
SET row_security = off
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_convert_wrapper';
