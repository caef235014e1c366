#!/usr/bin/env python3
"""A uuid key from snowflake_uuidv7(), an opaque ID in a public URL, and
snowflake_lastval(), as an application does them with psycopg 3.

The server has a key for opaque IDs (snowflake_id.opaque_keys_file, set up
by its operator); the application's role never sees it.

Run with the PG* variables set: python uuid_and_opaque.py   Ends with "OK".
"""
import datetime
import uuid

import psycopg

with psycopg.connect(autocommit=True) as conn:
    conn.execute("CREATE EXTENSION IF NOT EXISTS snowflake_id")

    # A uuid primary key, time-ordered across every session of the server.
    conn.execute("""
        CREATE TABLE ticket (
            id uuid PRIMARY KEY DEFAULT snowflake_uuidv7(),
            title text NOT NULL
        )""")
    started = conn.execute("SELECT now()").fetchone()[0]
    first = conn.execute("INSERT INTO ticket (title) VALUES ('printer') RETURNING id").fetchone()[0]
    second = conn.execute("INSERT INTO ticket (title) VALUES ('coffee') RETURNING id").fetchone()[0]
    assert isinstance(first, uuid.UUID) and first.version == 7 and first < second, (first, second)

    # The bigint ID inside, and its time (uuid_extract_timestamp(id) reads
    # the same time on PostgreSQL 17 and later).
    ticket_id, made = conn.execute(
        "SELECT snowflake_uuid_to_id(id), snowflake_timestamp(snowflake_uuid_to_id(id)) FROM ticket WHERE id = %s",
        [first],
    ).fetchone()
    assert abs(made - started) < datetime.timedelta(minutes=1), (made, started)
    assert conn.execute("SELECT snowflake_id_to_uuid(%s) <= %s", [ticket_id, first]).fetchone()[0]

    # Tickets of the last hour, by the primary key's index.
    recent = conn.execute(
        "SELECT count(*) FROM ticket WHERE id >= snowflake_uuid_from_timestamp(now() - interval '1 hour')"
    ).fetchone()[0]
    assert recent == 2, recent

    # An order table keyed by bigint, served in URLs as opaque text.
    conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), total numeric)")
    order_id = conn.execute("INSERT INTO orders (total) VALUES (12.50) RETURNING id").fetchone()[0]
    assert conn.execute("SELECT snowflake_lastval()").fetchone()[0] == order_id
    slug = conn.execute("SELECT snowflake_to_opaque(%s)", [order_id]).fetchone()[0]
    url = f"/orders/{slug}"  # 17 URL-safe characters: no time, no server, no count

    def find_order(slug):
        """The order a URL names, or None (answer 404) for any slug that
        was not made here: altered, guessed, or from another key."""
        return conn.execute(
            "SELECT id, total FROM orders WHERE id = snowflake_from_opaque_or_null(%s)", [slug]
        ).fetchone()

    assert find_order(url.rsplit("/", 1)[1]) == (order_id, 12.50), find_order(slug)
    tampered = slug[:-1] + ("A" if slug[-1] != "A" else "B")
    assert find_order(tampered) is None
    assert find_order("not-an-order") is None
    # The strict form says so with an error (22P02), the same for any bad slug.
    try:
        conn.execute("SELECT snowflake_from_opaque(%s)", [tampered])
        raise SystemExit("a tampered slug was read")
    except psycopg.errors.InvalidTextRepresentation:
        pass
    print(f"uuid key {first}, opaque URL {url}: OK so far")

print("OK")
