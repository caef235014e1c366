"""SQL regression files with expected output: what a user sees, byte for byte.

Set SNOWFLAKE_REGRESS_ACCEPT=1 to copy the new output over the expected files
after a deliberate change (then review the diff).
"""

import os
import shutil
import subprocess

from harness import WORK, Server

HERE = os.path.dirname(os.path.abspath(__file__))
REGRESS_DIR = os.path.join(HERE, "pg_regress")
PG_REGRESS = os.environ.get("PG_REGRESS", "/usr/lib/postgresql/15/lib/pgxs/src/test/regress/pg_regress")


def test_sql_regression_files():
    srv = Server("regress", conf={"snowflake_id.worker_id": 5})
    srv.start()
    out = os.path.join(WORK, "regress-output")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    try:
        result = subprocess.run(
            [
                PG_REGRESS,
                f"--inputdir={REGRESS_DIR}",
                f"--outputdir={out}",
                f"--bindir={os.environ.get('PG_BIN', '/usr/lib/postgresql/15/bin')}",
                f"--host={srv.dir}",
                f"--port={srv.port}",
                "--user=postgres",
                "--dbname=snowflake_regress",
                f"--schedule={os.path.join(REGRESS_DIR, 'regress_schedule')}",
            ],
            capture_output=True,
            text=True,
        )
        if os.environ.get("SNOWFLAKE_REGRESS_ACCEPT") == "1":
            os.makedirs(os.path.join(REGRESS_DIR, "expected"), exist_ok=True)
            for name in [n for n in os.listdir(os.path.join(out, "results")) if n.endswith(".out")]:
                shutil.copy(os.path.join(out, "results", name), os.path.join(REGRESS_DIR, "expected", name))
        diffs = os.path.join(out, "regression.diffs")
        detail = open(diffs).read() if os.path.exists(diffs) else ""
        assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n{detail}"
    finally:
        srv.destroy()
