"""The recipes of docs/applications.md, run as an application would run them.

Each recipe in tests/clients/apps (JavaScript: node-postgres, postgres.js, Drizzle
ORM, drizzle-kit, Knex, Kysely, Prisma, TypeORM; Ruby: ActiveRecord; Java: JDBC; Go: pgx and database/sql; Python: Django, SQLAlchemy, Alembic, psycopg, asyncpg)
checks its own results (uuid keys and opaque IDs in uuid_and_opaque.py) and exits non-zero on any wrong ID. Here each runs
against a real server, with the libraries pinned in tests/clients/apps/node's lock
file and tests/drivers/requirements.txt, as `app`: a role that is no
superuser, owns its database, may create databases (Django's test runner
and the Alembic check make their own), and installs the extension itself
(it is trusted). Both on the default layout, whose IDs do not fit a
JavaScript Number, and on js53, whose IDs do.

And the guide says only what the recipes do: every JavaScript, TypeScript,
Prisma schema, Python, Ruby, Java and Go block of docs/applications.md is a
fragment of a recipe file."""

import glob
import json
import os
import re
import secrets
import subprocess

import pytest

from harness import PROGRAM_TIMEOUT, REPO, application_role, drivers_python, go_path, server, use_opaque_keys

APPS = os.path.join(REPO, "tests", "clients", "apps")
GUIDE = os.path.join(REPO, "docs", "applications.md")

NODE_RECIPES = ["pg-strings.mjs", "pg-bigint.mjs", "postgres-js.mjs", "drizzle.mjs", "drizzle-kit-push.mjs",
                "drizzle-kit-pull.mjs", "drizzle-kit-migrate.mjs", "more-libraries.mjs", "prisma.mjs", "typeorm.mjs"]
PYTHON_RECIPES = [
    # (directory under tests/clients/apps/python, arguments after the venv's python)
    ("django_app", ["manage.py", "test", "--noinput"]),
    ("django_app", ["manage.py", "test", "--noinput", "--settings=snowproj.settings_customuser"]),
    ("django_app", ["convert_demo.py"]),
    ("sqlalchemy_app", ["flush_batch.py"]),
    ("sqlalchemy_app", ["check_alembic.py"]),
    (".", ["drivers_ids.py"]),
    (".", ["uuid_and_opaque.py"]),
]


# Debian's libpostgresql-jdbc-java and libjackson2-databind-java.
JAVA_CLASSPATH = ":".join(f"/usr/share/java/{jar}.jar" for jar in (
    "postgresql", "jackson-databind", "jackson-core", "jackson-annotations"))


def go_env(env):
    """The Go recipe builds in GOPATH mode against the packages' sources
    setup.sh unpacked: no module, no download."""
    with open(os.path.join(go_path(), "VERSIONS")) as f:
        versions = dict(line.split() for line in f)
    assert versions["golang-github-jackc-pgx-v4-dev"].startswith("4.15."), versions
    return {**env, "GO111MODULE": "off", "GOPROXY": "off", "GOPATH": go_path()}


def run(cwd, command, env):
    out = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=PROGRAM_TIMEOUT)
    text = out.stdout + out.stderr
    print(f"$ {' '.join(command)}  (in {os.path.relpath(cwd, REPO)})\n{text[-4000:]}")
    assert out.returncode == 0, f"{' '.join(command)} failed:\n{text[-6000:]}"
    return text


@pytest.mark.parametrize("layout", ["snowflake_id", "js53"])
def test_every_recipe_as_an_application_role(layout):
    # On localhost too: the JDBC driver speaks TCP only.
    with server(f"apps-{layout}", conf={"snowflake_id.worker_id": 4, "snowflake_id.layout": f"'{layout}'",
                                        "listen_addresses": "'localhost'"}) as s:
        # The operator's part of opaque IDs: a key file only the server
        # reads, outside the data directory (as the README says).
        use_opaque_keys(s, f"1 {secrets.token_hex(32)}\n")
        env = {**os.environ, **application_role(s, createdb=True), "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("PGPASSWORD", None)
        for recipe in NODE_RECIPES:
            assert f"OK {recipe.removesuffix('.mjs')}" in run(os.path.join(APPS, "node"), ["node", recipe], env)
        python = drivers_python()
        for where, args in PYTHON_RECIPES:
            text = run(os.path.join(APPS, "python", where), [python, *args], env)
            assert re.search(r"^OK\b", text, re.M), text[-2000:]
        text = run(os.path.join(APPS, "java"), ["java", "-cp", JAVA_CLASSPATH, "Ids.java"], env)
        assert re.search(r"^OK java$", text, re.M), text[-2000:]
        text = run(os.path.join(APPS, "ruby"), ["ruby", "active_record.rb"], env)
        assert re.search(r"^OK ruby$", text, re.M), text[-2000:]
        # Go's own checks first: formatted as gofmt writes it, and vet.
        assert run(os.path.join(APPS, "go"), ["gofmt", "-l", "."], env).strip() == ""
        run(os.path.join(APPS, "go"), ["go", "vet", "ids.go"], go_env(env))
        text = run(os.path.join(APPS, "go"), ["go", "run", "ids.go"], go_env(env))
        assert re.search(r"^OK go$", text, re.M), text[-2000:]
        # Nothing the recipes did made the role more than it was.
        assert s.one("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'") is False


def code_blocks(markdown, languages):
    """(language, text) of each fenced block in one of `languages`, dedented."""
    blocks = []
    for m in re.finditer(r"^( *)```(\w+)\n(.*?)^\1```", markdown, re.M | re.S):
        if m.group(2) in languages:
            blocks.append((m.group(2), m.group(3)))
    return blocks


def lines_of(text):
    return [line.strip() for line in text.splitlines() if line.strip()]


def contains(haystack, needle):
    n = len(needle)
    return any(haystack[i:i + n] == needle for i in range(len(haystack) - n + 1))


def test_every_code_block_of_the_guide_is_recipe_code():
    with open(GUIDE) as f:
        blocks = code_blocks(f.read(), {"js", "ts", "prisma", "python", "ruby", "java", "go"})
    node = lambda pattern: [p for p in glob.glob(f"{APPS}/node/**/{pattern}", recursive=True)  # noqa: E731
                            if "node_modules" not in p]
    sources = {
        "js": node("*.*js"),
        "ts": node("*.ts"),
        "prisma": node("*.prisma"),
        "python": glob.glob(f"{APPS}/python/**/*.py", recursive=True),
        "ruby": glob.glob(f"{APPS}/ruby/*.rb"),
        "java": glob.glob(f"{APPS}/java/*.java"),
        "go": glob.glob(f"{APPS}/go/*.go"),
    }
    texts = {lang: [lines_of(open(p).read()) for p in paths] for lang, paths in sources.items()}
    assert len(blocks) >= 20, f"only {len(blocks)} blocks found"
    strangers = [text for lang, text in blocks if not any(contains(t, lines_of(text)) for t in texts[lang])]
    assert strangers == [], "blocks of docs/applications.md that no recipe runs:\n" + "\n---\n".join(strangers)


def test_django_link_rows_of_two_servers_meet_without_a_clash():
    """Django's many-to-many link tables get snowflake keys under the guide's
    recipe (DEFAULT_AUTO_FIELD, shop/fields.py): the rows two servers made,
    brought into one database, keep every key. With identity keys, both
    servers' link rows start at 1."""
    django_app = os.path.join(APPS, "python", "django_app")
    with server("django-a", conf={"snowflake_id.worker_id": 4}) as a, \
            server("django-b", conf={"snowflake_id.worker_id": 5}) as b:
        for s in (a, b):
            env = {**os.environ, **application_role(s), "PYTHONDONTWRITEBYTECODE": "1"}
            env.pop("PGPASSWORD", None)
            run(django_app, [drivers_python(), "manage.py", "migrate", "--noinput"], env)
            run(django_app, [drivers_python(), "manage.py", "shell", "-c",
                             "from shop.models import Author, Post, Tag\n"
                             "tags = Tag.objects.bulk_create([Tag(name=f't{i}') for i in range(3)])\n"
                             "for i in range(4):\n"
                             "    Post.objects.create(author=Author.objects.create(name='a'), title='t').tags.add(*tags)\n"],
                env)
        # b's rows into a's tables, keys and all.
        for table in ("shop_author", "shop_tag", "shop_post", "shop_post_tags"):
            with b.connect(dbname="appdb") as bc, bc.cursor() as cur:
                cur.execute(f"SELECT * FROM {table}")
                columns, rows = [d[0] for d in cur.description], cur.fetchall()
            with a.connect(dbname="appdb") as ac, ac.cursor() as cur:
                cur.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})",
                                rows)
        links = a.sql("SELECT (snowflake_decode(id)).worker_id, count(*) FROM shop_post_tags GROUP BY 1 ORDER BY 1",
                      dbname="appdb")
        assert links == [(4, 12), (5, 12)], links


def test_the_guide_and_the_example_pin_what_the_recipes_run():
    """Every package the guide names with a version is the version the
    recipes' lock pins, and the example pins the same where it uses one."""
    with open(os.path.join(APPS, "node", "package.json")) as f:
        recipes = json.load(f)["dependencies"]
    with open(os.path.join(REPO, "examples", "node", "package.json")) as f:
        example = json.load(f)["dependencies"]
    with open(GUIDE) as f:
        pinned = re.search(r"^Pinned and run: (.*?)\(`tests/clients/apps/node`\)", f.read(), re.M | re.S).group(1)
    named = dict(re.findall(r"(@?[\w./-]+)(?: \([^)]*\))? (\d+\.\d+\.\d+)", pinned))
    assert named and all(recipes.get(k) == v for k, v in named.items()), (named, recipes)
    assert all(recipes.get(k) == v for k, v in example.items()), (example, recipes)
