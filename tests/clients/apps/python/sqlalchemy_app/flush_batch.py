#!/usr/bin/env python3
"""The ORM inserts 1,000 authors and 1,000 posts whose ids come from
snowflake_nextval(), and this counts the INSERT statements it sends.

With server_default=func.snowflake_nextval(monotonic=True) (models.py) the
flush sends one batched INSERT per table per 1,000 rows; each object gets the
id of its own row (checked by re-reading every row: name and author match).
The same flush on a copy of the table whose default lacks monotonic=True
sends one INSERT per object: that is what the flag changes.

Run from this directory with the PG* variables set (a role that may create
tables in the database, and the extension, if the database lacks it);
everything happens in one transaction that is rolled back, so the database is
left as it was. Prints the counts and "OK".
"""
from sqlalchemy import BigInteger, Column, MetaData, String, Table, event, func, insert, select
from sqlalchemy.sql.functions import Function
from sqlalchemy.orm import Session, registry

from db import make_engine
from models import Author, Base, Post

N = 1000
engine = make_engine()
inserts = []


@event.listens_for(engine, "before_cursor_execute")
def count_inserts(conn, cursor, statement, parameters, context, executemany):
    if statement.lstrip().upper().startswith("INSERT"):
        inserts.append(statement)


def inserts_into(table):
    return [s for s in inserts if s.lstrip().startswith(f"INSERT INTO {table} ")]


# The control: the same key without monotonic=True.
plain_metadata = MetaData()
plain_table = Table(
    "sa_author_plain",
    plain_metadata,
    Column("id", BigInteger, primary_key=True, server_default=func.snowflake_nextval()),
    Column("name", String(100)),
)


class PlainAuthor:
    def __init__(self, name):
        self.name = name


registry().map_imperatively(PlainAuthor, plain_table)

with engine.connect() as conn:
    conn.begin()
    conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS snowflake_id")
    Base.metadata.create_all(conn)  # no-op where `alembic upgrade head` made them
    plain_metadata.create_all(conn)
    session = Session(bind=conn, join_transaction_mode="create_savepoint")

    authors = [Author(name=f"author {i}") for i in range(N)]
    for a in authors:
        a.posts.append(Post(title=f"post by author {a.name}"))
    session.add_all(authors)
    inserts.clear()
    session.flush()
    n_author, n_post = len(inserts_into("sa_author")), len(inserts_into("sa_post"))
    print(f"monotonic=True: {N} authors -> {n_author} INSERT, {N} posts -> {n_post} INSERT")
    print("  " + inserts_into("sa_author")[0][:150].replace("\n", " ") + " ...")
    assert n_author <= 2 and n_post <= 2, (n_author, n_post)

    ids = [a.id for a in authors]
    assert all(type(i) is int and i > 2**31 for i in ids), ids[:3]
    assert len(set(ids)) == N
    # SQLAlchemy sorted the RETURNING rows by id and handed them out in the
    # order the objects were added; whether each object got its own row's id
    # is seen only by reading the rows back:
    names = dict(conn.execute(select(Author.id, Author.name)).all())
    assert names == {a.id: a.name for a in authors}
    posts = {pid: (title, aid) for pid, title, aid in conn.execute(select(Post.id, Post.title, Post.author_id))}
    assert posts == {p.id: (p.title, a.id) for a in authors for p in a.posts}
    assert all(p.author_id == a.id for a in authors for p in a.posts)
    print(f"  ids {ids[0]} ... {ids[-1]}: every object matches its row")

    plain = [PlainAuthor(f"plain {i}") for i in range(N)]
    session.add_all(plain)
    inserts.clear()
    session.flush()
    n_plain = len(inserts_into("sa_author_plain"))
    print(f"without monotonic: {N} authors -> {n_plain} INSERT")
    assert n_plain == N, n_plain
    names = dict(conn.execute(select(plain_table.c.id, plain_table.c.name)).all())
    assert names == {p.id: p.name for p in plain}

    # The re-read does catch a wrong match: a key whose values decrease,
    # declared monotonic all the same, gives objects each other's ids.
    conn.exec_driver_sql("CREATE TEMPORARY SEQUENCE countdown INCREMENT -1 MINVALUE 1 MAXVALUE 1000000 START 1000000")
    conn.exec_driver_sql(
        "CREATE FUNCTION pg_temp.countdown() RETURNS bigint LANGUAGE sql"
        " AS $$ SELECT nextval('countdown') $$"
    )
    wrong = Table(
        "sa_wrong", MetaData(),
        Column("id", BigInteger, primary_key=True,
               server_default=Function("countdown", packagenames=("pg_temp",), monotonic=True)),
        Column("name", String(100)),
    )
    wrong.create(conn)
    params = [{"name": f"w{i}"} for i in range(10)]
    rows = conn.execute(
        insert(wrong).returning(wrong.c.id, wrong.c.name, sort_by_parameter_order=True),
        params,
    ).all()
    # Each returned row carries its own name: in parameter order row i is w{i}.
    mismatched = sum(1 for row, p in zip(rows, params) if row.name != p["name"])
    print(f"a decreasing key declared monotonic: {mismatched} of 10 rows matched to the wrong parameters")
    assert mismatched > 0

    session.close()
    conn.rollback()
print("OK")
