"""Opaque IDs on a real server: round trips as the application's role, text
altered or made elsewhere refused alike, key rotation without broken links,
and the key out of reach of every role but the superuser: from SQL, from
pg_settings (even with pg_read_all_settings), from the status, from the
server log and from error messages."""

import os
import secrets
import shutil

import psycopg2
from harness import WORK, Server, _as_postgres, application_role, server, servers, started, write_opaque_keys

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
KEYS = "opaque.keys"


def keys_path(srv, inside=False):
    """Outside the data directory, as the README advises (a base backup, which
    any REPLICATION role may take, copies everything inside)."""
    return os.path.join(srv.data if inside else srv.dir, KEYS)


def use_keys(srv, text, mode=0o600, inside=False):
    write_opaque_keys(srv, text, mode, inside)
    srv.set_conf(snowflake_id__opaque_keys_file=f"'{keys_path(srv, inside)}'")
    srv.reload_and_wait()


def app(srv):
    return srv.connect(dbname="appdb", user="app").cursor()


def error_of(cur, query, args=None):
    try:
        cur.execute(query, args)
    except psycopg2.Error as e:
        return e.pgcode, e.diag.message_primary, e.diag.message_hint or "", e.diag.message_detail or ""
    raise AssertionError(f"no error from {query}")


def test_round_trip_every_layout_and_the_extremes_as_the_application():
    with server("opaque-round-trip") as srv:
        application_role(srv)
        code, msg, hint, _ = error_of(app(srv), "SELECT snowflake_to_opaque(1)")
        assert (code, msg) == ("55000", "no key for opaque IDs is set"), (code, msg)
        assert "snowflake_id.opaque_keys_file" in hint
        use_keys(srv, f"1 {secrets.token_hex(32)}\n")
        cur = app(srv)
        cur.execute(
            "SELECT i, snowflake_to_opaque(i), snowflake_from_opaque(snowflake_to_opaque(i)) FROM ("
            " SELECT unnest(ARRAY[0, 1, 9223372036854775807, -1, -9223372036854775808]::bigint[])"
            " UNION ALL SELECT snowflake_from_timestamp(least(now(), ends - interval '1 day'), name) + k"
            "   FROM snowflake_layouts(), generate_series(0, 3) k"
            " UNION ALL SELECT snowflake_nextval() FROM generate_series(1, 2000)) v(i)")
        rows = cur.fetchall()
        assert len(rows) == 5 + 8 * 4 + 2000
        for i, text, back in rows:
            assert back == i, (i, text, back)
            assert len(text) == 17 and text[0] == "B" and set(text) <= set(ALPHABET), text
        texts = [t for _, t, _ in rows]
        assert len(set(texts)) == len(texts)


def test_altered_and_foreign_text_is_refused_with_one_message():
    with server("opaque-tamper") as srv:
        application_role(srv)
        use_keys(srv, f"1 {secrets.token_hex(32)}\n")
        cur = app(srv)
        cur.execute("SELECT snowflake_to_opaque(snowflake_nextval())")
        good = cur.fetchone()[0]
        altered = []
        for i in range(17):
            for c in (ALPHABET[(ALPHABET.index(good[i]) + 1) % 64], ALPHABET[(ALPHABET.index(good[i]) + 37) % 64]):
                altered.append(good[:i] + c + good[i + 1:])
        # Made under another key, as on another server.
        with server("opaque-elsewhere") as elsewhere:
            use_keys(elsewhere, f"1 {secrets.token_hex(32)}\n")
            server_text = elsewhere.one("SELECT snowflake_to_opaque(12345)")
        other = [server_text, "", "B", good[:-1], good + "A", good.replace(good[5], "+", 1), "é" * 17, "x" * 100_000]
        seen = set()
        for text in altered + other:
            code, msg, hint, detail = error_of(cur, "SELECT snowflake_from_opaque(%s)", (text,))
            seen.add((code, msg, hint, detail))
        assert seen == {("22P02", "invalid opaque snowflake ID",
                         "An opaque ID is 17 characters made by snowflake_to_opaque() on a server that still has the key it was made with.",
                         "")}, seen


def test_rotation_keeps_old_links_and_reaches_open_sessions():
    with server("opaque-rotation") as srv:
        application_role(srv)
        k1, k2 = secrets.token_hex(32), secrets.token_hex(32)
        use_keys(srv, f"1 {k1}\n")
        pooled = app(srv)  # a session that stays open through the rotation
        pooled.execute("SELECT i, snowflake_to_opaque(i) FROM (SELECT snowflake_nextval() i) s")
        id_1, old = pooled.fetchone()
        # Stage the new key everywhere first: decodes, makes nothing yet.
        use_keys(srv, f"1 {k1}\n2 {k2} decode-only\n")
        pooled.execute("SELECT snowflake_to_opaque(%s)", (id_1,))
        assert pooled.fetchone()[0] == old
        # Switch: new text under key 2, in the open session too; old still decodes.
        use_keys(srv, f"1 {k1}\n2 {k2}\n")
        pooled.execute("SELECT snowflake_to_opaque(%s), snowflake_from_opaque(%s)", (id_1, old))
        new, back = pooled.fetchone()
        assert new[0] == "C" and new != old and back == id_1
        pooled.execute("SELECT snowflake_from_opaque(%s)", (new,))
        assert pooled.fetchone()[0] == id_1
        # Retire key 1: its links are refused, key 2's live on.
        use_keys(srv, f"2 {k2}\n")
        assert error_of(pooled, "SELECT snowflake_from_opaque(%s)", (old,))[0] == "22P02"
        pooled.execute("SELECT snowflake_from_opaque(%s)", (new,))
        assert pooled.fetchone()[0] == id_1


def test_the_key_is_out_of_reach_of_every_role_but_the_superuser():
    with server("opaque-secret") as srv:
        application_role(srv)
        key = secrets.token_hex(32)
        use_keys(srv, f"7 {key}\n")
        srv.sql("CREATE ROLE settings_reader LOGIN IN ROLE pg_read_all_settings")
        srv.sql("CREATE ROLE monitor LOGIN IN ROLE pg_monitor")
        srv.sql("GRANT CONNECT ON DATABASE appdb TO settings_reader, monitor")
        path = keys_path(srv)
        seen = []
        for user in ("app", "settings_reader", "monitor"):
            conn = srv.connect(dbname="appdb", user=user)
            cur = conn.cursor()
            cur.execute("SELECT snowflake_to_opaque(42)")
            assert cur.fetchone()[0][0] == "H"  # works for every role, under key 7
            for q in (
                "SELECT string_agg(name || '=' || coalesce(setting, ''), ',') FROM pg_settings",
                "SELECT string_agg(coalesce(setting, ''), ',') FROM pg_file_settings",
                "SELECT current_setting('snowflake_id.opaque_keys_file')",
                f"SELECT pg_read_file('{path}')",
                f"SELECT pg_read_binary_file('{path}')::text",
                f"COPY (SELECT 1) TO PROGRAM 'cat {path}'",
                "CREATE TEMP TABLE k (line text); COPY k FROM '" + path + "'; SELECT string_agg(line, ',') FROM k",
                "SELECT row_to_json(s)::text FROM snowflake_id.snowflake_status s",
            ):
                try:
                    cur.execute(q)
                    seen.append((user, q, str(cur.fetchall())))
                except psycopg2.Error as e:
                    seen.append((user, q, f"{e.pgcode} {e}"))
                    conn.rollback()
            conn.close()
        for user, q, got in seen:
            assert key not in got, (user, q)
        by = {(u, q[:30]): g for u, q, g in seen}
        # What each could read: the path's value only with pg_read_all_settings.
        setting = "SELECT current_setting('snowfl"
        assert by[("app", setting)].startswith("42501"), by[("app", setting)]
        assert KEYS in by[("settings_reader", setting)], by[("settings_reader", setting)]
        for user in ("app", "settings_reader", "monitor"):
            assert by[(user, "SELECT pg_read_file('" + path[:9])].startswith("42501")
        # Errors of a broken file reach the log by line, never by content,
        # and the caller learns only that the file cannot be used.
        use_keys(srv, f"1 {key[:-1]}\n")
        code, msg, hint, detail = error_of(app(srv), "SELECT snowflake_to_opaque(1)")
        assert (code, msg) == ("55000", "the key file for opaque IDs cannot be used"), (code, msg)
        assert key[:-1] not in msg + hint + detail and path not in msg + hint + detail
        use_keys(srv, f"1 {key}\n", mode=0o644)
        assert error_of(app(srv), "SELECT snowflake_from_opaque('BAAAAAAAAAAAAAAAA')")[0] == "55000"
        log = srv.log_text()
        assert "line 1 of the opaque ID key file has a key that is not 64 hex digits" in log
        assert "can be read by others than the server (mode 0644)" in log
        assert key[:-1] not in log, "the key reached the server log"


def test_public_lookups_answer_null_and_a_broken_reload_keeps_the_keys_sessions_have():
    with server("opaque-availability") as srv:
        application_role(srv)
        code, _, _, _ = error_of(app(srv), "SELECT snowflake_from_opaque_or_null('x')")
        assert code == "55000", "no key is an error even for the NULL form"
        key = secrets.token_hex(32)
        use_keys(srv, f"1 {key}\n")
        early = app(srv)
        early.execute("SELECT snowflake_to_opaque(77)")
        good = early.fetchone()[0]
        early.execute("SELECT snowflake_from_opaque_or_null(%s), snowflake_from_opaque_or_null(%s),"
                      " snowflake_from_opaque_or_null('')", (good, good[:-1] + ("A" if good[-1] != "A" else "B")))
        assert early.fetchone() == (77, None, None)
        # A typo in a rotation, then a reload: sessions that had keys keep them.
        use_keys(srv, f"1 {key}\n2 {secrets.token_hex(31)}\n")
        early.execute("SELECT snowflake_from_opaque(%s)", (good,))
        assert early.fetchone()[0] == 77
        assert "keeps the opaque ID keys it read before" in srv.log_text()
        # A session that starts now has none, until the file is fixed: then
        # it reads it again at its next call, without waiting for a reload.
        late = app(srv)
        assert error_of(late, "SELECT snowflake_from_opaque(%s)", (good,))[0] == "55000"
        write_opaque_keys(srv, f"1 {key}\n")
        late.execute("SELECT snowflake_from_opaque(%s)", (good,))
        assert late.fetchone()[0] == 77


def test_a_replication_role_copies_a_key_file_inside_the_data_directory_only():
    with server("opaque-backup") as srv:
        key_out, key_in = secrets.token_hex(32), secrets.token_hex(32)
        write_opaque_keys(srv, f"1 {key_in}\n", inside=True)
        use_keys(srv, f"1 {key_out}\n")
        srv.sql("CREATE ROLE cdc LOGIN REPLICATION")
        backup = os.path.join(WORK, "opaque-backup-copy")
        shutil.rmtree(backup, ignore_errors=True)
        _as_postgres([f"{srv.bin}/pg_basebackup", "-h", srv.dir, "-p", str(srv.port), "-U", "cdc",
                      "-D", backup, "-X", "none", "-c", "fast", "--no-sync"])
        try:
            # Every byte of the backup, not only a file of the key file's name.
            found = {}
            for root, _, files in os.walk(backup):
                for f in files:
                    with open(os.path.join(root, f), "rb") as fh:
                        data = fh.read()
                    for key in (key_in, key_out):
                        if key.encode() in data:
                            found.setdefault(key, []).append(os.path.relpath(os.path.join(root, f), backup))
            assert found.get(key_in) == [KEYS], found
            assert key_out not in found, found
        finally:
            shutil.rmtree(backup, ignore_errors=True)


def test_deleting_the_file_revokes_every_key_at_the_next_reload():
    with server("opaque-revoke") as srv:
        application_role(srv)
        use_keys(srv, f"1 {secrets.token_hex(32)}\n")
        pooled = app(srv)
        pooled.execute("SELECT snowflake_to_opaque(5)")
        link = pooled.fetchone()[0]
        os.remove(keys_path(srv))
        srv.reload_and_wait()
        # Even the session that had the keys: gone is revoked, not a mistake.
        assert error_of(pooled, "SELECT snowflake_from_opaque(%s)", (link,))[0] == "55000"
        # A mode too open is fixed by chmod alone: read again, no reload needed.
        write_opaque_keys(srv, f"1 {secrets.token_hex(32)}\n", mode=0o644)
        assert error_of(pooled, "SELECT snowflake_to_opaque(5)")[0] == "55000"
        os.chmod(keys_path(srv), 0o600)
        pooled.execute("SELECT length(snowflake_to_opaque(5))")
        assert pooled.fetchone()[0] == 17


def test_a_key_file_named_in_the_configuration_file_is_in_force_from_the_first_session_of_every_start():
    """Set in postgresql.conf, never reloaded: opaque IDs work in the first
    session after the start, a restart, a crash restart (kill -9) and the
    promotion of a standby that has the same setting. (The prefix was once
    reserved before this setting was defined, and Postgres dropped its value
    at every start, until a reload.)"""
    with servers() as made:
        s = Server("opaque-conf")
        made.append(s)
        path = write_opaque_keys(s, f"1 {secrets.token_hex(32)}\n")
        s.set_conf(snowflake_id__opaque_keys_file=f"'{path}'", wal_level="replica")
        s.start()
        s.sql("CREATE EXTENSION snowflake_id")
        first = s.one("SELECT snowflake_to_opaque(42)")
        assert s.one("SELECT snowflake_from_opaque(%s)", (first,)) == 42
        assert "invalid configuration parameter name" not in s.log_text()
        s.restart()
        assert s.one("SELECT snowflake_from_opaque(%s)", (first,)) == 42
        s.kill9_all()
        s.start()
        assert s.one("SELECT snowflake_from_opaque(%s)", (first,)) == 42
        # A standby with the same configuration (the copy's postgresql.conf
        # names the same file, outside the data directory), promoted.
        standby = started(made, "opaque-conf-standby", copy_of=s, standby=True)
        standby.promote()
        standby.wait_for("SELECT NOT pg_is_in_recovery()")
        assert standby.one("SELECT snowflake_from_opaque(%s)", (first,)) == 42
        assert standby.one("SELECT snowflake_to_opaque(42)") == first
        for srv in (s, standby):
            assert "opaque_keys_file" not in srv.log_text(), srv.log_text()[-2000:]


def test_a_file_there_but_unusable_at_a_reload_keeps_every_sessions_keys_and_only_gone_or_unset_revokes():
    """An operator's slips while rotating: the file saved by an editor in
    Latin-1 (one byte that is no UTF-8), with a byte order mark, or owned by
    root and closed to the server. Sessions that hold keys keep them, each
    slip is named in the log; a file that is gone, or the setting cleared,
    revokes them."""
    with server("opaque-slips") as srv:
        application_role(srv)
        key = secrets.token_hex(32)
        use_keys(srv, f"1 {key}\n")
        held = app(srv)
        held.execute("SELECT snowflake_to_opaque(42)")
        link = held.fetchone()[0]
        path = keys_path(srv)

        def write_bytes(data, owner_root=False):
            with open(path + ".new", "wb") as f:
                f.write(data)
            if not owner_root:
                shutil.chown(path + ".new", "postgres", "postgres")
            os.chmod(path + ".new", 0o600)
            os.replace(path + ".new", path)

        slips = [
            (f"# rotated by Jos\xe9\n1 {key}\n".encode("latin-1"),
             False, "line 1 of the opaque ID key file is not UTF-8 (byte 0xE9)"),
            (b"\xef\xbb\xbf" + f"1 {key}\n".encode(), False, "begins with a byte order mark (BOM)"),
            (f"1 {key}\n".encode(), True, "could not open the opaque ID key file"),
        ]
        for data, owner_root, said in slips:
            write_bytes(data, owner_root)
            srv.reload_and_wait()
            held.execute("SELECT snowflake_from_opaque(%s)", (link,))
            assert held.fetchone()[0] == 42, said
            assert said in srv.log_text(), said
            assert "keeps the opaque ID keys it read before the file became unusable" in srv.log_text()
            # Fixed: every session reads it again.
            write_bytes(f"1 {key}\n".encode())
            srv.reload_and_wait()
            fresh = app(srv)
            fresh.execute("SELECT snowflake_from_opaque(%s)", (link,))
            assert fresh.fetchone()[0] == 42
        # The setting cleared: revoked, in the session that had the keys too.
        srv.set_conf(snowflake_id__opaque_keys_file=None)
        srv.reload_and_wait()
        code, msg, _, _ = error_of(held, "SELECT snowflake_from_opaque(%s)", (link,))
        assert (code, msg) == ("55000", "no key for opaque IDs is set"), (code, msg)
        # A key file inside the data directory works, and the log says why it should not be there.
        use_keys(srv, f"1 {key}\n", inside=True)
        held.execute("SELECT snowflake_from_opaque(%s)", (link,))
        assert held.fetchone()[0] == 42
        assert "is inside the data directory: every base backup copies it" in srv.log_text()
