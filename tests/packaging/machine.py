"""The machine's own PostgreSQL, left as the test command found it.

scripts/test.sh runs `machine.py start` before anything else: a server of
the machine's PostgreSQL (Debian's, the system major), with the extension
loaded if the machine has it installed (as a user's server would, for
example the quick start's), one ID taken, and every snowflake_id file of
every PostgreSQL at Debian's paths noted (content and inode). `machine.py
check` at the end asks that the same postmaster still runs, that no child
of it died (a library replaced in place under a running server kills it
with SIGSEGV or SIGBUS), that it still hands out IDs above the first, and
that the files are what they were: the run installs into a PostgreSQL of
its own and the packages into a private copy of /usr, /etc and /var.
`machine.py stop` ends the server.

    machine.py start|check|stop
"""

import glob
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402

SYSTEM_BIN = "/usr/lib/postgresql/15/bin"
STATE = os.path.join(harness.WORK, "machine.json")
PATTERNS = ["/usr/lib/postgresql/*/lib/snowflake_id*", "/usr/lib/postgresql/*/lib/bitcode/snowflake_id*",
            "/usr/share/postgresql/*/extension/snowflake_id*"]


def extension_files():
    """path -> [sha256, inode, ctime] of every snowflake_id file at Debian's
    paths. The change time too: a file rewritten in place with the same
    bytes (cargo pgrx install copies over the file) kills a server that has
    it mapped as surely as another build would."""
    out = {}
    for pattern in PATTERNS:
        for path in glob.glob(pattern):
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    st = os.stat(path)
                    out[path] = [hashlib.sha256(f.read()).hexdigest(), st.st_ino, st.st_ctime_ns]
    return out


def other_postmasters():
    """pid -> start time of every postmaster of the machine's that is not
    the test command's (not under SNOWFLAKE_TEST_DIR): each must still run
    at the end, the same process."""

    def stat(pid):
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()  # [1]: parent, [19]: start time

    def program(pid):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0]

    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = stat(pid)
            if not program(pid).endswith((b"/postgres", b"/postmaster")):
                continue
            # A postmaster's parent is no postgres process; its children's is.
            if program(fields[1]).endswith((b"/postgres", b"/postmaster")):
                continue
            if os.readlink(f"/proc/{pid}/cwd").startswith(harness.WORK.rstrip("/") + "/"):
                continue
        except OSError:
            continue
        out[pid] = fields[19]
    return out


def server():
    """The server's object, without touching its directory."""
    s = harness.Server.__new__(harness.Server)
    with open(STATE) as f:
        state = json.load(f)
    s.name, s.bin, s.dir, s.port = "machine", SYSTEM_BIN, state["dir"], state["port"]
    s.data, s.log, s.faketime, s.extra_env, s.host_name = os.path.join(s.dir, "data"), os.path.join(
        s.dir, "server.log"), False, {}, None
    return s, state


def start():
    files = extension_files()
    loaded = os.path.exists(f"{SYSTEM_BIN}/../lib/snowflake_id.so") and os.path.exists(
        "/usr/share/postgresql/15/extension/snowflake_id.control")
    s = harness.Server("machine", bin=SYSTEM_BIN, preload=loaded)
    s.start()
    first = None
    if loaded:
        s.sql("CREATE EXTENSION snowflake_id")
        first = s.one("SELECT snowflake_nextval()")
    with open(STATE, "w") as f:
        json.dump({"dir": s.dir, "port": s.port, "postmaster": s.postmaster_pid(), "files": files,
                   "loaded": loaded, "first": first, "others": other_postmasters()}, f)
    print(f"the machine's PostgreSQL 15: a server at {s.dir}, "
          + (f"the extension loaded (first ID {first})" if loaded else "no snowflake_id installed")
          + f"; {len(files)} snowflake_id file(s) noted")


def check():
    s, state = server()
    problems = []
    if s.postmaster_pid() != state["postmaster"]:
        problems.append(f"the postmaster changed: {state['postmaster']} -> {s.postmaster_pid()}")
    log = s.log_text()
    for line in log.splitlines():
        if "terminated by signal" in line or "was terminated by" in line or "server process" in line and "exited" in line:
            problems.append(f"the server's log: {line}")
    try:
        if state["loaded"]:
            now = s.one("SELECT snowflake_nextval()")
            if not now > state["first"]:
                problems.append(f"an ID {now} not above the first, {state['first']}")
        else:
            s.one("SELECT 1")
    except Exception as e:  # noqa: BLE001 (any failure to answer is the finding)
        problems.append(f"the server did not answer: {e}")
    now = other_postmasters()
    for pid, started in state["others"].items():
        if now.get(pid) != started:
            problems.append(f"the machine's postmaster {pid} stopped or was replaced")
    files = extension_files()
    if files != state["files"]:
        before, after = state["files"], files
        for path in sorted(set(before) | set(after)):
            if before.get(path) != after.get(path):
                problems.append(f"{path}: {before.get(path)} -> {after.get(path)} ([sha256, inode, ctime])")
    if problems:
        print("The machine's own PostgreSQL was not left as found:\n  " + "\n  ".join(problems), file=sys.stderr)
        sys.exit(1)
    print(f"the machine's PostgreSQL 15: the same server answers"
          + (" with IDs" if state["loaded"] else "") + f"; {len(files)} snowflake_id file(s) unchanged; "
          + f"{len(state['others'])} other postmaster(s) of the machine still running")


def stop():
    if os.path.exists(STATE):
        s, _ = server()
        s.stop("immediate")


if __name__ == "__main__":
    {"start": start, "check": check, "stop": stop}[sys.argv[1]]()
