-- snowflake_registry_init(): makes this database a registry that hands out
-- worker ids to servers with snowflake_id.worker_id_source = 'registry'.
--
-- Run by the registry's own role (a role with CREATE on this database; not
-- a superuser): it owns the lease table, and nothing but the functions
-- below, which run as that role, writes it. `client` is the role leasing
-- servers connect as (snowflake_id.registry's user=): it may call lease,
-- renew and release, nothing else (not even read the list). Safe to run
-- again (it grants to a further client). Its objects are plain ones, not
-- the extension's: pg_dump keeps them with the data.
--
-- A lease never expires: only release() (by the role that leased it, at
-- decommission) or release_gone() (by the registry's role, for a server
-- gone for good) frees a worker id, and its next holder issues above the
-- last ID time given there (never more than an hour ahead of the
-- registry's clock).
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
        -- The role that leased it (the connection's): only it releases it.
        holder_role name NOT NULL,
        -- The start that leased it, for a 'disposable' lease: a retry of
        -- the same start is given the same worker id, not another.
        start_token text,
        -- The holder's backfill worker id, if it has one: never leased live.
        backfill_worker_id integer,
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
    -- lease() looks up the caller's cluster under the table's lock.
    CREATE INDEX IF NOT EXISTS worker_leases_system_identifier
        ON snowflake_registry.worker_leases (system_identifier);

    CREATE OR REPLACE VIEW snowflake_registry.leases AS
        SELECT worker_id, system_identifier, server_name, policy, holder_role, backfill_worker_id,
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
    -- its layout's largest worker id, its start, its backfill worker id or
    -- -1), for the calling role: with 'keep', the one this role holds for
    -- it if any; with 'disposable', the one this start leased already;
    -- else the lowest neither leased nor a live holder's backfill worker
    -- id; else the one released longest ago, above its last holder's last
    -- ID time. One at a time; the scans are linear in the leases, whatever
    -- the layout.
    CREATE OR REPLACE FUNCTION snowflake_registry.lease(
        sysid numeric, holder_name text, wanted_policy text, max_worker_id integer,
        token text, backfill integer)
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
        IF max_worker_id NOT BETWEEN 0 AND 16777215 OR sysid < 0 OR sysid > 18446744073709551615 OR sysid <> pg_catalog.trunc(sysid)
           OR backfill > max_worker_id THEN
            RAISE EXCEPTION 'no lease for system identifier % with worker ids 0 to % (at most 16777215)', sysid, max_worker_id
                USING ERRCODE = '22023';
        END IF;
        LOCK TABLE snowflake_registry.worker_leases IN EXCLUSIVE MODE;
        -- A backfill worker id that another server ever issued under, live,
        -- would repeat its IDs at their times.
        IF EXISTS (SELECT FROM snowflake_registry.worker_leases l
                   WHERE l.worker_id = backfill AND l.system_identifier <> sysid) THEN
            RAISE EXCEPTION 'worker id %, this server''s snowflake_id.backfill_worker_id, was leased live to another server', backfill
                USING ERRCODE = '55000',
                      HINT = 'Give this server a backfill worker id the registry never leased (ids counted down from the layout''s largest stay free longest), then reload.';
        END IF;
        SELECT l.worker_id INTO w FROM snowflake_registry.worker_leases l
            WHERE l.system_identifier = sysid AND l.released_at IS NULL AND l.holder_role = session_user
              AND l.policy = wanted_policy AND l.worker_id <= max_worker_id
              AND (wanted_policy = 'keep' OR l.start_token = token)
            ORDER BY l.worker_id LIMIT 1;
        IF w IS NOT NULL THEN
            UPDATE snowflake_registry.worker_leases l
                SET renewed_at = clock_timestamp(), server_name = holder_name,
                    backfill_worker_id = NULLIF(backfill, -1)
                WHERE l.worker_id = w;
        ELSE
            -- The lowest id that is neither leased nor a backfill worker id:
            -- 0, or one past an occupied id.
            WITH occupied AS (
                SELECT l.worker_id AS id FROM snowflake_registry.worker_leases l
                UNION SELECT l.backfill_worker_id FROM snowflake_registry.worker_leases l
                      WHERE l.released_at IS NULL AND l.backfill_worker_id IS NOT NULL
                UNION SELECT backfill WHERE backfill >= 0)
            SELECT min(c.id) INTO w FROM (
                SELECT 0 AS id
                UNION ALL SELECT o.id + 1 FROM occupied o WHERE o.id < max_worker_id) c
            WHERE NOT EXISTS (SELECT FROM occupied o WHERE o.id = c.id);
            IF w IS NOT NULL THEN
                INSERT INTO snowflake_registry.worker_leases AS l
                    (worker_id, system_identifier, server_name, policy, holder_role, start_token,
                     backfill_worker_id, leased_at, renewed_at)
                    VALUES (w, sysid, holder_name, wanted_policy, session_user, token,
                            NULLIF(backfill, -1), clock_timestamp(), clock_timestamp());
            ELSE
                SELECT l.worker_id, GREATEST(l.last_id_ms, l.floor_ms) INTO w, f
                    FROM snowflake_registry.worker_leases l
                    WHERE l.released_at IS NOT NULL AND l.worker_id <= max_worker_id AND l.worker_id <> backfill
                      AND NOT EXISTS (SELECT FROM snowflake_registry.worker_leases b
                                      WHERE b.backfill_worker_id = l.worker_id AND b.released_at IS NULL)
                    ORDER BY l.released_at, l.worker_id LIMIT 1;
                IF w IS NULL THEN
                    RAISE EXCEPTION 'every worker id from 0 to % is leased', max_worker_id
                        USING ERRCODE = '53400',
                              HINT = 'Release the worker ids of servers gone for good in the registry (SELECT snowflake_registry.release_gone(<worker id>, <its last ID time>)), or use a layout with more worker bits.';
                END IF;
                UPDATE snowflake_registry.worker_leases l
                    SET system_identifier = sysid, server_name = holder_name, policy = wanted_policy,
                        holder_role = session_user, start_token = token,
                        backfill_worker_id = NULLIF(backfill, -1),
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

    -- The holder says it still holds `w`: 'held'; 'released' or 'lost'
    -- (another's now), and it stops issuing under it; 'restored' where the
    -- registry had no row for it (restored from an older backup, or a row
    -- deleted by hand): the lease is written back, within the holder's
    -- layout, unless another server's backfill worker id is `w`. A lease
    -- of another role's is an error (nothing changes). A backfill worker
    -- id another server ever issued under live is 'backfill_taken' (kept
    -- unrecorded; the holder refuses backfills).
    CREATE OR REPLACE FUNCTION snowflake_registry.renew(
        w integer, sysid numeric, holder_name text, held_policy text, max_worker_id integer, backfill integer)
    RETURNS text VOLATILE STRICT SECURITY DEFINER PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '10s'
    LANGUAGE plpgsql AS $renew$
    DECLARE
        r record;
        taken boolean;
    BEGIN
        IF held_policy NOT IN ('keep', 'disposable') OR max_worker_id NOT BETWEEN 0 AND 16777215
           OR w NOT BETWEEN 0 AND max_worker_id OR backfill > max_worker_id
           OR sysid < 0 OR sysid > 18446744073709551615 OR sysid <> pg_catalog.trunc(sysid) THEN
            RAISE EXCEPTION 'no renew of worker id % (0 to %, at most 16777215) under policy %', w, max_worker_id,
                quote_literal(held_policy) USING ERRCODE = '22023';
        END IF;
        LOCK TABLE snowflake_registry.worker_leases IN EXCLUSIVE MODE;
        taken := EXISTS (SELECT FROM snowflake_registry.worker_leases l
                         WHERE l.worker_id = backfill AND l.system_identifier <> sysid);
        SELECT * INTO r FROM snowflake_registry.worker_leases l WHERE l.worker_id = w;
        IF NOT FOUND THEN
            IF EXISTS (SELECT FROM snowflake_registry.worker_leases l
                       WHERE l.backfill_worker_id = w AND l.released_at IS NULL) THEN
                RAISE EXCEPTION 'worker id % has no row here, and another server''s backfill worker id is %', w, w
                    USING ERRCODE = '55000';
            END IF;
            INSERT INTO snowflake_registry.worker_leases
                (worker_id, system_identifier, server_name, policy, holder_role, backfill_worker_id,
                 leased_at, renewed_at)
                VALUES (w, sysid, holder_name, held_policy, session_user,
                        CASE WHEN NOT taken THEN NULLIF(backfill, -1) END,
                        clock_timestamp(), clock_timestamp());
            RETURN CASE WHEN taken THEN 'backfill_taken' ELSE 'restored' END;
        ELSIF r.system_identifier <> sysid THEN
            RETURN 'lost';
        ELSIF r.holder_role <> session_user THEN
            RAISE EXCEPTION 'worker id % is leased by role %, not %', w, r.holder_role, session_user
                USING ERRCODE = '42501',
                      HINT = 'Connect as the role that leased it (snowflake_id.registry''s user=).';
        ELSIF r.released_at IS NOT NULL THEN
            RETURN 'released';
        END IF;
        UPDATE snowflake_registry.worker_leases l
            SET renewed_at = clock_timestamp(),
                backfill_worker_id = CASE WHEN NOT taken THEN NULLIF(backfill, -1) END
            WHERE l.worker_id = w;
        RETURN CASE WHEN taken THEN 'backfill_taken' ELSE 'held' END;
    END
    $renew$;

    -- The holder gives `w` back; every ID it issued is at or before
    -- `last_ms` (Unix ms, at most an hour ahead of this server's clock).
    -- Only the role that leased it may. Again after a release: the larger
    -- time stays.
    CREATE OR REPLACE FUNCTION snowflake_registry.release(w integer, sysid numeric, last_ms bigint)
    RETURNS text VOLATILE STRICT SECURITY DEFINER PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '10s'
    LANGUAGE plpgsql AS $release$
    BEGIN
        IF last_ms < 0 OR last_ms > (extract(epoch FROM clock_timestamp() + interval '1 hour') * 1000)::bigint THEN
            RAISE EXCEPTION 'a last ID time of % ms since 1970 is before 1970 or more than an hour ahead of the registry''s clock', last_ms
                USING ERRCODE = '22023';
        END IF;
        UPDATE snowflake_registry.worker_leases l
            SET released_at = COALESCE(l.released_at, clock_timestamp()),
                last_id_ms = GREATEST(l.last_id_ms, last_ms)
            WHERE l.worker_id = w AND l.system_identifier = sysid AND l.holder_role = session_user;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'worker id % is not leased to system identifier % by role %', w, sysid, session_user
                USING ERRCODE = '55000',
                      HINT = 'SELECT * FROM snowflake_registry.leases in the registry, as its own role, shows who holds it.';
        END IF;
        RETURN 'released';
    END
    $release$;

    -- The registry's role frees the worker id of a server gone for good;
    -- `last_id_time`: the latest time its IDs carry (the time of its
    -- largest ID, snowflake_decode(max(id)), or later; an hour ahead at
    -- most). Not for clients.
    CREATE OR REPLACE FUNCTION snowflake_registry.release_gone(w integer, last_id_time timestamptz)
    RETURNS text VOLATILE STRICT PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
    LANGUAGE plpgsql AS $gone$
    BEGIN
        IF last_id_time > clock_timestamp() + interval '1 hour' OR last_id_time < 'epoch'::timestamptz THEN
            RAISE EXCEPTION 'a last ID time of % is before 1970 or more than an hour ahead of this server''s clock', last_id_time
                USING ERRCODE = '22023',
                      HINT = 'IDs more than an hour ahead of the clock are refused by every server; give the time of the gone server''s largest ID.';
        END IF;
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

    REVOKE ALL ON FUNCTION snowflake_registry.lease(numeric, text, text, integer, text, integer) FROM PUBLIC;
    REVOKE ALL ON FUNCTION snowflake_registry.renew(integer, numeric, text, text, integer, integer) FROM PUBLIC;
    REVOKE ALL ON FUNCTION snowflake_registry.release(integer, numeric, bigint) FROM PUBLIC;
    REVOKE ALL ON FUNCTION snowflake_registry.release_gone(integer, timestamptz) FROM PUBLIC;
    IF client IS NOT NULL THEN
        EXECUTE format('GRANT USAGE ON SCHEMA snowflake_registry TO %s', client);
        EXECUTE format('GRANT EXECUTE ON FUNCTION snowflake_registry.lease(numeric, text, text, integer, text, integer), '
                       'snowflake_registry.renew(integer, numeric, text, text, integer, integer), '
                       'snowflake_registry.release(integer, numeric, bigint) TO %s', client);
    END IF;
    RETURN format('this database is a registry of worker ids (snowflake_registry.leases lists them)%s',
                  CASE WHEN client IS NULL THEN '' ELSE format('; %s may lease', client) END);
END
$init$;
