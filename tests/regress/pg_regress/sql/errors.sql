-- What a user is told when an input is out of range.
SET timezone = 'UTC';
SET datestyle = 'ISO';

SELECT snowflake_decode(-1);
SELECT snowflake_timestamp(-42);
SELECT * FROM snowflake_decode(9007199254740992, 'js53');
SELECT * FROM snowflake_decode(1, 'twiter');
SELECT * FROM snowflake_decode(1, 'time=41,worker=10,sequence=12,unit=1ms');
SELECT * FROM snowflake_decode(1, 'time=41,worker=10,sequence=13,unit=1ms,epoch=2025-01-01Z');
SELECT * FROM snowflake_decode(1, 'time=41,worker=10,sequence=12,unit=1h,epoch=2025-01-01Z');
SELECT * FROM snowflake_decode(1, 'time=41,worker=10,sequence=12,unit=1ms,epoch=2025-01-01');
SELECT snowflake_from_timestamp('2024-12-31 23:59:59.999+00');
SELECT snowflake_from_timestamp('2100-01-01 00:00:00+00');
SELECT snowflake_from_timestamp('infinity');
SELECT snowflake_from_timestamp('-infinity');
-- The latest finite timestamptz is a time, not infinity.
SELECT snowflake_from_timestamp('294276-12-31 23:59:59+00');
-- Epochs a timestamptz cannot hold are refused with the range allowed.
SELECT * FROM snowflake_decode(0, 'time=41,worker=10,sequence=12,unit=1ms,epoch=-9223372036854775808');
SELECT snowflake_timestamp(0, 'time=41,worker=10,sequence=12,unit=1ms,epoch=-210866803200001');
SELECT snowflake_timestamp(0, 'time=41,worker=10,sequence=12,unit=1ms,epoch=-210866803200000');
SELECT snowflake_from_timestamp('2026-01-01 00:00:00+00', 'baidu');
SELECT snowflake_from_timestamp('2047-01-01 00:00:00+00', 'instagram');
SELECT snowflake_nextval_batch(0);
SELECT snowflake_nextval_batch(1000001);
SELECT snowflake_nextval_array(0);
SELECT snowflake_nextval_array(1000001);
SELECT snowflake_decode(NULL) IS NULL AS strict_null;
-- Statements the utility hook looks at: nothing of its own is printed before
-- PostgreSQL's own error (a data-modifying CTE in an ADD COLUMN's default),
-- and a default that draws IDs is taken as it is where no Citus is.
CREATE TABLE hook_parent (v int);
CREATE TABLE hook_t (k int PRIMARY KEY);
INSERT INTO hook_t VALUES (1), (2);
ALTER TABLE hook_t ADD COLUMN z int DEFAULT (WITH w AS (INSERT INTO hook_parent VALUES (99) RETURNING 1) SELECT 1);
ALTER TABLE hook_t ADD COLUMN c int DEFAULT k;
ALTER TABLE hook_t ADD COLUMN s bigint DEFAULT snowflake_nextval(), ADD COLUMN u uuid DEFAULT snowflake_uuidv7();
SELECT count(DISTINCT s) AS distinct_ids, count(DISTINCT u) AS distinct_uuids FROM hook_t;
DROP TABLE hook_t, hook_parent;
