-- Taking fixed IDs apart, under this server's layout and under named ones.
SET timezone = 'UTC';
SET datestyle = 'ISO';

-- This server's layout: snowflake_id, 41/10/12 bits, 1 ms, epoch 2025-01-01.
SELECT * FROM snowflake_decode(0);
SELECT * FROM snowflake_decode(4194304 + (5 << 12) + 7);
SELECT (snowflake_decode(250305246994132992)).ts, (snowflake_decode(250305246994132992)).worker_id;
SELECT snowflake_timestamp(9223372036854775807);

-- IDs from other systems.
SELECT * FROM snowflake_decode(175928847299117063, 'discord');
SELECT ts, worker_id >> 5 AS datacenter, worker_id & 31 AS worker, sequence
  FROM snowflake_decode(1212092628029698048, 'twitter');
SELECT * FROM snowflake_decode((1387263000::bigint << 23) | (1341 << 10) | 1, 'instagram');
SELECT * FROM snowflake_decode(-1, 'instagram');
SELECT * FROM snowflake_decode((5::bigint << 24) | (18 << 16) | 43981, 'sonyflake');
-- An ID of pgEdge's snowflake 2.x, node 5, count 20, at 2026-01-01 00:00:00 UTC
-- (packed as its snowflake.c does: msec since 2023-01-01 << 22 | node << 12 | count).
SELECT * FROM snowflake_decode(397177100697620500, 'pgedge');
SELECT * FROM snowflake_decode((1::bigint << 35) | (3 << 13) | 9, 'baidu');
SELECT * FROM snowflake_decode(9007199254740991, 'js53');
SELECT * FROM snowflake_decode(4194304, 'time=41,worker=10,sequence=12,unit=1ms,epoch=2025-01-01 00:00:00+00');
SELECT snowflake_timestamp(175928847299117063, 'Discord');

-- Time to the smallest ID of its tick, and back.
SELECT snowflake_from_timestamp('2025-01-01 00:00:00+00');
SELECT snowflake_from_timestamp('2026-06-01 12:00:00.0005+00');
SELECT snowflake_timestamp(snowflake_from_timestamp('2026-06-01 12:00:00.0005+00'));
SELECT snowflake_from_timestamp('2016-04-30 11:18:25.796+00', 'discord') <= 175928847299117063 AS bound_holds,
       snowflake_from_timestamp('2016-04-30 11:18:25.797+00', 'discord') > 175928847299117063 AS next_tick_above;
SELECT snowflake_timestamp(snowflake_from_timestamp('2020-06-15 08:30:59.999+00', 'js53'), 'js53');

-- Every named layout.
SELECT * FROM snowflake_layouts();
