"""Worker ids leased from a registry database (worker_id_source = 'registry').

Real servers on this machine: a registry (a server with the extension, its
database made a registry by snowflake_registry_init() as a role of its own)
and leasing servers that reach it over a Unix socket with libpq. Clocks are
set with libfaketime where a test is about time; every wait is for a
condition (a worker id in the status, an answer from the registry)."""

import os
import socket
import struct
import threading

import psycopg2

from claims_cluster import own_claims_seen, subscribe, sysid, wait_problem, wait_refreshes, writer
from harness import PG_BIN, REPO, Server, _as_postgres, _chown, servers, started, wait_until

PASSWORD = "fleet-secret-4711"


def doc_block(marker):
    """The code block after `<!-- marker: ... -->` in docs/operators.md: the
    fleet recipe, run as written."""
    with open(os.path.join(REPO, "docs", "operators.md")) as f:
        text = f.read()
    after = text.split(f"<!-- {marker}:", 1)[1]
    return after.split("```", 2)[1].split("\n", 1)[1]


def registry(made, name="reg-registry", hba=None):
    """A registry made by the operators guide's recipe (run with psql):
    database `registry`, owned by role `registrar` (no superuser), which
    made it a registry; role `fleet` the leasing servers'."""
    r = started(made, name, conf={"snowflake_id.worker_id": 900})
    if hba:
        path = os.path.join(r.data, "pg_hba.conf")
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(hba + "\n" + text)
        r.reload()
    script = os.path.join(r.dir, "registry.sql")
    with open(script, "w") as f:
        # 13's default password_encryption is md5, which scram-sha-256 in
        # pg_hba.conf does not take.
        f.write("SET password_encryption = 'scram-sha-256';\n")
        f.write(doc_block("registry-setup").replace("change-me", PASSWORD))
    _chown(script)
    out = _as_postgres([f"{PG_BIN}/psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", r.dir, "-p", str(r.port),
                        "-U", "postgres", "-d", "postgres", "-f", script]).stdout
    assert "this database is a registry of worker ids" in out and "fleet may lease" in out, out
    assert r.one("SELECT relowner::regrole::text FROM pg_class WHERE oid = 'snowflake_registry.worker_leases'::regclass",
                 dbname="registry") == "registrar"
    return r


def conninfo(r, **extra):
    words = {"host": r.dir, "port": r.port, "dbname": "registry", "user": "fleet", **extra}
    return " ".join(f"{k}={v}" for k, v in words.items())


def fleet_settings(r, policy):
    """The operators guide's lines for every server of a fleet, pointed at
    registry `r` (the guide's host is an example)."""
    settings = {}
    for line in doc_block("registry-fleet").strip().splitlines():
        key, value = (part.strip() for part in line.split("=", 1))
        settings[key] = value
    assert settings.pop("shared_preload_libraries") == "'snowflake_id'"  # the harness preloads it
    assert settings["snowflake_id.worker_id_source"] == "'registry'"
    assert "user=fleet" in settings["snowflake_id.registry"] and "password" not in settings["snowflake_id.registry"]
    settings["snowflake_id.registry"] = f"'{conninfo(r)}'"
    settings["snowflake_id.registry_policy"] = f"'{policy}'"
    return settings


def leasing(made, name, r, policy="keep", start=True, conf=None, **kw):
    """A server of the fleet: leases its worker id from registry `r`."""
    s = Server(name, conf={
        "snowflake_id.worker_id": None,
        **fleet_settings(r, policy),
        "cluster_name": f"'{name}'",
        **(conf or {}),
    }, **kw)
    made.append(s)
    if start:
        s.start()
        s.sql("CREATE EXTENSION snowflake_id")
    return s


def registry_worker(s):
    """The process id of the registry worker of `s` (it has no database
    connection: not in pg_stat_activity), or None."""
    for pid in s.children():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"snowflake_id registry" in f.read():
                    return pid
        except FileNotFoundError:
            continue
    return None


def status(s, column):
    return s.one(f"SELECT {column} FROM snowflake_id.snowflake_status")


def wait_leased(s):
    """Waits until `s` issues under a leased worker id; returns it."""
    wait_until(lambda: status(s, "worker_id") is not None,
               lambda: f"{s.name} never leased: {status(s, 'registry')!r}, problem {status(s, 'problem')!r}")
    return status(s, "worker_id")


def leases(r):
    return r.sql("SELECT worker_id, system_identifier::text, server_name, live, issues_above"
                 " FROM snowflake_registry.leases ORDER BY worker_id", dbname="registry", user="registrar")


def take(s, n=5000):
    return [row[0] for row in s.sql(f"SELECT i FROM snowflake_nextval_batch({n}) i")]


def decoded_workers(s, ids):
    return {row[0] for row in s.sql("SELECT DISTINCT (snowflake_decode(i)).worker_id FROM unnest(%s::bigint[]) i",
                                    (ids,))}


def test_five_servers_starting_at_once_lease_five_worker_ids_and_never_collide():
    with servers() as made:
        r = registry(made)
        fleet = [leasing(made, f"reg-five-{i}", r, start=False) for i in range(5)]
        threads = [threading.Thread(target=s.start) for s in fleet]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s in fleet:
            s.sql("CREATE EXTENSION snowflake_id")
        workers = [wait_leased(s) for s in fleet]
        assert sorted(workers) == [0, 1, 2, 3, 4], workers
        rows = leases(r)
        assert [(w, sysid_text) for w, sysid_text, *_ in rows] == sorted(
            (status(s, "worker_id"), str(sysid(s))) for s in fleet), rows
        assert all(live for *_, live, _ in rows), rows
        assert {name for _, _, name, *_ in rows} == {s.name for s in fleet}
        # Every server issues at once; all their IDs together repeat none.
        made_ids = {}

        def issue(s):
            made_ids[s.name] = take(s, 20000)

        threads = [threading.Thread(target=issue, args=(s,)) for s in fleet]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        every = [i for ids in made_ids.values() for i in ids]
        assert len(every) == 100000 and len(set(every)) == len(every), "two leasing servers issued the same ID"
        for s in fleet:
            assert decoded_workers(s, made_ids[s.name]) == {status(s, "worker_id")}
            assert status(s, "worker_id_source").startswith(f"the registry: worker id {status(s, 'worker_id')} leased at")
            assert "leased worker id" in status(s, "registry") or "renewed" in status(s, "registry")
            assert "leased from the registry (leased now)" in s.log_text()


def test_a_restart_keeps_the_worker_id_with_the_registry_stopped():
    with servers() as made:
        r = registry(made)
        s = leasing(made, "reg-keep", r)
        w = wait_leased(s)
        before = take(s)
        r.stop()
        s.restart()
        # Kept from its file: a registry that cannot be reached stops nothing.
        assert wait_leased(s) == w
        after = take(s)
        assert decoded_workers(s, after) == {w}
        assert min(after) > max(before)
        assert "kept from its lease file; the registry could not confirm it" in s.log_text()
        # A kill -9 keeps it too.
        s.kill9_all()
        s.start()
        assert wait_leased(s) == w
        assert decoded_workers(s, take(s, 10)) == {w}
        # With the registry up, a start keeps it once the registry says it
        # still holds it.
        r.start()
        s.restart()
        assert wait_leased(s) == w
        assert f"worker id {w} kept from this server's lease file; worker id {w} renewed" in status(s, "registry")
        # And the registry still lists one live lease for it.
        assert [(row[0], row[3]) for row in leases(r)] == [(w, True)]
        # A registry that lost the row (restored from an older backup) gets
        # it back at the holder's next renew; the holder issues on.
        r.sql("DELETE FROM snowflake_registry.worker_leases", dbname="registry", user="registrar")
        wait_until(lambda: leases(r), "the lease was not written back")
        assert [(row[0], row[1], row[2], row[3]) for row in leases(r)] == [(w, str(sysid(s)), "reg-keep", True)]
        assert "written back" in status(s, "registry")
        assert decoded_workers(s, take(s, 10)) == {w}


def test_a_first_start_without_the_registry_refuses_ids_and_recovers_when_it_is_back():
    with servers() as made:
        r = registry(made)
        r.stop()
        s = leasing(made, "reg-down", r)
        wait_until(lambda: "cannot connect to the registry" in (status(s, "registry") or ""),
                   lambda: f"no answer about the registry: {status(s, 'registry')!r}")
        code, message, hint = s.error("SELECT snowflake_nextval()")
        assert code == "55000", (code, message)
        assert "no worker id yet" in message and "registry" in message, message
        assert "snowflake_id.registry" in hint and "nothing needs a restart" in hint, hint
        # Everything else works.
        assert s.one("SELECT (snowflake_decode(1 << 22)).sequence") == 0
        assert s.one("SELECT count(*) FROM pg_class") > 0
        assert status(s, "worker_id") is None
        r.start()
        w = wait_leased(s)
        assert decoded_workers(s, take(s, 10)) == {w}


def test_disposable_leases_a_new_worker_id_at_every_start():
    with servers() as made:
        r = registry(made)
        s = leasing(made, "reg-disposable", r, policy="disposable")
        seen = [wait_leased(s)]
        ids = take(s)
        for _ in range(2):
            s.restart()
            seen.append(wait_leased(s))
            more = take(s)
            assert min(more) > max(ids)
            ids += more
        assert seen == [0, 1, 2], seen
        assert len(set(ids)) == len(ids)
        assert "ERROR" not in s.log_text()
        # The spent ones stay leased (to this cluster) until an operator
        # releases them: none is handed out again meanwhile.
        assert [(row[0], row[1], row[3]) for row in leases(r)] == [(w, str(sysid(s)), True) for w in seen]


def test_a_released_worker_id_goes_to_the_next_holder_above_its_last_id_time():
    # One worker bit: worker ids 0 and 1 only, so a third server must reuse.
    layout = {"snowflake_id.layout": "'time=41,worker=1,sequence=21,unit=1ms'"}
    with servers() as made:
        r = registry(made)
        a = leasing(made, "reg-release-a", r, conf=layout, faketime=True)
        a.set_clock(600)  # ten minutes ahead: its IDs carry times B's clock has not reached
        assert wait_leased(a) == 0
        other = leasing(made, "reg-release-o", r, conf=layout)
        assert wait_leased(other) == 1
        from_a = take(a, 20000)
        # A third server finds none free, and says so.
        b = leasing(made, "reg-release-b", r, conf=layout)
        wait_until(lambda: "every worker id from 0 to 1 is leased" in (status(b, "registry") or ""),
                   lambda: f"b's answer: {status(b, 'registry')!r}")
        # Only a superuser may release.
        a.sql("CREATE ROLE plain LOGIN")
        code, message, _ = a.error("SELECT snowflake_release_worker_id()", user="plain")
        assert code == "42501", (code, message)
        said = a.one("SELECT snowflake_release_worker_id()")
        assert "worker id 0 released to the registry" in said, said
        code, message, hint = a.error("SELECT snowflake_nextval()")
        assert code == "55000" and "released its worker id" in message, message
        # b leases 0 now, and issues above every ID a issued under it.
        assert wait_leased(b) == 0
        from_b = take(b, 20000)
        assert min(from_b) > max(from_a), "the next holder issued below the released holder's IDs"
        assert not set(from_a) & set(from_b)
        assert decoded_workers(b, from_b) == {0}
        assert "previous holder's last ID time" in status(b, "worker_id_source")
        row = [row for row in leases(r) if row[0] == 0][0]
        assert row[1] == str(sysid(b)) and row[3] is True and row[4] is not None, row
        # The registry's own role frees a gone server's worker id by statement;
        # a live holder finds out at its next renew and stops.
        r.one("SELECT snowflake_registry.release_gone(1, now())", dbname="registry", user="registrar")
        wait_until(lambda: "was released" in (status(other, "problem") or ""),
                   lambda: f"o's problem: {status(other, 'problem')!r}")
        code, message, _ = other.error("SELECT snowflake_nextval()")
        assert code == "55000" and "released" in message, message
        # Released there is released here for good: a restart with the
        # registry down does not bring the lease back.
        r.stop()
        other.restart()
        code, message, _ = other.error("SELECT snowflake_nextval()")
        assert code == "55000" and "no worker id yet" in message, message
        r.start()
        assert wait_leased(other) == 1
        assert "previous holder's last ID time" in status(other, "worker_id_source")
        # Clients cannot: release_gone is the registry role's.
        code, message, _ = r.error("SELECT snowflake_registry.release_gone(0, now())", dbname="registry",
                                   user="fleet")
        assert code == "42501", (code, message)
        code, message, _ = r.error("DELETE FROM snowflake_registry.worker_leases", dbname="registry", user="fleet")
        assert code == "42501", (code, message)
        assert r.error("SELECT * FROM snowflake_registry.leases", dbname="registry", user="fleet")[0] == "42501"
        # Another client role may lease, but not release what fleet leased,
        # nor write rows past a layout, nor set a floor over an hour ahead.
        r.sql("CREATE ROLE fleet2 LOGIN")
        r.one("SELECT snowflake_registry_init('fleet2')", dbname="registry", user="registrar")
        code, message, _ = r.error(f"SELECT snowflake_registry.release(0, {sysid(b)}, 0)", dbname="registry",
                                   user="fleet2")
        assert code == "55000" and "by role fleet2" in message, (code, message)
        # ... nor renew it (taking its name or its backfill worker id), nor
        # be handed it back by lease().
        code, message, _ = r.error(f"SELECT snowflake_registry.renew(0, {sysid(b)}, 'evil', 'keep', 1, -1)",
                                   dbname="registry", user="fleet2")
        assert code == "42501" and "leased by role fleet" in message, (code, message)
        code, message, _ = r.error(f"SELECT * FROM snowflake_registry.lease({sysid(b)}, 'evil', 'keep', 1, 't', -1)",
                                   dbname="registry", user="fleet2")
        assert code == "53400", (code, message)
        assert [row[2] for row in leases(r) if row[0] == 0] == ["reg-release-b"]
        for statement in ("SELECT snowflake_registry.renew(2147483647, 7, 'x', 'keep', 1, -1)",
                          "SELECT snowflake_registry.renew(5, 7, 'x', 'keep', 2147483647, -1)",
                          "SELECT * FROM snowflake_registry.lease(7, 'x', 'keep', 2147483647, 't', -1)",
                          f"SELECT snowflake_registry.release(0, {sysid(b)}, 99999999999999)"):
            assert r.error(statement, dbname="registry", user="fleet")[0] == "22023", statement
        assert r.error("SELECT snowflake_registry.release_gone(0, now() + interval '2 hours')", dbname="registry",
                       user="registrar")[0] == "22023"


def test_a_server_whose_lease_was_given_away_meanwhile_issues_nothing_under_it():
    """A server's lease file says it holds worker id 0, but while it was
    down the registry's role wrote it off (release_gone) and another server
    leased 0 (as a backup restored from before a release would find it).
    At start the registry is asked before the first ID: the server issues
    nothing under 0, and leases another worker id, here none is free."""
    layout = {"snowflake_id.layout": "'time=41,worker=1,sequence=21,unit=1ms'"}
    with servers() as made:
        r = registry(made)
        a = leasing(made, "reg-gone-a", r, conf=layout)
        assert wait_leased(a) == 0
        other = leasing(made, "reg-gone-o", r, conf=layout)
        assert wait_leased(other) == 1
        take(a)
        a.stop()
        r.one("SELECT snowflake_registry.release_gone(0, now())", dbname="registry", user="registrar")
        b = leasing(made, "reg-gone-b", r, conf=layout)
        assert wait_leased(b) == 0
        a.start()
        wait_until(lambda: "every worker id from 0 to 1 is leased" in (status(a, "registry") or ""),
                   lambda: f"a's answer: {status(a, 'registry')!r}")
        code, message, _ = a.error("SELECT snowflake_nextval()")
        assert code == "55000" and "no worker id yet" in message, message
        assert status(a, "worker_id") is None
        assert "no longer this server's (held there for another server, or not at all)" in a.log_text()
        # Once a worker id is free, it leases that one (0 stays b's).
        r.one("SELECT snowflake_registry.release_gone(1, now())", dbname="registry", user="registrar")
        other.stop()
        assert wait_leased(a) == 1
        assert decoded_workers(a, take(a, 10)) == {1}
        assert {(row[0], row[2]) for row in leases(r) if row[3]} == {(0, "reg-gone-b"), (1, "reg-gone-a")}


def test_a_base_backup_keeps_the_lease_and_the_claims_refuse_the_later_of_the_two():
    """A base backup started beside its original: same system identifier,
    same lease (its file came along). The claims refuse the later of the
    two (the copy): at once, from the original's claim the backup carried,
    and for as long as the original's claim reaches it and stays live."""
    with servers() as made:
        r = registry(made)
        p = writer(made, "reg-copy-p", None, conf=fleet_settings(r, "keep"))
        w = wait_leased(p)
        wait_until(lambda: own_claims_seen(p), "p never claimed")
        ip = p.one("SELECT instance FROM snowflake_id.snowflake_claims")
        p.sql(f"CREATE PUBLICATION own_claim FOR TABLE snowflake_id.snowflake_claims WHERE (instance = {ip})"
              " WITH (publish = 'insert, update, delete')")
        r.stop()
        c = started(made, "reg-copy-c", copy_of=p,
                    conf={"cluster_name": "'reg-copy-c'", "snowflake_id.worker_id": None})
        # The copy holds the same lease (the registry cannot be reached).
        assert wait_leased(c) == w
        refusal = f"worker id {w} is also claimed by the live server \"reg-copy-p\""
        wait_problem(c, refusal)
        code, message, _ = c.error("SELECT snowflake_nextval()")
        assert code == "55000" and "reg-copy-p" in message, message
        # p's claim reaches c (c has its row already, from the backup): c
        # goes on refusing while p lives, past the 10 s a claim stays live
        # unrefreshed; p issues on.
        subscribe(c, "from_p", p, "own_claim", copy_data=False)
        wait_refreshes(p, 7, each=lambda: wait_problem(c, refusal))
        assert c.error("SELECT snowflake_nextval()")[0] == "55000"
        assert p.one("SELECT snowflake_nextval()") > 0
        r.start()
        assert len(leases(r)) == 1


def test_pg_upgrade_into_a_new_cluster_leases_anew():
    with servers() as made:
        r = registry(made)
        old = leasing(made, "reg-up-old", r)
        w_old = wait_leased(old)
        old_sysid = str(sysid(old))
        top = max(take(old))
        old.sql("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval())")
        old.sql("INSERT INTO t SELECT i FROM unnest(%s::bigint[]) i", ([top],))
        old.stop()
        new = leasing(made, "reg-up-new", r, start=False)
        _as_postgres([f"{PG_BIN}/pg_upgrade", "--link", "-b", PG_BIN, "-B", PG_BIN, "-d", old.data, "-D", new.data,
                      "-p", str(old.port), "-P", str(new.port), "-U", "postgres", "-s", new.dir], cwd=new.dir)
        new.start()
        w_new = wait_leased(new)
        assert w_new != w_old
        ids = [row[0] for row in new.sql("INSERT INTO t DEFAULT VALUES RETURNING id")]
        assert ids[0] > top and decoded_workers(new, ids) == {w_new}
        # The old cluster's lease stays its own (nobody released it).
        rows = leases(r)
        assert {(row[0], row[1]) for row in rows} == {(w_old, old_sysid), (w_new, str(sysid(new)))}, rows


def test_a_registry_is_its_own_roles_or_nothing():
    """snowflake_registry_init() run by another role, over a registry that
    exists: refused, not taken over; the leasing role writes nothing."""
    with servers() as made:
        r = registry(made)
        r.sql("CREATE ROLE squatter LOGIN")
        r.sql("GRANT CREATE ON DATABASE registry TO squatter", dbname="registry")
        r.sql("GRANT EXECUTE ON FUNCTION snowflake_registry_init(regrole) TO squatter", dbname="registry")
        code, message, hint = r.error("SELECT snowflake_registry_init('squatter')", dbname="registry",
                                      user="squatter")
        assert code == "42501" and "schema snowflake_registry belongs to another role" in message, (code, message)
        assert "snowflake_registry_init()" in hint
        for statement in ("INSERT INTO snowflake_registry.worker_leases (worker_id, system_identifier, server_name,"
                          " policy, holder_role, leased_at, renewed_at) VALUES (7, 1, 'x', 'keep', 'fleet', now(), now())",
                          "UPDATE snowflake_registry.worker_leases SET released_at = now()",
                          "SELECT snowflake_registry.release_gone(0, now())"):
            for user in ("fleet", "squatter"):
                assert r.error(statement, dbname="registry", user=user)[0] == "42501", (statement, user)
        # Without EXECUTE granted, nobody may make a database a registry.
        r.sql("CREATE ROLE nobody LOGIN")
        assert r.error("SELECT snowflake_registry_init()", dbname="registry", user="nobody")[0] == "42501"


def test_a_row_planted_for_a_server_past_its_layout_is_not_taken():
    """A row in the registry naming a server's cluster (written by hand,
    or left by a layout with more worker bits) with a worker id past its
    layout: the registry does not hand it out, and a row written back
    would be refused by the server all the same (next test)."""
    with servers() as made:
        r = registry(made)
        s = leasing(made, "reg-planted", r, start=False)
        control = _as_postgres([f"{PG_BIN}/pg_controldata", s.data]).stdout
        planted = [line.split(":")[1].strip() for line in control.splitlines()
                   if line.startswith("Database system identifier")][0]
        r.sql("INSERT INTO snowflake_registry.worker_leases (worker_id, system_identifier, server_name, policy,"
              f" holder_role, leased_at, renewed_at) VALUES (5000, {planted}, 'planted', 'keep', 'fleet', now(), now())",
              dbname="registry", user="registrar")
        s.start()
        s.sql("CREATE EXTENSION snowflake_id")
        assert str(sysid(s)) == planted
        assert wait_leased(s) == 0
        assert decoded_workers(s, take(s, 10)) == {0}


def test_a_layout_with_more_worker_bits_than_the_registry_leases_still_leases():
    """A layout with 26 worker bits (largest 67,108,863) asks the registry
    for an id up to 16,777,215, the largest it leases, and gets one."""
    with servers() as made:
        r = registry(made)
        s = leasing(made, "reg-wide", r, conf={"snowflake_id.layout": "'time=31,worker=26,sequence=6,unit=1s'"})
        assert "worker=26" in status(s, "layout"), status(s, "layout")
        assert wait_leased(s) == 0
        assert decoded_workers(s, take(s, 10)) == {0}
        assert [row[0] for row in leases(r)] == [0]


def test_a_hostile_registry_answer_is_refused():
    """A registry whose lease() answers rows no registry writes: NULLs, a
    worker id past the layout, another cluster's system identifier."""
    with servers() as made:
        fake = started(made, "reg-fake", conf={"snowflake_id.worker_id": 901})
        fake.sql("CREATE ROLE fleet LOGIN")
        fake.sql("CREATE DATABASE registry")
        fake.sql("CREATE SCHEMA snowflake_registry AUTHORIZATION fleet", dbname="registry")

        def answer(w, sys, floor="NULL"):
            fake.sql("CREATE OR REPLACE FUNCTION snowflake_registry.lease(numeric, text, text, integer, text, integer)"
                     " RETURNS TABLE (worker_id integer, system_identifier numeric, leased_at_ms bigint,"
                     f" floor_ms bigint) LANGUAGE sql AS $$ SELECT {w}::integer, {sys}::numeric, 0::bigint,"
                     f" {floor}::bigint $$", dbname="registry")

        answer("NULL", "$1")
        s = leasing(made, "reg-hostile", fake)

        def refused(words):
            wait_until(lambda: words in (status(s, "registry") or ""),
                       lambda: f"answer: {status(s, 'registry')!r}, expected {words!r}")
            assert status(s, "worker_id") is None
            code, message, _ = s.error("SELECT snowflake_nextval()")
            assert code == "55000", (code, message)

        refused("worker_id is NULL")
        answer("2000000", "$1")
        refused("worker id 2000000 is not one of this layout's (0 to 1023)")
        answer("3", "$1 + 1")
        refused("not to this cluster's")
        answer("3", "$1", floor="-5")
        refused("is not a time")
        answer("3", "$1", floor="(extract(epoch FROM now() + interval '2 hours') * 1000)::bigint")
        refused("more than an hour ahead of this server's clock")
        # What the refusal said is a superuser's: another role's error says where to look.
        s.sql("CREATE ROLE plain LOGIN")
        plain = s.connect(user="plain")
        try:
            with plain.cursor() as cur:
                cur.execute("SELECT snowflake_nextval()")
            raise AssertionError("a plain role got an ID")
        except psycopg2.Error as e:
            assert e.diag.sqlstate == "55000"
            assert "shown to superusers" in e.diag.message_detail and fake.dir not in e.diag.message_detail
        finally:
            plain.close()
        # A whole answer is taken.
        answer("3", "$1")
        assert wait_leased(s) == 3


def test_the_registry_password_is_not_readable_on_a_leasing_server():
    with servers() as made:
        r = registry(made, hba="local registry fleet scram-sha-256")
        s = leasing(made, "reg-secret", r, start=False)
        passfile = os.path.join(s.dir, "registry.pgpass")
        with open(passfile, "w") as f:
            f.write(f"{r.dir}:{r.port}:registry:fleet:{PASSWORD}\n")
        _chown(passfile)
        os.chmod(passfile, 0o600)
        s.set_conf(snowflake_id__registry=f"'{conninfo(r, passfile=passfile)}'")
        s.start()
        s.sql("CREATE EXTENSION snowflake_id")
        assert wait_leased(s) == 0
        s.sql("CREATE ROLE plain LOGIN")
        s.sql("CREATE ROLE watcher LOGIN IN ROLE pg_monitor")
        code, message, _ = s.error("SHOW snowflake_id.registry", user="plain")
        assert code == "42501", (code, message)
        assert s.sql("SELECT setting FROM pg_settings WHERE name = 'snowflake_id.registry'", user="plain") == []
        for user in ("plain", "watcher"):
            code, _, _ = s.error(f"SELECT pg_read_file('{passfile}')", user=user)
            assert code == "42501"
            code, _, _ = s.error("ALTER SYSTEM SET snowflake_id.registry = 'host=elsewhere'", user=user)
            assert code == "42501"
        # A monitoring role sees the status (and, with pg_read_all_settings,
        # the connection string): the password is in neither.
        row = s.sql("SELECT * FROM snowflake_id.snowflake_status", user="watcher")
        assert "fleet-secret" not in repr(row)
        assert "fleet-secret" not in s.one("SHOW snowflake_id.registry", user="watcher")
        # A password is refused before it is written anywhere (sslpassword too),
        # and not repeated.
        for word in ("password", "sslpassword"):
            code, message, hint = s.error(f"ALTER SYSTEM SET snowflake_id.registry = '{conninfo(r, **{word: PASSWORD})}'")
            assert code == "22023" and "holds a password" in message, (code, message)
            assert PASSWORD not in message + hint and "pgpass" in hint, hint
        with open(os.path.join(s.data, "postgresql.auto.conf")) as f:
            assert PASSWORD not in f.read()
        # Written into the file by hand, the reload refuses it (the old value stays).
        s.set_conf(snowflake_id__registry=f"'{conninfo(r, password=PASSWORD)}'")
        s.reload()
        wait_until(lambda: "holds a password" in s.log_text(), "the reload did not refuse the password")
        assert "passfile=" in s.one("SHOW snowflake_id.registry")
        assert decoded_workers(s, take(s, 10)) == {0}


def test_a_registry_that_holds_its_lock_stalls_nothing_here():
    """A session on the registry keeps the lease table locked: the release
    waits, interruptibly (a statement timeout ends it), and the leasing
    server still shuts down fast."""
    with servers() as made:
        r = registry(made)
        s = leasing(made, "reg-stalled", r)
        wait_leased(s)
        holder = r.connect(dbname="registry", user="registrar", autocommit=False)
        try:
            with holder.cursor() as cur:
                cur.execute("LOCK TABLE snowflake_registry.worker_leases")
            with s.connect() as conn, conn.cursor() as cur:
                cur.execute("SET statement_timeout = '1s'")
                try:
                    cur.execute("SELECT snowflake_release_worker_id()")
                    raise AssertionError("the release went through a locked registry")
                except psycopg2.Error as e:
                    assert e.pgcode == "57014", (e.pgcode, str(e))
            # The registry worker's renew waits on the lock now; a fast
            # shutdown ends it all the same (before, it waited for the lock).
            r.wait_for("SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'snowflake_id registry'"
                       " AND wait_event_type = 'Lock'")
            s.stop()
            assert not os.path.exists(os.path.join(s.data, "postmaster.pid")), "a fast shutdown did not end"
        finally:
            holder.close()


def test_a_disposable_start_that_fails_after_leasing_retries_under_the_same_lease():
    """The lease file cannot be written (a directory where its temporary
    file goes): the start retries, and the registry gives the retries the
    worker id it gave the first try, not a new one each time."""
    with servers() as made:
        r = registry(made)
        s = leasing(made, "reg-retry", r, policy="disposable", start=False)
        blocker = os.path.join(s.data, "snowflake_id.worker_lease.tmp")
        os.mkdir(blocker)
        _chown(blocker)
        s.start()
        s.sql("CREATE EXTENSION snowflake_id")
        answers = set()

        def retried():
            said = status(s, "registry") or ""
            if "worker lease file" in said:
                answers.add(said)
            return len(answers) >= 2

        wait_until(retried, lambda: f"no two failed attempts: {answers}, {status(s, 'registry')!r}")
        assert [row[0] for row in leases(r)] == [0], leases(r)
        os.rmdir(blocker)
        assert wait_leased(s) == 0
        assert [row[0] for row in leases(r)] == [0]


def test_a_backfill_worker_id_is_never_leased_live():
    with servers() as made:
        r = registry(made)
        a = leasing(made, "reg-bf-a", r, conf={"snowflake_id.backfill_worker_id": 1})
        assert wait_leased(a) == 0
        b = leasing(made, "reg-bf-b", r)
        assert wait_leased(b) == 2, "the registry leased a live server's backfill worker id"
        # A server whose backfill worker id is another's live one is told,
        # without being told whose.
        c = leasing(made, "reg-bf-c", r, conf={"snowflake_id.backfill_worker_id": 0})
        wait_until(lambda: "was leased live to another server" in (status(c, "registry") or ""),
                   lambda: f"c's answer: {status(c, 'registry')!r}")
        assert status(c, "worker_id") is None and "reg-bf-a" not in status(c, "registry")
        # A reload onto another's live worker id: the renew says so, and
        # backfills stop (live IDs go on) until it is set right again.
        b.sql("ALTER SYSTEM SET snowflake_id.backfill_worker_id = 0")
        b.reload_and_wait()
        wait_until(lambda: "was leased live to another server" in (status(b, "registry") or ""),
                   lambda: f"b's answer: {status(b, 'registry')!r}")
        code, message, hint = b.error("SELECT snowflake_nextval_at(now() - interval '1 day')")
        assert code == "55000" and "leased live to another server" in message, (code, message)
        assert "count down" in hint
        assert b.one("SELECT snowflake_nextval()") > 0
        assert [row[5] for row in r.sql("SELECT * FROM snowflake_registry.leases WHERE worker_id = 2",
                                        dbname="registry", user="registrar")] == [None]
        b.sql("ALTER SYSTEM SET snowflake_id.backfill_worker_id = 1000")
        b.reload_and_wait()
        wait_until(lambda: "renewed" in (status(b, "registry") or "")
                   and "another server" not in status(b, "registry"),
                   lambda: f"b's answer: {status(b, 'registry')!r}")
        assert b.one("SELECT snowflake_nextval_at(now() - interval '1 day')") > 0


def test_registry_settings_that_contradict_are_errors_with_a_hint():
    with servers() as made:
        s = started(made, "reg-settings", conf={
            "snowflake_id.worker_id": 4,
            "snowflake_id.worker_id_source": "'registry'",
            "snowflake_id.registry_policy": "'sometimes'",
        })
        s.sql("CREATE EXTENSION snowflake_id")
        code, message, hint = s.error("SELECT snowflake_nextval()")
        assert code == "22023" and "snowflake_id.worker_id = 4 is set" in message, (code, message)
        assert "Keep one" in hint
        s.set_conf(snowflake_id__worker_id=None)
        s.restart()
        code, message, hint = s.error("SELECT snowflake_nextval()")
        assert code == "22023" and "invalid snowflake_id.registry_policy: 'sometimes'" in message, (code, message)
        assert "'keep'" in hint and "'disposable'" in hint
        # No registry worker runs where the settings are refused.
        assert registry_worker(s) is None
        # Nor a release.
        assert s.error("SELECT snowflake_release_worker_id()")[0] == "22023"


def test_the_postmaster_maps_no_libpq_of_this_librarys_choosing():
    """The library is preloaded: a libpq linked into it would be the one
    every later process resolves libpq.so.5 to, the WAL receiver's included
    (a standby of a newer major then failed on a connection option its
    older libpq did not know). libpq is loaded, from the server's own
    libpqwalreceiver, only in the processes that talk to a registry."""
    with servers() as made:
        r = registry(made)
        s = leasing(made, "reg-libpq", r)
        wait_leased(s)

        def maps(pid):
            with open(f"/proc/{pid}/maps") as f:
                return {line.split()[-1] for line in f if "libpq" in line}

        assert maps(s.postmaster_pid()) == set()
        assert maps(r.postmaster_pid()) == set()
        worker = registry_worker(s)
        assert worker, "no registry worker"
        walreceiver_lib = maps(worker)
        assert any("libpq.so" in path for path in walreceiver_lib), walreceiver_lib
        libdir = _as_postgres([f"{PG_BIN}/pg_config", "--pkglibdir"]).stdout.strip()
        assert any(path.startswith(libdir) and "libpqwalreceiver" in path for path in walreceiver_lib), walreceiver_lib


class FakeRegistry(threading.Thread):
    """A server speaking just enough of the PostgreSQL protocol to accept a
    connection and then answer every statement by starting a COPY, which no
    registry does (messages per the protocol's documentation, "Message
    Formats", and libpq's fe-protocol3.c, which turns 'G' into
    PGRES_COPY_IN)."""

    def __init__(self, directory, port):
        super().__init__(daemon=True)
        self.path = os.path.join(directory, f".s.PGSQL.{port}")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o777)
        self.sock.listen(8)

    def run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    @staticmethod
    def serve(conn):
        msg = lambda kind, body=b"": kind + struct.pack("!I", len(body) + 4) + body  # noqa: E731
        try:
            conn.recv(8192)  # the startup packet
            conn.sendall(msg(b"R", struct.pack("!I", 0)) + msg(b"Z", b"I"))
            while conn.recv(8192):
                conn.sendall(msg(b"1") + msg(b"2") + msg(b"G", b"\x00\x00\x00"))
        except OSError:
            pass
        finally:
            conn.close()


def test_a_registry_that_answers_with_a_copy_stalls_nothing():
    with servers() as made:
        r = registry(made)
        s = leasing(made, "reg-copying", r)
        wait_leased(s)
        fake = FakeRegistry(s.dir, 5999)
        fake.start()
        try:
            s.sql(f"ALTER SYSTEM SET snowflake_id.registry = 'host={s.dir} port=5999 dbname=registry user=fleet'")
            s.reload_and_wait()
            wait_until(lambda: "result status" in (status(s, "registry") or ""),
                       lambda: f"answer: {status(s, 'registry')!r}")
            code, message, _ = s.error("SELECT snowflake_release_worker_id()")
            assert code == "55000" and "result status" in message, (code, message)
            s.stop()
            assert not os.path.exists(os.path.join(s.data, "postmaster.pid")), "a fast shutdown did not end"
        finally:
            fake.sock.close()
