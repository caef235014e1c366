-- The servers whose IDs this database may hold: a row for the server that
-- created the extension here, and one for every floor a server made after
-- the data came from another cluster, naming the servers it covered (see
-- "Copies" in docs/operators.md). It travels with the data: pg_upgrade
-- carries the table, pg_dump its rows (marked below), a publication of all
-- tables its rows. A server that finds a row of another server none of its
-- own rows covers reads the largest ID of every column whose default calls
-- a generating function before it issues one in this database.
-- Readable by every role, as pg_dump needs (a database's owner dumps its
-- rows with the data); a role may add rows (pg_restore by a database's
-- owner writes them), but only the extension's own rows, written as the
-- bootstrap superuser, say what a floor covered: the guard below strips
-- that from anyone else's, so a row can ask for a floor, never spare one.
CREATE TABLE snowflake_id.snowflake_floors (
    system_identifier bigint NOT NULL,
    covers bigint[] NOT NULL DEFAULT '{}',
    -- The state of the database's subscriptions' finished initial copies
    -- when this server floored, as one number (the core's copies_state).
    subscription_copies bigint,
    floor bigint,
    -- A backfill lease (snowflake_nextval_at), written in the transaction
    -- that took it: the ticks it covers and the depth it raised them to,
    -- {first tick, last tick, depth}. A server flooring a copy raises its
    -- backfill map over them, server-wide: only the extension's own rows
    -- and a superuser's keep it (the guard), or any role could use up every
    -- past time's numbers with one row.
    backfilled bigint[],
    at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
REVOKE ALL ON snowflake_id.snowflake_floors FROM PUBLIC;
GRANT USAGE ON SCHEMA snowflake_id TO PUBLIC;
GRANT SELECT, INSERT ON snowflake_id.snowflake_floors TO PUBLIC;
CREATE FUNCTION snowflake_id.snowflake_floors_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $guard$
BEGIN
    -- current_user, not is_superuser: the extension writes as the bootstrap
    -- superuser inside an application's session.
    IF TG_OP <> 'INSERT' THEN
        -- Rows are only ever added: a role that may write every table
        -- (pg_write_all_data) must not rewrite what a floor covered or a
        -- backfill leased, nor remove it.
        IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER) THEN
            RAISE EXCEPTION USING ERRCODE = '42501',
                MESSAGE = pg_catalog.format('permission denied to %s snowflake_id.snowflake_floors: its rows are only ever added, by the extension or a restore', pg_catalog.lower(TG_OP)),
                HINT = 'A superuser may change it; nothing else needs to.';
        END IF;
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        RETURN NEW;
    END IF;
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER) THEN
        NEW.covers := '{}';
        NEW.subscription_copies := NULL;
        NEW.floor := NULL;
        IF NEW.backfilled IS NOT NULL THEN
            NEW.backfilled := NULL;
            RAISE WARNING USING
                MESSAGE = 'snowflake_id: a backfill lease in the record of floors was not kept: only a superuser may restore them',
                DETAIL = 'This database''s copy does not know which numbers its original handed out at past times.',
                HINT = 'Restore the dump as a superuser, or give the server that backfills here a snowflake_id.backfill_worker_id no server used.';
        END IF;
    END IF;
    RETURN NEW;
END
$guard$;
REVOKE ALL ON FUNCTION snowflake_id.snowflake_floors_guard() FROM PUBLIC;
CREATE TRIGGER snowflake_floors_guard BEFORE INSERT OR UPDATE OR DELETE ON snowflake_id.snowflake_floors
    FOR EACH ROW EXECUTE FUNCTION snowflake_id.snowflake_floors_guard();
CREATE TRIGGER snowflake_floors_guard_truncate BEFORE TRUNCATE ON snowflake_id.snowflake_floors
    FOR EACH STATEMENT EXECUTE FUNCTION snowflake_id.snowflake_floors_guard();
-- Rows that replication applies too.
ALTER TABLE snowflake_id.snowflake_floors ENABLE ALWAYS TRIGGER snowflake_floors_guard;
ALTER TABLE snowflake_id.snowflake_floors ENABLE ALWAYS TRIGGER snowflake_floors_guard_truncate;
INSERT INTO snowflake_id.snowflake_floors (system_identifier)
    SELECT system_identifier FROM pg_catalog.pg_control_system();
SELECT pg_catalog.pg_extension_config_dump('snowflake_id.snowflake_floors', '');
