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
-- A schema of that name already there (the habit of CREATE SCHEMA x;
-- CREATE EXTENSION x SCHEMA x) stops the install: said with what to run.
DO $clash$
DECLARE
    ext_schema pg_catalog.oid;
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) 'snowflake_id') THEN
        -- The functions' schema, from the catalog (the extension's row is
        -- there while its script runs), not from the script's text.
        SELECT e.extnamespace INTO ext_schema FROM pg_catalog.pg_extension e
         WHERE e.extname OPERATOR(pg_catalog.=) 'snowflake_id';
        IF ext_schema OPERATOR(pg_catalog.=) 'snowflake_id'::pg_catalog.regnamespace THEN
            RAISE EXCEPTION USING ERRCODE = '42P06',
                MESSAGE = 'schema "snowflake_id" already exists: snowflake_id makes a schema of that name itself, for its claims table and status view, so its functions cannot be installed into it',
                HINT = 'Install the functions into a schema of another name (the rename as the schema''s owner): ALTER SCHEMA snowflake_id RENAME TO snowflake; CREATE EXTENSION snowflake_id SCHEMA snowflake;';
        END IF;
        RAISE EXCEPTION USING ERRCODE = '42P06',
            MESSAGE = 'schema "snowflake_id" already exists: snowflake_id makes a schema of that name itself, for its claims table and status view',
            HINT = pg_catalog.format('Rename that schema (as its owner), then create the extension again: ALTER SCHEMA snowflake_id RENAME TO snowflake_id_app; CREATE EXTENSION snowflake_id SCHEMA %I;',
                (SELECT n.nspname FROM pg_catalog.pg_namespace n WHERE n.oid OPERATOR(pg_catalog.=) ext_schema));
    END IF;
END
$clash$;
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
    -- A backfill worker id's claim (snowflake_nextval_at): it makes the
    -- claiming server refuse its backfills on a collision, and never
    -- anyone's live IDs.
    backfill boolean NOT NULL DEFAULT false,
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
