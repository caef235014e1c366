"""A Citus cluster on this machine for the tests and the benchmark: nodes
that preload Citus and snowflake_id with one configuration, the same on
every node (`snowflake_id.worker_id_source = 'citus'` and nothing more: the
install block of docs/citus.md; the claims live in the Citus database without
being named), talking over loopback."""

import psycopg2
from harness import Server, wait_until

# Nodes listen on TCP (Citus connects by host and port): the harness keeps
# every server's port out of Linux's ephemeral range.

SOURCE = {"snowflake_id.worker_id": None, "snowflake_id.worker_id_source": "'citus'"}


def node(made, name, faketime=False, **conf):
    """A started node with Citus created in database postgres (with
    faketime, under libfaketime: see Server.set_clock)."""
    s = Server(name, faketime=faketime, conf={
        "shared_preload_libraries": "'citus,snowflake_id'",
        "listen_addresses": "'localhost'",
        "wal_level": "logical",
        # Each client's COPY opens a connection per shard it writes: few
        # shards, room for all of them.
        "max_connections": 150,
        "citus.shard_count": 4,
        # Nodes talk over loopback here; Citus's own default asks for SSL.
        "citus.node_conninfo": "'sslmode=disable'",
        **SOURCE,
        **conf,
    })
    made.append(s)
    s.start()
    s.sql("CREATE EXTENSION citus")
    return s


def add(coordinator, worker, wait=True):
    """citus_add_node; with `wait`, where the coordinator has snowflake_id
    (which Citus then brings to the node), until the node issues: a group id
    new to a node is refused for its handover (docs/citus.md), however long
    this machine takes to get there."""
    coordinator.sql("SELECT citus_add_node('localhost', %s)", (worker.port,))
    if wait and coordinator.one("SELECT count(*) FROM pg_extension WHERE extname = 'snowflake_id'"):
        wait_issues(worker)


def start_cluster(made, prefix, workers=2, **conf):
    """A coordinator (named itself) and `workers` workers added, with
    snowflake_id created on the coordinator (Citus carries it to them)."""
    c = node(made, f"{prefix}-coord", **conf)
    ws = [node(made, f"{prefix}-w{i + 1}", **conf) for i in range(workers)]
    c.sql("SELECT citus_set_coordinator_host('localhost', %s)", (c.port,))
    for w in ws:
        add(c, w)
    c.sql("CREATE EXTENSION snowflake_id")
    # Each claims worker finds the extension at its next refresh, and a
    # worker's group is new to it (its handover): waited for on every node,
    # however long each one takes.
    for s in (c, *ws):
        wait_issues(s)
        s.wait_for("SELECT problem IS NULL FROM snowflake_id.snowflake_status",
                   what=f"{s.name} still has a problem after CREATE EXTENSION snowflake_id")
    return c, ws


def status(s):
    """A node's (worker_id, worker_id_source, problem)."""
    return s.sql("SELECT worker_id, worker_id_source, problem FROM snowflake_id.snowflake_status")[0]


def wait_refreshes(s, since):
    """Until `s`'s claims worker has finished a whole refresh (its claim
    written, the other nodes and the coordinator asked, what it found
    published) begun after `since`, a timestamp of `s`'s own clock: its
    claim written twice after it. The refresh that wrote it first asked the
    others after that write; the second write begins the refresh after it.
    However long a refresh takes on this machine, this waits for it, not for
    a number of seconds."""
    last_seen = "SELECT max(last_seen) FROM snowflake_id.snowflake_claims"
    s.wait_for(f"SELECT max(last_seen) > '{since}' FROM snowflake_id.snowflake_claims",
               what=lambda: f"{s.name}: the claims worker never wrote its claim: {status(s)}")
    first = s.one(last_seen)
    s.wait_for(f"SELECT max(last_seen) > '{first}' FROM snowflake_id.snowflake_claims",
               what=lambda: f"{s.name}: the claims worker never wrote its claim again: {status(s)}")


def wait_issues(s, dbname="postgres"):
    """Until `s` issues an ID (its claims worker lifted a refusal: SQLSTATE
    55000; any other error fails at once); the ID. A call waits a few
    seconds at most for the claims worker's judging, which a busy machine
    can make longer: this waits for the judging itself."""
    last = {}

    def issued():
        try:
            return [s.one("SELECT snowflake_nextval()", dbname=dbname)]
        except psycopg2.Error as e:
            if e.pgcode != "55000":
                raise
            last["refused"] = str(e)
            return None

    return wait_until(issued, lambda: f"{s.name} never issued: {last.get('refused')}", interval=0.2)[0]


def workers_of(s, ids):
    """The worker ids the IDs carry."""
    return {r[0] for r in s.sql("SELECT DISTINCT (snowflake_decode(i)).worker_id FROM unnest(%s::bigint[]) AS i",
                                (list(ids),))}
