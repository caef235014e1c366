-- snowflake_lastval() before this session drew any ID.
SELECT snowflake_lastval();
-- IDs as version 7 UUIDs: the bits are fixed by the ID (random bits zero
-- in the deterministic form), and map back.
SELECT snowflake_id_to_uuid(0, 'snowflake_id') AS epoch,
       snowflake_id_to_uuid(250305246994132992, 'snowflake_id') AS an_id,
       snowflake_id_to_uuid(9223372036854775807, 'snowflake_id') AS largest;
-- The time field is the ID's tick in Unix milliseconds; worker and sequence follow.
SELECT name, snowflake_id_to_uuid(i, name) AS uuid,
       snowflake_uuid_to_id(snowflake_id_to_uuid(i, name), name) = i AS round_trip
  FROM snowflake_layouts(), LATERAL (SELECT snowflake_from_timestamp('2026-06-01 12:00:00.123+00', name) + 5) v(i)
 WHERE name <> 'baidu' ORDER BY name;
-- Bounds: the smallest UUID of a tick.
SELECT snowflake_uuid_from_timestamp('2026-01-01 00:00:00.5+00', 'snowflake_id'),
       snowflake_uuid_from_timestamp('2026-01-01 00:00:00.5+00', 'sonyflake');
-- Drawn UUIDs: version 7, RFC variant, increasing, mapping to this server's IDs.
SELECT count(*) AS n, count(DISTINCT u) AS distinct_n,
       bool_and(substr(u::text, 15, 1) = '7') AS version_7,
       bool_and(substr(u::text, 20, 1) IN ('8', '9', 'a', 'b')) AS rfc_variant,
       bool_and((snowflake_decode(snowflake_uuid_to_id(u))).worker_id = 5) AS this_worker
  FROM (SELECT snowflake_uuidv7() AS u FROM generate_series(1, 1000)) s;
SELECT snowflake_lastval() = snowflake_uuid_to_id(u) AS lastval_is_the_uuids_id FROM (SELECT snowflake_uuidv7() AS u) s;
-- Refusals: a UUID that holds no ID of the layout, an ID outside it.
SELECT snowflake_uuid_to_id('8e2c6f6a-3f1b-4c2d-9e5f-0a1b2c3d4e5f');
SELECT snowflake_uuid_to_id('018cc251-f400-7000-8000-000000000000');
-- A UUIDv7 of the layout's time made elsewhere: its check bits do not match.
SELECT snowflake_uuid_to_id('019b76da-a87b-7a3c-9f1e-5d2c4b6a8e90');
-- (A UUID holds no layout: one whose millisecond is no tick of another layout is refused there.)
SELECT snowflake_uuid_to_id(snowflake_id_to_uuid(snowflake_from_timestamp('2026-01-01 00:00:00.123+00', 'snowflake_id'), 'snowflake_id'), 'sonyflake');
SELECT snowflake_id_to_uuid(-1);
SELECT snowflake_uuid_from_timestamp('2020-01-01+00');
-- Opaque IDs need a key the server holds; this one has none.
SELECT snowflake_to_opaque(1);
SELECT snowflake_to_text(1, 'opaque');
