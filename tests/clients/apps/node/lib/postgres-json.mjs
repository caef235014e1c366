// The postgres.js json type of the guide, for every recipe that runs on
// postgres.js (postgres-js.mjs, and Drizzle on it in more-libraries.mjs).

// #region guide:postgresjs-json
import { isInteger, isSafeNumber, parse, stringify } from 'lossless-json';

// JSON numbers: a Number when a Number holds the value exactly, else the
// digits as a string (like bigint columns).
const jsonNumber = (text) => (isInteger(text) && !isSafeNumber(text) ? text : Number(text));
const jsonOptions = { parseNumber: jsonNumber, onDuplicateKey: ({ newValue }) => newValue };
const json = {
  to: 114,
  from: [114, 3802], // json, jsonb
  serialize: (value) => stringify(value), // lossless-json: writes BigInts as numbers too
  parse: (text) => parse(text, null, jsonOptions),
};
// #endregion

export { json, jsonOptions };
