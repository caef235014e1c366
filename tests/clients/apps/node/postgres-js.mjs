// Recipe (b): postgres.js (`postgres`) with snowflake IDs as strings, and as BigInt.
//
// What postgres.js 3.4.9 does, read from node_modules/postgres/src/:
//   - types.js: the built-in parsers are number (OIDs 21, 23, 26, 700, 701),
//     json (114 and 3802: `parse: x => JSON.parse(x)`), boolean, date, bytea.
//     bigint (20) has no parser, so it arrives as a string: exact.
//   - index.js: `postgres.BigInt` is `{ to: 20, from: [20], parse: x => BigInt(x),
//     serialize: x => x.toString() }`, for `types: { bigint: postgres.BigInt }`.
//     User types are merged by OID over the built-ins (mergeUserTypes in
//     types.js), so a type with `from: [114, 3802]` replaces JSON.parse.
//   - connection.js: with fetch_types (the default) it reads pg_type once per
//     connection and builds every array parser from its element's parser
//     (addArrayType), so bigint[] (1016) follows whatever 20 does. With
//     `fetch_types: false` arrays arrive as unparsed text ('{1,2}').
//   - connection.js: `transform.value.from` runs on each column's value AFTER
//     its type parser, so it cannot repair numbers JSON.parse already rounded;
//     the fix has to be the json type's `parse`.
//   - A JavaScript BigInt parameter is sent as its digits ('' + x) either way.
//
// Run: PGHOST=... PGPORT=... PGUSER=app PGDATABASE=appdb node postgres-js.mjs

// #region guide:postgresjs-setup
import postgres from 'postgres';
import { json } from './lib/postgres-json.mjs'; // the json type above

// bigint and bigint[] stay strings (postgres.js's default).
const sql = postgres({ types: { json } }); // PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD
// #endregion

import { isInteger, isSafeNumber, parse } from 'lossless-json';
import { jsonOptions } from './lib/postgres-json.mjs';

// #region guide:postgresjs-bigint-setup
// The BigInt variant: bigint (and, through fetch_types, bigint[]) as BigInt,
// big JSON integers as BigInt. count(*) is then a BigInt too: cast it (::int).
const jsonBigNumber = (text) => (isInteger(text) && !isSafeNumber(text) ? BigInt(text) : Number(text));
const jsonBig = {
  ...json,
  parse: (text) => parse(text, null, { ...jsonOptions, parseNumber: jsonBigNumber }),
};
const sqlBig = postgres({ types: { bigint: postgres.BigInt, json: jsonBig } });
// #endregion

import {
  check, checkLayout, checkNotes, digits, run, INSERT_NOTES_SQL, SETUP_SQL,
} from './lib/check.mjs';

async function exercise(db, variant, layout, truth) {
  const idType = variant === 'bigint' ? 'bigint' : 'string';
  const jsonIdType = layout === 'js53' ? 'number' : idType;

  // #region guide:postgresjs-use
  const rows = await db`SELECT id, author_id, body FROM notes ORDER BY id`;
  const [{ ids }] = await db`SELECT array_agg(id ORDER BY id) AS ids FROM notes`;
  const [{ nested }] = await db`SELECT json_agg(n ORDER BY n.id) AS nested FROM notes n`;
  const [again] = await db`SELECT body FROM notes WHERE id = ${nested[0].id}`;
  const [{ n, k }] = await db`SELECT count(*) AS n, count(*)::int AS k FROM notes`;
  // #endregion

  checkNotes(`${variant}: top-level rows`, rows, truth, layout, idType);
  check(Array.isArray(ids) && ids.length === 100, `${variant}: bigint[] is not an array of 100: ${typeof ids}`);
  check(ids.every((v, i) => typeof v === idType && v === rows[i].id), `${variant}: bigint[]: an element differs from its ID`);
  checkNotes(`${variant}: json_agg(n)`, nested, truth, layout, jsonIdType);
  const [{ nestedb }] = await db`SELECT jsonb_agg(n ORDER BY n.id) AS nestedb FROM notes n`;
  checkNotes(`${variant}: jsonb_agg(n)`, nestedb, truth, layout, jsonIdType);
  const parents = await db`SELECT a.id, json_agg(n ORDER BY n.id) AS notes
      FROM authors a JOIN notes n ON n.author_id = a.id GROUP BY a.id`;
  for (const p of parents) {
    checkNotes(`${variant}: authors with json_agg(notes)`, p.notes, truth, layout, jsonIdType);
    check(p.notes.every((x) => digits(x.author_id) === digits(p.id)), `${variant}: a note under author ${p.id} names another author`);
  }
  check(again && again.body === nested[0].body, `${variant}: WHERE id = \${id} found ${again && again.body}`);
  let found = 0;
  for (const x of [...rows, ...nested]) {
    const r = await db`SELECT body FROM notes WHERE id = ${x.id}`;
    check(r.length === 1 && r[0].body === x.body,
      `${variant}: WHERE id = \${id} with ${digits(x.id)} found ${r.length ? r[0].body : 'nothing'}, not ${x.body}`);
    found++;
  }
  // A JSON parameter round trip through the serializer keeps big integers.
  const probe = { id: variant === 'bigint' ? rows[0].id : BigInt(rows[0].id) };
  const [{ back }] = await db`SELECT (${db.json(probe)}::jsonb ->> 'id') AS back`;
  check(back === digits(rows[0].id), `${variant}: a BigInt inside a JSON parameter came back as ${back}`);
  if (variant === 'bigint') {
    check(n === 100n && k === 100, `${variant}: count(*) gave ${digits(n)} (${typeof n}), ::int ${k}`);
    JSON.stringify({ k }); // a Number: fine
  } else {
    check(n === '100' && k === 100, `${variant}: count(*) gave ${JSON.stringify(n)}, ::int ${k}`);
    JSON.stringify([...rows, ...nested, { n, k }]); // no BigInt anywhere: must not throw
  }
  console.log(`${variant}: top-level ${idType}s, bigint[] ${idType}s, json_agg/jsonb_agg ${jsonIdType}s: all 100 exact, `
    + `parent links exact, ${found} of ${found} found their own row by parameter; count(*) ${typeof n}, count(*)::int number`);
}

await run('postgres-js', async () => {
  const reserved = [];
  try {
    const [{ layout }] = await sql`SELECT current_setting('snowflake_id.layout') AS layout`;
    checkLayout(layout);
    console.log(`layout ${layout}: 100 notes inserted in one statement per client`);
    for (const [client, variant] of [[sql, 'strings'], [sqlBig, 'bigint']]) {
      // Temporary tables belong to one connection: reserve one.
      const db = await client.reserve();
      reserved.push(db);
      for (const q of SETUP_SQL) await db.unsafe(q);
      const inserted = await db.unsafe(INSERT_NOTES_SQL);
      await exercise(db, variant, layout, new Map(inserted.map((r) => [r.body, r])));
    }
  } finally {
    for (const db of reserved) db.release();
    await sql.end({ timeout: 5 });
    await sqlBig.end({ timeout: 5 });
  }
});
