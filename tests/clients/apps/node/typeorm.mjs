// Recipe (g): TypeORM migrations replayed into a fresh database, as the
// application role, with the TypeORM CLI (1.1.3) and an ES-module data
// source (orm/data-source.mjs: EntitySchema entities, no decorators).
//
// What TypeORM does, seen here: `migration:generate` writes the tables with
// `DEFAULT snowflake_nextval()` and no `CREATE EXTENSION`, so `migration:run`
// into a fresh database fails on the first table (`function
// snowflake_nextval() does not exist`). A migration made first with
// `migration:create`, whose `up` creates the extension, fixes it: TypeORM
// runs migrations in the order of their timestamps. A `bigint` column comes
// back as a string (node-postgres's default): exact.
//
// It checks: the generated tables alone fail and make nothing; with the
// extension's migration first they apply, a second `migration:generate`
// finds no change (the default is not seen as drift), and 100 users and 100
// posts saved through the data source carry exactly the server's IDs. It
// makes two databases and drops them.
//
// Run: PGHOST=... PGPORT=... PGUSER=app PGDATABASE=appdb node typeorm.mjs

import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { check, programTimeoutMs, run } from './lib/check.mjs';
import { withFreshDatabases } from './lib/fresh-databases.mjs';

const here = dirname(fileURLToPath(import.meta.url));

function typeorm(args, env) {
  const r = spawnSync(join(here, 'node_modules', '.bin', 'typeorm'), args, {
    cwd: here, env, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8', timeout: programTimeoutMs,
  });
  return { status: r.status, out: `${r.stdout}\n${r.stderr}` };
}

// The `up` of the first migration, in place of the empty one
// `migration:create` writes (its source text, as the guide shows it).
class ExtensionFirst {
    async up(queryRunner) {
        await queryRunner.query('CREATE EXTENSION IF NOT EXISTS snowflake_id');
    }
}
const EXTENSION_UP = ExtensionFirst.prototype.up.toString();

await run('typeorm', () => withFreshDatabases(async (dbs) => {
  const fresh = async (name) => {
    const dir = mkdtempSync(join(tmpdir(), `${name}-`));
    await dbs.fresh(name, dir);
    return { ...process.env, ORM_DATABASE: name, ORM_MIGRATIONS: dir };
  };
  const source = ['-d', 'orm/data-source.mjs'];
  const tables = (name) => dbs.tablesIn(name, ['orm_users', 'orm_posts']);

  // The generated tables alone: migration:run fails, nothing made.
  const bare = await fresh(`orm_bare_${process.pid}`);
  const g0 = typeorm(['migration:generate', ...source, join(bare.ORM_MIGRATIONS, 'Tables'), '-o', '--esm'], bare);
  check(g0.status === 0, `migration:generate failed:\n${g0.out}`);
  check(/DEFAULT snowflake_nextval\(\)/.test(readFileSync(join(bare.ORM_MIGRATIONS, readdirSync(bare.ORM_MIGRATIONS)[0]), 'utf8')),
    'the generated migration has no DEFAULT snowflake_nextval()');
  const r0 = typeorm(['migration:run', ...source], bare);
  check(r0.status !== 0 && /snowflake_nextval\(\) does not exist/.test(r0.out),
    `migration:run of the tables alone did not fail as expected (exit ${r0.status}):\n${r0.out.slice(-2000)}`);
  check(!(await tables(bare.ORM_DATABASE)), 'the failed migration:run made tables');
  console.log(`generated tables alone: migration:run exits ${r0.status} (snowflake_nextval() does not exist), nothing made`);

  const env = await fresh(`orm_fresh_${process.pid}`);
  const dir = env.ORM_MIGRATIONS;
  const created = typeorm(['migration:create', join(dir, 'SnowflakeId'), '-o', '--esm'], env);
  check(created.status === 0, `migration:create failed:\n${created.out}`);
  const [first] = readdirSync(dir);
  const text = readFileSync(join(dir, first), 'utf8');
  check(/async up\(queryRunner\) \{\s*\}/.test(text), `migration:create wrote an up() of another shape:\n${text}`);
  writeFileSync(join(dir, first), text.replace(/async up\(queryRunner\) \{\s*\}/, EXTENSION_UP));
  const generated = typeorm(['migration:generate', ...source, join(dir, 'Tables'), '-o', '--esm'], env);
  check(generated.status === 0, `migration:generate failed:\n${generated.out}`);
  const ran = typeorm(['migration:run', ...source], env);
  check(ran.status === 0, `migration:run failed (exit ${ran.status}):\n${ran.out.slice(-3000)}`);
  check((await tables(env.ORM_DATABASE)) === 'orm_posts,orm_users', 'migration:run did not make both tables');
  const again = typeorm(['migration:generate', ...source, join(dir, 'Again'), '-o', '--esm'], env);
  check(/No changes in database schema were found/.test(again.out),
    `a second migration:generate found changes (exit ${again.status}):\n${again.out.slice(-2000)}`);
  console.log(`with ${first} first: migration:run applies both; a second migration:generate finds no change`);

  // The data source in use: IDs as strings, each the server's.
  process.env.ORM_DATABASE = env.ORM_DATABASE;
  process.env.ORM_MIGRATIONS = dir;
  const { default: dataSource, OrmUser, OrmPost } = await import('./orm/data-source.mjs');
  await dataSource.initialize();
  try {
    const users = await dataSource.getRepository(OrmUser)
      .save(Array.from({ length: 100 }, (_, i) => ({ name: `user ${i}` })));
    const posts = await dataSource.getRepository(OrmPost)
      .save(users.map((u, i) => ({ authorId: u.id, title: `post ${i}` })));
    const truth = new Map((await dataSource.query('SELECT name, id::text AS id FROM orm_users')).map((r) => [r.name, r.id]));
    check(users.every((u) => typeof u.id === 'string' && u.id === truth.get(u.name)),
      'a saved user\'s id differs from the server\'s');
    const postTruth = new Map((await dataSource.query('SELECT title, id::text AS id, author_id::text AS a FROM orm_posts'))
      .map((r) => [r.title, r]));
    check(posts.every((p) => p.id === postTruth.get(p.title).id && p.authorId === postTruth.get(p.title).a),
      'a saved post\'s id or author differs from the server\'s');
    const one = await dataSource.getRepository(OrmUser).findOneBy({ id: users[42].id });
    check(one && one.name === 'user 42', 'a user was not found by its id');
    console.log('data source: 100 users and 100 posts saved, every id and author the server\'s, found by id');
  } finally {
    await dataSource.destroy();
  }
}));
