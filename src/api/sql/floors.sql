-- The servers whose IDs this database may hold: a row for the server that
-- created the extension here, and one for every floor a server made after
-- the data came from another cluster, naming the rows of other servers it
-- covered by their arrival (see "Copies" in docs/operators.md). It travels
-- with the data: pg_upgrade carries the table, pg_dump its rows (marked
-- below), a publication of all tables its rows. A server whose floors did
-- not cover every other server's row that arrived here (an empty record
-- included) reads the largest ID of every column that can hold IDs before
-- it issues one in this database.
-- Readable by every role, as pg_dump needs (a database's owner dumps its
-- rows with the data). Only superusers and members of the database's
-- owner may add rows (pg_restore by either writes them), so no other role
-- can make a database floor; and only the extension's own rows, written as
-- the bootstrap superuser, and a superuser's say what a floor covered: the
-- guard strips that from the owner's, so a row can ask for a floor, never
-- spare one. Each statement that adds rows makes every session of the
-- server check its database again before its next ID.
CREATE TABLE snowflake_id.snowflake_floors (
    system_identifier bigint NOT NULL,
    -- Set by the guard whenever a row is written into this database, what
    -- a dump says notwithstanding: rows of the same server that arrive
    -- again (a rehearsal restore, then the real one) are new to a floor.
    arrival uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
    -- The arrivals of other servers' rows this server's floor covered.
    covers uuid[] NOT NULL DEFAULT '{}',
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
    IF NOT (SELECT pg_catalog.pg_has_role(CURRENT_USER, d.datdba, 'MEMBER') FROM pg_catalog.pg_database d
            WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = 'permission denied to add rows to snowflake_id.snowflake_floors: only superusers and the database''s owner may',
            DETAIL = 'A row of another server makes the next ID of this database read every ID column first.',
            HINT = 'Restore the record of floors as a superuser or as the database''s owner; nothing else needs to write it.';
    END IF;
    NEW.arrival := pg_catalog.gen_random_uuid();
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
-- Rows added by anyone but the extension's floor (a restore, an operator,
-- replication): every database of the server checks again before its next
-- ID, once the statement's transaction commits. For each row the guard let
-- in, not for each statement: an INSERT of no rows is any role's.
CREATE TRIGGER snowflake_floors_written AFTER INSERT ON snowflake_id.snowflake_floors
    FOR EACH ROW EXECUTE FUNCTION @extschema@.snowflake_floors_written();
ALTER TABLE snowflake_id.snowflake_floors ENABLE ALWAYS TRIGGER snowflake_floors_written;
REVOKE ALL ON FUNCTION @extschema@.snowflake_floors_written() FROM PUBLIC;
-- The creating server's row: a database made here holds no other
-- server's IDs, and its first ID reads none (a Citus worker's comes inside
-- a distributed query, where reading a shard's shell table fails).
INSERT INTO snowflake_id.snowflake_floors (system_identifier)
    SELECT system_identifier FROM pg_catalog.pg_control_system();
SELECT pg_catalog.pg_extension_config_dump('snowflake_id.snowflake_floors', '');
