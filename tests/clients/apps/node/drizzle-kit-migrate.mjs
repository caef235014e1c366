// Recipe (f): `drizzle-kit generate` + `drizzle-kit migrate` into a fresh
// database, as the application role: migrations replayed where nothing was
// set up by hand (a new environment, a CI database).
//
// What drizzle-kit 0.31.11 does, seen here: `generate` writes the tables of
// kit/schema.js with `DEFAULT snowflake_nextval()` and no `CREATE
// EXTENSION` (it never manages extensions), so `migrate` into a fresh
// database fails on the first table (`function snowflake_nextval() does not
// exist`), exiting 1 after printing only "applying migrations...". A custom
// migration made first (`generate --custom`), holding the one line, fixes it:
// migrations apply in the order they were generated.
//
// It checks: without the custom migration, migrate fails and creates no
// table; with it, migrate applies both, the extension and the tables are
// there, a second migrate applies nothing, and 100 posts inserted in one
// statement through drizzle-orm get exact IDs. It makes two databases and
// drops them.
//
// Run: PGHOST=... PGPORT=... PGUSER=app PGDATABASE=appdb node drizzle-kit-migrate.mjs

import { spawnSync } from 'node:child_process';
import { readdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { sql } from 'drizzle-orm';
import { kitPosts, kitUsers } from './kit/schema.js';
import { check, digits, programTimeoutMs, run } from './lib/check.mjs';
import { withFreshDatabases } from './lib/fresh-databases.mjs';

const here = dirname(fileURLToPath(import.meta.url));

function kit(args, env) {
  const r = spawnSync(join(here, 'node_modules', '.bin', 'drizzle-kit'), [...args, '--config=kit/drizzle.migrate.config.js'], {
    cwd: here, env, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8', timeout: programTimeoutMs,
  });
  const out = `${r.stdout}\n${r.stderr}`.replace(/\x1b\[[0-9;]*[A-Za-z]/g, ''); // eslint-disable-line no-control-regex
  return { status: r.status, out };
}

const sqlFiles = (dir) => readdirSync(join(here, dir)).filter((f) => f.endsWith('.sql')).sort();

await run('drizzle-kit-migrate', () => withFreshDatabases(async (dbs) => {
  const tag = `${process.pid}`;
  const fresh = async (name) => {
    // Relative to this folder: drizzle-kit 0.31.11 reads its snapshots at
    // "./" + out, which an absolute path breaks.
    const dir = join('kit-out', name);
    await dbs.fresh(name, join(here, dir));
    return { ...process.env, KIT_OUT: dir, KIT_DATABASE: name };
  };
  const tables = (name) => dbs.tablesIn(name, ['kit_users', 'kit_posts']);

  // Generated alone: no CREATE EXTENSION, and migrate fails.
  const bare = await fresh(`kit_bare_${tag}`);
  const g0 = kit(['generate'], bare);
  check(g0.status === 0, `generate failed:\n${g0.out}`);
  const m0 = kit(['migrate'], bare);
  check(m0.status !== 0, `migrate of the tables alone into a fresh database succeeded:\n${m0.out}`);
  check(!(await tables(`kit_bare_${tag}`)), 'migrate without the extension created tables');
  console.log(`without the extension's migration: migrate exits ${m0.status}, no table made`);

  const env = await fresh(`kit_fresh_${tag}`);
  // #region guide:kit-migrate
  // First, a custom migration that creates the extension; then the tables.
  const custom = kit(['generate', '--custom', '--name=snowflake_id'], env);
  check(custom.status === 0, `generate --custom failed:\n${custom.out}`);
  const [first] = sqlFiles(env.KIT_OUT);
  writeFileSync(join(here, env.KIT_OUT, first), 'CREATE EXTENSION IF NOT EXISTS snowflake_id;\n');
  const generated = kit(['generate'], env);
  const migrated = kit(['migrate'], env);
  // #endregion
  check(generated.status === 0 && sqlFiles(env.KIT_OUT).length === 2,
    `generate after the custom migration: exit ${generated.status}, files ${sqlFiles(env.KIT_OUT)}:\n${generated.out}`);
  check(migrated.status === 0, `migrate failed (exit ${migrated.status}):\n${migrated.out}`);
  check((await tables(`kit_fresh_${tag}`)) === 'kit_posts,kit_users', 'migrate did not create both tables');
  console.log(`with ${first} first: migrate exits 0, both tables made`);
  const again = kit(['migrate'], env);
  check(again.status === 0, `a second migrate failed:\n${again.out}`);

  const client = new pg.Client({ database: `kit_fresh_${tag}` });
  await client.connect();
  try {
    const owner = (await client.query(`SELECT e.extname, r.rolsuper FROM pg_extension e, pg_roles r
      WHERE e.extname = 'snowflake_id' AND r.rolname = current_user`)).rows[0];
    check(owner && !owner.rolsuper, 'the extension is missing, or the role is a superuser');
    const db = drizzle({ client });
    const users = await db.insert(kitUsers).values([{ name: 'a' }, { name: 'b' }])
      .returning({ id: kitUsers.id, idText: sql`${kitUsers.id}::text` });
    const posts = await db.insert(kitPosts)
      .values(Array.from({ length: 100 }, (_, i) => ({ authorId: users[i % 2].id, title: `post ${i}` })))
      .returning({ id: kitPosts.id, idText: sql`${kitPosts.id}::text` });
    check(users.every((u) => digits(u.id) === u.idText), 'kit_users: an id differs from the server\'s');
    check(posts.length === 100 && posts.every((p) => digits(p.id) === p.idText), 'kit_posts: an id differs from the server\'s');
    console.log('migrated tables: 100 posts inserted in one statement, ids exact');
  } finally {
    await client.end();
  }
}));
