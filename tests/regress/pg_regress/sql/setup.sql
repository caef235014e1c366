-- The regression server preloads snowflake_id with snowflake_id.worker_id = 5.
CREATE EXTENSION snowflake_id;
