"""Two servers with different worker ids, issuing at the same time, never
issue the same ID, and each ID names the server that made it."""

import threading

import pytest
from harness import Deadline, Window, server

# Each round, both servers take IDs in batches for this long (each at least
# one batch), started together; rounds go on until the two have issued in
# one same millisecond (a busy machine can starve one thread for a whole
# round), within the harness's timeout.
ROUND_S = 0.5


@pytest.mark.parametrize("layout", ["snowflake_id", "pgedge"])
def test_servers_with_different_worker_ids_never_collide(layout):
    conf = {"snowflake_id.layout": f"'{layout}'"}
    with server(f"two-a-{layout}", conf={**conf, "snowflake_id.worker_id": 1}) as a, server(
        f"two-b-{layout}", conf={**conf, "snowflake_id.worker_id": 2}
    ) as b:
        made = {1: [], 2: []}
        cursors = {1: a.connect().cursor(), 2: b.connect().cursor()}
        start = threading.Barrier(2)

        def take(worker):
            cur = cursors[worker]
            start.wait()
            window = Window(ROUND_S)
            batches = 0
            while window.open() or not batches:
                cur.execute("SELECT i FROM snowflake_nextval_batch(10000) i")
                made[worker].extend(r[0] for r in cur.fetchall())
                batches += 1

        def shared_millisecond():
            return {i >> 22 for i in made[1]} & {i >> 22 for i in made[2]}

        rounds = Deadline("the servers never shared a millisecond")
        while True:
            threads = [threading.Thread(target=take, args=(w,)) for w in (1, 2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if shared_millisecond() or rounds.passed():
                break
        for worker, cur in cursors.items():
            cur.execute(
                "SELECT bool_and((snowflake_decode(i)).worker_id = %s) FROM unnest(%s::bigint[]) i",
                (worker, made[worker]),
            )
            assert cur.fetchone()[0], f"an ID of server {worker} does not decode to its worker id"
        ids_a, ids_b = made[1], made[2]
        assert len(set(ids_a)) == len(ids_a) and len(set(ids_b)) == len(ids_b), "a server repeated an ID"
        assert not set(ids_a) & set(ids_b), "two servers issued the same ID"
        # They were made in the same milliseconds: only the worker bits keep them apart.
        assert shared_millisecond(), f"the servers never shared a millisecond in {rounds.timeout:.0f} s of rounds"
