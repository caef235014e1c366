// Fresh databases for the recipes that replay migrations into one
// (drizzle-kit-migrate.mjs, typeorm.mjs): made by the application role
// (CREATEDB) from its own database, and dropped, with the folders the
// migrations were written to, whatever the recipe's outcome.

import { rmSync } from 'node:fs';
import pg from 'pg';

// Runs `body({ fresh, tablesIn })`: `fresh(name, dir)` makes database `name`
// (and removes `dir` at the end); `tablesIn(name, tables)` says which of
// `tables` are tables there, as a sorted comma-separated list (null: none).
export async function withFreshDatabases(body) {
  const admin = new pg.Client(); // the application's own database: PGDATABASE
  await admin.connect();
  const made = [];
  const dirs = [];
  const fresh = async (name, dir) => {
    await admin.query(`CREATE DATABASE ${name}`);
    made.push(name);
    dirs.push(dir);
  };
  const tablesIn = async (name, tables) => {
    const c = new pg.Client({ database: name });
    await c.connect();
    try {
      return (await c.query(`SELECT string_agg(relname, ',' ORDER BY relname) AS t FROM pg_class
        WHERE relname = ANY($1) AND relkind = 'r'`, [tables])).rows[0].t;
    } finally {
      await c.end();
    }
  };
  try {
    return await body({ fresh, tablesIn });
  } finally {
    for (const name of made) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  }
}
