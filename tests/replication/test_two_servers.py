"""Two servers with different worker ids, issuing at the same time, never
issue the same ID, and each ID names the server that made it."""

import threading

import pytest
from harness import server

PER_SERVER = 200_000


@pytest.mark.parametrize("layout", ["snowflake_id", "pgedge"])
def test_servers_with_different_worker_ids_never_collide(layout):
    conf = {"snowflake_id.layout": f"'{layout}'"}
    with server(f"two-a-{layout}", conf={**conf, "snowflake_id.worker_id": 1}) as a, server(
        f"two-b-{layout}", conf={**conf, "snowflake_id.worker_id": 2}
    ) as b:
        made = {}

        def take(srv, worker):
            cur = srv.connect().cursor()
            ids = []
            for _ in range(PER_SERVER // 10_000):
                cur.execute("SELECT i FROM snowflake_nextval_batch(10000) i")
                ids.extend(r[0] for r in cur.fetchall())
            cur.execute(
                "SELECT bool_and((snowflake_decode(i)).worker_id = %s) FROM unnest(%s::bigint[]) i",
                (worker, ids),
            )
            made[worker] = (ids, cur.fetchone()[0])

        threads = [threading.Thread(target=take, args=(s, w)) for s, w in ((a, 1), (b, 2))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        (ids_a, named_a), (ids_b, named_b) = made[1], made[2]
        assert named_a and named_b, "an ID does not decode to the worker that made it"
        assert len(set(ids_a)) == len(set(ids_b)) == PER_SERVER
        assert not set(ids_a) & set(ids_b), "two servers issued the same ID"
        # They were made in the same milliseconds: only the worker bits keep them apart.
        assert {i >> 22 for i in ids_a} & {i >> 22 for i in ids_b}, "the servers never shared a millisecond"
