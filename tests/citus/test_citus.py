"""A real Citus cluster: a coordinator and two workers on this machine, each
preloading Citus and snowflake_id with one configuration, the same on every
node (`snowflake_id.worker_id_source = 'citus'`), built by
scripts/citus-builds.sh from the sources beside the project (test.sh skips
this folder, saying why, where they are absent).

What Citus does was read in its source (13.2.2 and 14.0.1):
- a node's group id is the one row of `pg_dist_local_group`, 0 until the
  coordinator adds the node and writes it there (metadata sync,
  `metadata/metadata_sync.c`); the coordinator's own group is 0
  (`COORDINATOR_GROUP_ID`), and it lists itself in `pg_dist_node` once
  `citus_set_coordinator_host` ran (`metadata/node_metadata.c`,
  `EnsureCoordinatorIsInMetadata`);
- an INSERT ... SELECT that Citus repartitions evaluates volatile functions
  other than nextval() in the per-shard SELECTs on the workers
  (`planner/multi_logical_optimizer.c`, `CanPushDownExpression`).
"""

import contextlib
import io
import threading

import pytest
from citus_cluster import add, node, start_cluster, status, wait_issues, wait_refreshes, workers_of
from harness import Deadline, Window, let_run, servers, started, wait_until, wall_clock


@pytest.fixture(scope="module")
def cluster():
    with servers() as made:
        c, (w1, w2) = start_cluster(made, "citus")
        yield c, w1, w2, made


def every_node(cluster):
    """The coordinator and every node its metadata lists, as Servers: nodes
    an earlier test added are waited for as well as the first three."""
    c, _, _, made = cluster
    ports = {r[0] for r in c.sql("SELECT nodeport FROM pg_dist_node")} | {c.port}
    return [s for s in made if s.port in ports]


def settled(cluster):
    """Waits until no node of the cluster has a problem: each claims worker
    has read every other node since the last change (on every node, however
    long each one takes)."""
    for s in every_node(cluster):
        s.wait_for("SELECT problem IS NULL FROM snowflake_id.snowflake_status",
                   what=lambda s=s: f"{s.name} still has a problem: {status(s)[2]}")


def test_each_node_takes_its_worker_id_from_its_group_id(cluster):
    c, w1, w2, _ = cluster
    for s, group in ((c, 0), (w1, 1), (w2, 2)):
        assert s.one("SELECT groupid FROM pg_dist_local_group") == group
        s.sql("SELECT snowflake_nextval()")
        worker_id, source, problem = status(s)
        assert (worker_id, problem) == (group, None), (s.name, worker_id, problem)
        assert source == f"Citus group id {group} (worker ids up to 1023 fit this layout)", source
        assert workers_of(s, [s.one("SELECT snowflake_nextval()")]) == {group}
        # The claims worker that settled it logs it just after the call that
        # waited for it went on: waited for, not read at once.
        s.wait_for_log(f"worker id {group}, from Citus group id {group}")


def test_every_insert_path_gives_unique_ids_carrying_the_evaluating_nodes_group(cluster):
    c, w1, w2, _ = cluster
    c.sql("""CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), tenant int, note text);
             SELECT create_distributed_table('events', 'id');
             CREATE TABLE orders (tenant int, id bigint DEFAULT snowflake_nextval(), note text,
                                  PRIMARY KEY (tenant, id));
             SELECT create_distributed_table('orders', 'tenant');""")
    errors = []

    def clients(target, body, n=2):
        def run():
            try:
                # Not `with conn`: psycopg2 makes that one transaction.
                with contextlib.closing(target.connect()) as conn, conn.cursor() as cur:
                    body(cur)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(f"{target.name}: {e}")

        threads = [threading.Thread(target=run) for _ in range(n)]
        for t in threads:
            t.start()
        return threads

    def single(tag):
        def body(cur):
            for i in range(200):
                cur.execute("INSERT INTO events (tenant, note) VALUES (%s, %s)", (i % 7, f"single {tag}"))
        return body

    def multi(cur):
        for _ in range(20):
            cur.execute("INSERT INTO events (tenant, note) SELECT g % 7, 'multi' FROM generate_series(1, 10) g")
            cur.execute("INSERT INTO orders (tenant, note) VALUES (1, 'multi'), (2, 'multi'), (3, 'multi')")

    def copy(cur):
        cur.copy_expert("COPY events (tenant, note) FROM STDIN",
                        io.StringIO("".join(f"{i % 7}\tcopy\n" for i in range(500))))

    threads = []
    for target in (c, w1, w2):  # the coordinator, and straight to each worker
        threads += clients(target, single(target.name)) + clients(target, multi) + clients(target, copy, n=1)
    for t in threads:
        t.join()
    assert errors == [], errors
    # INSERT ... SELECT between tables distributed differently: repartitioned,
    # the DEFAULT evaluated on the workers that hold the source shards.
    before = c.one("SELECT coalesce(max(id), 0) FROM orders WHERE note = 'moved'")
    c.sql("INSERT INTO orders (tenant, note) SELECT tenant, 'moved' FROM events WHERE note = 'copy'")
    moved = [r[0] for r in c.sql("SELECT id FROM orders WHERE note = 'moved' AND id > %s", (before,))]
    assert len(moved) == 1500
    # The workers that hold the source table's shards: w1 and w2, and a
    # node an earlier test added, where one did.
    holders = {r[0] for r in c.sql("SELECT DISTINCT n.groupid FROM citus_shards s JOIN pg_dist_node n"
                                   " ON n.nodeport = s.nodeport WHERE s.table_name = 'events'::regclass")}
    assert {1, 2} <= holders, holders
    assert workers_of(c, moved) == holders, (workers_of(c, moved), holders)

    ids = [r[0] for r in c.sql("SELECT id FROM events UNION ALL SELECT id FROM orders")]
    assert len(ids) == 3 * (2 * 200 + 2 * 200 + 500) + 3 * 2 * 20 * 3 + 1500
    assert len(set(ids)) == len(ids), "duplicate ids"
    assert workers_of(c, ids) == {0, 1, 2} | holders
    # A row's DEFAULT is evaluated by the node the statement was sent to.
    for target, group in ((c, 0), (w1, 1), (w2, 2)):
        mine = [r[0] for r in c.sql("SELECT id FROM events WHERE note = %s", (f"single {target.name}",))]
        assert len(mine) == 400 and workers_of(c, mine) == {group}, (target.name, workers_of(c, mine))


def test_a_node_not_added_yet_waits_and_then_issues_with_its_own_group(cluster):
    c, _, _, made = cluster
    w3 = node(made, "citus-w3")
    # Its group id is still 0, the coordinator's: refused, never guessed.
    w3.sql("CREATE EXTENSION snowflake_id")
    code, message, hint = w3.error("SELECT snowflake_nextval()")
    assert code == "55000", (code, message)
    assert "group id is 0" in message and "citus_add_node" in hint, (message, hint)
    assert "group id is 0" in status(w3)[2]
    w3.sql("DROP EXTENSION snowflake_id")  # Citus brings it when the node is added
    add(c, w3)
    group = w3.one("SELECT groupid FROM pg_dist_local_group")
    assert group not in (0, 1, 2)
    ids = [w3.one("SELECT snowflake_nextval()") for _ in range(3)]
    assert workers_of(w3, ids) == {group}
    assert status(w3)[0] == group


def added_later(cluster):
    """A worker added after the cluster started: the one the test above
    added, or, where that test did not run first, one added here."""
    c, w1, w2, made = cluster
    later = [s for s in every_node(cluster) if s.name in ("citus-w3", "citus-late")]
    if later:
        return later[0]
    late = node(made, "citus-late")
    add(c, late)
    return late


def test_shards_moved_and_rebalanced_under_concurrent_inserts_lose_and_repeat_nothing(cluster):
    """A shard move copies rows with their ids (logical replication, then a
    switch of the placement); it evaluates no DEFAULT. Inserts go on through
    the coordinator and straight to a worker throughout; a node added later
    (w3, from the test above) takes shards in the rebalance."""
    c, w1, w2, made = cluster
    added_later(cluster)
    c.sql("CREATE TABLE moving (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), v int);"
          "SELECT create_distributed_table('moving', 'id')")
    stop = threading.Event()
    inserted, errors = [], []

    def insert(node):
        with contextlib.closing(node.connect()) as conn, conn.cursor() as cur:
            while not stop.is_set():
                try:
                    cur.execute("INSERT INTO moving (v) VALUES (1) RETURNING id")
                    inserted.append(cur.fetchone()[0])
                except Exception as e:  # noqa: BLE001 - counted, and must be none
                    errors.append(str(e))

    def more_inserts(when):
        """Lets the inserts run a while (how many decides nothing: every
        one is checked below), and then until they stored a row more (or
        met an error, reported below): whatever this machine's speed, rows
        go in before, during and after each move."""
        let_run(1)
        before = len(inserted)
        wait_until(lambda: len(inserted) > before or errors, f"no row was inserted {when}")

    threads = [threading.Thread(target=insert, args=(n,)) for n in (c, c, w1)]
    for t in threads:
        t.start()
    try:
        more_inserts("before the move")
        shard = c.one("SELECT shardid FROM citus_shards WHERE table_name = 'moving'::regclass AND nodeport = %s"
                      " ORDER BY shardid LIMIT 1", (w1.port,))
        c.sql("SELECT citus_move_shard_placement(%s, 'localhost', %s, 'localhost', %s, 'force_logical')",
              (shard, w1.port, w2.port))
        assert c.one("SELECT nodeport FROM citus_shards WHERE shardid = %s", (shard,)) == w2.port
        more_inserts("after the move")
        c.sql("SELECT rebalance_table_shards('moving', shard_transfer_mode => 'force_logical')")
        more_inserts("after the rebalance")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == [], errors[:3]
    stored = [r[0] for r in c.sql("SELECT id FROM moving")]
    assert len(stored) == len(set(stored)) == len(inserted) > 0
    assert sorted(stored) == sorted(inserted)
    nodes = {r[0] for r in c.sql("SELECT DISTINCT nodeport FROM citus_shards WHERE table_name = 'moving'::regclass")}
    w3 = added_later(cluster)
    assert w3.port in nodes, nodes
    # The node added later issues its own ids into the shards it now holds.
    mine = w3.one("INSERT INTO moving (v) VALUES (3) RETURNING id")
    assert workers_of(c, [mine]) == {w3.one("SELECT groupid FROM pg_dist_local_group")}


def test_a_database_without_citus_cannot_settle_the_worker_id():
    with servers() as made:
        s = node(made, "citus-alone")
        s.sql("CREATE DATABASE plain")
        s.sql("CREATE EXTENSION snowflake_id", dbname="plain")
        code, message, hint = s.error("SELECT snowflake_nextval()", dbname="plain")
        assert code == "55000" and "this database has none" in message, (code, message)
        assert "CREATE EXTENSION citus" in hint, hint
        # A single node that has not named itself the coordinator: group 0, no coordinator listed.
        s.sql("CREATE EXTENSION snowflake_id")
        code, message, hint = s.error("SELECT snowflake_nextval()")
        assert code == "55000" and "citus_set_coordinator_host" in hint, (code, message, hint)
        s.sql("SELECT citus_set_coordinator_host('localhost', %s)", (s.port,))
        first = s.one("SELECT snowflake_nextval()")
        # Settled for the whole server: the database without Citus issues too.
        assert workers_of(s, [first, s.one("SELECT snowflake_nextval()", dbname="plain")]) == {0}


def test_a_group_id_past_the_layouts_worker_bits_is_refused_not_wrapped():
    with servers() as made:
        s = node(made, "citus-far", **{"snowflake_id.layout": "'js53'", "snowflake_id.worker_id_offset": 31})
        s.sql("SELECT citus_set_coordinator_host('localhost', %s)", (s.port,))
        s.sql("CREATE EXTENSION snowflake_id")
        assert s.one("SELECT snowflake_nextval()") is not None  # 0 + 31: the last that fits
        far = node(made, "citus-far-w", **{"snowflake_id.layout": "'js53'", "snowflake_id.worker_id_offset": 31})
        add(s, far, wait=False)  # group 1: 1 + 31 = 32 does not fit js53's 5 worker bits
        code, message, hint = far.error("SELECT snowflake_nextval()")
        assert code == "22023", (code, message)
        assert "worker id 32 from Citus group id 1 + snowflake_id.worker_id_offset 31" in message, message
        assert "does not fit the 5 worker bits" in message and "worker_id_offset" in hint


def test_returning_with_the_layout_named_decoding_forms(cluster):
    c, _, _, _ = cluster
    c.sql("CREATE TABLE IF NOT EXISTS ret (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), v int);"
          "SELECT create_distributed_table('ret', 'id')")
    row = c.sql("INSERT INTO ret (v) VALUES (1) RETURNING id, snowflake_timestamp(id, 'snowflake_id') IS NOT NULL,"
                " (snowflake_decode(id, 'snowflake_id')).worker_id")[0]
    assert row[1:] == (True, 0)
    # The one-argument forms read the node's settings (STABLE): Citus refuses them there.
    code, message, _ = c.error("INSERT INTO ret (v) VALUES (2) RETURNING snowflake_timestamp(id)")
    assert code is not None and "RETURNING" in message, (code, message)


@pytest.mark.parametrize("table, ddl, distributed_by", [
    ("by_id", "CREATE TABLE by_id (id bigserial PRIMARY KEY, v text)", "id"),
    ("by_tenant", "CREATE TABLE by_tenant (tenant int, id serial, v text, PRIMARY KEY (tenant, id))", "tenant"),
])
def test_snowflake_convert_refuses_a_distributed_table_up_front_and_the_hints_way_works(cluster, table, ddl,
                                                                                     distributed_by):
    c, _, _, _ = cluster
    c.sql(ddl)
    c.sql(f"SELECT create_distributed_table('{table}', '{distributed_by}')")
    c.sql(f"INSERT INTO {table} (v{', tenant' if distributed_by == 'tenant' else ''}) "
          f"SELECT 'old'{', g % 5' if distributed_by == 'tenant' else ''} FROM generate_series(1, 100) g")
    shape = f"""SELECT format_type(atttypid, atttypmod), pg_get_expr(adbin, adrelid) FROM pg_attribute
                LEFT JOIN pg_attrdef ON adrelid = attrelid AND adnum = attnum
                WHERE attrelid = '{table}'::regclass AND attname = 'id'"""
    before = (c.sql(shape), c.sql(f"SELECT * FROM {table} ORDER BY 1, 2"))
    code, message, hint = c.error(f"SELECT snowflake_convert('{table}')")
    assert code == "0A000", (code, message)
    assert message == f"public.{table} is a Citus distributed table: snowflake_convert does not change Citus tables"
    assert (c.sql(shape), c.sql(f"SELECT * FROM {table} ORDER BY 1, 2")) == before
    # The HINT, pasted into psql: the table comes back distributed, converted, rows kept.
    for statement in hint[hint.index("SELECT undistribute_table"):hint.index(" (and the same")].rstrip(";").split("; "):
        c.sql(statement)
    assert c.one(f"SELECT column_to_column_name(logicalrelid, partkey) FROM pg_dist_partition "
                 f"WHERE logicalrelid = '{table}'::regclass") == distributed_by
    assert c.sql(shape)[0] == ("bigint", "snowflake_nextval()")
    assert c.sql(f"SELECT * FROM {table} ORDER BY 1, 2") == before[1]
    c.sql(f"INSERT INTO {table} (v{', tenant' if distributed_by == 'tenant' else ''}) "
          f"VALUES ('new'{', 1' if distributed_by == 'tenant' else ''})")


def test_a_generator_default_added_to_a_filled_reference_table_is_refused_and_the_hints_way_keeps_copies_identical(
        cluster):
    c, w1, w2, _ = cluster
    c.sql("CREATE TABLE countries (code text PRIMARY KEY, name text); SELECT create_reference_table('countries')")
    c.sql("INSERT INTO countries SELECT 'c' || g, 'n' || g FROM generate_series(1, 1000) g")
    code, message, hint = c.error("ALTER TABLE countries ADD COLUMN sid bigint DEFAULT snowflake_nextval()")
    assert code == "0A000", (code, message)
    assert message == ("cannot add a column whose DEFAULT calls snowflake_nextval() to the Citus reference table"
                       " public.countries: it is not empty")
    has_sid = "SELECT count(*) FROM pg_attribute WHERE attrelid = 'countries'::regclass AND attname = 'sid'"
    assert [s.one(has_sid) for s in (c, w1, w2)] == [0, 0, 0]
    # The HINT's way, pasted into psql (which sends each statement on its
    # own, as Citus needs for DDL): every copy holds the same IDs.
    for statement in hint[hint.index("ALTER TABLE"):].rstrip(";").split("; "):
        c.sql(statement)
    digests = [r[0] for r in c.sql(
        "SELECT result FROM run_command_on_placements('countries',"
        " $$SELECT md5(string_agg(code || ':' || sid, ',' ORDER BY code)) FROM %s$$)")]
    assert len(digests) >= 3 and len(set(digests)) == 1, digests  # a copy on every node
    assert c.one("SELECT count(*) FROM countries WHERE sid IS NULL") == 0
    # New rows take the default; a table without rows takes the column at once.
    c.sql("INSERT INTO countries (code) VALUES ('new')")
    c.sql("CREATE TABLE empty_ref (k int PRIMARY KEY); SELECT create_reference_table('empty_ref');"
          "ALTER TABLE empty_ref ADD COLUMN sid bigint DEFAULT snowflake_nextval()")
    # Distributed tables are filled shard by shard, once: no refusal there.
    c.sql("CREATE TABLE dist_fill (k int PRIMARY KEY); SELECT create_distributed_table('dist_fill', 'k');"
          "INSERT INTO dist_fill SELECT generate_series(1, 100);"
          "ALTER TABLE dist_fill ADD COLUMN sid bigint DEFAULT snowflake_nextval()")
    assert c.one("SELECT count(DISTINCT sid) FROM dist_fill") == 100


def filled_table_with_copies(c, kind, table):
    """`table` (k, v) with 300 rows kept in several copies: a reference
    table, or ("replicated") a distributed one of 4 shards, 2 copies each."""
    c.sql(f"CREATE TABLE {table} (k int PRIMARY KEY, v text)")
    if kind == "reference":
        c.sql(f"SELECT create_reference_table('{table}')")
    else:
        c.sql(f"SET citus.shard_replication_factor = 2; SELECT create_distributed_table('{table}', 'k', shard_count => 4)")
    c.sql(f"INSERT INTO {table} SELECT g, 'v' || g FROM generate_series(1, 300) g")


def digests_per_shard(c, table, column):
    """Each shard's set of md5s of (k, column) over its copies: one each where
    the copies are alike."""
    per_shard = {}
    for shard, result in c.sql(
            f"SELECT shardid, result FROM run_command_on_placements('{table}',"
            f" $$SELECT md5(string_agg(k || ':' || {column}, ',' ORDER BY k)) FROM %s$$)"):
        per_shard.setdefault(shard, set()).add(result)
    return per_shard


@pytest.mark.parametrize("kind, column, default, generator", [
    ("reference", "uid uuid", "snowflake_uuidv7()", "snowflake_uuidv7"),
    ("reference", "code text", "snowflake_to_text(snowflake_nextval(), 'base62')", "snowflake_nextval"),
    ("replicated", "sid bigint", "snowflake_nextval()", "snowflake_nextval"),
    ("replicated", "uid uuid", "snowflake_id_to_uuid(snowflake_nextval())", "snowflake_nextval"),
])
def test_a_default_that_draws_ids_added_to_a_filled_table_with_copies_is_refused_and_the_hints_way_keeps_them_identical(
        cluster, kind, column, default, generator):
    """Every table whose rows Citus keeps in more than one copy (a reference table;
    a distributed table made with citus.shard_replication_factor = 2), and every
    default that draws IDs, however wrapped: refused before any node changes, with a
    HINT that keeps the column's own default and, pasted, leaves every copy alike."""
    c, w1, w2, _ = cluster
    name = column.split()[0]
    table = f"copied_{kind}_{name}"
    filled_table_with_copies(c, kind, table)
    code, message, hint = c.error(f"ALTER TABLE {table} ADD COLUMN {column} DEFAULT {default}")
    assert code == "0A000", (code, message)
    where = ("the Citus reference table" if kind == "reference"
             else "the distributed table")
    assert message.startswith(f"cannot add a column whose DEFAULT calls {generator}() to {where} public.{table}"), message
    if kind == "replicated":
        assert message.endswith("each of its shards has 2 copies"), message
    has = f"SELECT count(*) FROM pg_attribute WHERE attrelid = '{table}'::regclass AND attname = '{name}'"
    assert [s.one(has) for s in (c, w1, w2)] == [0, 0, 0]
    # The HINT keeps the column's own default (as PostgreSQL prints it).
    assert f"ALTER TABLE public.{table} ADD COLUMN {column};" in hint, hint
    assert f"SET DEFAULT {default.split('(')[0]}(" in hint, hint
    # Pasted into psql (each statement on its own, as Citus needs for DDL):
    # every copy of every shard holds the same values.
    for statement in hint[hint.index("ALTER TABLE"):].rstrip(";").split("; "):
        c.sql(statement)
    per_shard = digests_per_shard(c, table, name)
    copies = 3 if kind == "reference" else 2
    assert per_shard and all(len(d) == 1 for d in per_shard.values()), per_shard
    assert c.one(f"SELECT count(*) FROM run_command_on_placements('{table}', 'SELECT 1')") >= copies * len(per_shard)
    assert c.one(f"SELECT count(*) FROM {table} WHERE {name} IS NULL") == 0
    assert c.one(f"SELECT count(DISTINCT {name}) FROM {table}") == 300


@pytest.mark.parametrize("kind, through", [
    ("reference", "domain"), ("replicated", "domain over a domain"), ("reference", "function"),
])
def test_a_default_that_draws_ids_through_a_domain_or_a_function_is_refused_and_the_hints_way_keeps_copies_alike(
        cluster, kind, through):
    """What the ADD COLUMN's own text does not show: a column of a domain whose
    default draws IDs (to any depth), or a default calling a function of the
    user's, whose body is not read (issue 51: 4 placements, 4 different md5s)."""
    c, w1, w2, _ = cluster
    tag = through.replace(" ", "_")
    table = f"through_{kind}_{tag}"
    filled_table_with_copies(c, kind, table)
    if through == "function":
        c.sql(f"CREATE FUNCTION make_{tag}_{kind}() RETURNS bigint LANGUAGE sql VOLATILE AS 'SELECT snowflake_nextval()'")
        column, words = f"d bigint DEFAULT make_{tag}_{kind}()", "a volatile function whose body snowflake_id does not read"
    else:
        c.sql(f"CREATE DOMAIN sf_{tag}_{kind} AS bigint DEFAULT snowflake_nextval()")
        domain = f"sf_{tag}_{kind}"
        if through == "domain over a domain":
            c.sql(f"CREATE DOMAIN sf2_{tag}_{kind} AS sf_{tag}_{kind}")
            domain = f"sf2_{tag}_{kind}"
        column, words = f"d {domain}", "a column of the domain"
    code, message, hint = c.error(f"ALTER TABLE {table} ADD COLUMN {column}")
    assert code == "0A000", (code, message)
    assert words in message and f"public.{table}" in message, message
    has = f"SELECT count(*) FROM pg_attribute WHERE attrelid = '{table}'::regclass AND attname = 'd'"
    assert [s.one(has) for s in (c, w1, w2)] == [0, 0, 0]
    # Pasted into psql, each statement on its own: every copy alike.
    for statement in hint[hint.index("ALTER TABLE"):].rstrip(";").split("; "):
        c.sql(statement)
    per_shard = digests_per_shard(c, table, "d")
    assert per_shard and all(len(d) == 1 for d in per_shard.values()), per_shard
    assert c.one(f"SELECT count(*) FROM {table} WHERE d IS NULL") == 0
    assert c.one(f"SELECT count(DISTINCT d) FROM {table}") == 300
    # New rows take the default again (the domain's, where it came from one).
    assert c.one(f"INSERT INTO {table} (k, v) VALUES (1000, 'new') RETURNING d") is not None


def test_a_worker_id_given_twice_by_hand_is_refused_before_it_stores_a_row(cluster):
    c, w1, w2, _ = cluster
    c.sql("CREATE TABLE dup (tenant int, id bigint DEFAULT snowflake_nextval(), src text, PRIMARY KEY (tenant, id));"
          "SELECT create_distributed_table('dup', 'tenant')")
    stop = threading.Event()
    refused = []
    stored = {"w1": 0, "w2": 0}

    def insert(node, tag):
        conn = None
        while not stop.is_set():
            try:
                conn = conn or node.connect()
                conn.cursor().execute("INSERT INTO dup (tenant, src) VALUES (%s, %s)", (len(refused) % 5, tag))
                stored[tag] += 1
            except Exception as e:  # noqa: BLE001 - what w2 meets is the point
                refused.append((tag, getattr(e, "pgcode", None), str(e)))
                conn = None
                Deadline.nap(0.05)

    first = threading.Thread(target=insert, args=(w1, "w1"))
    first.start()
    try:
        # w2 restarted with w1's worker id, set by hand, inserting at once.
        w2.set_conf(snowflake_id__worker_id_source=None, snowflake_id__worker_id=1)
        w2.restart()
        second = threading.Thread(target=insert, args=(w2, "w2"))
        second.start()
        # Both insert for a while (how many decides nothing: every answer w2
        # gets is checked below), and then until w2 had an answer and w1
        # stored a row, however slow this machine is.
        let_run(6)
        wait_until(lambda: (stored["w2"] or any(r[0] == "w2" for r in refused)) and stored["w1"],
                   lambda: f"w2 had no answer, or w1 stored no row: {stored}, {refused[-3:]}")
    finally:
        stop.set()
        first.join()
    second.join()
    try:
        assert c.sql("SELECT id FROM dup GROUP BY id HAVING count(*) > 1") == []
        assert c.one("SELECT count(*) FROM dup WHERE src = 'w2'") == 0
        assert c.one("SELECT count(*) FROM dup WHERE src = 'w1'") > 0
        from_w2 = [r for r in refused if r[0] == "w2"]
        assert from_w2 and all(code == "55000" for _, code, _ in from_w2), from_w2[:3]
        assert all(f":{w1.port}" in message for _, _, message in from_w2), from_w2[0]
        # w1 was never refused; what it met, if anything, were w2's shards
        # away while w2 restarted (connection errors, which end its session).
        assert all(code != "55000" for tag, code, _ in refused if tag == "w1"), \
            [r for r in refused if r[0] == "w1"][:3]
        # The earlier node's status says so too, once its claims worker read w2's claim.
        w1.wait_for(f"SELECT problem LIKE '%:{w2.port}%' FROM snowflake_id.snowflake_status",
                    what=lambda: f"w1 never named w2: {status(w1)}")
    finally:
        w2.set_conf(snowflake_id__worker_id=None, snowflake_id__worker_id_source="'citus'")
        w2.restart()
    # w2 starts refusing, as it was refused when it last ran (its claims
    # memory), until its claims worker's first judging, which a call waits
    # for a few seconds at most: issuing under its group once it has.
    assert workers_of(w2, [wait_issues(w2)]) == {2}
    # Once w2's claim on worker id 1 went stale (it was released at its
    # restart, and is counted 10 s more), no node sees a problem.
    settled(cluster)


def test_a_node_that_holds_its_claims_or_fakes_them_neither_stalls_nor_fools_the_others(cluster):
    c, w1, w2, _ = cluster
    # A role that may write any table holds w2's claims table: the other
    # nodes' reads of it end on their timers (each node waits 1 s for the
    # lock there), they say so, and they go on judging and issuing.
    c.sql("CREATE ROLE locker LOGIN IN ROLE pg_write_all_data")
    hold = w2.connect(user="locker")
    hold.autocommit = False
    hold.cursor().execute("LOCK TABLE snowflake_id.snowflake_claims IN ACCESS EXCLUSIVE MODE")
    try:
        c.wait_for("SELECT problem LIKE '%claims of other nodes of this Citus cluster could not be read%'"
                   " FROM snowflake_id.snowflake_status")
        c.sql("SELECT snowflake_nextval()")
        w1.sql("SELECT snowflake_nextval()")
    finally:
        hold.rollback()
        hold.close()
    c.wait_for("SELECT problem IS NULL FROM snowflake_id.snowflake_status")
    # On w2, the claims table and the status view replaced by objects of an
    # ordinary role (the extension dropped there alone): nothing of theirs
    # runs as the other nodes' claims workers or as a superuser asking for
    # the cluster's status.
    local = "SET citus.enable_ddl_propagation = off;"  # this worker alone
    w2.sql(local + "CREATE ROLE mallory LOGIN; GRANT CREATE ON SCHEMA public TO mallory;"
           "CREATE TABLE public.trap_log (who text); GRANT INSERT ON public.trap_log TO PUBLIC")
    w2.sql(local + "DROP EXTENSION snowflake_id CASCADE; CREATE SCHEMA snowflake_id AUTHORIZATION mallory")
    w2.sql(local + """CREATE FUNCTION public.trap() RETURNS boolean LANGUAGE sql AS
                $$ INSERT INTO public.trap_log VALUES (current_user) RETURNING true $$;
              CREATE VIEW snowflake_id.snowflake_claims AS
                SELECT 1 AS worker_id, 1::bigint AS system_identifier, 1 AS timeline, 1::bigint AS instance,
                       'fake' AS name, now() AS claimed_at, now() AS last_seen WHERE public.trap();
              CREATE VIEW snowflake_id.snowflake_status AS SELECT 1 AS worker_id WHERE public.trap();""",
           user="mallory")
    try:
        # Every other node's claims worker asks w2 at each refresh: a whole
        # refresh of each, begun once the trap was set, has asked it (waited
        # for on each node, not for a number of seconds).
        others = [s for s in every_node(cluster) if s is not w2]
        since = {s.name: s.one("SELECT clock_timestamp()") for s in others}
        for s in others:
            wait_refreshes(s, since[s.name])
        rows = cluster_status(c)
        assert "snowflake_id is not installed there" in rows[2][3], rows[2]
        assert w2.sql("SELECT who FROM public.trap_log") == []
    finally:
        w2.sql(local + "DROP SCHEMA snowflake_id CASCADE; DROP FUNCTION public.trap(); DROP TABLE public.trap_log;"
               "CREATE EXTENSION snowflake_id")
    # Every node reads w2's claims again at its next refresh.
    settled(cluster)


def cluster_status(c):
    """snowflake_cluster_status() by group id: (worker_id, source, preloaded, problem)."""
    return {r[0]: r[1:] for r in c.sql(
        "SELECT groupid, worker_id, worker_id_source, preloaded, problem FROM snowflake_cluster_status()")}


def cluster_status_once(c, ready, what):
    """The cluster view from `c` once `ready(rows)` holds: a node restarted a
    moment ago settles its worker id at its claims worker's first judging,
    which a busy machine delays."""
    last = {}

    def check():
        last["rows"] = rows = cluster_status(c)
        return rows if ready(rows) else None

    return wait_until(check, lambda: f"{what}: {last.get('rows')}", interval=0.2)


def test_the_cluster_view_is_the_same_from_every_node_and_stays_so_once_problems_cleared(cluster):
    """A problem on every node (each cannot read w2's claims while w2's
    extension is gone), cleared: from then on, the view read from any node,
    again and again for 10 s, is the same. (A node's problem once read as
    empty from one node and as the old problem from another, a moment
    later: a reader that met the claims worker in the middle of rewriting
    it took that for no problem.)"""
    c, _, w2, _ = cluster
    local = "SET citus.enable_ddl_propagation = off;"
    w2.sql(local + "DROP EXTENSION snowflake_id CASCADE")
    try:
        others = [s for s in every_node(cluster) if s is not w2]
        for s in others:
            s.wait_for("SELECT problem LIKE '%claims of other nodes of this Citus cluster could not be read%'"
                       " FROM snowflake_id.snowflake_status", what=lambda s=s: f"{s.name} never missed w2: {status(s)}")
    finally:
        w2.sql(local + "CREATE EXTENSION snowflake_id")
    settled(cluster)
    nodes = every_node(cluster)
    first = cluster_status(c)
    assert all(row[3] is None for row in first.values()), first
    # Read again and again for a while: how many rounds fit decides nothing
    # (each must equal the first), and at least one round is read.
    window = Window(10)
    while True:
        for s in nodes:
            assert cluster_status(s) == first, s.name
        if not window.open():
            break


def test_a_worker_restarted_and_not_asked_for_an_id_yet_is_no_problem_in_the_view(cluster):
    """A worker restarted settles its worker id at its first ID (which waits
    for it, INSERT ... SELECT included): until then the view has nothing to
    say of it (issue 51: "no worker id: INSERT ... SELECT that Citus runs
    there fails", while such an INSERT stored its rows)."""
    c, w1, _, _ = cluster
    settled(cluster)
    w1.stop("immediate")
    w1.start()
    rows = cluster_status(c)
    # Its worker id is not settled yet (the view asked it first): the case
    # in point (an earlier build said "no worker id" here).
    assert all("no worker id" not in (row[3] or "") for row in rows.values()), rows
    assert workers_of(c, [wait_issues(w1)]) == {1}
    settled(cluster)


def test_a_worker_restarted_is_one_server_to_the_others_not_two(cluster):
    """A worker restarted writes a claim of its new start beside the one of
    its last (ended at its shutdown, then deleted): the same data directory
    in turn. The other nodes judge both until the old one is stale (10 s
    after they last saw it change); issue 51: for those 10 s they said
    "worker id 1 is claimed by two live servers", naming the restarted node
    and its own stopped claim. Looked at from every other node, by status
    and by the cluster view, from the restart until each has judged twice
    after the old claim went stale."""
    c, w1, _, _ = cluster
    settled(cluster)
    others = [s for s in every_node(cluster) if s is not w1]
    logged = {s.name: len(s.log_text()) for s in others}
    w1.restart()
    assert workers_of(c, [wait_issues(w1)]) == {1}
    seen = []

    def look():
        for s in others:
            problem = status(s)[2] or ""
            if "two live servers" in problem or "also claimed" in problem:
                seen.append((s.name, problem))
        for group, row in cluster_status(c).items():
            if "two live servers" in (row[3] or ""):
                seen.append((f"view of group {group}", row[3]))

    # The old claim is stale 10 s after its last change, by each judge's
    # clock: looked at throughout (how many looks fit decides nothing), then
    # until each node finished two refreshes begun after it.
    window = Window(11)
    while window.open():
        look()
    since = {s.name: s.one("SELECT clock_timestamp()") for s in others}
    for s in others:
        wait_refreshes(s, since[s.name])
    look()
    assert seen == [], seen[:3]
    for s in others:
        assert "two live servers" not in s.log_text()[logged[s.name]:], s.name


def test_a_backfill_worker_id_that_is_another_nodes_group_refuses_backfills_alone(cluster):
    """w2 given w1's group id as its backfill worker id: w2 refuses its
    backfills (w1 issues under 1 live) and goes on issuing under 2; w1 has
    nothing to say (issue 51: it said both issue the same IDs, though only
    w2's backfills are refused); the coordinator, an onlooker, names the
    pair and which of the two is a backfill."""
    c, w1, w2, _ = cluster
    settled(cluster)
    logged = len(w1.log_text())
    w2.sql("ALTER SYSTEM SET snowflake_id.backfill_worker_id = 1")
    w2.reload_and_wait()
    try:
        w2.wait_for("SELECT problem LIKE '%the backfill worker id 1 is also claimed by the live server%'"
                    " FROM snowflake_id.snowflake_status", what=lambda: f"w2 never refused: {status(w2)}")
        code, message = w2.error("SELECT snowflake_nextval_at('2025-02-01')")[:2]
        assert code == "55000" and "backfills are refused" in message, message
        assert workers_of(c, [w2.one("SELECT snowflake_nextval()")]) == {2}
        c.wait_for("SELECT problem LIKE '%worker id 1 is claimed by two live servers%(as its backfill worker id)%'"
                   " FROM snowflake_id.snowflake_status", what=lambda: f"the coordinator never saw it: {status(c)}")
        # w1 has judged w2's claims since (two whole refreshes), and says nothing.
        since = w1.one("SELECT clock_timestamp()")
        wait_refreshes(w1, since)
        assert status(w1)[2] is None, status(w1)
        assert workers_of(c, [w1.one("SELECT snowflake_nextval()")]) == {1}
        assert "both issue the same IDs" not in w1.log_text()[logged:]
    finally:
        w2.sql("ALTER SYSTEM RESET snowflake_id.backfill_worker_id")
        w2.reload_and_wait()
    settled(cluster)


def test_the_cluster_view_shows_every_node_and_what_is_wrong_between_them(cluster):
    c, w1, w2, made = cluster
    settled(cluster)
    rows = cluster_status(c)
    for group in (0, 1, 2):
        worker_id, source, preloaded, problem = rows[group]
        assert (worker_id, preloaded, problem) == (group, True, None), (group, rows[group])
        assert source.startswith(f"Citus group id {group} "), source
    # Any node with metadata answers the same.
    assert cluster_status(w1) == rows
    # A worker stopped: reported, and the others go on issuing IDs.
    w2.stop()
    try:
        for s in (c, w1):
            s.wait_for(f"SELECT problem LIKE '%could not be read: node localhost:{w2.port}%'"
                       " FROM snowflake_id.snowflake_status", what=lambda s=s: f"{s.name} never missed w2: {status(s)}")
        rows = cluster_status(c)
        assert rows[2][3].startswith("not reachable: "), rows[2]
        # The others say they cannot check w2 for their worker ids, and issue.
        for group in (0, 1):
            assert rows[group][3].startswith("the claims of other nodes of this Citus cluster could not be read: "
                                             f"node localhost:{w2.port}"), rows[group]
        c.sql("SELECT snowflake_nextval()")
        w1.sql("SELECT snowflake_nextval()")
    finally:
        w2.start()
    # A worker without the library preloaded: said, with what it breaks.
    w2.set_conf(shared_preload_libraries="'citus'")
    w2.restart()
    try:
        rows = cluster_status(c)
        assert rows[2][2] is False and "not preloaded there" in rows[2][3], rows[2]
    finally:
        w2.set_conf(shared_preload_libraries="'citus,snowflake_id'")
    # A worker id given twice by hand: both nodes' rows say so, naming the other.
    w2.set_conf(snowflake_id__worker_id_source=None, snowflake_id__worker_id=1)
    w2.restart()
    try:
        rows = cluster_status_once(c, lambda rows: rows[2][0] == 1, "w2 never issued under worker id 1")
        assert "worker id 1 is also node" in rows[1][3] and "worker id 1 is also node" in rows[2][3], rows
        assert f":{w2.port}): the two make the same IDs" in rows[1][3], rows[1]
        # The coordinator is in neither collision; it may still say it could
        # not read w2 while w2 restarted, or, as an onlooker, that w1 and w2
        # claim one worker id.
        assert rows[0][0] == 0 and "worker id 0" not in (rows[0][3] or ""), rows[0]
    finally:
        w2.set_conf(snowflake_id__worker_id=None, snowflake_id__worker_id_source="'citus'")
        w2.restart()
    cluster_status_once(c, lambda rows: rows[2][0] == 2, "w2 never took its group id again")
    # Another epoch on one node: decoding pushed down there gives other times.
    w2.set_conf(snowflake_id__epoch="'2024-01-01 00:00:00+00'")
    w2.restart()
    try:
        assert "give other times" in cluster_status(c)[2][3], cluster_status(c)[2]
    finally:
        w2.set_conf(snowflake_id__epoch=None)
        w2.restart()
    # A node whose clock is a minute ahead (libfaketime), past max_lead (10 s).
    ahead = node(made, "citus-ahead", faketime=True)
    ahead.set_clock(60)
    add(c, ahead, wait=False)
    try:
        group = ahead.one("SELECT groupid FROM pg_dist_local_group")
        # set_clock returned once every process reads the new offset.
        wait_until(lambda: ahead.one("SELECT extract(epoch FROM clock_timestamp())::float8") - wall_clock() >= 50,
                   "the faked clock did not move")
        problem = cluster_status(c)[group][3]
        assert "its clock is" in problem and "more than snowflake_id.max_lead" in problem, problem
    finally:
        # The tests after this one find the cluster as it was.
        c.sql("SELECT citus_remove_node('localhost', %s)", (ahead.port,))
        ahead.stop()


def test_the_cluster_view_needs_citus_and_the_monitoring_role():
    with servers() as made:
        s = started(made, "citus-none", extension=True)
        code, message, hint = s.error("SELECT * FROM snowflake_cluster_status()")
        assert code == "55000" and "needs Citus" in message and "CREATE EXTENSION citus" in hint
        s.sql("CREATE ROLE app LOGIN")
        assert s.error("SELECT * FROM snowflake_cluster_status()", user="app")[0] == "42501"
