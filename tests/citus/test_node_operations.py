"""Every way Citus makes, moves or copies a node, on a real cluster whose
nodes have the install block of docs/citus.md and nothing more (no
snowflake_id.claims_database): the worker id follows the group id, a copy
of a node never issues its origin's IDs, and what Citus's metadata cannot
stop is seen.

What Citus does was read in its source (13.2.2 and 14.0.1):
- `citus_add_clone_node` registers a streaming standby of a worker as its
  clone: a `pg_dist_node` row with `nodeisclone`, `nodeprimarynodeid` = the
  origin's node id, a new group id of its own, inactive, synced to the nodes
  with metadata (`metadata/node_metadata.c`, `citus_add_clone_node_with_nodeid`).
  It checks that the standby streams from the origin by the origin's
  `pg_stat_replication` (`application_name`, `client_hostname` or
  `client_addr`: `utils/clonenode_utils.c`, `EnsureValidStreamingReplica`).
- `citus_promote_clone_and_rebalance` blocks writes to the origin's shards,
  waits for the clone to catch up, runs `pg_promote()` on it, marks it an
  active primary and syncs the metadata, which writes its new group id into
  its `pg_dist_local_group` (`operations/node_promotion.c`;
  `LocalGroupIdUpdateCommand` in `metadata/metadata_sync.c`), then splits the
  shards between the two.
- A secondary (`citus_add_secondary_node`) shares its primary's group id.
- `citus_add_node(..., groupid => N)` takes the group id it is given
  (`metadata/node_metadata.c`, `citus_add_node`); a node removed with
  `citus_remove_node` is not told.
"""

import re
import threading

import harness
import pytest
from citus_cluster import add, node, start_cluster, status, wait_issues, wait_refreshes, workers_of
from harness import Deadline, servers, started, wait_until


@pytest.fixture(scope="module")
def cluster():
    with servers() as made:
        c, (w1, w2) = start_cluster(made, "nodeops")
        yield c, w1, w2, made


def group_of(c, s):
    return c.one("SELECT groupid FROM pg_dist_node WHERE nodeport = %s AND noderole = 'primary'", (s.port,))


def cluster_view(c):
    """snowflake_cluster_status() by port: (nodeid, groupid, noderole, worker_id, problem)."""
    return {r[0]: r[1:] for r in c.sql(
        "SELECT nodeport, nodeid, groupid, noderole, worker_id, problem FROM snowflake_cluster_status()")}


def standby_of(made, origin, name):
    """A streaming standby of `origin` as Citus can take it for a clone or a
    secondary: its WAL receiver connects over TCP as application_name
    'localhost', the name Citus looks for in the origin's pg_stat_replication."""
    def copy(data):
        harness._as_postgres([
            f"{harness.PG_BIN}/pg_basebackup", "-d",
            f"host=localhost port={origin.port} user=postgres application_name=localhost",
            "-D", data, "-X", "stream", "-c", "fast", "--no-sync", "-R"])
    # The origin's settings, not the harness's worker id for a lone server.
    s = started(made, name, copy_of=origin, copy_with=copy, conf={"snowflake_id.worker_id": None})
    origin.wait_for("SELECT EXISTS (SELECT FROM pg_stat_replication"
                    " WHERE application_name = 'localhost' AND state = 'streaming')",
                    what=f"{name} never streamed from {origin.name}")
    return s


def refusal(s, query="SELECT snowflake_nextval()", dbname="postgres"):
    """The SQLSTATE and message `query` fails with on `s`, or None if it works."""
    try:
        s.sql(query, dbname=dbname)
        return None
    except Exception as e:  # noqa: BLE001 - the refusal is the point
        return getattr(e, "pgcode", None), str(e)


def refusal_hint(s):
    """The HINT of `s`'s refusal of an ID."""
    try:
        s.sql("SELECT snowflake_nextval()")
    except Exception as e:  # noqa: BLE001 - the refusal is the point
        return e.diag.message_hint
    raise AssertionError(f"{s.name} issued an ID")


def wait_refused(s, words):
    """Until `s` refuses an ID with `words` (its claims worker read what
    makes it refuse); the refusal."""
    last = {}

    def refused():
        last["got"] = got = refusal(s)
        return got if got and got[0] == "55000" and words in got[1] else None

    return wait_until(refused, lambda: f"{s.name} never refused with {words!r}: {last.get('got')}", interval=0.2)


def test_a_clone_promoted_by_citus_issues_under_its_own_group_and_never_its_origins(cluster):
    """Clone promotion under concurrent inserts through the origin and calls on
    the clone: the clone refuses until Citus has written its new group id, then
    issues under it; the origin is never refused; no ID repeats."""
    c, w1, _, made = cluster
    if c.one("SELECT to_regprocedure('citus_promote_clone_and_rebalance(integer,name,integer)') IS NULL"):
        pytest.skip("this Citus has no clones (13.2 and later have)")
    c.sql("CREATE TABLE cloned (k int, id bigint DEFAULT snowflake_nextval(), src text, PRIMARY KEY (k, id));"
          "SELECT create_distributed_table('cloned', 'k')")
    origin_worker = status(w1)[0]
    clone = standby_of(made, w1, "nodeops-clone")
    clone_id = c.one("SELECT citus_add_clone_node('localhost', %s, 'localhost', %s)", (clone.port, w1.port))
    stop = threading.Event()
    through_origin, origin_errors, on_clone, clone_errors = [], [], [], []

    def insert_through_origin():
        conn, k = None, 0
        while not stop.is_set():
            try:
                conn = conn or w1.connect()
                cur = conn.cursor()
                cur.execute("INSERT INTO cloned (k, src) VALUES (%s, 'origin') RETURNING id", (k,))
                through_origin.append(cur.fetchone()[0])
            except Exception as e:  # noqa: BLE001 - what the origin meets is checked below
                origin_errors.append((getattr(e, "pgcode", None), str(e)))
                conn = None
                Deadline.nap(0.05)
            k += 1

    def draw_on_clone():
        conn = None
        while not stop.is_set():
            try:
                conn = conn or clone.connect()
                cur = conn.cursor()
                cur.execute("SELECT snowflake_nextval()")
                on_clone.append(cur.fetchone()[0])
            except Exception as e:  # noqa: BLE001 - in recovery, then refused: expected
                clone_errors.append((getattr(e, "pgcode", None), str(e)))
                conn = None
                Deadline.nap(0.02)

    threads = [threading.Thread(target=insert_through_origin), threading.Thread(target=draw_on_clone)]
    for t in threads:
        t.start()
    try:
        c.sql("SELECT citus_promote_clone_and_rebalance(%s)", (clone_id,))
        # As long as this machine needs: the clone issues once its claims
        # worker read the group Citus gave it, and the origin goes on after.
        wait_until(lambda: len(on_clone) >= 200, lambda: f"the promoted clone issued no IDs: {clone_errors[-3:]}")
        counted = len(through_origin)
        wait_until(lambda: len(through_origin) >= counted + 50,
                   lambda: f"the origin stopped inserting: {origin_errors[-3:]}")
    finally:
        stop.set()
        for t in threads:
            t.join()
    new_group = group_of(c, clone)
    assert new_group not in (None, origin_worker), new_group
    # Every ID the clone issued carries its own group, none its origin's.
    assert workers_of(c, on_clone) == {new_group}
    # Until Citus wrote the new group, the clone refused, saying why.
    refused = [m for code, m in clone_errors if code == "55000" and "promoted from a Citus clone" in m]
    assert all(code in ("25006", "55000", None) for code, _ in clone_errors), clone_errors[:3]
    # The origin was never refused by snowflake_id (Citus may have held its
    # writes while it promoted the clone).
    assert not [e for e in origin_errors if e[0] == "55000"], origin_errors[:3]
    everything = through_origin + on_clone
    assert len(everything) == len(set(everything))
    assert c.one("SELECT count(*) - count(DISTINCT id) FROM cloned") == 0
    print(f"clone promotion: {len(through_origin)} inserts through the origin, {len(on_clone)} IDs on the clone"
          f" (group {new_group}), {len(refused)} calls refused until Citus gave it its group")
    for s in (c, w1, clone):
        s.wait_for("SELECT problem IS NULL FROM snowflake_id.snowflake_status",
                   what=lambda s=s: f"{s.name}: {status(s)}")


def test_a_secondary_promoted_beside_its_primary_refuses_and_the_view_says_so(cluster):
    c, _, w2, made = cluster
    secondary = standby_of(made, w2, "nodeops-secondary")
    c.sql("SELECT citus_add_secondary_node('localhost', %s, 'localhost', %s)", (secondary.port, w2.port))
    try:
        # The secondary replays the metadata that lists it (Citus wrote it on w2).
        secondary.wait_for("SELECT count(*) > 0 FROM pg_dist_node WHERE noderole = 'secondary'",
                           what="the secondary never replayed the metadata that lists it")
        # In recovery: the view lists it, with nothing wrong.
        view = cluster_view(c)
        assert view[secondary.port][2] == "secondary" and view[secondary.port][4] is None, view[secondary.port]
        secondary.promote()
        code, message = wait_refused(secondary, "a Citus secondary of group")
        assert f"group {group_of(c, w2)}" in message, message
        # Its primary goes on, with nothing to say.
        w2.sql("SELECT snowflake_nextval()")
        w2.wait_for("SELECT problem IS NULL FROM snowflake_id.snowflake_status",
                    what=lambda: f"w2: {status(w2)}")
        row = cluster_view(c)[secondary.port]
        assert "a secondary out of recovery" in row[4] and "promoted out of recovery" in row[4], row
        # The HINT's way, in its order: the secondary's entry removed while
        # the old primary runs, the old primary stopped, then its entry moved
        # to the promoted node, which then issues under the group.
        hint = refusal_hint(secondary)
        primary_id = c.one("SELECT nodeid FROM pg_dist_node WHERE nodeport = %s AND noderole = 'primary'", (w2.port,))
        steps = re.findall(r"SELECT citus_\w+\([^)]*\)", hint)
        assert [s.split("(")[0] for s in steps] == ["SELECT citus_remove_node", "SELECT citus_update_node"], hint
        fill = {"<this host>": "localhost", "<this port>": str(secondary.port), "<the primary's nodeid>": str(primary_id)}
        for placeholder, value in fill.items():
            steps = [s.replace(placeholder, value) for s in steps]
        before = [r[0] for r in w2.sql("SELECT snowflake_nextval_batch(100)")]
        c.sql(steps[0])
        w2.stop()
        c.sql(steps[1])
        replaced = wait_issues(secondary)
        assert workers_of(c, [replaced]) == {group_of(c, secondary)} and replaced > max(before)
    finally:
        if c.one("SELECT count(*) FROM pg_dist_node WHERE nodeport = %s AND noderole = 'secondary'", (secondary.port,)):
            c.sql("SELECT citus_remove_node('localhost', %s)", (secondary.port,))


def test_a_group_id_given_again_by_hand_stops_the_removed_node_that_held_it(cluster):
    c, _, _, made = cluster
    old = node(made, "nodeops-removed")
    add(c, old)
    group = group_of(c, old)
    assert workers_of(c, [wait_issues(old)]) == {group}
    c.sql("CREATE TABLE regrouped (k int, id bigint DEFAULT snowflake_nextval(), src text, PRIMARY KEY (k, id));"
          "SELECT create_distributed_table('regrouped', 'k')")
    c.sql("SELECT citus_remove_node('localhost', %s)", (old.port,))
    # Removed and still running: said, not refused (its group id is not
    # anyone else's).
    old.wait_for("SELECT problem LIKE '%is not in the coordinator''s metadata any more%'"
                 " FROM snowflake_id.snowflake_status", what=lambda: f"{status(old)}")
    old.sql("SELECT snowflake_nextval()")
    new = node(made, "nodeops-regrouped")
    # The removed node draws IDs throughout, the new one from the moment it
    # is added: until the removed one reads that its group was given away,
    # both could issue under it (issue 51: hundreds of repeats in ~2 s). The
    # new node waits out its handover instead.
    drawn = {"old": [], "new": []}
    refused = {"old": [], "new": []}
    stop_drawing = threading.Event()

    def draw(s, tag):
        conn = None
        while not stop_drawing.is_set():
            try:
                conn = conn or s.connect()
                cur = conn.cursor()
                cur.execute("SELECT snowflake_nextval()")
                drawn[tag].append(cur.fetchone()[0])
            except Exception as e:  # noqa: BLE001 - refusals are the point
                refused[tag].append((getattr(e, "pgcode", None), str(e)))
                conn = None
                Deadline.nap(0.02)

    new_listed = False
    drawing = [threading.Thread(target=draw, args=(old, "old"))]
    drawing[0].start()
    try:
        wait_until(lambda: drawn["old"], "the removed node issued nothing")
        c.sql("SELECT citus_add_node('localhost', %s, groupid => %s)", (new.port, group))
        new_listed = True
        drawing.append(threading.Thread(target=draw, args=(new, "new")))
        drawing[1].start()
        wait_until(lambda: len(drawn["new"]) >= 200,
                   lambda: f"the new node issued fewer than 200 IDs: {refused['new'][-3:]}", interval=0.2)
    finally:
        stop_drawing.set()
        for t in drawing:
            t.join()
    assert not set(drawn["old"]) & set(drawn["new"]), "an ID was issued by both nodes"
    assert workers_of(c, drawn["new"]) == {group}
    assert any("is new to it" in m for code, m in refused["new"] if code == "55000"), refused["new"][:3]
    assert all(code == "55000" for code, _ in refused["old"]), refused["old"][:3]
    try:
        # Its group id given again by hand: the removed node stops.
        code, message = wait_refused(old, "gives this node's group")
        assert f"to node localhost:{new.port}" in message, message
        stop = threading.Event()
        errors = []

        def insert(s, tag):
            conn, k = None, 0
            while not stop.is_set():
                try:
                    conn = conn or s.connect()
                    conn.cursor().execute("INSERT INTO regrouped (k, src) VALUES (%s, %s)", (k, tag))
                except Exception as e:  # noqa: BLE001 - the removed node's refusals are the point
                    errors.append((tag, getattr(e, "pgcode", None)))
                    conn = None
                    Deadline.nap(0.05)
                k += 1

        threads = [threading.Thread(target=insert, args=(s, tag)) for s, tag in ((old, "old"), (new, "new"))]
        for t in threads:
            t.start()
        try:
            # As long as the new node needs to judge the claims and issue.
            wait_until(lambda: c.one("SELECT count(*) FROM regrouped WHERE src = 'new'") >= 200,
                       lambda: f"the new node stored fewer than 200 rows: {errors[-3:]}", interval=0.2)
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert c.one("SELECT count(*) FROM regrouped WHERE src = 'old'") == 0
        assert c.one("SELECT count(*) - count(DISTINCT id) FROM regrouped") == 0
        assert workers_of(c, [r[0] for r in c.sql("SELECT id FROM regrouped")]) == {group}
        assert all(code == "55000" for tag, code in errors if tag == "old"), errors[:3]
        # Cut off from the coordinator (its metadata's coordinator row made
        # to point where nothing listens: a removed node is often out of
        # reach of its old cluster) and restarted: the refusal was kept with
        # its claims, and stands while the coordinator cannot be asked.
        old.sql("UPDATE pg_dist_node SET nodeport = 1 WHERE groupid = 0")
        old.restart()
        since = old.one("SELECT clock_timestamp()")
        status(old)  # a status read in the Citus database tells the claims worker where it is
        wait_refreshes(old, since)
        got = refusal(old)
        assert got and got[0] == "55000" and "gives this node's group" in got[1], got
        assert "the coordinator has not answered since" in got[1], got
        # The coordinator's own answer lifts it: reachable again, the group
        # still given away, still refused; the node that holds the group
        # removed, issuing again.
        old.sql("UPDATE pg_dist_node SET nodeport = %s WHERE groupid = 0", (c.port,))
        old.wait_for("SELECT problem NOT LIKE '%has not answered since%' FROM snowflake_id.snowflake_status",
                     what=lambda: f"the coordinator was never asked again: {status(old)}")
        wait_refused(old, "gives this node's group")
        c.sql("SELECT citus_remove_node('localhost', %s)", (new.port,))
        new_listed = False
        old.wait_for("SELECT problem LIKE '%is not in the coordinator''s metadata any more%'"
                     " FROM snowflake_id.snowflake_status", what=lambda: f"{status(old)}")
        # The claims worker publishes what it found a moment before it lifts
        # the refusal: the status can say so while a call is still refused.
        # Issuing again once it has, however long that moment lasts here.
        wait_issues(old)
    finally:
        if new_listed:
            c.sql("SELECT citus_remove_node('localhost', %s)", (new.port,))
        old.stop()
        new.stop()


def test_a_node_added_again_moves_to_its_new_group_without_a_restart(cluster):
    c, w1, _, made = cluster
    again = node(made, "nodeops-again")
    add(c, again)
    first = group_of(c, again)
    assert workers_of(c, [again.one("SELECT snowflake_nextval()")]) == {first}
    # w1 answers the claims question slower than a reader waits (3 s), as a
    # node that hangs mid-answer would: no node's claims on the new id can
    # be read while it does.
    local = "SET citus.enable_ddl_propagation = off;"  # this worker alone
    original = w1.one("SELECT pg_get_functiondef('pg_catalog.snowflake_id_claims_here()'::regprocedure)")
    w1.sql(local + """CREATE OR REPLACE FUNCTION pg_catalog.snowflake_id_claims_here() RETURNS text
                      LANGUAGE sql AS $$ SELECT pg_catalog.pg_sleep(10)::text $$""")
    restored = False
    try:
        c.sql("SELECT citus_remove_node('localhost', %s)", (again.port,))
        add(c, again, wait=False)
        second = group_of(c, again)
        assert second != first
        # Moved, and refused until the other nodes' claims on the new id
        # are read; the status says why.
        again.wait_for(f"SELECT problem LIKE '%moves from {first} to {second}%could not be read%'"
                       " FROM snowflake_id.snowflake_status",
                       what=lambda: f"not refused while the claims cannot be read: {status(again)}")
        got = refusal(again)
        assert got and got[0] == "55000" and f"moves from {first} to {second}" in got[1], got
        # Its claims worker restarted meanwhile: the move is still to be
        # judged, and still refused.
        since = again.one("SELECT clock_timestamp()")
        worker = "SELECT pid FROM pg_stat_activity WHERE backend_type = 'snowflake_id claims'"
        old_pid = again.one(worker)
        again.sql(f"SELECT pg_terminate_backend(({worker}))")
        again.wait_for(f"SELECT EXISTS ({worker} AND pid <> {old_pid})", what="the claims worker never came back")
        wait_refreshes(again, since)
        got = refusal(again)
        assert got and got[0] == "55000" and f"moves from {first} to {second}" in got[1], got
        w1.sql(local + original)
        restored = True
        # Issuing once they were read.
        again.wait_for(f"SELECT worker_id = {second} AND problem IS NULL FROM snowflake_id.snowflake_status",
                       what=lambda: f"the worker id stayed, or stays refused: {status(again)}")
        # A problem of NULL is read only once the refusal is lifted (the
        # status says why a call would fail first): issuing at once.
        assert workers_of(c, [again.one("SELECT snowflake_nextval()")]) == {second}
        c.wait_for(f"SELECT problem IS NULL FROM snowflake_cluster_status() WHERE nodeport = {again.port}",
                   what=lambda: f"{cluster_view(c).get(again.port)}")
    finally:
        if not restored:
            w1.sql(local + original)
        c.sql("SELECT citus_remove_node('localhost', %s)", (again.port,))
        again.stop()


def test_a_node_whose_own_metadata_holds_an_old_group_is_named_with_the_command_that_syncs_it(cluster):
    """A node added again whose own metadata still holds its old group id (an
    older copy of its data directory started at its address, or a sync that
    never reached it) issues under the old one. The view says so with the
    command that mends it, and the command works pasted (issue 51: the text
    said the node "moves to the new group within 2 s", which it never did).
    `citus_activate_node` writes the node's group id into its
    `pg_dist_local_group` (Citus 13.2.2 `metadata/node_metadata.c`:
    `ActivateNodeList` -> `UpdateLocalGroupIdsViaMetadataContext` ->
    `LocalGroupIdUpdateCommand`)."""
    c, _, _, made = cluster
    stale = node(made, "nodeops-stale")
    add(c, stale)
    first = group_of(c, stale)
    c.sql("SELECT citus_remove_node('localhost', %s)", (stale.port,))
    add(c, stale)
    second = group_of(c, stale)
    assert second != first
    try:
        # Its own metadata as the older copy holds it: the group it had.
        stale.sql(f"UPDATE pg_dist_local_group SET groupid = {first}")
        stale.wait_for(f"SELECT worker_id = {first} FROM snowflake_id.snowflake_status",
                       what=lambda: f"it never went back to {first}: {status(stale)}")
        assert workers_of(c, [wait_issues(stale)]) == {first}
        problem = cluster_view(c)[stale.port][4]
        assert f"it issues IDs under worker id {first}, but its group id here is {second}" in problem, problem
        command = re.search(r"(SELECT citus_activate_node\([^)]*\))", problem).group(1)
        c.sql(command)
        stale.wait_for(f"SELECT worker_id = {second} FROM snowflake_id.snowflake_status",
                       what=lambda: f"it never moved to {second}: {status(stale)}")
        assert workers_of(c, [wait_issues(stale)]) == {second}
        c.wait_for(f"SELECT problem IS NULL FROM snowflake_cluster_status() WHERE nodeport = {stale.port}",
                   what=lambda: f"{cluster_view(c).get(stale.port)}")
    finally:
        c.sql("SELECT citus_remove_node('localhost', %s)", (stale.port,))
        stale.stop()


def test_the_view_lists_an_unnamed_coordinator_and_a_disabled_node_that_issues(cluster):
    c, _, _, made = cluster
    # A coordinator that has not named itself refuses every ID; its view
    # lists it (it is in no pg_dist_node) and says why.
    lonely = node(made, "nodeops-lonely")
    lonely.sql("CREATE EXTENSION snowflake_id")
    rows = lonely.sql("SELECT nodeid, nodeport, worker_id, problem FROM snowflake_cluster_status()")
    assert len(rows) == 1 and rows[0][0] is None and rows[0][1] == lonely.port, rows
    assert "not in its own Citus metadata" in rows[0][3] and "citus_set_coordinator_host" in rows[0][3], rows
    assert refusal(lonely)[0] == "55000"
    lonely.stop()
    # A node disabled in the metadata still issues IDs to whoever connects
    # to it: the view says so.
    disabled = node(made, "nodeops-disabled")
    add(c, disabled)
    disabled.one("SELECT snowflake_nextval()")
    c.sql("SELECT citus_disable_node('localhost', %s, synchronous => true)", (disabled.port,))
    try:
        row = cluster_view(c)[disabled.port]
        assert "inactive in Citus's metadata" in row[4], row
        disabled.sql("SELECT snowflake_nextval()")
    finally:
        c.sql("SELECT citus_remove_node('localhost', %s)", (disabled.port,))
        disabled.stop()


def test_claims_follow_the_citus_database_dropped_made_again_or_copied(cluster):
    _, _, _, made = cluster
    # A lone Citus node (its own coordinator), whose cluster's database is
    # dropped and made again under another name while the server runs, where
    # the node has another group id, and then copied with CREATE DATABASE ...
    # TEMPLATE.
    s = node(made, "nodeops-databases")
    s.sql("CREATE EXTENSION snowflake_id")  # in postgres, whose Citus metadata lists no node

    def make_cluster_database(name, group=0):
        s.sql(f"CREATE DATABASE {name}")
        s.sql("CREATE EXTENSION citus; SELECT citus_set_coordinator_host('localhost', %s);"
              "CREATE EXTENSION snowflake_id", (s.port,), dbname=name)
        if group:
            # As a worker of a cluster made anew would find it (its metadata
            # written by hand here: one node, no coordinator to add it).
            s.sql("UPDATE pg_dist_local_group SET groupid = %s; UPDATE pg_dist_node SET groupid = %s",
                  (group, group), dbname=name)

    def wait(query, dbname, what):
        wait_until(lambda: s.one(query, dbname=dbname),
                   lambda: f"{what}: {s.sql('SELECT problem FROM snowflake_id.snowflake_status')}")

    def kept_in(name):
        """The claims worker writes this server's claim in `name` after
        this call began: it keeps the claim there now (however long its
        refresh takes on this machine)."""
        since = s.one("SELECT clock_timestamp()")
        wait(f"SELECT EXISTS (SELECT FROM snowflake_id.snowflake_claims WHERE last_seen > '{since}')", name,
             f"no claim kept in {name}")

    problem = "SELECT problem FROM snowflake_id.snowflake_status"
    nextval = "SELECT snowflake_nextval()"
    try:
        make_cluster_database("first_app")
        assert workers_of(s, [s.one(nextval, dbname="first_app")]) == {0}
        kept_in("first_app")
        s.sql("DROP DATABASE first_app")
        # The worker id was settled: IDs go on, and the status says the
        # claim is not kept.
        s.one(nextval)
        wait("SELECT problem LIKE '%Citus database it was kept in was dropped%' FROM snowflake_id.snowflake_status",
             "postgres", "the dropped database is not said")
        make_cluster_database("second_app", group=3)
        # The first ID of a session there tells the worker, and is refused
        # until the worker has read the node's group there and the claims:
        # then IDs carry the new group.
        got = refusal(s, dbname="second_app")
        assert got and got[0] == "55000", got
        wait_until(lambda: refusal(s, dbname="second_app") is None,
                   lambda: f"still refused in second_app: {s.sql(problem, dbname='second_app')}")
        assert workers_of(s, [s.one(nextval, dbname="second_app")]) == {3}
        assert workers_of(s, [s.one(nextval)]) == {3}
        kept_in("second_app")
        wait("SELECT problem IS NULL FROM snowflake_id.snowflake_status", "postgres", "still a problem")
        # A copy. Citus's maintenance daemon leaves its template, as the
        # claims worker does, for the copy to be made (tried again if the
        # daemon came back in between).
        deadline = Deadline("CREATE DATABASE app_copy TEMPLATE second_app: the template was never left free")
        while True:
            s.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                  " WHERE datname = 'second_app' AND backend_type LIKE 'Citus%'")
            try:
                s.sql("CREATE DATABASE app_copy TEMPLATE second_app")
                break
            except Exception as e:  # noqa: BLE001 - "being accessed by other users", tried again
                assert "being accessed by other users" in str(e), e
                deadline.check()
        # A session's first ID in the copy finds its Citus metadata listing
        # this node too: said, and the claims stay where they were.
        s.one(nextval, dbname="app_copy")
        wait("SELECT problem LIKE '%databases second_app and app_copy both hold Citus metadata%'"
             " FROM snowflake_id.snowflake_status", "second_app", "the copy is not said")
        said = s.one(problem, dbname="second_app")
        assert "snowflake_id.claims_database = 'app_copy'" in said, said
        kept_in("second_app")
        s.sql("DROP DATABASE app_copy WITH (FORCE)")
        wait("SELECT problem IS NULL FROM snowflake_id.snowflake_status", "second_app", "the copy is still said")
    finally:
        s.stop()
