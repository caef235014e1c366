-- snowflake_registry_init(): makes this database a registry that hands out
-- worker ids to servers with snowflake_id.worker_id_source = 'registry'.
--
-- Run by the registry's own role (a role with CREATE on this database; not
-- a superuser): it owns the lease table, and nothing but the functions
-- below, which run as that role, writes it. `client` is the role leasing
-- servers connect as (snowflake_id.registry's user=): it may call lease,
-- renew and release, and read the list, nothing else. Safe to run again
-- (it grants to a further client). Its objects are plain ones, not the
-- extension's: pg_dump keeps them with the data.
--
-- A lease never expires: only release() (by the server that holds it, at
-- decommission) or release_gone() (by the registry's role, for a server
-- gone for good) frees a worker id, and its next holder issues above the
-- last ID time given there.
CREATE FUNCTION snowflake_registry_init(client regrole DEFAULT NULL)
RETURNS text VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
LANGUAGE plpgsql AS $init$
BEGIN
    CREATE SCHEMA IF NOT EXISTS snowflake_registry;
    -- IF NOT EXISTS would take over objects another role made first under
    -- these names: a registry is its own role's, or nothing.
    IF (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'snowflake_registry')
           OPERATOR(pg_catalog.<>) current_user::regrole THEN
        RAISE EXCEPTION 'schema snowflake_registry belongs to another role than %', current_user
            USING ERRCODE = '42501',
                  HINT = 'Run snowflake_registry_init() as the role that made it, or drop it (it is no registry of this role''s) and run it again.';
    END IF;
    REVOKE ALL ON SCHEMA snowflake_registry FROM PUBLIC;
    CREATE TABLE IF NOT EXISTS snowflake_registry.worker_leases (
        worker_id integer PRIMARY KEY CHECK (worker_id >= 0),
        system_identifier numeric(20, 0) NOT NULL
            CHECK (system_identifier BETWEEN 0 AND 18446744073709551615),
        server_name text NOT NULL,
        policy text NOT NULL CHECK (policy IN ('keep', 'disposable')),
        leased_at timestamptz NOT NULL,
        renewed_at timestamptz NOT NULL,
        released_at timestamptz,
        -- The last ID time the holder reported at release (Unix ms): its
        -- next holder issues above it.
        last_id_ms bigint CHECK (last_id_ms >= 0),
        -- The previous holder's last ID time, which this holder issues above.
        floor_ms bigint CHECK (floor_ms >= 0),
        times_leased integer NOT NULL DEFAULT 1,
        CHECK ((released_at IS NULL) = (last_id_ms IS NULL))
    );
    IF (SELECT c.relowner FROM pg_catalog.pg_class c
        WHERE c.oid = 'snowflake_registry.worker_leases'::regclass) OPERATOR(pg_catalog.<>) current_user::regrole THEN
        RAISE EXCEPTION 'table snowflake_registry.worker_leases belongs to another role than %', current_user
            USING ERRCODE = '42501',
                  HINT = 'Run snowflake_registry_init() as the role that made it.';
    END IF;
    REVOKE ALL ON snowflake_registry.worker_leases FROM PUBLIC;

    CREATE OR REPLACE VIEW snowflake_registry.leases AS
        SELECT worker_id, system_identifier, server_name, policy,
               leased_at, renewed_at, released_at,
               CASE WHEN last_id_ms IS NOT NULL
                    THEN pg_catalog.to_timestamp(last_id_ms / 1000.0) END AS last_id_time,
               CASE WHEN floor_ms IS NOT NULL
                    THEN pg_catalog.to_timestamp(floor_ms / 1000.0) END AS issues_above,
               released_at IS NULL AS live,
               times_leased
        FROM snowflake_registry.worker_leases;
    REVOKE ALL ON snowflake_registry.leases FROM PUBLIC;

    -- A worker id for the server `sysid` (its name for people, its policy,
    -- its layout's largest worker id): with 'keep', the one it holds if it
    -- holds one; else the lowest never leased; else the one released
    -- longest ago, above its last holder's last ID time. One at a time.
    CREATE OR REPLACE FUNCTION snowflake_registry.lease(
        sysid numeric, holder_name text, wanted_policy text, max_worker_id integer)
    RETURNS TABLE (worker_id integer, system_identifier numeric, leased_at_ms bigint, floor_ms bigint)
    VOLATILE STRICT SECURITY DEFINER PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '10s'
    LANGUAGE plpgsql AS $lease$
    #variable_conflict use_column
    DECLARE
        w integer;
        f bigint;
    BEGIN
        IF wanted_policy NOT IN ('keep', 'disposable') THEN
            RAISE EXCEPTION 'unknown lease policy %', quote_literal(wanted_policy)
                USING ERRCODE = '22023', HINT = 'Use ''keep'' or ''disposable''.';
        END IF;
        IF max_worker_id < 0 OR sysid < 0 OR sysid > 18446744073709551615 THEN
            RAISE EXCEPTION 'no lease for system identifier % with worker ids 0 to %', sysid, max_worker_id
                USING ERRCODE = '22023';
        END IF;
        LOCK TABLE snowflake_registry.worker_leases IN EXCLUSIVE MODE;
        IF wanted_policy = 'keep' THEN
            SELECT l.worker_id INTO w FROM snowflake_registry.worker_leases l
                WHERE l.system_identifier = sysid AND l.released_at IS NULL
                  AND l.policy = 'keep' AND l.worker_id <= max_worker_id
                ORDER BY l.worker_id LIMIT 1;
        END IF;
        IF w IS NOT NULL THEN
            UPDATE snowflake_registry.worker_leases l
                SET renewed_at = clock_timestamp(), server_name = holder_name
                WHERE l.worker_id = w;
        ELSE
            -- Past the largest first; the gaps only once that is used up.
            SELECT COALESCE(max(l.worker_id) + 1, 0) INTO w FROM snowflake_registry.worker_leases l;
            IF w > max_worker_id THEN
                SELECT g INTO w FROM generate_series(0, max_worker_id) g
                    WHERE NOT EXISTS (SELECT FROM snowflake_registry.worker_leases l WHERE l.worker_id = g)
                    ORDER BY g LIMIT 1;
            END IF;
            IF w IS NOT NULL THEN
                INSERT INTO snowflake_registry.worker_leases AS l
                    (worker_id, system_identifier, server_name, policy, leased_at, renewed_at)
                    VALUES (w, sysid, holder_name, wanted_policy, clock_timestamp(), clock_timestamp());
            ELSE
                SELECT l.worker_id, GREATEST(l.last_id_ms, l.floor_ms) INTO w, f
                    FROM snowflake_registry.worker_leases l
                    WHERE l.released_at IS NOT NULL AND l.worker_id <= max_worker_id
                    ORDER BY l.released_at, l.worker_id LIMIT 1;
                IF w IS NULL THEN
                    RAISE EXCEPTION 'every worker id from 0 to % is leased', max_worker_id
                        USING ERRCODE = '53400',
                              HINT = 'Release the worker ids of servers gone for good in the registry (SELECT snowflake_registry.release_gone(<worker id>, <its last ID time>)), or use a layout with more worker bits.';
                END IF;
                UPDATE snowflake_registry.worker_leases l
                    SET system_identifier = sysid, server_name = holder_name, policy = wanted_policy,
                        leased_at = clock_timestamp(), renewed_at = clock_timestamp(),
                        released_at = NULL, last_id_ms = NULL, floor_ms = f,
                        times_leased = l.times_leased + 1
                    WHERE l.worker_id = w;
            END IF;
        END IF;
        RETURN QUERY SELECT l.worker_id, l.system_identifier,
                (extract(epoch FROM l.leased_at) * 1000)::bigint, l.floor_ms
            FROM snowflake_registry.worker_leases l WHERE l.worker_id = w;
    END
    $lease$;

    -- The holder says it still holds `w`: 'held', or 'released' / 'lost'
    -- (then it stops issuing under it).
    CREATE OR REPLACE FUNCTION snowflake_registry.renew(w integer, sysid numeric)
    RETURNS text VOLATILE STRICT SECURITY DEFINER PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    LANGUAGE plpgsql AS $renew$
    DECLARE
        r record;
    BEGIN
        SELECT * INTO r FROM snowflake_registry.worker_leases l WHERE l.worker_id = w;
        IF NOT FOUND OR r.system_identifier <> sysid THEN
            RETURN 'lost';
        ELSIF r.released_at IS NOT NULL THEN
            RETURN 'released';
        END IF;
        UPDATE snowflake_registry.worker_leases l SET renewed_at = clock_timestamp() WHERE l.worker_id = w;
        RETURN 'held';
    END
    $renew$;

    -- The holder gives `w` back; every ID it issued is at or below
    -- `last_ms` (Unix ms). Again after a release: the larger time stays.
    CREATE OR REPLACE FUNCTION snowflake_registry.release(w integer, sysid numeric, last_ms bigint)
    RETURNS text VOLATILE STRICT SECURITY DEFINER PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    LANGUAGE plpgsql AS $release$
    BEGIN
        IF last_ms < 0 THEN
            RAISE EXCEPTION 'a last ID time before 1970 (% ms)', last_ms USING ERRCODE = '22023';
        END IF;
        UPDATE snowflake_registry.worker_leases l
            SET released_at = COALESCE(l.released_at, clock_timestamp()),
                last_id_ms = GREATEST(l.last_id_ms, last_ms)
            WHERE l.worker_id = w AND l.system_identifier = sysid;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'worker id % is not leased to system identifier %', w, sysid
                USING ERRCODE = '55000',
                      HINT = 'SELECT * FROM snowflake_registry.leases in the registry shows who holds it.';
        END IF;
        RETURN 'released';
    END
    $release$;

    -- The registry's role frees the worker id of a server gone for good;
    -- `last_id_time`: the latest time its IDs carry (the time of its
    -- largest ID, snowflake_decode(max(id)), or later). Not for clients.
    CREATE OR REPLACE FUNCTION snowflake_registry.release_gone(w integer, last_id_time timestamptz)
    RETURNS text VOLATILE STRICT PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    LANGUAGE plpgsql AS $gone$
    BEGIN
        UPDATE snowflake_registry.worker_leases l
            SET released_at = COALESCE(l.released_at, clock_timestamp()),
                last_id_ms = GREATEST(l.last_id_ms, (extract(epoch FROM last_id_time) * 1000)::bigint)
            WHERE l.worker_id = w;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'worker id % was never leased', w USING ERRCODE = '22023';
        END IF;
        RETURN 'released';
    END
    $gone$;

    REVOKE ALL ON FUNCTION snowflake_registry.lease(numeric, text, text, integer) FROM PUBLIC;
    REVOKE ALL ON FUNCTION snowflake_registry.renew(integer, numeric) FROM PUBLIC;
    REVOKE ALL ON FUNCTION snowflake_registry.release(integer, numeric, bigint) FROM PUBLIC;
    REVOKE ALL ON FUNCTION snowflake_registry.release_gone(integer, timestamptz) FROM PUBLIC;
    IF client IS NOT NULL THEN
        EXECUTE format('GRANT USAGE ON SCHEMA snowflake_registry TO %s', client);
        EXECUTE format('GRANT SELECT ON snowflake_registry.leases TO %s', client);
        EXECUTE format('GRANT EXECUTE ON FUNCTION snowflake_registry.lease(numeric, text, text, integer), '
                       'snowflake_registry.renew(integer, numeric), '
                       'snowflake_registry.release(integer, numeric, bigint) TO %s', client);
    END IF;
    RETURN format('this database is a registry of worker ids (snowflake_registry.leases lists them)%s',
                  CASE WHEN client IS NULL THEN '' ELSE format('; %s may lease', client) END);
END
$init$;
