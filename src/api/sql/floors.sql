-- The servers whose IDs this database may hold: a row for the server that
-- created the extension here, and one for every floor a server made after
-- the data came from another cluster, naming the servers it covered (see
-- "Copies" in docs/operators.md). It travels with the data: pg_upgrade
-- carries the table, pg_dump its rows (marked below), a publication of all
-- tables its rows. A server that finds a row of another server none of its
-- own rows covers reads the largest ID of every column whose default calls
-- a generating function before it issues one in this database.
-- Written by the extension alone (as the bootstrap superuser); readable by
-- monitoring roles, as the status is.
CREATE TABLE snowflake_id.snowflake_floors (
    system_identifier bigint NOT NULL,
    covers bigint[] NOT NULL DEFAULT '{}',
    subscriptions_lsn pg_catalog.pg_lsn,
    floor bigint,
    at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
REVOKE ALL ON snowflake_id.snowflake_floors FROM PUBLIC;
GRANT SELECT ON snowflake_id.snowflake_floors TO pg_read_all_stats;
INSERT INTO snowflake_id.snowflake_floors (system_identifier)
    SELECT system_identifier FROM pg_catalog.pg_control_system();
SELECT pg_catalog.pg_extension_config_dump('snowflake_id.snowflake_floors', '');
