"""META.json validates against PGXN's meta spec 1.0 (tests/packaging/pgxn_meta.py), says
what the rest of the project says, and the validator refuses broken ones."""

import copy
import json
import os
import re
import subprocess

import pytest

from pgxn_meta import validate

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_meta():
    with open(os.path.join(REPO, "META.json")) as f:
        return json.load(f)


def cargo(key):
    with open(os.path.join(REPO, "Cargo.toml")) as f:
        found = re.search(rf'^{key} = (?:\["(.*)"\]|"(.*)")$', f.read(), re.M)
    return found.group(1) or found.group(2)


def test_meta_json_validates():
    assert validate(load_meta()) == []


def test_meta_json_agrees_with_the_project():
    meta = load_meta()
    version = cargo("version")
    assert meta["version"] == version
    ext = meta["provides"]["snowflake_id"]
    assert ext["version"] == version
    assert ext["file"] == f"sql/snowflake_id--{version}.sql"
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert ext["file"] in tracked and ext["docfile"] in tracked
    assert all(any(t.startswith(d + "/") for t in tracked) for d in meta["no_index"]["directory"])
    assert meta["abstract"] == cargo("description")
    assert meta["maintainer"] == [cargo("authors")]
    assert (meta["license"], cargo("license")) == ("mit", "MIT")
    # The majors the project supports, not those a run was narrowed to.
    env = {k: v for k, v in os.environ.items() if k != "SNOWFLAKE_OTHER_MAJORS"}
    oldest = subprocess.run(["bash", "-c", ". scripts/versions.sh; echo $SYSTEM_MAJOR $OTHER_MAJORS"], cwd=REPO,
                            capture_output=True, text=True, check=True, env=env).stdout.split()
    assert meta["prereqs"]["runtime"]["requires"]["PostgreSQL"] == f"{min(map(int, oldest))}.0.0"


def _set(doc, path, value):
    *parents, last = path
    for key in parents:
        doc = doc[key]
    if value is DELETE:
        del doc[last]
    else:
        doc[last] = value


DELETE = object()

# (where, new value, what the problem must mention): each breaks one rule of
# the spec's schemas, so a validator that let it through would be wrong.
BROKEN = [
    (("name",), DELETE, "name is required"),
    (("meta-spec",), DELETE, "meta-spec is required"),
    (("name",), "a", "/name"),
    (("name",), "snowflake id", "/name"),
    (("version",), "0.2", "/version"),
    (("version",), "v0.2.0", "/version"),
    (("version",), "0.2.0\n", "/version"),
    (("version",), "0.2.1\u0663", "/version"),
    (("meta-spec", "version"), "1.0.0\n", "/meta-spec/version"),
    (("abstract",), "", "/abstract"),
    (("maintainer",), [], "/maintainer"),
    (("maintainer",), ["a <a@b>", "a <a@b>"], "unique"),
    (("license",), "MIT", "/license"),
    (("license",), {"MIT": "not a uri"}, "/license/MIT"),
    (("provides",), {}, "/provides"),
    (("provides", "snowflake_id", "file"), DELETE, "file is required"),
    (("provides", "snowflake_id", "file"), "../snowflake_id.sql", "/provides/snowflake_id/file"),
    (("provides", "snowflake_id", "file"), "/sql/snowflake_id.sql", "/provides/snowflake_id/file"),
    (("provides", "snowflake_id", "version"), "1", "/provides/snowflake_id/version"),
    (("provides", "snowflake_id", "homepage"), "https://example.com", "unknown key"),
    (("meta-spec", "version"), "2.0.0", "/meta-spec/version"),
    (("meta-spec", "url"), "https://pgxn.org/spec", "/meta-spec/url"),
    (("release_status",), "beta", "/release_status"),
    (("tags",), ["ok", "a/b"], "/tags/1"),
    (("tags",), [], "/tags"),
    (("prereqs", "runtime", "requires", "PostgreSQL"), "13", "/prereqs/runtime/requires/PostgreSQL"),
    (("prereqs", "runtime", "requires", "PostgreSQL"), ">= 13.0.0, 0", "/prereqs/runtime/requires/PostgreSQL"),
    (("prereqs", "install"), {"requires": {"PostgreSQL": "13.0.0"}}, "unknown key"),
    (("prereqs", "runtime"), {}, "needs one of"),
    (("no_index",), {}, "needs one of"),
    (("resources",), {"repository": {"url": "https://example.com/x.git"}}, "needs web, or url with type"),
    (("homepage",), "https://example.com", "/homepage: unknown key"),
]


@pytest.mark.parametrize("path,value,expected", BROKEN, ids=[f"{'/'.join(p)}={v!r}" for p, v, _ in BROKEN])
def test_the_validator_refuses_what_the_spec_forbids(path, value, expected):
    doc = copy.deepcopy(load_meta())
    _set(doc, path, value)
    problems = validate(doc)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("path,value", [
    (("x_snowflake",), {"anything": 1}),
    (("prereqs", "runtime", "requires", "PostgreSQL"), ">= 13.0.0, < 19.0.0"),
    (("prereqs", "runtime", "requires", "PostgreSQL"), 0),
    (("license",), {"PostgreSQL": "https://www.postgresql.org/about/licence"}),
    (("license",), ["mit", "postgresql"]),
    (("maintainer",), "someone <someone@example.org>"),
    (("resources",), {"repository": {"url": "https://example.com/x.git", "type": "git"}}),
    (("version",), "1.0.0-rc.1+build.5"),
])
def test_the_validator_takes_what_the_spec_allows(path, value):
    doc = copy.deepcopy(load_meta())
    _set(doc, path, value)
    assert validate(doc) == []
