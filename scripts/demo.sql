\pset footer off
\echo
\echo '-- A table whose primary key is a snowflake ID.'
\echo
CREATE EXTENSION IF NOT EXISTS snowflake_id;
CREATE TABLE orders (
    id        bigint PRIMARY KEY DEFAULT snowflake_nextval(),
    item      text NOT NULL,
    placed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO orders (item) VALUES ('tea'), ('coffee'), ('cake');
SELECT pg_sleep(0.02) \g /dev/null
INSERT INTO orders (item) SELECT 'bulk item ' || g FROM generate_series(1, 10000) g;
\echo '-- Rows and their IDs, taken apart:'
SELECT o.id, d.ts AS id_time, d.worker_id, d.sequence, o.item
  FROM orders o, snowflake_decode(o.id) d
 ORDER BY o.id
 LIMIT 6;
\echo '-- Orders of the last minute, by ID range on the primary key:'
SELECT count(*) AS orders_last_minute
  FROM orders WHERE id >= snowflake_from_timestamp(now() - interval '1 minute');
SET enable_seqscan = off;
EXPLAIN (COSTS OFF)
SELECT count(*) FROM orders WHERE id >= snowflake_from_timestamp(now() - interval '1 minute');
RESET enable_seqscan;
\echo '-- An ID made by another system (Discord), decoded with its named layout:'
SELECT * FROM snowflake_decode(175928847299117063, 'discord');
\echo '-- What the generator did:'
SELECT worker_id, layout, last_id, ids_issued, lead, durable_mark, mark_writes, errors
  FROM snowflake_id.snowflake_status;
