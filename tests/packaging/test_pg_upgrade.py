"""pg_upgrade --link between two majors with claims on, into a server whose
clock is 60 s behind the old one's, with applications writing at once:

- the upgraded server must not take its own old cluster's claim for another
  live server's (the old cluster's claims table travels with its files;
  before this was fixed, the upgraded server refused every ID for about
  10 s, naming its old cluster as the live server);
- nobody runs a statement: the extension finds that the data came from
  another cluster (its record of floors names the old one) and floors every
  column whose default calls a generating function (a bigint key, an event
  log without an index, a uuid key, a partitioned table) before the first
  ID. Every new ID is above every old one, and no insert fails.

Runs where scripts/test.sh sets SNOWFLAKE_UPGRADE_FROM_BIN: the binaries of
an older major it built (with the extension installed: the oldest, or for
the newest major the one before it), upgraded to PG_BIN's newer major."""

import glob
import os

import pytest

from copies import CLOCK_BEHIND_S, SCHEMA, check_copy, fill
from harness import PG_BIN, Server, _as_postgres, pg_major, servers, started, wait_until

OLD_BIN = os.environ.get("SNOWFLAKE_UPGRADE_FROM_BIN")


@pytest.mark.skipif(not OLD_BIN, reason="scripts/test.sh runs it in the update layer of a newer major")
def test_pg_upgrade_link_with_claims_is_floored_by_the_extension_and_keeps_issuing():
    claims = {"snowflake_id.claims_database": "'claims'"}
    new_major, old_major = pg_major(PG_BIN), pg_major(OLD_BIN)
    assert old_major < new_major
    with servers() as made:
        old = started(made, "pgup-old", conf=claims, bin=OLD_BIN)
        old.sql("CREATE DATABASE claims")
        old.sql("CREATE EXTENSION snowflake_id", dbname="claims")
        old.sql(SCHEMA)
        data = fill(old)
        old_sysid = old.one("SELECT system_identifier FROM pg_control_system()")
        # A live claim, refreshed by this run of the old cluster.
        wait_until(lambda: old.one(f"SELECT count(*) FROM snowflake_id.snowflake_claims"
                                   f" WHERE system_identifier = {old_sysid}"
                                   " AND last_seen >= pg_postmaster_start_time()", dbname="claims"),
                   "the old cluster's claims worker never claimed")
        top = data["top"]
        # The extension's notes reach the log on every major, the oldest
        # included (13 dropped them all: pgrx compared LOG with
        # log_min_messages by number there). A row of another server in the
        # record makes the next ID floor, which says so in the log.
        old.sql("INSERT INTO snowflake_id.snowflake_floors (system_identifier) VALUES (4242)")
        assert old.one("SELECT snowflake_nextval()") > top
        assert 'snowflake_id: database "postgres" was floored' in old.log_text(), old_major
        old.stop()

        # 18 enables data checksums at initdb; a cluster made before has none.
        new = Server("pgup-new", conf=claims, faketime=True,
                     initdb_args=["--no-data-checksums"] if old_major < 18 <= new_major else [])
        made.append(new)
        new.set_clock(-CLOCK_BEHIND_S)
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
        own = f"SELECT max(last_seen) FROM snowflake_id.snowflake_claims WHERE system_identifier = {new_sysid}"
        wait_until(lambda: new.one(own, dbname="claims"), "the upgraded cluster's claims worker never claimed")
        check_copy(new, data, what=f"pg_upgrade --link {old_major} -> {new_major}")
        # And over three more refreshes of its claim (each judges the claims
        # it reads, the old cluster's among them), no refusal appears.
        seen = [new.one(own, dbname="claims")]

        def three_more_refreshes():
            assert new.one("SELECT snowflake_nextval()") > top
            assert new.one("SELECT problem FROM snowflake_id.snowflake_status") is None
            now = new.one(own, dbname="claims")
            if now != seen[-1]:
                seen.append(now)
            return len(seen) > 3

        wait_until(three_more_refreshes, lambda: f"the claim was refreshed {len(seen) - 1} of 3 times", interval=0.25)
        assert "live server" not in new.log_text()
