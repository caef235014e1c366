"""No test's outcome depends on how fast the machine is. Only the harness
(tests/harness.py) reads the real clock or sleeps: a test waits for a
condition (harness.wait_until, Server.wait_for, Deadline) bounded by the
one timeout of the whole run (SNOWFLAKE_TEST_TIMEOUT), lets load run for
a while where the amount of it decides nothing (let_run, Window), and sets
the clock it needs with libfaketime (Server.set_clock). A bare
`time.time() + N` deadline or a `time.sleep(N)` written in a test file is
refused here, so that the class of test that passes where it was written
and fails on a busy machine cannot come back."""

import ast
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(REPO, "tests")
# The one module allowed to read the clock and sleep.
HARNESS = os.path.join(TESTS, "harness.py")
CLOCK_MODULES = {"time"}


def clock_uses(source, name="<test>"):
    """(line, what) for every use of the real clock or of sleep in `source`:
    importing the time module or a name from it (`import time`, `from time
    import sleep`), any `.sleep`, `datetime.now()` and its kin, and a
    thread's join or an event's wait bounded by a number of its own."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in CLOCK_MODULES:
                    found.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] in CLOCK_MODULES:
                found.append((node.lineno, f"from {node.module} import ..."))
        elif isinstance(node, ast.Attribute) and node.attr in ("sleep", "now", "utcnow", "today"):
            found.append((node.lineno, f"{ast.unparse(node)}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "join", "wait") and (any(k.arg == "timeout" for k in node.keywords) or (
                    node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, (int, float)))):
            # A thread's join or an event's wait with a bound of its own.
            found.append((node.lineno, f"{ast.unparse(node)}"))
    return found


def checked_files():
    out = []
    for root, dirs, files in os.walk(TESTS):
        # The applications' own code (Django's test suite, node scripts) is
        # theirs; their waits are bounded by the test that runs them.
        dirs[:] = [d for d in dirs if d not in ("apps", "__pycache__", "node_modules")]
        out += [os.path.join(root, f) for f in files if f.endswith(".py")]
    return sorted(p for p in out if p != HARNESS)


@pytest.mark.parametrize("path", checked_files(), ids=lambda p: os.path.relpath(p, TESTS))
def test_only_the_harness_reads_the_clock_or_sleeps(path):
    with open(path) as f:
        uses = clock_uses(f.read(), path)
    assert not uses, (
        f"{os.path.relpath(path, REPO)} reads the real clock or sleeps: "
        + "; ".join(f"line {line}: {what}" for line, what in uses)
        + ". Wait for a condition with harness.wait_until or Server.wait_for, bound a working loop with"
        " harness.Deadline, let load run with harness.let_run or harness.Window, and set a server's clock with"
        " Server.set_clock: see tests/harness.py."
    )


@pytest.mark.parametrize("bad", [
    "import time\ndeadline = time.time() + 5\n",
    "import time as t\nt.sleep(2)\n",
    "from time import sleep\nsleep(1)\n",
    "from time import monotonic as now\nuntil = now() + 3\n",
    "import asyncio\nasyncio.sleep(1)\n",
    "import datetime\nuntil = datetime.datetime.now() + datetime.timedelta(seconds=5)\n",
    "t.join(10)\n",
    "t.join(timeout=10)\n",
    "done.wait(5)\n",
])
def test_the_rule_refuses_a_bare_deadline_or_sleep(bad):
    assert clock_uses(bad), f"the rule let through:\n{bad}"


def test_the_rule_lets_the_harness_helpers_through():
    good = ("from harness import wait_until, Deadline, let_run\n"
            "wait_until(lambda: True, 'x')\nlet_run(1)\nd = Deadline('y')\nd.nap()\n")
    assert clock_uses(good) == []


def test_the_harness_bounds_every_wait_by_one_setting():
    with open(HARNESS) as f:
        text = f.read()
    assert 'os.environ.get("SNOWFLAKE_TEST_TIMEOUT"' in text
