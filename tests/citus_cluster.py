"""A Citus cluster on this machine for the tests and the benchmark: nodes
that preload Citus and snowflake_id with one configuration, the same on
every node (`snowflake_id.worker_id_source = 'citus'` and nothing more: the
install block of docs/citus.md; the claims live in the Citus database without
being named), talking over loopback."""

from harness import Server

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


def add(coordinator, worker):
    coordinator.sql("SELECT citus_add_node('localhost', %s)", (worker.port,))


def start_cluster(made, prefix, workers=2, **conf):
    """A coordinator (named itself) and `workers` workers added, with
    snowflake_id created on the coordinator (Citus carries it to them)."""
    c = node(made, f"{prefix}-coord", **conf)
    ws = [node(made, f"{prefix}-w{i + 1}", **conf) for i in range(workers)]
    c.sql("SELECT citus_set_coordinator_host('localhost', %s)", (c.port,))
    for w in ws:
        add(c, w)
    c.sql("CREATE EXTENSION snowflake_id")
    # Each claims worker finds the extension at its next refresh.
    for s in (c, *ws):
        s.wait_for("SELECT problem IS NULL FROM snowflake_id.snowflake_status", timeout=30)
    return c, ws


def status(s):
    """A node's (worker_id, worker_id_source, problem)."""
    return s.sql("SELECT worker_id, worker_id_source, problem FROM snowflake_id.snowflake_status")[0]


def workers_of(s, ids):
    """The worker ids the IDs carry."""
    return {r[0] for r in s.sql("SELECT DISTINCT (snowflake_decode(i)).worker_id FROM unnest(%s::bigint[]) AS i",
                                (list(ids),))}
