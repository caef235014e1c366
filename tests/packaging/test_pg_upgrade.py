"""pg_upgrade --link between two majors with claims on: the upgraded server
must not take its own old cluster's claim for another live server's.

The old cluster's claims table travels with its files. Before this was
fixed, the upgraded server refused every ID for about 10 s, naming its old
cluster as the live server, and `snowflake_resume_above` (the README's next
step after an upgrade) failed meanwhile.

Runs where scripts/test.sh sets SNOWFLAKE_UPGRADE_FROM_BIN: the binaries of
the oldest major it builds (with the extension installed), upgraded to
PG_BIN's newer major."""

import glob
import os
import subprocess
import time

import pytest

from harness import PG_BIN, Server, _as_postgres, servers

OLD_BIN = os.environ.get("SNOWFLAKE_UPGRADE_FROM_BIN")


def major(bin_dir):
    out = subprocess.run([f"{bin_dir}/pg_config", "--version"], capture_output=True, text=True, check=True).stdout
    return int(out.split()[1].split(".")[0])


@pytest.mark.skipif(not OLD_BIN, reason="scripts/test.sh runs it in the update layer of a newer major")
def test_pg_upgrade_link_with_claims_keeps_issuing_and_resume_above_works_at_once():
    claims = {"snowflake_id.claims_database": "'claims'"}
    new_major = major(PG_BIN)
    assert major(OLD_BIN) < new_major
    with servers() as made:
        old = Server("pgup-old", conf=claims, bin=OLD_BIN)
        made.append(old)
        old.start()
        old.sql("CREATE DATABASE claims")
        old.sql("CREATE EXTENSION snowflake_id", dbname="claims")
        old.sql("CREATE EXTENSION snowflake_id")
        old.sql("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), n int)")
        old.sql("INSERT INTO t (n) SELECT g FROM generate_series(1, 1000) g")
        old_sysid = old.one("SELECT system_identifier FROM pg_control_system()")
        deadline = time.time() + 30
        while not old.one(f"SELECT count(*) FROM snowflake_id.snowflake_claims WHERE system_identifier = {old_sysid}"
                          " AND last_seen > now() - interval '3 s'", dbname="claims"):
            assert time.time() < deadline, "the old cluster's claims worker never claimed"
            time.sleep(0.2)
        top = old.one("SELECT max(id) FROM t")
        old.stop()

        # 18 enables data checksums at initdb; the old cluster has none.
        new = Server("pgup-new", conf=claims, initdb_args=["--no-data-checksums"] if new_major >= 18 else [])
        made.append(new)
        r = _as_postgres([f"{PG_BIN}/pg_upgrade", "--link", "-b", OLD_BIN, "-B", PG_BIN, "-d", old.data, "-D", new.data,
                          "-p", str(old.port), "-P", str(new.port), "-U", "postgres", "-s", new.dir],
                         check=False, cwd=new.dir)
        if r.returncode != 0:
            logs = "".join(f"--- {path} ---\n" + open(path, errors="replace").read()[-6000:]
                           for path in glob.glob(f"{new.data}/pg_upgrade_output.d/*/log/*.log"))
            raise AssertionError(f"pg_upgrade failed:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}\n{logs}")

        new.start()
        # The old cluster's claim came along, marked as ended at its
        # shutdown: neither the binary-upgrade starts pg_upgrade made nor
        # anything else refreshed it.
        assert new.one(f"SELECT last_seen = 'epoch' FROM snowflake_id.snowflake_claims"
                       f" WHERE system_identifier = {old_sysid}", dbname="claims") is True
        new_sysid = new.one("SELECT system_identifier FROM pg_control_system()")
        deadline = time.time() + 30
        while not new.one(f"SELECT count(*) FROM snowflake_id.snowflake_claims WHERE system_identifier = {new_sysid}",
                          dbname="claims"):
            assert time.time() < deadline, "the upgraded cluster's claims worker never claimed"
            time.sleep(0.2)
        # Its claims worker has judged the table: the README's next step
        # works at its first call.
        assert "every new ID is above" in new.one("SELECT snowflake_resume_above(max(id)) FROM t")
        # And over three more refreshes, no refusal appears.
        until = time.time() + 6.5
        while time.time() < until:
            assert new.one("SELECT snowflake_nextval()") > top
            assert new.one("SELECT problem FROM snowflake_id.snowflake_status") is None
            time.sleep(0.25)
        assert new.one("SELECT count(*) FROM t") == 1000
        new.sql("INSERT INTO t (n) SELECT g FROM generate_series(1, 100) g")
        assert new.one("SELECT count(*) FROM t WHERE id > %s", (top,)) == 100
        assert "live server" not in new.log_text()
