// Recipe (f): `drizzle-kit pull` of a database with snowflake keys, as the
// application role, and a round trip through the schema it writes.
//
// What drizzle-kit 0.31.11 writes, seen in its output (and read in
// node_modules/drizzle-kit/bin.cjs, where a bigint column is printed with
// `{ mode: "number" }` and the comment "You can use { mode: "bigint" } if
// numbers are exceeding js number limitations"): every bigint column, keys
// and foreign keys included, as `bigint({ mode: "number" })`. A snowflake ID
// of the default layout does not fit a Number: read through that schema,
// most IDs of a burst come back as another row's. The fix is one command
// after every pull (the guide's), after which the same round trip is exact;
// on js53, `mode: "number"` is exact as it is.
//
// The pull runs in a directory of its own (a temporary one, with this
// recipe's node_modules linked in), so that runs beside each other never
// share its files. The round trip is TypeScript, as pull writes it, run with
// tsx (a dependency of drizzle-kit).
//
// Run: PGHOST=... PGPORT=... PGUSER=app PGDATABASE=appdb node drizzle-kit-pull.mjs

import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { check, checkLayout, programTimeoutMs, run } from './lib/check.mjs';

const here = dirname(fileURLToPath(import.meta.url));

const TABLES = `
  DROP TABLE IF EXISTS pull_posts, pull_users;
  CREATE TABLE pull_users (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), name text NOT NULL);
  CREATE TABLE pull_posts (id bigint PRIMARY KEY DEFAULT snowflake_nextval(),
                           author_id bigint NOT NULL REFERENCES pull_users, title text)`;

const CONFIG = `import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  out: './drizzle',
  tablesFilter: ['pull_*'],
  dbCredentials: {
    host: process.env.PGHOST ?? 'localhost',
    port: Number(process.env.PGPORT ?? 5432),
    user: process.env.PGUSER,
    password: process.env.PGPASSWORD || undefined,
    database: process.env.PGDATABASE,
    ssl: false,
  },
});
`;

// 100 users inserted through drizzle with the pulled schema, in one
// statement, and read back: the IDs as drizzle hands them over.
const ROUND_TRIP = `import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import * as schema from './drizzle/schema.ts';

const client = new pg.Client();
await client.connect();
const db = drizzle({ client, schema });
const inserted = await db.insert(schema.pullUsers)
  .values(Array.from({ length: 100 }, (_, i) => ({ name: 'user ' + i }))).returning();
const read = await db.select().from(schema.pullUsers);
console.log(JSON.stringify({ inserted: inserted.map((u) => [u.name, String(u.id)]),
                             read: read.map((u) => [u.name, String(u.id)]) }));
await client.end();
`;

function sh(command, args, cwd) {
  const out = spawnSync(command, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: programTimeoutMs });
  check(out.status === 0, `${command} ${args.join(' ')} failed:\n${out.stdout}${out.stderr}`);
  return out.stdout;
}

// The IDs drizzle handed over that are not the server's, by name.
async function wrongIds(client, dir) {
  await client.query('TRUNCATE pull_posts, pull_users');
  const { inserted, read } = JSON.parse(sh(join(here, 'node_modules/.bin/tsx'), ['round-trip.ts'], dir));
  const truth = new Map((await client.query('SELECT name, id::text AS id FROM pull_users')).rows.map((r) => [r.name, r.id]));
  check(truth.size === 100 && inserted.length === 100 && read.length === 100, 'the round trip did not make 100 users');
  return [...inserted, ...read].filter(([name, id]) => truth.get(name) !== id).length;
}

await run('drizzle-kit-pull', async () => {
  const client = new pg.Client();
  await client.connect();
  const dir = mkdtempSync(join(tmpdir(), 'snowflake-pull-'));
  try {
    const layout = checkLayout((await client.query(
      "SELECT current_setting('snowflake_id.layout') AS layout")).rows[0].layout);
    await client.query(TABLES);
    symlinkSync(join(here, 'node_modules'), join(dir, 'node_modules'));
    writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
    writeFileSync(join(dir, 'drizzle.config.js'), CONFIG);
    writeFileSync(join(dir, 'round-trip.ts'), ROUND_TRIP);
    sh(join(here, 'node_modules/.bin/drizzle-kit'), ['pull'], dir);
    const pulled = readFileSync(join(dir, 'drizzle/schema.ts'), 'utf8');
    const numbers = pulled.match(/bigint\([^)]*\{ mode: "number" \}\)/g) ?? [];
    check(numbers.length === 3, `pull wrote ${numbers.length} bigint columns with mode "number", not 3:\n${pulled}`);
    check(pulled.includes('.default(sql`snowflake_nextval()`)'), `pull lost the snowflake default:\n${pulled}`);
    const before = await wrongIds(client, dir);
    if (layout === 'js53') check(before === 0, `js53: ${before} IDs wrong with mode "number"`);
    else check(before > 0, 'mode "number" got every ID right: this check proves nothing');
    console.log(`pulled: 3 bigint columns as { mode: "number" }; through them ${before} of 200 IDs came back wrong`);

    // #region guide:kit-pull-fix
    // After every `drizzle-kit pull`: bigint columns as BigInt, exact.
    //   sed -i 's/{ mode: "number" }/{ mode: "bigint" }/g' drizzle/schema.ts
    // #endregion
    sh('sed', ['-i', 's/{ mode: "number" }/{ mode: "bigint" }/g', 'drizzle/schema.ts'], dir);
    const fixed = readFileSync(join(dir, 'drizzle/schema.ts'), 'utf8');
    check(!fixed.includes('mode: "number"') && (fixed.match(/bigint\([^)]*\{ mode: "bigint" \}\)/g) ?? []).length === 3,
      `the fix left:\n${fixed}`);
    const after = await wrongIds(client, dir);
    check(after === 0, `${after} IDs still wrong after the fix`);
    console.log('after the fix: { mode: "bigint" }, 200 of 200 IDs exact');
  } finally {
    await client.query('DROP TABLE IF EXISTS pull_posts, pull_users');
    await client.end();
    rmSync(dir, { recursive: true, force: true });
  }
});
