-- Generating IDs: checked by properties, since the values depend on the clock.
SET timezone = 'UTC';
SET datestyle = 'ISO';

CREATE TABLE orders (
  id    bigint PRIMARY KEY DEFAULT snowflake_nextval(),
  item  text NOT NULL
);
INSERT INTO orders (item) SELECT 'item ' || g FROM generate_series(1, 5000) g;

-- Unique (the primary key held), increasing in insert order, this server's worker.
SELECT count(*) AS rows, count(DISTINCT id) AS distinct_ids FROM orders;
SELECT bool_and(id > prev) AS increasing
  FROM (SELECT id, lag(id) OVER (ORDER BY item_no) AS prev
          FROM (SELECT id, substr(item, 6)::int AS item_no FROM orders) o) s
 WHERE prev IS NOT NULL;
SELECT DISTINCT worker_id FROM orders, snowflake_decode(id);
SELECT bool_and(ts BETWEEN now() - interval '1 minute' AND now() + interval '1 minute') AS near_now
  FROM orders, snowflake_decode(id);

-- A batch: increasing, and above every ID before it.
SELECT count(*) AS n, bool_and(i > (SELECT max(id) FROM orders)) AS above_table
  FROM snowflake_nextval_batch(10000) i;

-- The same as one array: increasing, above every ID before it, and usable
-- as the keys of an INSERT.
SELECT cardinality(a) AS n, a[1] > (SELECT max(id) FROM orders) AS above_table,
       (SELECT bool_and(x < y) FROM unnest(a[1:9999], a[2:10000]) AS p(x, y)) AS increasing
  FROM snowflake_nextval_array(10000) a;
INSERT INTO orders (id, item) SELECT i, 'array' FROM unnest(snowflake_nextval_array(3)) i;
SELECT count(*) FROM orders WHERE item = 'array' AND id > (SELECT max(id) FROM orders WHERE item <> 'array');

-- Range queries by time can use the primary key (a VOLATILE bound could not).
CREATE FUNCTION plan_uses(q text, index text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE line text;
BEGIN
  FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
    IF line LIKE '%' || index || '%' THEN RETURN true; END IF;
  END LOOP;
  RETURN false;
END $$;
SET enable_seqscan = off;
SELECT plan_uses($$SELECT id FROM orders WHERE id >= snowflake_from_timestamp(now() - interval '1 hour')$$, 'orders_pkey');
SELECT plan_uses($$SELECT id FROM orders WHERE id BETWEEN snowflake_from_timestamp('2026-01-01+00') AND snowflake_from_timestamp('2026-02-01+00')$$, 'orders_pkey');
RESET enable_seqscan;
SELECT count(*) AS last_hour FROM orders WHERE id >= snowflake_from_timestamp(now() - interval '1 hour');
SELECT count(*) AS future FROM orders WHERE id >= snowflake_from_timestamp(now() + interval '1 hour');

-- The status view.
SELECT worker_id, layout, epoch, problem, ids_issued >= 15000 AS counted,
       last_id >= (SELECT max(id) FROM orders) AS last_id_is_latest,
       durable_mark >= last_id_time AS durable, reserver_pid IS NOT NULL AS writer_running
  FROM snowflake_id.snowflake_status;
