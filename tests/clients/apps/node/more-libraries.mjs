// Recipe (e): the query builders and ORMs that sit on the two drivers, with
// the drivers' recipes and nothing more: Knex and Kysely on node-postgres (pg),
// Drizzle ORM on postgres.js.
//
// What each does, read from node_modules:
//   - knex 3.3.0 (lib/dialects/postgres/index.js): its 'pg' client requires
//     the `pg` module and uses its global type registry, so pg.types'
//     parsers (lib/pg-json.mjs) reach every query; bigint stays pg's string.
//   - kysely 0.28.19 (dist/esm/dialect/postgres/postgres-driver.js): the
//     PostgresDialect runs queries on the pg Pool it is given, again with
//     pg's global parsers; its jsonArrayFrom / jsonObjectFrom helpers
//     (dist/esm/helpers/postgres.js) nest rows with json_agg / to_json, which
//     the json parser then reads losslessly.
//   - drizzle-orm 0.45.4 (postgres-js/driver.js): `drizzle({ client })`
//     replaces only the date and time parsers of the postgres.js client (and
//     the json serializers); the client's own json type (lib/postgres-json.mjs)
//     parses what relational queries (`with:`) nest as JSON.
// Without the parsers, nested IDs round: each library is also run once as it
// comes (pg's JSON.parse put back for Knex and Kysely, a postgres.js client
// without the json type for Drizzle), and the IDs it got wrong are counted.
//
// Each library gets one connection: the test tables are temporary.
//
// Run: PGHOST=... PGPORT=... PGUSER=app PGDATABASE=appdb node more-libraries.mjs

// #region guide:more-libraries
import pg from 'pg';
import './lib/pg-json.mjs'; // node-postgres: the lossless json and jsonb parsers, on pg.types
import knex from 'knex';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { jsonArrayFrom } from 'kysely/helpers/postgres';
import postgres from 'postgres';
import { json } from './lib/postgres-json.mjs'; // postgres.js: the json type
import { drizzle } from 'drizzle-orm/postgres-js';
import { bigint, pgTable, text } from 'drizzle-orm/pg-core';
import { relations } from 'drizzle-orm';

// Knex and Kysely run on pg: its global parsers are theirs. (One connection
// each here, as the recipe's tables are temporary.)
const kx = knex({ client: 'pg', connection: {}, pool: { min: 1, max: 1 } }); // PG* variables
const ky = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ max: 1 }) }) });
// Drizzle on postgres.js: the client carries the json type.
const authors = pgTable('authors', {
  id: bigint('id', { mode: 'bigint' }).primaryKey(),
  name: text('name').notNull(),
});
const notes = pgTable('notes', {
  id: bigint('id', { mode: 'bigint' }).primaryKey(),
  authorId: bigint('author_id', { mode: 'bigint' }).notNull(),
  body: text('body').notNull(),
});
const authorsRelations = relations(authors, ({ many }) => ({ notes: many(notes) }));
const notesRelations = relations(notes, ({ one }) => ({
  author: one(authors, { fields: [notes.authorId], references: [authors.id] }),
}));
const client = postgres({ types: { json }, max: 1 });
const dz = drizzle({ client, schema: { authors, notes, authorsRelations, notesRelations } });
// #endregion

import {
  check, checkLayout, checkNotes, changedByNumber, run, INSERT_NOTES_SQL, SETUP_SQL,
} from './lib/check.mjs';

// The notes nested under their authors, checked against the server's truth.
function checkNested(what, parents, truth, layout, idType) {
  check(parents.length === 4, `${what}: ${parents.length} authors, not 4`);
  for (const p of parents) checkNotes(what, p.notes, truth, layout, idType);
}

// How many nested IDs (and their authors) a library as it comes got wrong.
function wrongAsItComes(parents, truth) {
  return parents.flatMap((p) => p.notes).filter((n) => {
    const t = truth.get(n.body);
    return BigInt(n.id).toString() !== t.id_text || BigInt(n.author_id ?? n.authorId).toString() !== t.author_text;
  }).length;
}

// pg's own json parser, for a run of Knex or Kysely as they come.
async function withPlainJson(body) {
  const lossless = [pg.types.getTypeParser(114), pg.types.getTypeParser(3802)];
  pg.types.setTypeParser(114, JSON.parse);
  pg.types.setTypeParser(3802, JSON.parse);
  try {
    return await body();
  } finally {
    pg.types.setTypeParser(114, lossless[0]);
    pg.types.setTypeParser(3802, lossless[1]);
  }
}

async function setUp(query) {
  for (const q of SETUP_SQL) await query(q);
  const inserted = await query(INSERT_NOTES_SQL);
  return new Map(inserted.map((r) => [r.body, r]));
}


const plain = postgres({ max: 1 });

await run('more-libraries', async () => {
  try {
    // Knex
    const truthK = await setUp(async (q) => (await kx.raw(q)).rows);
    const layout = checkLayout((await kx.raw("SELECT current_setting('snowflake_id.layout') AS l")).rows[0].l);
    // On js53 JSON numbers stay Numbers (exact); above 2^53 they arrive as strings.
    const jsonIdType = layout === 'js53' ? 'number' : 'string';
    const lossy = changedByNumber([...truthK.values()].map((r) => r.id_text));
    if (layout !== 'js53') check(lossy > 0, 'IDs above 2^53: some must change as Numbers, or this check proves nothing');

    // #region guide:knex-use
    // Columns: strings (pg's default for bigint). Nested rows: the json parser.
    const kRows = await kx('notes').select('id', 'author_id', 'body').orderBy('id');
    const kNested = await kx('authors as a').select('a.id', kx.raw(
      '(SELECT json_agg(n ORDER BY n.id) FROM notes n WHERE n.author_id = a.id) AS notes'));
    // #endregion
    checkNotes('Knex rows', kRows, truthK, layout, 'string');
    checkNested('Knex json_agg', kNested, truthK, layout, jsonIdType);
    const kNaive = wrongAsItComes(await withPlainJson(() => kx('authors as a').select('a.id', kx.raw(
      '(SELECT json_agg(n ORDER BY n.id) FROM notes n WHERE n.author_id = a.id) AS notes'))), truthK);
    console.log(`Knex: 100 nested rows exact; as it comes, ${kNaive} of 100 wrong`);

    // Kysely
    const truthY = await setUp(async (q) => (await sql.raw(q).execute(ky)).rows);
    // #region guide:kysely-use
    const yRows = await ky.selectFrom('notes').select(['id', 'author_id', 'body']).orderBy('id').execute();
    const yNested = await ky.selectFrom('authors').select((eb) => [
      'authors.id',
      jsonArrayFrom(eb.selectFrom('notes').select(['notes.id', 'notes.author_id', 'notes.body'])
        .whereRef('notes.author_id', '=', 'authors.id').orderBy('notes.id')).as('notes'),
    ]).execute();
    // #endregion
    checkNotes('Kysely rows', yRows, truthY, layout, 'string');
    checkNested('Kysely jsonArrayFrom', yNested, truthY, layout, jsonIdType);
    const yNaive = wrongAsItComes(await withPlainJson(() => ky.selectFrom('authors').select((eb) => [
      'authors.id',
      jsonArrayFrom(eb.selectFrom('notes').select(['notes.id', 'notes.author_id', 'notes.body'])
        .whereRef('notes.author_id', '=', 'authors.id').orderBy('notes.id')).as('notes'),
    ]).execute()), truthY);
    console.log(`Kysely: 100 nested rows exact; as it comes, ${yNaive} of 100 wrong`);

    // Drizzle on postgres.js
    const truthD = await setUp((q) => client.unsafe(q));
    // #region guide:drizzle-postgres-js-use
    const dNested = await dz.query.authors.findMany({ with: { notes: { orderBy: (n, { asc }) => asc(n.id) } } });
    // #endregion
    checkNested('Drizzle (postgres.js) with', dNested, truthD, layout, 'bigint');
    check(dNested.every((a) => typeof a.id === 'bigint'), 'Drizzle: a top-level id is not a BigInt');
    // As it comes: a postgres.js client without the json type (its own tables).
    const truthPlain = await setUp((q) => plain.unsafe(q));
    const dzPlain = drizzle({ client: plain, schema: { authors, notes, authorsRelations, notesRelations } });
    const dNaive = wrongAsItComes(
      await dzPlain.query.authors.findMany({ with: { notes: { orderBy: (n, { asc }) => asc(n.id) } } }), truthPlain);
    console.log(`Drizzle on postgres.js: 100 nested rows exact; as it comes, ${dNaive} of 100 wrong`);

    if (layout !== 'js53') {
      check(kNaive > 0 && yNaive > 0 && dNaive > 0, 'plain JSON.parse got every nested ID right: this check proves nothing');
    }
  } finally {
    await kx.destroy();
    await ky.destroy();
    await client.end();
    await plain.end();
  }
});
