"""The documents hold together: every relative link of every Markdown file
of the project names a file that exists and, after `#`, a heading that file
has (as GitHub makes a heading's anchor). A section moved from one page to
another breaks the links to it, and this says which."""

import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP_DIRS = {".git", "node_modules", "target"}


def markdown_files():
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for f in files:
            if f.endswith(".md"):
                yield os.path.join(root, f)


def without_code(text):
    """The text with fenced blocks and inline code blanked (links there are
    examples, not links)."""
    text = re.sub(r"^( *)```.*?^\1```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "``", text)


def anchor(heading):
    """GitHub's anchor of a heading: lower case, punctuation other than `-`
    and `_` dropped, each space a `-`."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip()).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"^( *)```.*?^\1```", "", text, flags=re.M | re.S)
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
        a = anchor(heading)
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else f"{a}-{n}")
    return out


def links(path):
    text = without_code(open(path, encoding="utf-8").read())
    return re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text)


def broken():
    wrong = []
    for md in markdown_files():
        for target in links(md):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, frag = target.partition("#")
            where = os.path.normpath(os.path.join(os.path.dirname(md), file)) if file else md
            rel = os.path.relpath(md, REPO)
            if not os.path.exists(where):
                wrong.append(f"{rel}: {target}: no such file")
            elif frag and where.endswith(".md") and frag not in anchors(where):
                wrong.append(f"{rel}: {target}: no such heading")
    return wrong


def test_every_relative_link_names_a_file_and_heading_that_exist():
    assert len(list(markdown_files())) >= 6
    assert broken() == []


def test_every_path_contributing_names_exists():
    """The feature index and the maps name files by path, in code spans: each
    one is there."""
    text = open(os.path.join(REPO, "CONTRIBUTING.md"), encoding="utf-8").read()
    paths = set(re.findall(r"`((?:src|core|tests|scripts|bench|docs|sql|examples)/[\w./-]*)`", text))
    # The feature index names core files under core/src and shell files under src.
    index = text[text.index("## Where each feature lives"):]
    for row in re.findall(r"^\|(?! ?Feature|---)(.*)\|$", index.split("\n## ")[0], re.M):
        cells = row.split("|")
        paths |= {f"core/src/{p}" for p in re.findall(r"`([\w/.]+)`", cells[1])}
        paths |= {f"src/{p}" for p in re.findall(r"`([\w/.]+)`", cells[2])}
    assert len(paths) > 50
    missing = sorted(p for p in paths if not os.path.exists(os.path.join(REPO, p)))
    assert missing == []


def test_every_section_an_error_names_exists():
    """A HINT or message that sends the user to a section (`see "X" in F`)
    names a heading F has."""
    named = []
    for root in ("src", "core/src"):
        for d, _, files in os.walk(os.path.join(REPO, root)):
            for f in files:
                if f.endswith(".rs"):
                    text = open(os.path.join(d, f), encoding="utf-8").read()
                    named += re.findall(r'see \\"([^"\\]+)\\" in ([\w/.]+\.md)', text)
    assert len(named) >= 4
    missing = [f"{section} in {doc}" for section, doc in named
               if anchor(section) not in anchors(os.path.join(REPO, doc))]
    assert missing == []


def test_the_check_finds_a_broken_link():
    assert anchor("`snowflake_convert(tbl regclass, col name DEFAULT 'id')`") == \
        "snowflake_converttbl-regclass-col-name-default-id"
    assert anchor("Copies: pg_upgrade, dumps and logical copies") == "copies-pg_upgrade-dumps-and-logical-copies"
    assert links("/dev/null") == []
    assert without_code("see `[a](b)` and\n```\n[c](d)\n```\n[e](f)") .count("](") == 1
