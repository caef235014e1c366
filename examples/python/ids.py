"""Snowflake IDs in Python with psycopg 3.

Python's int is exact at any size, so IDs read and written through psycopg
need nothing special. What needs care is where they go next: JSON for a
browser parses numbers into JavaScript Numbers (exact only up to 2**53), so
send IDs as strings there, or use the short text forms.

Connects with the usual PGHOST/PGPORT/PGUSER/PGDATABASE variables, prints
what it finds, and exits non-zero if an exact way is not.
"""

import json

import psycopg


def as_javascript_number(i):
    """What a JavaScript Number (an IEEE double) makes of the integer i."""
    return int(float(i))


def main():
    with psycopg.connect(autocommit=True) as conn:
        layout = conn.execute("SELECT current_setting('snowflake_id.layout') AS layout").fetchone()[0]
        print(f"server layout: {layout}")
        conn.execute("CREATE TEMP TABLE notes (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), body text)")
        # A hundred rows in one statement: most share a millisecond, so
        # their low bits (the sequence) are not all zero.
        rows = conn.execute(
            "INSERT INTO notes (body) SELECT 'note ' || i FROM generate_series(1, 100) i"
            " RETURNING id, id::text, body").fetchall()

        # psycopg reads bigint as int: exact.
        assert all(type(i) is int and str(i) == text for i, text, _ in rows)
        print(f"as int: {rows[0][0]} exact")

        # Passed back as a parameter, an int finds its row.
        i, _, body = rows[42]
        assert conn.execute("SELECT body FROM notes WHERE id = %s", (i,)).fetchone()[0] == body

        # What a browser would make of them as JSON numbers.
        changed = sum(as_javascript_number(i) != i for i, _, _ in rows)
        print(f"as JavaScript Numbers: {changed} of {len(rows)} IDs would change")
        if layout == "js53":
            assert changed == 0, "js53 IDs must fit a JavaScript Number exactly"
        else:
            assert changed > 0, "IDs above 2**53 lose their low bits as JavaScript Numbers"

        # JSON for JavaScript: IDs as strings. json.dumps writes an int as a
        # JSON number, exact in the text, but not once a browser parses it.
        payload = json.dumps([{"id": str(i), "body": b} for i, _, b in rows])
        assert [int(o["id"]) for o in json.loads(payload)] == [i for i, _, _ in rows]
        # Or let the server write it: id::text in json_build_object.
        server_json = conn.execute(
            "SELECT json_agg(json_build_object('id', id::text) ORDER BY id) FROM notes").fetchone()[0]
        assert sorted(int(o["id"]) for o in server_json) == sorted(i for i, _, _ in rows)
        print(f"JSON: {json.dumps({'id': str(rows[0][0])})}")

        # The short text form for URLs sorts like the IDs (byte order).
        texts = [t for (t,) in conn.execute(
            "SELECT snowflake_to_text(id, 'base62') FROM notes ORDER BY id").fetchall()]
        assert texts == sorted(texts)
        back = conn.execute("SELECT snowflake_from_text(%s, 'base62')", (texts[0],)).fetchone()[0]
        assert back == min(i for i, _, _ in rows)
        print(f"base62: {texts[0]}")


if __name__ == "__main__":
    main()
