"""Many writers, one ID space: worker-id claims travel with replicated data.

Real clusters on this machine: built-in logical replication (fan-in of two
writers into one reader, claims exchanged between the writers), a split
brain after promoting a streaming standby, and bidirectional pglogical
(Debian's postgresql-15-pglogical). Each writer runs a short load of
inserts; what arrives where is compared row by row.

Claims are refreshed every 2 s and a claim is stale after 10 s without a
change (core/src/claims.rs); the waits below are timeouts, not timings."""

import os
import subprocess

import pytest
from claims_cluster import (apply_errors, dsn, load, load_both, problem, publish, subscribe, sysid, wait_claims,
                            wait_problem, wait_refreshes, wait_rows, writer)
from harness import PG_BIN, Stopwatch, pg_major, servers, started, wait_until

def test_fan_in_with_distinct_worker_ids_is_exact_and_quiet():
    with servers() as made:
        a = writer(made, "claims-fan-a", 1)
        b = writer(made, "claims-fan-b", 2)
        # The reader issues no IDs of its own: no worker id, yet it judges claims.
        r = writer(made, "claims-fan-r", -1)
        for w in (a, b):
            publish(w, "pub")
            subscribe(r, f"from_{w.name.replace('-', '_')}", w, "pub")
        wait_claims(r, 2, "the writers' claims did not reach the reader")
        (ids_a, err_a), (ids_b, err_b) = load_both(a, b).join()
        assert not err_a and not err_b, (err_a[:2], err_b[:2])
        wait_rows(r, len(ids_a) + len(ids_b), "the reader did not receive every row")
        got = {row[0]: row[1] for row in r.sql("SELECT id, origin FROM t")}
        assert set(got) == set(ids_a) | set(ids_b)
        assert not set(ids_a) & set(ids_b)
        assert apply_errors(r) == 0
        for s in (a, b):
            assert problem(s) is None, (s.name, problem(s))
        assert "claimed by" not in (problem(r) or "") + r.log_text(), problem(r)
        assert "duplicate key" not in r.log_text()
        print(f"fan-in: {len(ids_a)} + {len(ids_b)} rows, 0 conflicts")


def test_a_clean_shutdown_ends_the_claim_and_a_worker_ended_alone_does_not():
    """The claim is marked as ended (last_seen 1970) only when the server
    shuts down: a copy of its files (pg_upgrade's new cluster, see
    test_pg_upgrade.py) then does not take it for a live server's. A claims
    worker ended alone (pg_terminate_backend) comes back to a server that
    went on issuing IDs: its claim must stay live meanwhile."""
    with servers() as made:
        s = writer(made, "claim_end", 5)
        wait_claims(s, 1, "no claim written")
        me = sysid(s)
        pid = s.one("SELECT pid FROM pg_stat_activity WHERE backend_type = 'snowflake_id claims'")
        live = s.one(f"SELECT last_seen FROM snowflake_id.snowflake_claims WHERE system_identifier = {me}")
        s.sql(f"SELECT pg_terminate_backend({pid})")

        # From the end of the worker (its exit is where a shutdown marks the
        # claim as ended) until the postmaster starts it again (5 s later), at
        # every look: the claim is as live as before, never marked as ended
        # nor set back. The new worker's refreshes only move it forward.
        def back_and_live():
            seen = s.one(f"SELECT last_seen FROM snowflake_id.snowflake_claims WHERE system_identifier = {me}")
            assert seen >= live, f"the claim went from {live} to {seen} when its worker was ended alone"
            return s.one("SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'snowflake_id claims'"
                         f" AND pid <> {pid}")

        wait_until(back_and_live, "the claims worker did not come back")
        s.stop()
        # Started without claims, so that no worker touches the row again.
        s.set_conf(snowflake_id__claims_database=None)
        s.start()
        assert s.sql("SELECT last_seen = 'epoch', claimed_at < now() FROM snowflake_id.snowflake_claims") \
            == [(True, True)]


def claims_mesh(a, b):
    """Each writer receives the other's claim (claims only: the data goes to
    the reader alone)."""
    for w in (a, b):
        publish(w, "claims", tables="")
    subscribe(a, "claims_from_b", b, "claims")
    subscribe(b, "claims_from_a", a, "claims")


def test_the_same_worker_id_is_found_and_the_later_claimant_refuses():
    with servers() as made:
        a = writer(made, "claims-same-a", 5)
        # a claims first: b starts after a's claim exists.
        wait_claims(a, 1, "a did not claim its worker id")
        b = writer(made, "claims-same-b", 5)
        wait_claims(b, 1, "b did not claim its worker id")
        r = writer(made, "claims-same-r", -1)
        for w in (a, b):
            publish(w, "pub")
            subscribe(r, f"from_{w.name.replace('-', '_')}", w, "pub")
        met = Stopwatch()
        claims_mesh(a, b)
        wait_problem(b, 'worker id 5 is also claimed by the live server "claims-same-a"')
        print(f"b refused {met.seconds():.1f} s after the claims subscriptions were created")
        wait_problem(a, 'worker id 5 is also claimed by the live server "claims-same-b"')
        assert "that server stops issuing IDs when it reads this server's claim" in problem(a)
        # The reader issues nothing, and says so in its log.
        r.wait_for_log("worker id 5 is claimed by two live servers", what=lambda: r.log_text()[-2000:])
        code, message, hint = b.error("SELECT snowflake_nextval()")
        assert code == "55000", (code, message)
        assert "claims-same-a" in message and "system identifier" in message, message
        assert "another worker id" in hint and "not ALTER SYSTEM" in hint, hint
        # The claims met before any load: nothing repeats.
        (ids_a, err_a), (ids_b, err_b) = load_both(a, b).join()
        assert ids_a and not err_a, err_a[:2]
        assert not ids_b and err_b and {e[0] for e in err_b} == {"55000"}, (len(ids_b), err_b[:2])
        wait_rows(r, len(ids_a), "the reader did not receive a's rows")
        assert apply_errors(r) == 0
        assert "duplicate key" not in r.log_text()
        for s in (a, b):
            assert "is also claimed by the live server" in s.log_text()
        # A restart does not lift the refusal: b refuses from its first call.
        b.restart()
        code, message, _ = b.error("SELECT snowflake_nextval()")
        assert code == "55000" and "claimed by" in message, message
        wait_problem(b, 'worker id 5 is also claimed by the live server "claims-same-a"')
        # a stops: its claim goes stale, b issues again, by itself.
        a.stop()
        stale = wait_problem(b, None)
        print(f"b issued again {stale:.1f} s after a stopped")
        assert b.one("SELECT snowflake_nextval()") > 0
        assert "issuing IDs again" in b.log_text()


def test_a_backfill_worker_id_is_claimed_and_checked_as_live_ones_are():
    """Backfill worker ids (snowflake_nextval_at) are claimed beside the
    live ones: two servers with one backfill worker id refuse backfills
    (their live IDs go on), and a server whose live worker id is another's
    backfill worker id makes that server refuse its backfills, and goes on
    itself, with nothing to say (issue 51: it was refused, or warned that
    both issue the same IDs)."""
    with servers() as made:
        a = writer(made, "claims-bf-a", 5, conf={"snowflake_id.backfill_worker_id": 1000})
        wait_claims(a, 2, "a did not claim its worker id and its backfill worker id")
        assert a.sql("SELECT worker_id FROM snowflake_id.snowflake_claims ORDER BY 1") == [(5,), (1000,)]
        b = writer(made, "claims-bf-b", 6, conf={"snowflake_id.backfill_worker_id": 1000})
        wait_claims(b, 2, "b did not claim its worker id and its backfill worker id")
        claims_mesh(a, b)
        for me, other in ((a, b), (b, a)):
            wait_problem(me, f'the backfill worker id 1000 is also claimed by the live server "{other.name}"')
            code, message, hint = me.error("SELECT snowflake_nextval_at('2025-02-01')")
            assert code == "55000" and "backfills are refused" in message, message
            assert "snowflake_id.backfill_worker_id" in hint, hint
            assert me.one("SELECT snowflake_nextval()") > 0
        # b takes another: both backfill again, their IDs apart. Its first
        # backfill under 999 waits for the claims on 999 to be read.
        b.sql("ALTER SYSTEM SET snowflake_id.backfill_worker_id = 999")
        b.reload_and_wait()
        for s in (a, b):
            wait_problem(s, None)
        ids = [s.one("SELECT snowflake_nextval_at('2025-02-01')") for s in (a, b)]
        assert ids[0] != ids[1]
        assert "no other live server claims this server's backfill worker id any more" in a.log_text()
        # A live worker id that is another server's backfill worker id.
        b.sql("ALTER SYSTEM RESET snowflake_id.backfill_worker_id")
        b.stop()
        b.set_conf(**{"snowflake_id.worker_id": 1000})
        b.start()
        wait_problem(a, 'the backfill worker id 1000 is also claimed by the live server "claims-bf-b"')
        code, message, _ = a.error("SELECT snowflake_nextval_at('2025-02-01')")
        assert code == "55000" and "backfills are refused" in message, message
        assert a.one("SELECT snowflake_nextval()") > 0
        # b has judged a's claims (it lists them) and says nothing of them.
        wait_refreshes(b)
        assert problem(b) is None, problem(b)
        assert (b.one("SELECT (snowflake_decode(snowflake_nextval())).worker_id")) == 1000
        assert "both issue the same IDs" not in b.log_text()


def test_repeats_while_the_claims_have_not_met_yet_are_counted():
    """Both writers issue under one worker id before their claims meet: the
    repeats are counted here (and printed), then the claims meet mid-load and
    the later claimant stops."""
    with servers() as made:
        a = writer(made, "claims-late-a", 5)
        wait_claims(a, 1, "a did not claim its worker id")
        b = writer(made, "claims-late-b", 5)
        # Until stopped below: until the claims have met and b has refused.
        both = load_both(a, b, seconds=None)
        load_a, load_b = both.loads

        def shared():
            with load_a.lock, load_b.lock:
                return set(load_a.ids) & set(load_b.ids)

        # The writers repeat IDs before their claims meet: what is counted.
        wait_until(shared, "the writers never shared a millisecond: nothing was measured")
        claims_mesh(a, b)
        took = wait_problem(b, "is also claimed by the live server")
        at_refusal = b.one("SELECT count(*) FROM t")
        # b's load goes on until it has been refused.
        wait_until(lambda: load_b.errors, "b's load was never refused")
        both.stop()
        (ids_a, _), (ids_b, err_b) = both.join()
        repeats = len(set(ids_a) & set(ids_b))
        print(f"claims met {took:.1f} s after the subscriptions were created; "
              f"{repeats} IDs repeated before; b refused {len(err_b)} statements after")
        assert err_b and {e[0] for e in err_b} == {"55000"}
        assert repeats > 0, "the writers never shared a millisecond: nothing was measured"
        # After the refusal b inserted at most the statements under way (two
        # sessions of 50 rows).
        assert b.one("SELECT count(*) FROM t") - at_refusal <= 100
        # a, once b's claim has reached it, says that b stops.
        wait_problem(a, "stops issuing IDs")


def test_a_split_brain_after_promotion_stops_the_old_primary_where_the_claims_meet():
    with servers() as made:
        p = writer(made, "claims-split-p", 5)
        publish(p, "claims", tables="")
        s = started(made, "claims-split-s", copy_of=p, standby=True, conf={"cluster_name": "'claims-split-s'"})
        load(p, seconds=1)
        s.wait_for("SELECT count(*) > 0 FROM t", what="the standby did not catch up")
        # The old primary's first claim can come after the load's rows (its
        # worker refreshes every 2 s; 2 runs in 12 promoted before it
        # arrived): a standby promoted then knows nothing of it, which is
        # not the failover this test is about.
        s.wait_for("SELECT count(*) = 1 FROM snowflake_id.snowflake_claims", what="the old primary's claim did not reach the standby")
        s.promote()
        # A normal failover: the copy of the old primary's claim never
        # changes on the promoted one, so it says nothing.
        wait_claims(s, 2, "the promoted standby did not claim")
        # Its claims worker has judged both claims, and said nothing at any look.
        def quiet():
            assert problem(s) is None, problem(s)

        wait_refreshes(s, each=quiet)
        # The old primary lives on (a split brain) and receives the promoted
        # one's claim: same system, later timeline.
        subscribe(p, "claims_from_s", s, "claims", copy_data=False)
        took = wait_problem(p, 'worker id 5 is also claimed by the live server "claims-split-s"')
        print(f"the old primary refused {took:.1f} s after its subscription was created")
        code, message, _ = p.error("SELECT snowflake_nextval()")
        assert code == "55000" and "timeline 2" in message, message
        assert s.one("SELECT snowflake_nextval()") > 0
        assert problem(s) is None


def test_a_base_backup_running_beside_its_original_is_found_where_their_claims_meet():
    """Same system identifier, same timeline (a base backup started without
    recovery settings): only the start's instance number tells them apart."""
    with servers() as made:
        p = writer(made, "claims-copy-p", 5)
        publish(p, "pub")
        c = started(made, "claims-copy-c", copy_of=p, conf={"cluster_name": "'claims-copy-c'"})
        r = writer(made, "claims-copy-r", 7)
        subscribe(r, "from_p", p, "pub")
        subscribe(r, "from_c", c, "pub", copy_data=False)
        wait_problem(r, "worker id 5 is claimed by two live servers")
        names = r.one("SELECT string_agg(name, ',' ORDER BY name) FROM snowflake_id.snowflake_claims WHERE worker_id = 5")
        assert names == "claims-copy-c,claims-copy-p", names


def pglogical_available():
    lib = subprocess.run([f"{PG_BIN}/pg_config", "--pkglibdir"], capture_output=True, text=True, check=True).stdout.strip()
    return os.path.exists(os.path.join(lib, "pglogical.so"))


@pytest.mark.parametrize("ids", [(1, 2), (5, 5)], ids=["distinct", "same"])
def test_bidirectional_pglogical(ids):
    if not pglogical_available():
        # scripts/setup.sh installs it for the system's PostgreSQL 15; Debian
        # has none for the other majors.
        assert pg_major() != 15, "postgresql-15-pglogical is not installed: run scripts/setup.sh"
        pytest.skip(f"no pglogical for PostgreSQL {pg_major()}")
    conf = {
        "shared_preload_libraries": "'snowflake_id,pglogical'",
        "track_commit_timestamp": "on",
        # Debian's pglogical 2 asks for it by name; without it the
        # subscriptions stay down.
        "output_plugin_libraries": "'pgoutput, test_decoding, pglogical_output'",
    }
    with servers() as made:
        a = writer(made, f"claims-pgl-{ids[0]}{ids[1]}-a", ids[0], conf=conf)
        if ids[0] == ids[1]:
            wait_claims(a, 1, "a did not claim its worker id")
        b = writer(made, f"claims-pgl-{ids[0]}{ids[1]}-b", ids[1], conf=conf)
        for w in (a, b):
            w.sql("CREATE EXTENSION pglogical")
            w.sql(f"SELECT pglogical.create_node(node_name := '{w.name.replace('-', '_')}', dsn := '{dsn(w)}')")
            w.sql("SELECT pglogical.replication_set_add_table('default', 't')")
            w.sql("SELECT pglogical.replication_set_add_table('default', 'snowflake_id.snowflake_claims')")
        for w, other in ((a, b), (b, a)):
            w.sql(f"SELECT pglogical.create_subscription(subscription_name := 'from_{other.name[-1]}',"
                  f" provider_dsn := '{dsn(other)}', synchronize_data := false, forward_origins := '{{}}')")
        for w in (a, b):
            wait_claims(w, 2, f"{w.name} did not receive the other's claim")
        if ids[0] == ids[1]:
            wait_problem(b, f'worker id 5 is also claimed by the live server "{a.name}"')
            wait_problem(a, "stops issuing IDs")
        else:
            # Each claims worker has judged the other's claim: nothing to say.
            def quiet():
                assert problem(a) is None and problem(b) is None, (problem(a), problem(b))

            for w in (a, b):
                wait_refreshes(w, each=quiet)
        (ids_a, err_a), (ids_b, err_b) = load_both(a, b).join()
        assert ids_a and not err_a, err_a[:2]
        if ids[0] == ids[1]:
            assert not ids_b and {e[0] for e in err_b} == {"55000"}, err_b[:2]
        else:
            assert ids_b and not err_b, err_b[:2]
        total = len(ids_a) + len(ids_b)
        for w in (a, b):
            wait_rows(w, total, f"{w.name} did not converge")
        assert a.sql("SELECT id, origin FROM t ORDER BY id") == b.sql("SELECT id, origin FROM t ORDER BY id")
        assert not set(ids_a) & set(ids_b)
        for w in (a, b):
            # On snowflake_id.snowflake_claims pglogical may log one skipped remote DELETE
            # of a claim it had not received yet (each refresh deletes and
            # inserts the row): harmless. None on the data.
            conflicts = [line for line in w.log_text().splitlines() if "CONFLICT" in line]
            assert all("relation snowflake_id.snowflake_claims" in line for line in conflicts), conflicts[:3]
        print(f"pglogical {ids}: {len(ids_a)} + {len(ids_b)} rows on both, 0 conflicts")
