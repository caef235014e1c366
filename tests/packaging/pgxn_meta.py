"""A validator for PGXN's META.json, version 1.0 of the meta spec, that runs
offline (PGXN's own validators are a Perl module and a Rust crate, neither
installable here).

The rules are those of the spec's JSON Schemas, read in pgxn/meta at commit
53f43ea (schema/v1/*.schema.json, 2025-05-31): which keys each object takes
and requires, the Term, Tag, Version, Version Range, Path, License and URI
forms, and custom keys `x_...`/`X_...` allowed where the schemas allow them.
Patterns must match the whole string (no trailing newline) and digits are
ASCII, as in the schemas' regular expressions. Two checks are stricter than
that schema: paths must not start with `/` or
hold a backslash (the spec says relative, with Unix conventions), and URIs
must have a scheme.
"""

import re

CUSTOM = re.compile(r"^[xX]_.")
# \p{Space} and \p{Cntrl} of the schemas, in Python's re.
TERM = re.compile(r"^[^/\\\s\x00-\x1f\x7f-\x9f]{2,}$")
TAG = re.compile(r"^[^/\\\x00-\x1f\x7f-\x9f]{2,255}$")
_NUM = r"(?:0|[1-9][0-9]*)"
_IDENT = r"(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
SEMVER = rf"{_NUM}\.{_NUM}\.{_NUM}(?:-{_IDENT}(?:\.{_IDENT})*)?(?:\+[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*)?"
VERSION = re.compile(rf"^{SEMVER}$")
_OP = r"(?:(?:[=!]=|[<>]=?)\s*)?"
VERSION_RANGE = re.compile(rf"^{_OP}(?:{SEMVER}|0)(?:,\s*{_OP}{SEMVER})*$")
META_SPEC_VERSION = re.compile(r"^1\.0\.[0-9]+$")
META_SPEC_URLS = ("https://pgxn.org/meta/spec.txt", "http://pgxn.org/meta/spec.txt")
URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:\S+$")
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")
LICENSES = {
    "agpl_3", "apache_1_1", "apache_2_0", "artistic_1", "artistic_2", "bsd", "freebsd", "gfdl_1_2", "gfdl_1_3",
    "gpl_1", "gpl_2", "gpl_3", "lgpl_2_1", "lgpl_3_0", "mit", "mozilla_1_0", "mozilla_1_1", "openssl", "perl_5",
    "postgresql", "qpl_1_0", "ssleay", "sun", "zlib", "open_source", "restricted", "unrestricted", "unknown",
}
PHASES = ("configure", "build", "test", "runtime", "develop")
RELATIONSHIPS = ("requires", "recommends", "suggests", "conflicts")
RELEASE_STATUSES = ("stable", "testing", "unstable")


def validate(meta):
    """Returns the list of problems in `meta` (a parsed META.json), each
    naming where it is; an empty list means it validates."""
    problems = []
    _distribution(meta, "", problems.append)
    return problems


def _object(value, where, fail, keys, required=(), any_of=None, custom=True):
    """Checks the shape every object of the spec shares; False if not an object."""
    if not isinstance(value, dict):
        fail(f"{where or '/'}: must be an object")
        return False
    for key in value:
        if key not in keys and not (custom and CUSTOM.match(key)):
            fail(f"{where}/{key}: unknown key")
    for key in required:
        if key not in value:
            fail(f"{where or '/'}: {key} is required")
    if any_of and not any(k in value for k in any_of):
        fail(f"{where or '/'}: needs one of {', '.join(any_of)}")
    return True


def _string(value, where, fail, pattern=None, what="", min_length=1):
    if not isinstance(value, str) or len(value) < min_length:
        fail(f"{where}: must be a string of at least {min_length} character(s)")
    elif pattern is not None and not pattern.fullmatch(value):
        fail(f"{where}: {value!r} is not {what}")


def _unique_list(value, where, fail, check_item):
    if not isinstance(value, list) or not value:
        fail(f"{where}: must be a non-empty array")
        return
    if len({repr(v) for v in value}) != len(value):
        fail(f"{where}: items must be unique")
    for i, item in enumerate(value):
        check_item(item, f"{where}/{i}", fail)


def _term(value, where, fail):
    _string(value, where, fail, TERM, "a Term (2+ characters, no slash, backslash, space or control character)", 2)


def _version(value, where, fail):
    _string(value, where, fail, VERSION, "a semantic version")


def _path(value, where, fail):
    _string(value, where, fail, min_length=2)
    if isinstance(value, str):
        parts = value.removeprefix("./").split("/")
        if value.startswith("/") or "\\" in value or ".." in parts or "." in parts:
            fail(f"{where}: {value!r} is not a relative Unix path inside the distribution")


def _uri(value, where, fail):
    _string(value, where, fail, URI, "a URI")


def _distribution(meta, where, fail):
    keys = ("name", "version", "abstract", "maintainer", "license", "provides", "meta-spec", "description",
            "generated_by", "tags", "no_index", "prereqs", "release_status", "resources")
    if not _object(meta, where, fail, keys, required=keys[:7]):
        return
    checks = {
        "name": _term, "version": _version, "maintainer": _maintainer, "license": _license,
        "provides": _provides, "meta-spec": _meta_spec, "tags": _tags, "no_index": _no_index,
        "prereqs": _prereqs, "resources": _resources,
        "abstract": _string, "description": _string, "generated_by": _string,
    }
    for key, check in checks.items():
        if key in meta:
            check(meta[key], f"{where}/{key}", fail)
    if "release_status" in meta and meta["release_status"] not in RELEASE_STATUSES:
        fail(f"/release_status: must be one of {', '.join(RELEASE_STATUSES)}")


def _maintainer(value, where, fail):
    if isinstance(value, list):
        _unique_list(value, where, fail, _string)
    else:
        _string(value, where, fail)


def _license(value, where, fail):
    def known(v, w, f):
        if v not in LICENSES:
            f(f"{w}: {v!r} is not one of the spec's license names")

    if isinstance(value, list):
        _unique_list(value, where, fail, known)
    elif isinstance(value, dict):
        if not value:
            fail(f"{where}: must name at least one license")
        for name, url in value.items():
            _uri(url, f"{where}/{name}", fail)
    else:
        known(value, where, fail)


def _provides(value, where, fail):
    if not isinstance(value, dict) or not value:
        fail(f"{where}: must be an object naming at least one extension")
        return
    for name, ext in value.items():
        _term(name, f"{where}/{name} (name)", fail)
        _extension(ext, f"{where}/{name}", fail)


def _extension(value, where, fail):
    if not _object(value, where, fail, ("file", "version", "abstract", "docfile", "docpath"), ("file", "version")):
        return
    checks = {"file": _path, "version": _version, "abstract": _string, "docfile": _path, "docpath": _string}
    for key, check in checks.items():
        if key in value:
            check(value[key], f"{where}/{key}", fail)


def _meta_spec(value, where, fail):
    if not _object(value, where, fail, ("version", "url"), ("version",)):
        return
    if "version" in value:
        _string(value["version"], f"{where}/version", fail, META_SPEC_VERSION, "1.0.x")
    if "url" in value and value["url"] not in META_SPEC_URLS:
        fail(f"{where}/url: must be one of {', '.join(META_SPEC_URLS)}")


def _tags(value, where, fail):
    _unique_list(value, where, fail, lambda v, w, f: _string(v, w, f, TAG, "a Tag (2-255 characters, no slash, "
                                                                     "backslash or control character)", 2))


def _no_index(value, where, fail):
    if not _object(value, where, fail, ("file", "directory"), any_of=("file", "directory")):
        return
    for key in ("file", "directory"):
        if isinstance(value.get(key), list):
            _unique_list(value[key], f"{where}/{key}", fail, _path)
        elif key in value:
            _path(value[key], f"{where}/{key}", fail)


def _prereqs(value, where, fail):
    if not _object(value, where, fail, PHASES, any_of=PHASES):
        return
    for phase in PHASES:
        if phase not in value:
            continue
        rels = value[phase]
        w = f"{where}/{phase}"
        if not _object(rels, w, fail, RELATIONSHIPS, any_of=RELATIONSHIPS):
            continue
        for rel in RELATIONSHIPS:
            if rel not in rels:
                continue
            reqs = rels[rel]
            if not isinstance(reqs, dict) or not reqs:
                fail(f"{w}/{rel}: must be an object naming at least one prerequisite")
                continue
            for name, version_range in reqs.items():
                _term(name, f"{w}/{rel}/{name} (name)", fail)
                if version_range != 0 or isinstance(version_range, bool):
                    _string(version_range, f"{w}/{rel}/{name}", fail, VERSION_RANGE, "a version range")


def _resources(value, where, fail):
    names = ("homepage", "bugtracker", "repository")
    if not _object(value, where, fail, names, any_of=names):
        return
    if "homepage" in value:
        _uri(value["homepage"], f"{where}/homepage", fail)
    if "bugtracker" in value:
        bug, w = value["bugtracker"], f"{where}/bugtracker"
        if _object(bug, w, fail, ("web", "mailto"), any_of=("web", "mailto")):
            if "web" in bug:
                _uri(bug["web"], f"{w}/web", fail)
            if "mailto" in bug:
                _string(bug["mailto"], f"{w}/mailto", fail, EMAIL, "an email address")
    if "repository" in value:
        repo, w = value["repository"], f"{where}/repository"
        if _object(repo, w, fail, ("url", "web", "type")):
            if not ("web" in repo or ("url" in repo and "type" in repo)):
                fail(f"{w}: needs web, or url with type")
            for key in ("url", "web"):
                if key in repo:
                    _uri(repo[key], f"{w}/{key}", fail)
            if "type" in repo:
                _string(repo["type"], f"{w}/type", fail, re.compile(r"^[a-z]+$"), "a lowercase VCS name")
