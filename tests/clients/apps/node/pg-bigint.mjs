// Recipe (a), BigInt variant: node-postgres (`pg`) with snowflake IDs as BigInt.
//
// Read from node_modules/pg-types/lib/textParsers.js (pg-types 2.2.0, pg
// 8.23.1's): parsers are registered per type OID, and bigint[] (1016) has its
// own parser (parseBigIntegerArray, strings), so setTypeParser(20, BigInt)
// does not reach arrays; json (114) and jsonb (3802) use JSON.parse. And since
// a parser sees only the type, count(*), sum() of a bigint and every other
// bigint become BigInts too, which JSON.stringify refuses ("Do not know how to
// serialize a BigInt"): cast counts (`count(*)::int`) and stringify with a
// replacer. Prefer pg-strings.mjs unless the application computes with IDs.
//
// Run: PGHOST=... PGPORT=... PGUSER=app PGDATABASE=appdb node pg-bigint.mjs

// #region guide:pg-bigint-setup
import pg from 'pg';
import { isInteger, isSafeNumber, parse } from 'lossless-json';

const toBigInt = (v) => (v === null ? null : Array.isArray(v) ? v.map(toBigInt) : BigInt(v));
const int8Array = pg.types.getTypeParser(1016); // pg's own bigint[] parser (strings)
pg.types.setTypeParser(20, BigInt); // bigint
pg.types.setTypeParser(1016, (text) => toBigInt(int8Array(text))); // bigint[]: 20 does not reach it
// JSON numbers: a Number when a Number holds the value exactly, else a BigInt.
const jsonNumber = (text) => (isInteger(text) && !isSafeNumber(text) ? BigInt(text) : Number(text));
const jsonOptions = { parseNumber: jsonNumber, onDuplicateKey: ({ newValue }) => newValue };
const parseJson = (text) => parse(text, null, jsonOptions);
pg.types.setTypeParser(114, parseJson); // json
pg.types.setTypeParser(3802, parseJson); // jsonb
// JSON.stringify throws on a BigInt: write BigInts as strings.
const toJson = (value) => JSON.stringify(value, (key, v) => (typeof v === 'bigint' ? v.toString() : v));
// #endregion

import {
  check, checkLayout, checkNotes, digits, run, INSERT_NOTES_SQL, SETUP_SQL,
} from './lib/check.mjs';

await run('pg-bigint', async () => {
  const client = new pg.Client(); // PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD
  await client.connect();
  try {
    const layout = checkLayout((await client.query(
      "SELECT current_setting('snowflake_id.layout') AS layout")).rows[0].layout);
    for (const q of SETUP_SQL) await client.query(q);
    const inserted = (await client.query(INSERT_NOTES_SQL)).rows;
    const truth = new Map(inserted.map((r) => [r.body, r]));
    console.log(`layout ${layout}: 100 notes inserted in one statement`);
    const jsonIdType = layout === 'js53' ? 'number' : 'bigint';

    // #region guide:pg-bigint-use
    const { rows } = await client.query('SELECT id, author_id, body FROM notes ORDER BY id');
    const { ids } = (await client.query('SELECT array_agg(id ORDER BY id) AS ids FROM notes')).rows[0];
    const { nested } = (await client.query(
      'SELECT json_agg(n ORDER BY n.id) AS nested FROM notes n')).rows[0];
    const again = (await client.query('SELECT body FROM notes WHERE id = $1', [rows[0].id])).rows[0];
    // count(*) is a bigint: 100n here; count(*)::int is a Number.
    const { n, k } = (await client.query('SELECT count(*) AS n, count(*)::int AS k FROM notes')).rows[0];
    const body = toJson({ rows, ids, nested, again, n, k }); // JSON.stringify(rows) would throw
    // #endregion

    checkNotes('top-level rows', rows, truth, layout, 'bigint');
    console.log(`top-level bigint: ${rows.length} rows, BigInts, exact`);
    check(Array.isArray(ids) && ids.length === 100, 'bigint[]: not an array of 100');
    check(ids.every((v, i) => typeof v === 'bigint' && v === rows[i].id), 'bigint[]: an element differs from its ID');
    const { grid } = (await client.query(
      "SELECT '{{1,NULL},{9007199254740993,-9223372036854775808}}'::bigint[] AS grid")).rows[0];
    check(grid[0][0] === 1n && grid[0][1] === null && grid[1][0] === 9007199254740993n
      && grid[1][1] === -9223372036854775808n, `bigint[][] with NULL parsed as ${toJson(grid)}`);
    console.log('bigint[]: 100 BigInts, exact (also 2-D with NULL)');

    checkNotes('json_agg(n)', nested, truth, layout, jsonIdType);
    const { nestedb } = (await client.query('SELECT jsonb_agg(n ORDER BY n.id) AS nestedb FROM notes n')).rows[0];
    checkNotes('jsonb_agg(n)', nestedb, truth, layout, jsonIdType);
    const parents = (await client.query(`SELECT a.id, json_agg(n ORDER BY n.id) AS notes
        FROM authors a JOIN notes n ON n.author_id = a.id GROUP BY a.id`)).rows;
    for (const p of parents) {
      checkNotes('authors with json_agg(notes)', p.notes, truth, layout, jsonIdType);
      // A nested ID is a BigInt above 2^53 and a Number below: compare with BigInt().
      check(p.notes.every((x) => BigInt(x.author_id) === p.id), `a note nested under author ${p.id} names another author`);
    }
    console.log(`json_agg/jsonb_agg: 100 nested rows exact (${jsonIdType}s), parent links exact`);

    check(again.body === rows[0].body, `WHERE id = $1 with ${rows[0].id}n found ${again.body}`);
    let found = 0;
    for (const x of [...rows, ...nested]) {
      const r = (await client.query('SELECT body FROM notes WHERE id = $1', [x.id])).rows;
      check(r.length === 1 && r[0].body === x.body,
        `WHERE id = $1 with ${digits(x.id)} found ${r.length ? r[0].body : 'nothing'}, not ${x.body}`);
      found++;
    }
    console.log(`parameters: ${found} of ${found} IDs (BigInt, and JSON values) found their own row`);

    check(n === 100n && k === 100, `count(*) gave ${digits(n)} (${typeof n}), count(*)::int ${k}`);
    let threw = false;
    try { JSON.stringify(rows[0]); } catch (e) { threw = e instanceof TypeError; }
    check(threw, 'JSON.stringify of a row with a BigInt did not throw: the replacer is not needed?');
    check(body.includes(`"${digits(rows[0].id)}"`), 'toJson lost an ID');
    console.log(`count(*): ${n}n, count(*)::int: ${k}; JSON.stringify(row) throws, toJson(row) works`);
  } finally {
    await client.end();
  }
});
