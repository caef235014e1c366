// Shared checks of the recipes: the truth about every row comes from the
// server as text (`id::text`), never from a JavaScript number.

export class CheckFailed extends Error {}

// Fails the recipe with a message that says what was wrong.
export function check(condition, message) {
  if (!condition) throw new CheckFailed(message);
}

// Runs a recipe: prints its lines, exits 0 on success, 1 with "FAIL: ..." on
// any wrong ID (or any error, e.g. no server).
export async function run(name, main) {
  try {
    await main();
    console.log(`OK ${name}`);
    process.exit(0);
  } catch (e) {
    if (e instanceof CheckFailed) console.error(`FAIL ${name}: ${e.message}`);
    else console.error(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
    process.exit(1);
  }
}

// The two layouts the recipes know: IDs above 2^53 (the default) or below it.
export function checkLayout(layout) {
  check(layout === 'snowflake_id' || layout === 'js53',
    `snowflake_id.layout is '${layout}': these recipes expect 'snowflake_id' (the default) or 'js53'`);
  return layout;
}

// An ID's exact digits, whatever a client made of it (string, bigint, number).
// The bound on one run of a tool a recipe starts (prisma, drizzle-kit): the
// tests' one timeout (SNOWFLAKE_TEST_TIMEOUT, tests/harness.py), which a slow
// machine raises, never below its default.
export const programTimeoutMs = 1000 * Math.max(180, Number(process.env.SNOWFLAKE_TEST_TIMEOUT || 180));

export const digits = (v) => (typeof v === 'bigint' ? v.toString() : String(v));

// How many of the given exact ID texts a JavaScript Number would change:
// what JSON.parse or parseInt make of them.
export const changedByNumber = (texts) =>
  texts.filter((t) => BigInt(Number(t)).toString() !== t).length;

// The test data: `authors` and 100 `notes` inserted in ONE statement, so that
// many IDs share a tick and differ only in their low bits (the sequence).
// Returns the notes as the server wrote them, as text.
export const SETUP_SQL = [
  `CREATE TEMP TABLE authors (
     id   bigint PRIMARY KEY DEFAULT snowflake_nextval(),
     name text NOT NULL)`,
  `CREATE TEMP TABLE notes (
     id        bigint PRIMARY KEY DEFAULT snowflake_nextval(),
     author_id bigint NOT NULL REFERENCES authors,
     body      text NOT NULL UNIQUE)`,
  `INSERT INTO authors (name) SELECT 'author ' || i FROM generate_series(1, 4) i`,
];
export const INSERT_NOTES_SQL = `INSERT INTO notes (author_id, body)
  SELECT a.id, 'note ' || i
    FROM generate_series(1, 100) i
    JOIN (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM authors) a ON a.k = i % 4
  RETURNING id::text AS id_text, author_id::text AS author_text, body`;

// Checks that `notes` (objects with id, author_id, body, in any representation)
// are exactly the rows the server has, given the truth by body.
export function checkNotes(what, notes, truth, layout, expectType) {
  check(Array.isArray(notes) && notes.length > 0, `${what}: no rows`);
  for (const n of notes) {
    const t = truth.get(n.body);
    check(t, `${what}: a row with body ${JSON.stringify(n.body)} that was never inserted`);
    check(digits(n.id) === t.id_text,
      `${what}: ${n.body} has id ${digits(n.id)}, the server has ${t.id_text} (${layout} layout)`);
    const author = n.author_id ?? n.authorId;
    check(digits(author) === t.author_text,
      `${what}: ${n.body} has author ${digits(author)}, the server has ${t.author_text} (${layout} layout)`);
    if (expectType) {
      check(typeof n.id === expectType, `${what}: id ${digits(n.id)} is a ${typeof n.id}, expected a ${expectType}`);
    }
  }
}
