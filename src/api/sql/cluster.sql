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
