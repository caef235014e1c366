// Recipe (a), recommended: node-postgres (`pg`) with snowflake IDs as STRINGS.
//
// What pg does, read from node_modules/pg-types/lib/textParsers.js (pg-types
// 2.2.0, the one pg 8.23.1 depends on):
//   - 20 (bigint) -> parseBigInteger: the digits as a string. Exact.
//   - 1016 (bigint[]) -> parseBigIntegerArray: an array of strings. Exact.
//   - 114 (json) and 3802 (jsonb) -> JSON.parse.bind(JSON): every JSON number
//     becomes a Number, and an integer above 2^53 loses its low bits. This is
//     what breaks json_agg(t), to_json(t) and ORMs that nest rows as JSON.
// So the only change needed is a lossless JSON parser. It is set globally
// (pg.types), because drizzle-orm's node-postgres driver passes its own
// per-query `types` that fall back to the global registry, bypassing a
// client's setTypeParser or `new Pool({ types })` (see drizzle.mjs).
//
// Why lossless-json (4.3.3) and not json-bigint (1.0.0): lossless-json hands
// each number's exact text to a function we choose (`parseNumber`), has no
// dependencies, builds ordinary objects, keeps a "__proto__" key as an own
// property as JSON.parse does, and lets duplicate keys (possible in `json`)
// resolve like JSON.parse. json-bigint (read from sidorares/json-bigint
// lib/parse.js) builds objects with Object.create(null), throws on any key
// that merely contains "constructor" or "__proto__" unless told otherwise,
// throws plain objects instead of SyntaxErrors, and needs bignumber.js.
//
// Run: PGHOST=... PGPORT=... PGUSER=app PGDATABASE=appdb node pg-strings.mjs

import pg from 'pg';
import './lib/pg-json.mjs'; // the lossless json and jsonb parsers, set on pg.types

import {
  check, checkLayout, checkNotes, changedByNumber, digits, run, INSERT_NOTES_SQL, SETUP_SQL,
} from './lib/check.mjs';

await run('pg-strings', async () => {
  const client = new pg.Client(); // PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD
  await client.connect();
  try {
    const layout = checkLayout((await client.query(
      "SELECT current_setting('snowflake_id.layout') AS layout")).rows[0].layout);
    for (const q of SETUP_SQL) await client.query(q);
    const inserted = (await client.query(INSERT_NOTES_SQL)).rows;
    const truth = new Map(inserted.map((r) => [r.body, r]));
    const texts = inserted.map((r) => r.id_text);
    const lossy = changedByNumber(texts);
    console.log(`layout ${layout}: 100 notes inserted in one statement; as Numbers ${lossy} of 100 IDs would change`);
    if (layout === 'js53') check(lossy === 0, 'js53 IDs must all fit a Number exactly');
    else check(lossy > 0, 'IDs above 2^53: some must change as Numbers, or this check proves nothing');
    // Under js53 JSON numbers stay Numbers (exact); above 2^53 they arrive as strings.
    const jsonIdType = layout === 'js53' ? 'number' : 'string';

    // #region guide:pg-strings-use
    // Top-level bigint: a string with the exact digits.
    const { rows } = await client.query('SELECT id, author_id, body FROM notes ORDER BY id');
    // bigint[]: an array of strings.
    const { ids } = (await client.query('SELECT array_agg(id ORDER BY id) AS ids FROM notes')).rows[0];
    // Rows nested as JSON: exact, through the lossless parser.
    const { nested } = (await client.query(
      'SELECT json_agg(n ORDER BY n.id) AS nested FROM notes n')).rows[0];
    // An ID sent back as a parameter finds its own row.
    const again = (await client.query('SELECT body FROM notes WHERE id = $1', [nested[0].id])).rows[0];
    // count(*) is a bigint too: a string ('100'); cast it where a Number is wanted.
    const { n, k } = (await client.query('SELECT count(*) AS n, count(*)::int AS k FROM notes')).rows[0];
    // Nothing here is a BigInt, so JSON.stringify (and res.json) just works.
    const body = JSON.stringify({ rows, ids, nested, again, n, k });
    // #endregion

    checkNotes('top-level rows', rows, truth, layout, 'string');
    console.log(`top-level bigint: ${rows.length} rows, strings, exact`);

    check(Array.isArray(ids) && ids.length === 100, 'bigint[]: not an array of 100');
    const sorted = [...texts].sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1));
    check(ids.every((v, i) => typeof v === 'string' && v === sorted[i]), 'bigint[]: an element differs from its ID');
    console.log('bigint[]: 100 strings, exact');

    checkNotes('json_agg(n)', nested, truth, layout, jsonIdType);
    const { nestedb } = (await client.query('SELECT jsonb_agg(n ORDER BY n.id) AS nestedb FROM notes n')).rows[0];
    checkNotes('jsonb_agg(n)', nestedb, truth, layout, jsonIdType);
    // Parent rows with their notes nested: every note's author_id is its parent's id.
    const parents = (await client.query(`SELECT a.id, json_agg(n ORDER BY n.id) AS notes
        FROM authors a JOIN notes n ON n.author_id = a.id GROUP BY a.id`)).rows;
    for (const p of parents) {
      checkNotes('authors with json_agg(notes)', p.notes, truth, layout, jsonIdType);
      check(p.notes.every((x) => digits(x.author_id) === p.id), `a note nested under author ${p.id} names another author`);
    }
    const raw = (await client.query('SELECT json_agg(n ORDER BY n.id)::text AS raw FROM notes n')).rows[0].raw;
    const naive = JSON.parse(raw).filter((x) => BigInt(x.id).toString() !== truth.get(x.body).id_text).length;
    console.log(`json_agg/jsonb_agg: 100 nested rows exact (${jsonIdType}s), parent links exact; plain JSON.parse would get ${naive} of 100 wrong`);

    check(again.body === nested[0].body, `WHERE id = $1 with ${nested[0].id} found ${again.body}, not ${nested[0].body}`);
    let found = 0;
    let neighbours = 0;
    for (const x of [...rows, ...nested]) {
      const r = (await client.query('SELECT body FROM notes WHERE id = $1', [x.id])).rows;
      check(r.length === 1 && r[0].body === x.body,
        `WHERE id = $1 with ${digits(x.id)} found ${r.length ? r[0].body : 'nothing'}, not ${x.body}`);
      found++;
      const viaNumber = (await client.query('SELECT body FROM notes WHERE id = $1', [Number(x.id)])).rows;
      if (viaNumber.length === 1 && viaNumber[0].body !== x.body) neighbours++;
    }
    console.log(`parameters: ${found} of ${found} IDs found their own row; as Numbers ${neighbours} would have found another row`);

    check(n === '100' && k === 100, `count(*) gave ${JSON.stringify(n)} and count(*)::int ${JSON.stringify(k)}`);
    check(body.includes(`"${texts[0]}"`), 'JSON.stringify of the results lost an ID');
    console.log(`count(*): '${n}' (string), count(*)::int: ${k}; JSON.stringify of every result: fine`);
  } finally {
    await client.end();
  }
});
