"""The shell's layers import only downward, no file of the shell or the
core imports another in a circle, and CONTRIBUTING.md's map names every
layer (so the map cannot go stale). Read from the
sources, as the compiler sees the paths they name: `crate::a::b`,
`super::c`, and grouped `use` lists of either."""

import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Lowest first: each may name only those before it.
LAYERS = ["pg", "catalog", "settings", "shmem", "mark", "citus", "opaque", "copies", "worker_id", "registry", "issue", "backfill", "bgworkers", "api"]
# lib.rs wires every part; sql_tests are the #[pg_test] tests, of the whole.
ABOVE_ALL = {"lib", "sql_tests"}


def modules(src):
    """Module path (a tuple) -> file, for every .rs file under `src`."""
    found = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel == ["lib"]:
                rel = []
            found[tuple(rel)] = os.path.join(root, f)
    return found


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


PATH = r"[a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*"


def named_paths(text):
    """Every (root, path) a file names: root is `crate` or `super`."""
    text = strip_comments(text)
    out = []
    for root, prefix, group in re.findall(r"\b(crate|super)::((?:[a-z_][a-z0-9_]*::)*)\{([^}]*)\}", text):
        for item in group.split(","):
            item = item.strip().split(" as ")[0].strip()
            if item and item != "self":
                out.append((root, prefix + item))
            elif item == "self":
                out.append((root, prefix.rstrip(":")))
    for root, path in re.findall(rf"\b(crate|super)::({PATH})", text):
        out.append((root, path))
    return out


def resolve(mods, base, path):
    """The longest module named by `base` + `path` (the rest is an item)."""
    parts = list(base) + [p for p in path.split("::") if p]
    while parts and tuple(parts) not in mods:
        parts.pop()
    return tuple(parts)


def graph(src):
    mods = modules(src)
    edges = {}
    for mod, path in mods.items():
        text = open(path, encoding="utf-8").read()
        targets = set()
        for root, named in named_paths(text):
            base = () if root == "crate" else mod[:-1]
            t = resolve(mods, base, named)
            if t != mod:
                targets.add(t)
        # A child module named from its parent without a root (`start::x`,
        # `use file::{..}`): the parent imports it.
        for child in re.findall(r"(?<![:\w])([a-z_][a-z0-9_]*)::", strip_comments(text)):
            if mod + (child,) in mods:
                targets.add(mod + (child,))
        edges[mod] = targets
    return edges


def circles(edges):
    found, state = [], {}

    def visit(n, stack):
        state[n] = "open"
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == "open":
                found.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m, stack)
        stack.pop()
        state[n] = "done"

    for n in sorted(edges):
        if n not in state:
            visit(n, [])
    return found


@pytest.mark.parametrize("src", ["src", "core/src"])
def test_no_file_imports_another_in_a_circle(src):
    edges = graph(os.path.join(REPO, src))
    assert len(edges) > 10, "the sources were not found"
    assert circles(edges) == []


def test_each_layer_names_only_the_layers_below_it():
    edges = graph(os.path.join(REPO, "src"))
    tops = {m[0] if m else "lib" for m in edges}
    assert tops <= set(LAYERS) | ABOVE_ALL, f"a part of the shell in no layer: {tops - set(LAYERS) - ABOVE_ALL}"
    wrong = []
    for mod, targets in edges.items():
        top = mod[0] if mod else "lib"
        if top in ABOVE_ALL:
            continue
        for t in targets:
            other = t[0] if t else "lib"
            if other != top and (other in ABOVE_ALL or LAYERS.index(other) > LAYERS.index(top)):
                wrong.append(f"{'::'.join(mod)} names {'::'.join(t) or 'the crate root'}")
    assert wrong == []


def test_the_core_knows_nothing_of_the_shell():
    for mod, path in modules(os.path.join(REPO, "core", "src")).items():
        text = strip_comments(open(path, encoding="utf-8").read())
        assert "pgrx" not in text and "snowflake_id::" not in text, path


def test_the_checks_catch_what_they_look_for():
    # A circle, and a layer naming one above it, in sources made for it.
    edges = {("a",): {("b",)}, ("b",): {("a",)}}
    assert circles(edges) == [[("a",), ("b",), ("a",)]]
    text = "use crate::api::status;\nuse super::{x, y as z};\n// crate::bgworkers in a comment\n"
    assert named_paths(text) == [("super", "x"), ("super", "y"), ("crate", "api::status")]


# Folders of the shell layered inside as the shell is: each file names only
# the files the map lists before it (mod.rs, the surface, names them all).
LAYERED_FOLDERS = ["citus", "copies"]


def the_map(text):
    """CONTRIBUTING.md's map, as (path, depth-first order) of every folder
    and file it names: `core/src/...` and `src/...`, from the indentation
    (two spaces a level) of the block under "## The layers"."""
    section = text[text.index("## The layers"):]
    block = re.search(r"```\n(.*?)```", section, re.S).group(1)
    paths, stack = [], []
    for line in block.splitlines():
        m = re.match(r"^( *)(\S+?/|\S+\.(?:rs|sql))(?:\s|$)", line)
        if not m or len(m.group(1)) % 2:
            continue
        depth = len(m.group(1)) // 2
        if depth > len(stack):
            continue  # a wrapped description
        stack[depth:] = [m.group(2).rstrip("/")]
        paths.append("/".join(stack) + ("/" if m.group(2).endswith("/") else ""))
    return paths


def sources(repo):
    """Every .rs and .sql file under src/ and core/src/, relative to `repo`."""
    found = set()
    for top in ("src", os.path.join("core", "src")):
        for root, _, files in os.walk(os.path.join(repo, top)):
            for f in files:
                if f.endswith((".rs", ".sql")):
                    found.add(os.path.relpath(os.path.join(root, f), repo).replace(os.sep, "/"))
    return found


def unmapped(repo, text):
    """(files the map does not name, files it names that do not exist)."""
    named = {p for p in the_map(text) if not p.endswith("/")}
    have = sources(repo)
    return sorted(have - named), sorted(named - have)


def test_the_map_names_every_file_of_src_and_core():
    text = open(os.path.join(REPO, "CONTRIBUTING.md"), encoding="utf-8").read()
    missing, extra = unmapped(REPO, text)
    assert missing == [], f"files CONTRIBUTING.md's map does not name: {missing}"
    assert extra == [], f"the map names what is not there: {extra}"


def test_the_map_lists_the_layers_in_their_order():
    text = open(os.path.join(REPO, "CONTRIBUTING.md"), encoding="utf-8").read()
    tops = [p[len("src/"):].rstrip("/").removesuffix(".rs") for p in the_map(text)
            if p.startswith("src/") and p.count("/") == 1 + p.endswith("/")]
    order = [t for t in tops if t in LAYERS]
    assert order == LAYERS, f"the map's order {order} is not the layers' {LAYERS}"
    assert set(tops) <= set(LAYERS) | ABOVE_ALL, set(tops) - set(LAYERS) - ABOVE_ALL


def test_the_map_check_finds_a_file_added_to_a_subfolder(tmp_path):
    for f in ("src/lib.rs", "src/copies/mod.rs", "src/copies/floor.rs", "src/copies/json.rs", "core/src/lib.rs"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    text = ("## The layers\n```\ncore/src/   the core\n  lib.rs     its modules\nsrc/   the shell\n"
            "  copies/    floors\n    mod.rs     the surface\n    floor.rs   the floor\n"
            "               wrapped.rs is a description, not a file\n  lib.rs     the root\n```\n")
    assert unmapped(str(tmp_path), text) == (["src/copies/json.rs"], [])
    assert unmapped(str(tmp_path), text.replace("    floor.rs", "    floors.rs")) == (
        ["src/copies/floor.rs", "src/copies/json.rs"], ["src/copies/floors.rs"])


def folder_order_breaks(edges, folder, order):
    """Where a file of `folder` names a sibling listed after it (or one the
    map does not list)."""
    wrong = []
    for mod, targets in edges.items():
        if len(mod) != 2 or mod[0] != folder:
            continue
        for t in targets:
            if len(t) >= 2 and t[0] == folder and t[1] != mod[1]:
                if t[1] not in order or mod[1] not in order or order.index(t[1]) > order.index(mod[1]):
                    wrong.append(f"{folder}/{mod[1]} names {folder}/{t[1]}")
            elif t == (folder,):
                wrong.append(f"{folder}/{mod[1]} names its folder's surface")
    return wrong


@pytest.mark.parametrize("folder", LAYERED_FOLDERS)
def test_the_files_of_a_layered_folder_name_only_those_listed_before_them(folder):
    text = open(os.path.join(REPO, "CONTRIBUTING.md"), encoding="utf-8").read()
    order = [p.split("/")[-1][:-3] for p in the_map(text)
             if p.startswith(f"src/{folder}/") and p.endswith(".rs") and not p.endswith("/mod.rs")]
    assert len(order) >= 4, order
    assert folder_order_breaks(graph(os.path.join(REPO, "src")), folder, order) == []


def test_the_folder_order_check_finds_a_file_naming_one_after_it():
    edges = {("copies", "record"): {("copies", "floor"), ("pg",)}, ("copies", "floor"): {("copies", "record")}}
    assert folder_order_breaks(edges, "copies", ["record", "floor"]) == ["copies/record names copies/floor"]


def test_only_worker_id_sets_the_worker_id():
    """The worker id has one owner (src/worker_id.rs): no other file of the
    shell sets, settles, moves or times it in shared memory."""
    writes = re.compile(r"\.worker\s*\.\s*(set_at_start|settle|follow|wait_until)\(")
    found = []
    for mod, path in modules(os.path.join(REPO, "src")).items():
        if writes.search(strip_comments(open(path, encoding="utf-8").read())):
            found.append("::".join(mod))
    assert found == ["worker_id"]


def readers_of_the_backfill_worker_id(src):
    """The files of `src` (besides settings.rs, where it is read from the
    configuration) that read `snowflake_id.backfill_worker_id` themselves."""
    reads = re.compile(r"\bsettings::backfill_worker_id\b|\bbackfill_worker_id\(\)")
    return sorted("::".join(mod) for mod, path in modules(src).items()
                  if mod != ("settings",) and reads.search(strip_comments(open(path, encoding="utf-8").read())))


def test_only_worker_id_reads_the_backfill_worker_id():
    """The backfill worker id has the live one's owner: its rule (set, in the
    layout, not the live one) is the core's `worker_id::backfill`, and only
    src/worker_id.rs reads the setting; a backfill, the claims and the
    status ask it."""
    assert readers_of_the_backfill_worker_id(os.path.join(REPO, "src")) == ["worker_id"]


def test_the_backfill_rule_finds_a_second_reader(tmp_path):
    (tmp_path / "worker_id.rs").write_text("fn f() { settings::backfill_worker_id() }\n")
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "status.rs").write_text("use crate::settings;\nfn g() { settings::backfill_worker_id().ok() }\n")
    assert readers_of_the_backfill_worker_id(str(tmp_path)) == ["api::status", "worker_id"]


def unsafe_blocks(src):
    """(file relative to `src`, line, lines) of every `unsafe { ... }` block."""
    found = []
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            text = strip_comments(open(path, encoding="utf-8").read())
            for m in re.finditer(r"\bunsafe\s*\{", text):
                i, depth = m.end(), 1
                while depth and i < len(text):
                    depth += {"{": 1, "}": -1}.get(text[i], 0)
                    i += 1
                found.append((os.path.relpath(path, src), text[:m.start()].count("\n") + 1,
                              text[m.start():i].count("\n") + 1))
    return found


def test_postgres_glue_lives_in_pg():
    """Most `unsafe` calls into Postgres are in pg/, behind safe wrappers;
    elsewhere no block is longer than 25 lines (one call, or a few, with the
    reason they are sound beside them)."""
    blocks = unsafe_blocks(os.path.join(REPO, "src"))
    in_pg = [b for b in blocks if b[0].startswith("pg" + os.sep)]
    assert len(blocks) > 50
    assert len(in_pg) > len(blocks) / 2, f"{len(in_pg)} of {len(blocks)} unsafe blocks in pg/"
    long = [f"{f}:{line} ({n} lines)" for f, line, n in blocks if not f.startswith("pg" + os.sep) and n > 25]
    assert long == []
