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
        'epoch', s.epoch, 'problem', s.problem, 'now', pg_catalog.clock_timestamp())::text
    FROM snowflake_id.snowflake_status s
$function$;
REVOKE ALL ON FUNCTION pg_catalog.snowflake_id_status_here() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pg_catalog.snowflake_id_status_here() TO pg_read_all_stats;

-- One row per primary node of the Citus cluster this database belongs to:
-- what each node's snowflake_id status says, asked through Citus's own
-- connections (its conninfo and authentication, as the caller), and what is
-- wrong between them. VOLATILE (it asks the nodes now); PARALLEL UNSAFE (it
-- opens connections). A node that does not answer within 2 s to connect is
-- reported, not waited for. Its search path is pinned to pg_catalog: every
-- function, operator and type it names is the built-in one, or Citus's
-- (which lives there too).
CREATE FUNCTION @extschema@.snowflake_cluster_status(
    OUT nodeid integer,
    OUT nodename text,
    OUT nodeport integer,
    OUT groupid integer,
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
BEGIN
    IF pg_catalog.to_regprocedure('pg_catalog.run_command_on_all_nodes(text,boolean,boolean)') IS NULL THEN
        RAISE EXCEPTION 'snowflake_cluster_status() needs Citus in this database'
            USING ERRCODE = '55000',
                  HINT = 'Call it in the database where CREATE EXTENSION citus ran, on the coordinator or any node with metadata.';
    END IF;
    SELECT s.layout, s.epoch, s.worker_id INTO here FROM snowflake_id.snowflake_status s;
    lead_s := pg_catalog.date_part('epoch', pg_catalog.current_setting('snowflake_id.max_lead', true)::interval);
    asked := pg_catalog.clock_timestamp();
    FOR r IN
        SELECT n.nodeid, n.nodename::text AS nodename, n.nodeport, n.groupid, a.success, a.result
        FROM pg_catalog.run_command_on_all_nodes(
            -- The question is a function of pg_catalog (above): nothing a role
            -- other than a superuser made can stand in for it on any node.
            'SELECT pg_catalog.snowflake_id_status_here()', true, false) a
        JOIN pg_catalog.pg_dist_node n ON n.nodeid = a.nodeid
        WHERE n.noderole = 'primary'
    LOOP
        answers := answers || pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
            'nodeid', r.nodeid, 'nodename', r.nodename, 'nodeport', r.nodeport, 'groupid', r.groupid,
            'success', r.success, 'result', r.result));
    END LOOP;
    answered := pg_catalog.clock_timestamp();
    FOR r IN SELECT value AS a FROM pg_catalog.jsonb_array_elements(answers) ORDER BY (value->>'groupid')::int, (value->>'nodeid')::int
    LOOP
        nodeid := (r.a->>'nodeid')::int;
        nodename := r.a->>'nodename';
        nodeport := (r.a->>'nodeport')::int;
        groupid := (r.a->>'groupid')::int;
        problems := '{}';
        worker_id := NULL; worker_id_source := NULL; layout := NULL; epoch := NULL; clock_offset := NULL;
        preloaded := NULL;
        IF (r.a->>'success')::boolean THEN
            j := (r.a->>'result')::json;
            preloaded := true;
            worker_id := (j->>'worker_id')::int;
            worker_id_source := j->>'source';
            layout := j->>'layout';
            epoch := (j->>'epoch')::timestamptz;
            -- Against the middle of the time the question took.
            clock_offset := (j->>'now')::timestamptz - (asked + (answered - asked) / 2);
            IF j->>'problem' IS NOT NULL THEN
                problems := problems || (j->>'problem');
            ELSIF worker_id IS NULL THEN
                problems := problems || 'no worker id: INSERT ... SELECT that Citus runs there fails'::text;
            END IF;
            IF layout IS DISTINCT FROM here.layout OR epoch IS DISTINCT FROM here.epoch THEN
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
        ELSE
            problems := problems || ('not reachable: ' || (r.a->>'result'));
        END IF;
        -- Two nodes that issue IDs under one worker id make the same IDs.
        IF worker_id IS NOT NULL THEN
            problems := problems || ARRAY(
                SELECT pg_catalog.format('worker id %s is also node %s''s (%s:%s): the two make the same IDs',
                                         worker_id, o->>'nodeid', o->>'nodename', o->>'nodeport')
                FROM pg_catalog.jsonb_array_elements(answers) o
                WHERE (o->>'nodeid')::int <> nodeid AND (o->>'success')::boolean
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
