// Recipe (g): Prisma ORM 7.10 (prisma 7.10.1, @prisma/client 7.10.0,
// @prisma/adapter-pg 7.10.1) with snowflake keys (prisma/schema.prisma), as
// the application role.
//
// What is run here, and what is not:
//   - The first migration (prisma/migrations/0_init/migration.sql) replayed
//     into a fresh database, as Prisma replays migrations into its shadow
//     database or a new environment: without its first line, CREATE
//     EXTENSION, it fails ("function snowflake_nextval() does not exist");
//     with it, it applies as the application role (the extension is trusted).
//     The statements are applied with node-postgres, in one transaction as
//     `prisma migrate deploy` applies a migration; `migrate` itself needs
//     Prisma's schema engine, a download (binaries.prisma.sh) the test
//     machines cannot make.
//   - `prisma generate` (the "prisma-client" generator, TypeScript output),
//     which needs no schema engine: PRISMA_SCHEMA_ENGINE_BINARY names one
//     that is never run, so the CLI does not try to download it.
//   - The generated client over @prisma/adapter-pg (prisma/round-trip.ts,
//     run with tsx): createManyAndReturn of 100 users, their 200 posts,
//     findMany with the posts included, findUnique by an ID read from a
//     nested row, and
//     $queryRaw building JSON, with IDs as numbers (rounded above 2^53: the
//     adapter parses json with JSON.parse) and as text (exact). Every ID is
//     compared with the server's own text of it.
//
// Run: PGHOST=... PGPORT=... PGUSER=app PGDATABASE=appdb node prisma.mjs

import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { check, checkLayout, programTimeoutMs, run } from './lib/check.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const MIGRATION = readFileSync(join(here, 'prisma/migrations/0_init/migration.sql'), 'utf8');
const CONFIG = `import { defineConfig } from 'prisma/config';

export default defineConfig({ schema: 'prisma/schema.prisma' });
`;

function sh(command, args, cwd, env) {
  const out = spawnSync(command, args, {
    cwd, env: { ...process.env, ...env }, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: programTimeoutMs,
  });
  check(out.status === 0, `${command} ${args.join(' ')} failed:\n${out.stdout}${out.stderr}`);
  return out.stdout;
}

async function inDatabase(database, body) {
  const client = new pg.Client({ database });
  await client.connect();
  try {
    return await body(client);
  } finally {
    await client.end();
  }
}

await run('prisma', async () => {
  const database = `${process.env.PGDATABASE ?? 'appdb'}_prisma_${process.pid}`;
  const dir = mkdtempSync(join(tmpdir(), 'snowflake-prisma-'));
  const admin = new pg.Client();
  await admin.connect();
  await admin.query(`CREATE DATABASE ${database}`);
  try {
    const layout = checkLayout((await admin.query(
      "SELECT current_setting('snowflake_id.layout') AS layout")).rows[0].layout);

    // The migration, replayed into a database without the extension.
    const withoutFirst = MIGRATION.replace(/^CREATE EXTENSION IF NOT EXISTS snowflake_id;$/m, '');
    check(withoutFirst !== MIGRATION, 'the migration has no CREATE EXTENSION line');
    const failure = await inDatabase(database, async (c) => {
      try {
        await c.query(`BEGIN; ${withoutFirst}; COMMIT`);
        return null;
      } catch (e) {
        await c.query('ROLLBACK');
        return e.message;
      }
    });
    check(failure && failure.includes('snowflake_nextval() does not exist'),
      `without CREATE EXTENSION the migration gave: ${failure}`);
    await inDatabase(database, (c) => c.query(`BEGIN; ${MIGRATION}; COMMIT`));
    console.log(`migration 0_init: without its CREATE EXTENSION line "${failure}"; with it, applied`);

    // prisma generate, then the client.
    symlinkSync(join(here, 'node_modules'), join(dir, 'node_modules'));
    writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
    writeFileSync(join(dir, 'prisma.config.ts'), CONFIG);
    mkdirSync(join(dir, 'prisma'));
    copyFileSync(join(here, 'prisma/schema.prisma'), join(dir, 'prisma/schema.prisma'));
    copyFileSync(join(here, 'prisma/round-trip.ts'), join(dir, 'round-trip.ts'));
    // No update check (CHECKPOINT_DISABLE): the CLI would ask Prisma's servers.
    sh(join(here, 'node_modules/.bin/prisma'), ['generate'], dir,
      { PRISMA_SCHEMA_ENGINE_BINARY: '/bin/false', CHECKPOINT_DISABLE: '1' });
    // DATABASE_URL as an application sets it; here through the socket directory.
    const url = new URL(`postgresql://${encodeURIComponent(process.env.PGUSER ?? '')}@localhost/${database}`);
    if (process.env.PGHOST) url.searchParams.set('host', process.env.PGHOST);
    if (process.env.PGPORT) url.searchParams.set('port', process.env.PGPORT);
    const got = JSON.parse(sh(join(here, 'node_modules/.bin/tsx'), ['round-trip.ts'], dir,
      { DATABASE_URL: url.toString() }));

    const truth = await inDatabase(database, async (c) => ({
      users: new Map((await c.query('SELECT name, id::text AS id FROM prisma_users')).rows.map((r) => [r.name, r.id])),
      posts: new Map((await c.query('SELECT title, id::text AS id, author_id::text AS author FROM prisma_posts'))
        .rows.map((r) => [r.title, r])),
    }));
    check(got.made.length === 100 && got.made.every(([name, id, type]) => type === 'bigint' && truth.users.get(name) === id),
      'createManyAndReturn: an ID is not a BigInt, or not the server\'s');
    let nested = 0;
    for (const [name, id, posts] of got.users) {
      check(truth.users.get(name) === id, `findMany: ${name} has ${id}, the server ${truth.users.get(name)}`);
      for (const [title, postId, authorId] of posts) {
        const t = truth.posts.get(title);
        check(t && t.id === postId && t.author === authorId && authorId === id,
          `findMany include: ${title} has ${postId} by ${authorId}, the server ${t?.id} by ${t?.author}`);
        nested++;
      }
    }
    check(nested === 200, `findMany include: ${nested} posts, not 200`);
    check(truth.users.get(got.one[0]) === got.one[1], 'findUnique by a nested ID found another row');
    check(got.stringifyError && got.stringifyError.includes('BigInt'), `JSON.stringify of a row: ${got.stringifyError}`);
    check(got.rawText.every(([name, id]) => truth.users.get(name) === id), '$queryRaw with id::text: an ID is wrong');
    const rounded = got.rawNumbers.filter(([name, id]) => truth.users.get(name) !== id).length;
    if (layout === 'js53') check(rounded === 0, `js53: $queryRaw JSON rounded ${rounded} IDs`);
    else check(rounded > 0, '$queryRaw JSON with bigint IDs rounded none: this check proves nothing');
    console.log(`client: 100 users and 200 nested posts exact BigInts; JSON.stringify of a row: "${got.stringifyError}";`
      + ` $queryRaw JSON: ${rounded} of 100 IDs rounded as numbers, 0 as text`);
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await admin.end();
    rmSync(dir, { recursive: true, force: true });
  }
});
