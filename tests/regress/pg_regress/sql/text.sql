-- IDs as text: fixed width, byte order = numeric order, strict parsing.
SELECT e, snowflake_to_text(0, e) AS zero, snowflake_to_text(1234, e) AS "1234",
       snowflake_to_text(9223372036854775807, e) AS largest
  FROM unnest(ARRAY['base62', 'base32', 'hex']) e;
-- Round trip and order over edge values and 5000 pseudo-random IDs.
SELECT setseed(0.42);
CREATE TEMP TABLE ids AS
  SELECT DISTINCT id FROM (
    SELECT (random() * 9223372036854775807)::bigint AS id FROM generate_series(1, 5000)
    UNION ALL SELECT unnest(ARRAY[0, 1, 61, 62, 63, 31, 32, 33, 255, 256,
                                  9223372036854775806, 9223372036854775807])
    UNION ALL SELECT (random() * 100000)::bigint FROM generate_series(1, 500)) s;
SELECT e,
       bool_and(snowflake_from_text(snowflake_to_text(id, e), e) = id) AS round_trip,
       min(length(snowflake_to_text(id, e))) = max(length(snowflake_to_text(id, e))) AS fixed_width,
       array_agg(id ORDER BY id) = array_agg(id ORDER BY snowflake_to_text(id, e) COLLATE "C") AS byte_order_is_id_order
  FROM ids, unnest(ARRAY['base62', 'base32', 'hex']) e
 GROUP BY e ORDER BY e;
-- Crockford's spellings, upper-case hex.
SELECT snowflake_from_text('000000000016j', 'base32'), snowflake_from_text('0000000000oIl', 'base32'),
       snowflake_from_text('00000000000000FF', 'hex');
-- Strict: wrong width, foreign characters, out of range, unknown encoding.
\set VERBOSITY sqlstate
SELECT snowflake_from_text('abc', 'base62');
SELECT snowflake_from_text('00000000000U0', 'base32');
SELECT snowflake_from_text('zzzzzzzzzzz', 'base62');
SELECT snowflake_to_text(-1, 'hex');
SELECT snowflake_to_text(1, 'base64');
\set VERBOSITY default
SELECT snowflake_from_text('abc', 'base62');
SELECT snowflake_from_text(' 00000000000000f', 'hex');
SELECT snowflake_from_text('00000000000U0', 'base32');
SELECT snowflake_from_text('zzzzzzzzzzz', 'base62');
SELECT snowflake_to_text(-1, 'hex');
SELECT snowflake_to_text(1, 'base64');
SELECT snowflake_to_text(NULL, 'hex') IS NULL AS strict_null;
