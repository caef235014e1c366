// Recipe (c): Drizzle ORM (node-postgres driver) relational queries with
// nested rows, `db.query.users.findMany({ with: { posts: true } })`.
//
// What drizzle-orm 0.45.4 does, read from node_modules/drizzle-orm/:
//   - pg-core/dialect.js, buildRelationalQueryWithoutPK: each relation in
//     `with:` is a LEFT JOIN LATERAL subquery selecting
//     `coalesce(json_agg(json_build_array(<columns>)), '[]'::json)` for a many
//     relation and `json_build_array(<columns>)` for a one relation: nested
//     rows travel as a `json` column (OID 114), bigint columns as JSON numbers.
//   - node-postgres/session.js: every query passes its own `types` with a
//     getTypeParser that returns raw text for dates and intervals and falls
//     back to the GLOBAL `pg.types.getTypeParser` for everything else. So json
//     is parsed by whatever pg.types has for 114 (pg-types: JSON.parse), and a
//     parser set with client.setTypeParser() or `new Pool({ types })` is
//     ignored by drizzle's queries (pg/lib/client.js uses the client's types
//     only when the query brings none).
//   - relations.js, mapRelationalRow: takes the parsed JSON (it calls
//     JSON.parse itself only when the driver returned a string), then each
//     nested value goes through the column's mapFromDriverValue.
//   - pg-core/columns/bigint.js: `bigint({ mode: 'bigint' })` (PgBigInt64)
//     maps with BigInt(value); `{ mode: 'number' }` (PgBigInt53) with
//     Number(value). There is no 'string' mode in 0.45.4 (any mode other than
//     'number' gives PgBigInt64). BigInt(value) of a Number that JSON.parse
//     already rounded is exact BigInt of the WRONG id: hence issues #4380 and
//     #5760 even with mode 'bigint'.
//
// The recipe: columns `bigint(..., { mode: 'bigint' })`, and the global pg
// type parser for json/jsonb replaced by lossless-json with big integers kept
// as digit strings (pg-strings.mjs); mapFromDriverValue then makes exact
// BigInts of them. On js53 `{ mode: 'number' }` is exact without any of this.
//
// Run: PGHOST=... PGPORT=... PGUSER=app PGDATABASE=appdb node drizzle.mjs

// #region guide:drizzle-setup
import pg from 'pg';
import { isInteger, isSafeNumber, parse } from 'lossless-json';
import { drizzle } from 'drizzle-orm/node-postgres';
import { bigint, pgTable, text } from 'drizzle-orm/pg-core';
import { eq, relations, sql } from 'drizzle-orm';

// Before the first query: drizzle's node-postgres queries parse json through
// the global pg.types registry.
const jsonNumber = (text) => (isInteger(text) && !isSafeNumber(text) ? text : Number(text));
const jsonOptions = { parseNumber: jsonNumber, onDuplicateKey: ({ newValue }) => newValue };
const parseJson = (text) => parse(text, null, jsonOptions);
pg.types.setTypeParser(114, parseJson); // json: what relational queries nest rows in
pg.types.setTypeParser(3802, parseJson); // jsonb

export const users = pgTable('users', {
  id: bigint('id', { mode: 'bigint' }).primaryKey().default(sql`snowflake_nextval()`),
  name: text('name').notNull(),
});
export const posts = pgTable('posts', {
  id: bigint('id', { mode: 'bigint' }).primaryKey().default(sql`snowflake_nextval()`),
  authorId: bigint('author_id', { mode: 'bigint' }).notNull().references(() => users.id),
  title: text('title').notNull(),
});
export const usersRelations = relations(users, ({ many }) => ({ posts: many(posts) }));
export const postsRelations = relations(posts, ({ one }) => ({
  author: one(users, { fields: [posts.authorId], references: [users.id] }),
}));
// mode 'bigint' gives BigInts, which JSON.stringify refuses: write them as strings.
const toJson = (value) => JSON.stringify(value, (key, v) => (typeof v === 'bigint' ? v.toString() : v));
// #endregion

import { check, checkLayout, digits, run } from './lib/check.mjs';

// The same tables read with mode 'number': exact only where every ID < 2^53 (js53).
// #region guide:drizzle-js53
const usersN = pgTable('users', {
  id: bigint('id', { mode: 'number' }).primaryKey(),
  name: text('name').notNull(),
});
const postsN = pgTable('posts', {
  id: bigint('id', { mode: 'number' }).primaryKey(),
  authorId: bigint('author_id', { mode: 'number' }).notNull().references(() => usersN.id),
  title: text('title').notNull(),
});
const usersNRelations = relations(usersN, ({ many }) => ({ posts: many(postsN) }));
const postsNRelations = relations(postsN, ({ one }) => ({
  author: one(usersN, { fields: [postsN.authorId], references: [usersN.id] }),
}));
// #endregion

await run('drizzle', async () => {
  // One connection: the tables below are temporary (per connection), and
  // shadow any `users`/`posts` in public for this session only.
  const client = new pg.Client(); // PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD
  await client.connect();
  try {
    const { layout } = (await client.query("SELECT current_setting('snowflake_id.layout') AS layout")).rows[0];
    checkLayout(layout);
    await client.query(`CREATE TEMP TABLE users (
        id bigint PRIMARY KEY DEFAULT snowflake_nextval(), name text NOT NULL)`);
    await client.query(`CREATE TEMP TABLE posts (
        id bigint PRIMARY KEY DEFAULT snowflake_nextval(),
        author_id bigint NOT NULL REFERENCES users, title text NOT NULL UNIQUE)`);

    // #region guide:drizzle-db
    const db = drizzle({ client, schema: { users, posts, usersRelations, postsRelations } });
    // #endregion
    const inserted = await db.insert(users).values([1, 2, 3, 4].map((i) => ({ name: `user ${i}` })))
      .returning({ id: users.id, idText: sql`${users.id}::text` });
    check(inserted.every((u) => digits(u.id) === u.idText), 'insert ... returning: a user id differs from its text');
    // 100 posts in ONE statement: many share a tick, differing in low bits.
    const truth = new Map((await db.insert(posts)
      .values(Array.from({ length: 100 }, (_, i) => ({ authorId: inserted[i % 4].id, title: `post ${i + 1}` })))
      .returning({ title: posts.title, idText: sql`${posts.id}::text`, authorText: sql`${posts.authorId}::text` }))
      .map((p) => [p.title, p]));
    console.log(`layout ${layout}: 4 users, 100 posts inserted in one statement`);

    // #region guide:drizzle-use
    const found = await db.query.users.findMany({ with: { posts: true } });
    const withAuthor = await db.query.posts.findMany({ with: { author: true } });
    // An ID from a nested row finds its own row.
    const one = await db.query.posts.findFirst({ where: eq(posts.id, found[0].posts[0].id) });
    // BigInts: JSON.stringify needs a replacer; counts from db.$count are Numbers.
    const payload = toJson(found);
    const count = await db.$count(posts);
    // #endregion

    const query = db.query.users.findMany({ with: { posts: true } }).toSQL().sql;
    check(/json_agg\(json_build_array\(/.test(query), `drizzle no longer nests with json_agg(json_build_array(...)): ${query}`);
    console.log('SQL of with: posts ->', query.replace(/\s+/g, ' ').slice(0, 400));

    const byId = new Map(inserted.map((u) => [u.idText, u]));
    let nestedCount = 0;
    const ids = new Set();
    for (const u of found) {
      check(typeof u.id === 'bigint' && byId.has(digits(u.id)), `user ${digits(u.id)} is not one that was inserted`);
      for (const p of u.posts) {
        const t = truth.get(p.title);
        check(t, `a nested post titled ${p.title} was never inserted`);
        check(typeof p.id === 'bigint' && digits(p.id) === t.idText,
          `nested post ${p.title}: id ${digits(p.id)} (${typeof p.id}), the server has ${t.idText}`);
        check(p.authorId === u.id,
          `nested post ${p.title}: authorId ${digits(p.authorId)} is not its parent's id ${digits(u.id)}`);
        check(digits(p.authorId) === t.authorText, `nested post ${p.title}: authorId differs from the server's`);
        ids.add(p.id);
        nestedCount++;
      }
    }
    check(nestedCount === 100 && ids.size === 100, `with: posts gave ${nestedCount} nested posts with ${ids.size} distinct ids, expected 100`);
    for (const p of withAuthor) {
      const t = truth.get(p.title);
      check(digits(p.id) === t.idText, `post ${p.title}: id ${digits(p.id)}, the server has ${t.idText}`);
      check(p.author && p.author.id === p.authorId && digits(p.author.id) === t.authorText,
        `post ${p.title}: nested author ${p.author && digits(p.author.id)}, its authorId is ${t.authorText}`);
    }
    console.log(`with: 100 nested posts, 100 distinct exact ids, every authorId its parent's; posts with author: exact`);

    check(one && one.title === found[0].posts[0].title, `findFirst(where id = nested id) found ${one && one.title}`);
    let back = 0;
    for (const u of found) {
      for (const p of u.posts) {
        const r = await db.select({ title: posts.title }).from(posts).where(eq(posts.id, p.id));
        check(r.length === 1 && r[0].title === p.title, `where id = ${digits(p.id)} found ${r.length ? r[0].title : 'nothing'}, not ${p.title}`);
        back++;
      }
    }
    console.log(`parameters: ${back} of ${back} nested ids found their own row`);

    check(count === 100, `db.$count(posts) gave ${count} (${typeof count})`);
    let threw = false;
    try { JSON.stringify(found); } catch (e) { threw = e instanceof TypeError; }
    check(threw && payload.includes(`"${[...truth.values()][0].idText}"`), 'JSON of the nested result is not what was expected');
    console.log('db.$count: 100 (number); JSON.stringify of BigInt rows throws, the replacer writes exact strings');

    // mode 'number' on the same tables: exact only on js53.
    const dbN = drizzle({ client, schema: { users: usersN, posts: postsN, usersNRelations, postsNRelations } });
    const foundN = await dbN.query.users.findMany({ with: { posts: true } });
    const wrongN = foundN.flatMap((u) => u.posts).filter((p) => digits(p.id) !== truth.get(p.title).idText).length;
    if (layout === 'js53') {
      check(wrongN === 0, `mode 'number' on js53: ${wrongN} of 100 nested ids wrong`);
      check(foundN.every((u) => u.posts.every((p) => p.authorId === u.id)), "mode 'number' on js53: a parent link is wrong");
      console.log("mode 'number' on js53: 100 nested ids exact Numbers");
    } else {
      check(wrongN > 0, "mode 'number' above 2^53: expected rounded ids");
      console.log(`mode 'number' above 2^53: ${wrongN} of 100 nested ids wrong (as expected: use mode 'bigint')`);
    }
  } finally {
    await client.end();
  }
});
