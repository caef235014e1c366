// Recipe (d): `drizzle-kit push` of a schema with snowflake keys
// (kit/schema.js, kit/drizzle.config.js), as the application role, with no
// schemaFilter or tablesFilter configured.
//
// What drizzle-kit 0.31.11 does, read from node_modules/drizzle-kit/bin.cjs:
//   - The config's schemaFilter defaults to ["public"]; push introspects
//     tables, views, materialized views, sequences, enums and policies of
//     those schemas only, with no exception for objects that belong to an
//     extension. It never looks at functions. Anything in "public" that the
//     schema file does not declare is dropped: DROP TABLE asks first (a
//     data-loss prompt), DROP VIEW and DROP SEQUENCE do not. (On
//     PostgreSQL 15+ the database owner owns "public", and a schema's owner
//     may drop what is in it, whoever owns it.) So the extension keeps only
//     functions in "public"; its tables and view are in schema "snowflake_id".
//   - `push` flags: --verbose prints the statements, --strict asks before
//     any statement, --force approves data-loss statements without asking.
//     Neither --strict nor --force is used here: statements without data loss
//     run without a prompt, and a data-loss prompt on a stdin that is not a
//     terminal fails ("Interactive prompts require a TTY terminal") instead
//     of dropping anything.
//   - pgPush catches errors from the statements, prints them and still exits
//     0. So this recipe reads the output and the catalogs, not the exit code.
//
// It checks: the first push applies (CREATE TABLE with DEFAULT
// snowflake_nextval(), the foreign key), the second reports "No changes
// detected", neither touches the extension's objects (compared before and
// after from the catalogs), and 100 rows inserted in one statement through
// drizzle-orm get exact IDs. It drops kit_posts and kit_users before and after.
//
// Run: PGHOST=... PGPORT=... PGUSER=app PGDATABASE=appdb node drizzle-kit-push.mjs

import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { eq, sql } from 'drizzle-orm';
import { kitPosts, kitUsers } from './kit/schema.js';
import { check, checkLayout, digits, run } from './lib/check.mjs';

const here = dirname(fileURLToPath(import.meta.url));

// Every object of the extension, with what would change if anyone altered,
// moved, re-owned, re-granted or replaced it.
const EXTENSION_OBJECTS = `
  WITH m AS (
    SELECT d.classid, d.objid
      FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
     WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extname = 'snowflake_id')
  SELECT pg_describe_object(m.classid, m.objid, 0) AS object,
         CASE m.classid
         WHEN 'pg_class'::regclass THEN (
           SELECT concat_ws(' | ', c.relnamespace::regnamespace, c.relkind, pg_get_userbyid(c.relowner), c.relacl,
             (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                     || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END, ', ' ORDER BY a.attnum)
                FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
             (SELECT string_agg(t.tgname, ', ' ORDER BY t.tgname) FROM pg_trigger t WHERE t.tgrelid = c.oid),
             (SELECT string_agg(i.indexrelid::regclass::text, ', ' ORDER BY 1) FROM pg_index i WHERE i.indrelid = c.oid),
             CASE WHEN c.relkind = 'v' THEN md5(pg_get_viewdef(c.oid)) END)
           FROM pg_class c WHERE c.oid = m.objid)
         WHEN 'pg_proc'::regclass THEN (
           SELECT concat_ws(' | ', p.pronamespace::regnamespace, pg_get_userbyid(p.proowner), p.proacl,
             CASE WHEN p.prokind IN ('f', 'p') THEN md5(pg_get_functiondef(p.oid)) END)
           FROM pg_proc p WHERE p.oid = m.objid)
         WHEN 'pg_namespace'::regclass THEN (
           SELECT concat_ws(' | ', pg_get_userbyid(n.nspowner), n.nspacl) FROM pg_namespace n WHERE n.oid = m.objid)
         ELSE '' END AS state
    FROM m
   ORDER BY 1`;

async function snapshot(client) {
  const ext = (await client.query(
    "SELECT extversion, extnamespace::regnamespace::text AS schema FROM pg_extension WHERE extname = 'snowflake_id'")).rows[0];
  check(ext, 'extension snowflake_id is not installed in this database (CREATE EXTENSION snowflake_id, as a superuser)');
  const objects = (await client.query(EXTENSION_OBJECTS)).rows.map((r) => `${r.object}: ${r.state}`);
  return { text: [`extension ${ext.extversion} in ${ext.schema}`, ...objects].join('\n'), count: objects.length };
}

// #region guide:kit-push
// As the application role, no prompt possible: stdin is not a terminal.
function push() {
  const bin = join(here, 'node_modules', '.bin', 'drizzle-kit');
  const r = spawnSync(bin, ['push', '--config=kit/drizzle.config.js', '--verbose'], {
    cwd: here, env: process.env, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8', timeout: 600_000,
  });
  // Without colours and spinner redraws.
  const out = `${r.stdout}\n${r.stderr}`.replace(/\x1b\[[0-9;]*[A-Za-z]/g, ''); // eslint-disable-line no-control-regex
  return { status: r.status, out };
}
// #endregion

function printable(out) {
  return out.split('\n').filter((l) => l.trim() && !/^\[[⣷⣯⣟⡿⢿⣻⣽⣾]\]/.test(l.trim())).map((l) => `  | ${l}`).join('\n');
}

await run('drizzle-kit-push', async () => {
  const client = new pg.Client(); // PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD
  await client.connect();
  try {
    const me = (await client.query(`SELECT current_user AS role, r.rolsuper,
        current_setting('snowflake_id.layout') AS layout,
        pg_get_userbyid(n.nspowner) AS public_owner
      FROM pg_roles r, pg_namespace n WHERE r.rolname = current_user AND n.nspname = 'public'`)).rows[0];
    const layout = checkLayout(me.layout);
    check(!me.rolsuper, `connected as ${me.role}, a superuser: run this as the application role`);
    console.log(`layout ${layout}; role ${me.role} (not a superuser); schema public owned by ${me.public_owner}`);
    // Relations of the extension in "public" are what push would try to drop
    // (or ask whether a new table is one of them renamed).
    const inPublic = (await client.query(`SELECT string_agg(c.relname, ', ' ORDER BY c.relname) AS names
        FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake_id'
        JOIN pg_class c ON c.oid = d.objid AND d.classid = 'pg_class'::regclass
       WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
         AND c.relnamespace = 'public'::regnamespace`)).rows[0].names;
    check(!inPublic, `the installed snowflake_id keeps ${inPublic} in schema public: drizzle-kit push with no `
      + 'filter would try to drop them (or ask whether a new table is one of them renamed). This needs the version '
      + 'that keeps them in schema snowflake_id');
    const before = await snapshot(client);
    console.log(`extension objects before: ${before.count}`);
    await client.query('DROP TABLE IF EXISTS kit_posts, kit_users');

    const first = push();
    const firstOk = first.status === 0 && /Changes applied/.test(first.out) && !/error/i.test(first.out);
    check(firstOk, `first push did not apply cleanly (exit ${first.status}):\n${printable(first.out)}`);
    // Only the application's tables, and nothing else, in what it ran.
    const statements = first.out.split('\n').filter((l) => /^(CREATE|ALTER|DROP|COMMENT|GRANT|REVOKE|TRUNCATE)\b/.test(l.trim()));
    check(statements.every((l) => /"kit_(users|posts)"/.test(l) && !/^\s*(DROP|TRUNCATE)/.test(l)),
      `first push ran statements beyond the schema file's tables:\n${statements.join('\n')}`);
    console.log(`push 1: Changes applied (${statements.length} statements, all on kit_users/kit_posts)`);

    const cols = (await client.query(`SELECT c.relname, a.attname, pg_get_expr(d.adbin, d.adrelid) AS def
        FROM pg_attrdef d JOIN pg_class c ON c.oid = d.adrelid
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
       WHERE c.relname IN ('kit_users', 'kit_posts') AND c.relnamespace = 'public'::regnamespace
       ORDER BY 1`)).rows;
    check(cols.length === 2 && cols.every((c) => c.attname === 'id' && c.def === 'snowflake_nextval()'),
      `the pushed tables' defaults are ${JSON.stringify(cols)}`);
    const fk = (await client.query(`SELECT count(*)::int AS n FROM pg_constraint
       WHERE conrelid = 'public.kit_posts'::regclass AND contype = 'f' AND confrelid = 'public.kit_users'::regclass`)).rows[0].n;
    check(fk === 1, 'kit_posts has no foreign key to kit_users');

    const second = push();
    check(second.status === 0 && /No changes detected/.test(second.out) && !/Changes applied|error/i.test(second.out),
      `second push did not report "No changes detected" (exit ${second.status}):\n${printable(second.out)}`);
    console.log('push 2: No changes detected');

    const after = await snapshot(client);
    check(after.text === before.text, `the extension's objects changed:\nbefore:\n${before.text}\nafter:\n${after.text}`);
    console.log(`extension objects after: ${after.count}, unchanged (schema, owner, grants, columns, triggers, definitions)`);

    // The pushed tables in use: 100 posts in one statement, exact ids.
    const db = drizzle({ client });
    const users = await db.insert(kitUsers).values([{ name: 'a' }, { name: 'b' }])
      .returning({ id: kitUsers.id, idText: sql`${kitUsers.id}::text` });
    const posts = await db.insert(kitPosts)
      .values(Array.from({ length: 100 }, (_, i) => ({ authorId: users[i % 2].id, title: `post ${i}` })))
      .returning({ id: kitPosts.id, idText: sql`${kitPosts.id}::text`, title: kitPosts.title });
    check(users.every((u) => digits(u.id) === u.idText), 'kit_users: an id differs from the server\'s');
    check(posts.length === 100 && posts.every((p) => digits(p.id) === p.idText), 'kit_posts: an id differs from the server\'s');
    for (const p of posts) {
      const r = await db.select({ title: kitPosts.title }).from(kitPosts).where(eq(kitPosts.id, p.id));
      check(r.length === 1 && r[0].title === p.title, `kit_posts where id = ${p.idText} found ${r.length ? r[0].title : 'nothing'}`);
    }
    console.log('pushed tables: 100 posts inserted in one statement, ids exact, each found by its id');
    await client.query('DROP TABLE kit_posts, kit_users');
  } finally {
    await client.end();
  }
});
