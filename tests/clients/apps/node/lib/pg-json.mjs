// The node-postgres setup of the guide, for every recipe that runs on pg
// (pg-strings.mjs, more-libraries.mjs: Knex and Kysely use pg too, and its
// global parsers). Importing this module once, at start, sets them.

// #region guide:pg-strings-setup
import pg from 'pg';
import { isInteger, isSafeNumber, parse } from 'lossless-json';

// JSON numbers: a Number when a Number holds the value exactly; an integer too
// big for one keeps its digits as a string, like a bigint column.
const jsonNumber = (text) => (isInteger(text) && !isSafeNumber(text) ? text : Number(text));
// `json` (unlike `jsonb`) can hold a key twice: the last wins, as in JSON.parse.
const jsonOptions = { parseNumber: jsonNumber, onDuplicateKey: ({ newValue }) => newValue };
const parseJson = (text) => parse(text, null, jsonOptions);
pg.types.setTypeParser(114, parseJson); // json
pg.types.setTypeParser(3802, parseJson); // jsonb
// bigint (20) and bigint[] (1016) keep pg's default: exact strings.
// #endregion
