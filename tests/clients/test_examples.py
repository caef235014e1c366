"""The client examples in examples/ against a real server, in the default
layout (IDs above 2^53: a JavaScript Number loses them) and in js53 (every
ID fits). Each example checks itself and exits non-zero if an exact way of
reading IDs is not. They run as an application's role: no superuser, the
owner of its database, which installs the extension there itself (it is
trusted, as pgcrypto is)."""

import os
import subprocess

import pytest

from harness import PROGRAM_TIMEOUT, application_role, server

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


def run(s, *command):
    env = {**os.environ, **s.app_env}
    out = subprocess.run(command, cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=PROGRAM_TIMEOUT)
    print(out.stdout)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.parametrize("layout", ["snowflake_id", "js53"])
def test_the_examples_read_ids_exactly(layout):
    with server(f"examples-{layout}", conf={"snowflake_id.worker_id": 3, "snowflake_id.layout": f"'{layout}'"}) as s:
        s.app_env = application_role(s)
        node = run(s, "node", "node/ids.js")
        python = run(s, "/usr/bin/python3", "python/ids.py")
        assert f"server layout: {layout}" in node and f"server layout: {layout}" in python
        if layout == "js53":
            assert "as Number: 0 of 100 IDs changed" in node
            assert "as JavaScript Numbers: 0 of 100 IDs would change" in python
        else:
            assert "as Number: 0 of" not in node
