-- snowflake_id 0.1.0 -> 0.2.0: the durable mark travels in WAL.
-- The status gains where the mark came from (state file, WAL replay, written
-- here), the server and timeline it belongs to, marks replayed, and waits for
-- a synchronous standby; snowflake_resume_above(id) raises the floor above
-- data that arrived without the mark; snowflake_nextval_array(n) hands out a
-- batch as one array; snowflake_lastval() reads back the last ID drawn;
-- snowflake_uuidv7() makes version 7 UUIDs from the same generator, with
-- mappings to and from IDs; snowflake_to_opaque/from_opaque key IDs for URLs;
-- snowflake_nextval_at(ts) and snowflake_nextval_at_array(ts, n) make IDs for
-- past times under the backfill worker id. The status becomes readable by
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
    OUT backfill_worker_id integer,
    OUT backfill_leases bigint,
    OUT layout_ends timestamptz,
    OUT time_left interval,
    OUT reserver_pid integer,
    OUT started_at timestamptz,
    OUT registry text)
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

-- IDs for past times, under snowflake_id.backfill_worker_id.
CREATE FUNCTION @extschema@.snowflake_nextval_at(ts timestamptz) RETURNS bigint
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_nextval_at_wrapper';
CREATE FUNCTION @extschema@.snowflake_nextval_at_array(ts timestamptz, n integer) RETURNS bigint[]
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_nextval_at_array_wrapper';
-- For the roles an operator grants them to (see the install script).
REVOKE ALL ON FUNCTION @extschema@.snowflake_nextval_at(timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.snowflake_nextval_at_array(timestamptz, integer) FROM PUBLIC;

-- The last ID this session drew, as lastval() for sequences.
CREATE FUNCTION @extschema@.snowflake_lastval() RETURNS bigint
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_lastval_wrapper';

-- IDs as version 7 UUIDs: new ones from the shared generator, the two
-- mappings between an ID and its UUID, and time bounds for uuid columns.
CREATE FUNCTION @extschema@.snowflake_uuidv7() RETURNS uuid
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_uuidv7_wrapper';

CREATE FUNCTION @extschema@.snowflake_id_to_uuid(id bigint) RETURNS uuid
STRICT STABLE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_id_to_uuid_wrapper';

CREATE FUNCTION @extschema@.snowflake_id_to_uuid(id bigint, layout text) RETURNS uuid
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_id_to_uuid_in_wrapper';

CREATE FUNCTION @extschema@.snowflake_uuid_to_id(uuid uuid) RETURNS bigint
STRICT STABLE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_uuid_to_id_wrapper';

CREATE FUNCTION @extschema@.snowflake_uuid_to_id(uuid uuid, layout text) RETURNS bigint
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_uuid_to_id_in_wrapper';

CREATE FUNCTION @extschema@.snowflake_uuid_from_timestamp(ts timestamptz) RETURNS uuid
STRICT STABLE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_uuid_from_timestamp_wrapper';

CREATE FUNCTION @extschema@.snowflake_uuid_from_timestamp(ts timestamptz, layout text) RETURNS uuid
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_uuid_from_timestamp_in_wrapper';

-- Opaque IDs for public URLs, under the secret keys of
-- snowflake_id.opaque_keys_file.
CREATE FUNCTION @extschema@.snowflake_to_opaque(id bigint) RETURNS text
STRICT STABLE PARALLEL RESTRICTED
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_to_opaque_wrapper';

CREATE FUNCTION @extschema@.snowflake_from_opaque(text text) RETURNS bigint
STRICT STABLE PARALLEL RESTRICTED
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_from_opaque_wrapper';

CREATE FUNCTION @extschema@.snowflake_from_opaque_or_null(text text) RETURNS bigint
STRICT STABLE PARALLEL RESTRICTED
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_from_opaque_or_null_wrapper';

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
-- A schema of that name already there stops the update: said with what to
-- run (the 0.1.0 functions installed into it, the habit of CREATE SCHEMA x;
-- CREATE EXTENSION x SCHEMA x, or a schema of the application's).
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
                MESSAGE = 'schema "snowflake_id" already exists: snowflake_id 0.2.0 makes a schema of that name itself, for its claims table and status view, and 0.1.0 was installed into it',
                DETAIL = 'Column defaults call the functions by OID: renaming their schema changes nothing for them.',
                HINT = 'Rename the schema 0.1.0 was installed into (as its owner), then update, and name the new schema where snowflake_id was named (search_path, qualified calls): ALTER SCHEMA snowflake_id RENAME TO snowflake; ALTER EXTENSION snowflake_id UPDATE;';
        END IF;
        RAISE EXCEPTION USING ERRCODE = '42P06',
            MESSAGE = 'schema "snowflake_id" already exists: snowflake_id 0.2.0 makes a schema of that name itself, for its claims table and status view',
            HINT = 'Rename that schema (as its owner), then update: ALTER SCHEMA snowflake_id RENAME TO snowflake_id_app; ALTER EXTENSION snowflake_id UPDATE;';
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

-- What the other nodes of a Citus cluster ask of this one, through Citus's
-- connections: this node's own claims (for their claims workers) and its
-- status (for snowflake_cluster_status). In pg_catalog, where only a
-- superuser can create anything: a role that drops the extension on one
-- node cannot put objects of its own where the other nodes' questions
-- would run them, and while the extension stands, the names below are its
-- own objects. Each bounds its wait for the claims table's lock.
CREATE FUNCTION pg_catalog.snowflake_id_claims_here() RETURNS text
STABLE PARALLEL SAFE
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
SET lock_timeout = 1000
AS $function$
    SELECT pg_catalog.json_agg(c)::text FROM snowflake_id.snowflake_claims c
    WHERE c.system_identifier = (SELECT s.system_identifier FROM pg_catalog.pg_control_system() s)
$function$;
REVOKE ALL ON FUNCTION pg_catalog.snowflake_id_claims_here() FROM PUBLIC;

CREATE FUNCTION pg_catalog.snowflake_id_status_here() RETURNS text
VOLATILE PARALLEL SAFE
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
SET lock_timeout = 1000
AS $function$
    SELECT pg_catalog.json_build_object(
        'worker_id', s.worker_id, 'source', s.worker_id_source, 'layout', s.layout,
        'epoch', s.epoch, 'problem', s.problem, 'now', pg_catalog.clock_timestamp(),
        'in_recovery', pg_catalog.pg_is_in_recovery(),
        'offset', pg_catalog.current_setting('snowflake_id.worker_id_offset', true))::text
    FROM snowflake_id.snowflake_status s
$function$;
REVOKE ALL ON FUNCTION pg_catalog.snowflake_id_status_here() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pg_catalog.snowflake_id_status_here() TO pg_read_all_stats;

-- One row per node of the Citus cluster this database belongs to, as this
-- node's metadata lists them (every role and state: primaries, secondaries,
-- clones, disabled nodes), and this node itself where the metadata does not
-- list it (nodeid NULL): what each node's snowflake_id status says, asked
-- through Citus's own connections (its conninfo and authentication, as the
-- caller), and what is wrong with it or between them. VOLATILE (it asks the
-- nodes now); PARALLEL UNSAFE (it opens connections). A node that does not
-- answer within 2 s to connect is reported, not waited for. Its search path
-- is pinned to pg_catalog: every function, operator and type it names is
-- the built-in one, or Citus's (which lives there too).
CREATE FUNCTION @extschema@.snowflake_cluster_status(
    OUT nodeid integer,
    OUT nodename text,
    OUT nodeport integer,
    OUT groupid integer,
    OUT noderole text,
    OUT worker_id integer,
    OUT worker_id_source text,
    OUT layout text,
    OUT epoch timestamptz,
    OUT clock_offset interval,
    OUT preloaded boolean,
    OUT problem text)
RETURNS SETOF record
VOLATILE PARALLEL UNSAFE
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET citus.node_connection_timeout = 2000
AS $function$
DECLARE
    asked timestamptz;
    answered timestamptz;
    here record;
    lead_s float8;
    r record;
    j json;
    problems text[];
    answers jsonb := '[]';
    question constant text := 'SELECT pg_catalog.snowflake_id_status_here()';
    offset_n integer;
    in_recovery boolean;
    issues boolean;
BEGIN
    IF pg_catalog.to_regprocedure('pg_catalog.master_run_on_worker(text[],integer[],text[],boolean)') IS NULL
       OR pg_catalog.to_regclass('pg_catalog.pg_dist_node') IS NULL THEN
        RAISE EXCEPTION 'snowflake_cluster_status() needs Citus in this database'
            USING ERRCODE = '55000',
                  HINT = 'Call it in the database where CREATE EXTENSION citus ran, on the coordinator or any node with metadata.';
    END IF;
    SELECT s.layout, s.epoch, s.worker_id INTO here FROM snowflake_id.snowflake_status s;
    lead_s := pg_catalog.date_part('epoch', pg_catalog.current_setting('snowflake_id.max_lead', true)::interval);
    asked := pg_catalog.clock_timestamp();
    FOR r IN
        WITH listed AS (
            SELECT n.nodeid, n.nodename::text AS nodename, n.nodeport, n.groupid, n.noderole::text AS noderole,
                   n.isactive
            FROM pg_catalog.pg_dist_node n
            WHERE n.nodecluster = pg_catalog.current_setting('citus.cluster_name')
            UNION ALL
            -- This node, where the metadata lists no node of its group (a
            -- coordinator that has not named itself), by the name Citus's
            -- run_command_on_all_nodes gives it then.
            SELECT NULL, pg_catalog.current_setting('citus.local_hostname'),
                   pg_catalog.current_setting('port')::integer, g.groupid, NULL, true
            FROM pg_catalog.pg_dist_local_group g
            WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_dist_node n
                              WHERE n.groupid = g.groupid
                                AND n.nodecluster = pg_catalog.current_setting('citus.cluster_name'))
        ), asked_nodes AS (
            SELECT pg_catalog.array_agg(l.nodename) AS names, pg_catalog.array_agg(l.nodeport) AS ports,
                   pg_catalog.array_agg(question) AS questions
            FROM listed l
        )
        SELECT l.*, a.success, a.result
        FROM listed l
        LEFT JOIN (
            -- Every node asked at once. The question is a function of
            -- pg_catalog (above): nothing a role other than a superuser made
            -- can stand in for it on any node.
            SELECT m.node_name, m.node_port, m.success, m.result
            FROM asked_nodes q, pg_catalog.master_run_on_worker(q.names, q.ports, q.questions, true) m
        ) a ON a.node_name = l.nodename AND a.node_port = l.nodeport
    LOOP
        answers := answers || pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
            'nodeid', r.nodeid, 'nodename', r.nodename, 'nodeport', r.nodeport, 'groupid', r.groupid,
            'noderole', r.noderole, 'isactive', r.isactive, 'success', r.success, 'result', r.result));
    END LOOP;
    answered := pg_catalog.clock_timestamp();
    FOR r IN SELECT value AS a FROM pg_catalog.jsonb_array_elements(answers)
             ORDER BY (value->>'groupid')::int, (value->>'nodeid')::int NULLS FIRST
    LOOP
        nodeid := (r.a->>'nodeid')::int;
        nodename := r.a->>'nodename';
        nodeport := (r.a->>'nodeport')::int;
        groupid := (r.a->>'groupid')::int;
        noderole := r.a->>'noderole';
        problems := '{}';
        worker_id := NULL; worker_id_source := NULL; layout := NULL; epoch := NULL; clock_offset := NULL;
        preloaded := NULL; in_recovery := NULL; issues := false;
        IF nodeid IS NULL THEN
            problems := problems ||
                'this node is not in its own Citus metadata (pg_dist_node): a coordinator names itself with citus_set_coordinator_host, and a worker is added with citus_add_node on the coordinator'::text;
        END IF;
        IF (r.a->>'success')::boolean THEN
            j := (r.a->>'result')::json;
            preloaded := true;
            in_recovery := (j->>'in_recovery')::boolean;
            worker_id := (j->>'worker_id')::int;
            worker_id_source := j->>'source';
            layout := j->>'layout';
            epoch := (j->>'epoch')::timestamptz;
            offset_n := COALESCE(NULLIF(j->>'offset', '')::int, 0);
            -- It has a worker id and is no standby: it issues, or would but
            -- for the problem it states.
            issues := worker_id IS NOT NULL AND NOT COALESCE(in_recovery, false);
            -- Against the middle of the time the question took.
            clock_offset := (j->>'now')::timestamptz - (asked + (answered - asked) / 2);
            IF in_recovery THEN
                -- A standby (a secondary, a clone not promoted yet) issues
                -- nothing: nothing of its IDs to check.
                NULL;
            ELSIF j->>'problem' IS NOT NULL THEN
                problems := problems || (j->>'problem');
            END IF;
            -- No worker id and no problem: not settled since its start, which
            -- its first ID does (waiting for it, INSERT ... SELECT included).
            IF noderole = 'secondary' AND NOT in_recovery THEN
                problems := problems ||
                    'a secondary out of recovery: promoted beside its group''s primary, it shares the primary''s group id'::text;
            END IF;
            IF NOT (r.a->>'isactive')::boolean AND issues THEN
                problems := problems || pg_catalog.format(
                    'inactive in Citus''s metadata (citus_disable_node), yet it answers, and issues IDs under worker id %s to the sessions connected to it: nothing routes to it, nothing stops them either',
                    worker_id);
            END IF;
            IF issues AND worker_id_source LIKE 'Citus group id%' AND worker_id <> groupid + offset_n THEN
                problems := problems || pg_catalog.format(
                    'it issues IDs under worker id %s, but its group id here is %s: it moves to the new group within 2 s of its own metadata having it (if it does not, Citus has not synced the node''s metadata: SELECT citus_activate_node(%L, %s) on the coordinator)',
                    worker_id, groupid, nodename, nodeport);
            END IF;
            IF NOT COALESCE(in_recovery, false)
               AND (layout IS DISTINCT FROM here.layout OR epoch IS DISTINCT FROM here.epoch) THEN
                problems := problems || pg_catalog.format(
                    'layout %s from %s, where this node has %s from %s: IDs decoded there (Citus pushes decoding down) give other times',
                    layout, epoch, here.layout, here.epoch);
            END IF;
            IF lead_s IS NOT NULL AND pg_catalog.abs(pg_catalog.date_part('epoch', clock_offset)) > lead_s THEN
                problems := problems || pg_catalog.format(
                    'its clock is %s from this node''s, more than snowflake_id.max_lead (%s s)', clock_offset, lead_s);
            END IF;
        ELSIF r.a->>'result' LIKE '%snowflake_id_status_here() does not exist%' THEN
            problems := problems ||
                'snowflake_id is not installed there (CREATE EXTENSION snowflake_id on the coordinator carries it to every node)'::text;
        ELSIF r.a->>'result' LIKE '%not loaded through shared_preload_libraries%' THEN
            preloaded := false;
            problems := problems ||
                'snowflake_id is not preloaded there: every INSERT ... SELECT whose DEFAULT Citus evaluates there fails'::text;
        ELSIF (r.a->>'isactive')::boolean THEN
            problems := problems || ('not reachable: ' || COALESCE(r.a->>'result', 'no answer'));
        END IF;
        -- Two nodes that issue IDs under one worker id make the same IDs
        -- (one of them may refuse already, and says so above).
        IF worker_id IS NOT NULL AND NOT COALESCE(in_recovery, false) THEN
            problems := problems || ARRAY(
                SELECT pg_catalog.format('worker id %s is also node %s''s (%s:%s): the two make the same IDs',
                                         worker_id, COALESCE(o->>'nodeid', 'outside pg_dist_node'), o->>'nodename', o->>'nodeport')
                FROM pg_catalog.jsonb_array_elements(answers) o
                WHERE (o->>'nodename', o->>'nodeport') IS DISTINCT FROM (nodename, nodeport::text)
                  AND (o->>'success')::boolean
                  AND NOT COALESCE(((o->>'result')::json->>'in_recovery')::boolean, false)
                  AND ((o->>'result')::json->>'worker_id')::int = worker_id);
        END IF;
        problem := pg_catalog.array_to_string(problems, '; ');
        IF problem = '' THEN
            problem := NULL;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$function$;
REVOKE ALL ON FUNCTION @extschema@.snowflake_cluster_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.snowflake_cluster_status() TO pg_read_all_stats;

-- Data from another cluster is floored by the extension itself (see
-- "Copies" in docs/operators.md). Updated here, the record starts empty:
-- whether this database's data is this server's own or came with a
-- pg_upgrade or a dump made under 0.1.0 cannot be told, so the first ID
-- after the update reads every ID column once, and the floor writes this
-- server's row.
-- Tells the server that the record of floors gained rows.
CREATE FUNCTION @extschema@.snowflake_floors_written() RETURNS trigger
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_floors_written_wrapper';

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
-- No row here: 0.1.0 kept no record, so the first ID after the update floors.
SELECT pg_catalog.pg_extension_config_dump('snowflake_id.snowflake_floors', '');

CREATE FUNCTION @extschema@.snowflake_resume_above(id uuid) RETURNS text
VOLATILE STRICT PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_resume_above_uuid_wrapper';
REVOKE ALL ON FUNCTION @extschema@.snowflake_resume_above(uuid) FROM PUBLIC;
CREATE FUNCTION @extschema@.snowflake_resume_above() RETURNS text
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_resume_above_everything_wrapper';
REVOKE ALL ON FUNCTION @extschema@.snowflake_resume_above() FROM PUBLIC;

-- A superuser's word that a backfill worker id never issued live IDs on a
-- server whose data arrived here. Superuser only.
CREATE FUNCTION @extschema@.snowflake_vouch_backfill_worker_id(worker_id integer) RETURNS text
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_vouch_backfill_worker_id_wrapper';
REVOKE ALL ON FUNCTION @extschema@.snowflake_vouch_backfill_worker_id(integer) FROM PUBLIC;

-- Worker ids leased from a registry (see registry.sql in the sources).
--
--
CREATE FUNCTION @extschema@.snowflake_registry_init(client regrole DEFAULT NULL)
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
REVOKE ALL ON FUNCTION @extschema@.snowflake_registry_init(regrole) FROM PUBLIC;
CREATE FUNCTION @extschema@.snowflake_release_worker_id() RETURNS text
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_release_worker_id_wrapper';
REVOKE ALL ON FUNCTION @extschema@.snowflake_release_worker_id() FROM PUBLIC;
