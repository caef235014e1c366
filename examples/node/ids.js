// Snowflake IDs in Node.js with the `pg` package.
//
// A JavaScript Number holds integers exactly only up to 2^53; a snowflake ID
// in the default layout is about 2^60. Read IDs as strings (pg's default for
// bigint) or as BigInt, send them to browsers as JSON strings, or give the
// server the js53 layout, whose IDs all fit a Number.
//
// Connects with the usual PGHOST/PGPORT/PGUSER/PGDATABASE variables, prints
// what each way of reading gives, and exits non-zero if an exact way is not.

'use strict';

const assert = require('node:assert');
const { Client, types } = require('pg');

async function main() {
  const client = new Client();
  await client.connect();
  const { layout } = (await client.query("SELECT current_setting('snowflake_id.layout') AS layout")).rows[0];
  console.log(`server layout: ${layout}`);

  await client.query(`CREATE TEMP TABLE notes (
      id bigint PRIMARY KEY DEFAULT snowflake_nextval(),
      body text)`);
  // A hundred rows in one statement: most share a millisecond, so their
  // low bits (the sequence) are not all zero, as they are in real traffic.
  const { rows } = await client.query(`INSERT INTO notes (body)
      SELECT 'note ' || i FROM generate_series(1, 100) i
      RETURNING id, id::text AS text, body`);

  // 1. pg's default for bigint: a string, exact.
  assert(rows.every((r) => typeof r.id === 'string' && r.id === r.text));
  console.log(`as string (pg default): ${rows[0].id} exact`);

  // 2. BigInt: exact, and it compares and sorts like the IDs.
  const big = rows.map((r) => BigInt(r.id));
  assert(big.every((b, i) => b.toString() === rows[i].text));
  assert(big.every((b, i) => i === 0 || big[i - 1] < b));
  console.log(`as BigInt: ${big[0]}n exact`);

  // 3. Number (a type parser of Number, parseInt, or JSON.parse of a JSON
  //    number): exact only where the ID fits 53 bits.
  const changed = rows.filter((r) => BigInt(Number(r.id)).toString() !== r.text).length;
  console.log(`as Number: ${changed} of ${rows.length} IDs changed`);
  if (layout === 'js53') {
    assert.strictEqual(changed, 0, 'js53 IDs must fit a Number exactly');
    assert(rows.every((r) => Number.isSafeInteger(Number(r.id))));
  } else {
    assert(changed > 0, 'IDs above 2^53 lose their low bits as Numbers');
  }

  // The same in JSON made by the server: a JSON number is parsed into a
  // Number; a JSON string stays exact.
  const json = (await client.query(`SELECT json_agg(json_build_object('id', id) ORDER BY id)::text AS numbers,
      json_agg(json_build_object('id', id::text) ORDER BY id)::text AS strings FROM notes`)).rows[0];
  const fromNumbers = JSON.parse(json.numbers).filter((o, i) => BigInt(o.id) !== big[i]).length;
  const fromStrings = JSON.parse(json.strings).filter((o, i) => BigInt(o.id) !== big[i]).length;
  assert.strictEqual(fromStrings, 0);
  assert.strictEqual(fromNumbers, changed);
  console.log(`JSON numbers: ${fromNumbers} of ${rows.length} changed; JSON strings: exact`);

  // JSON.stringify cannot write a BigInt: say how, as a string.
  assert.throws(() => JSON.stringify({ id: big[0] }), TypeError);
  const payload = JSON.stringify({ id: big[0] }, (k, v) => (typeof v === 'bigint' ? v.toString() : v));
  assert.strictEqual(JSON.parse(payload).id, rows[0].text);

  // A type parser for bigint (OID 20) that makes BigInts, for every query
  // of this client; IDs go back as parameters in any of these forms.
  client.setTypeParser(types.builtins.INT8, BigInt);
  const back = (await client.query('SELECT id, body FROM notes WHERE id = $1', [big[42]])).rows[0];
  assert.strictEqual(back.id, big[42]);
  assert.strictEqual(back.body, rows[42].body);
  console.log(`type parser BigInt: ${back.id}n exact; found by a BigInt parameter`);

  // The short, sortable text form for URLs.
  const short = (await client.query("SELECT snowflake_to_text($1, 'base62') AS t", [rows[0].id])).rows[0].t;
  const again = (await client.query("SELECT snowflake_from_text($1, 'base62') AS id", [short])).rows[0].id;
  assert.strictEqual(again, big[0]);
  console.log(`base62: ${short}`);

  await client.end();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
