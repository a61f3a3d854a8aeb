-- PostgreSQL staging tables for the Spark bulk enqueue (shardq.spark).

-- name: spark_stage_create
-- A per-attempt staging table: no key, no constraint, so Spark's plain INSERTs can never fail on
-- a duplicate (a retried partition just adds rows again). UNLOGGED: it is scratch data, and
-- skipping the WAL makes the Spark write cheaper. Crash recovery empties an unlogged table, so
-- every chunk merge first checks spark_server_started against the value noted when the table was
-- created, and the attempt stops (the re-run rewrites staging) if the server restarted in
-- between. Columns follow shardq.spark.frame.STAGED; Spark writes only the mapped ones.
CREATE UNLOGGED TABLE {stage} (
    chunk INT4 NOT NULL,
    id TEXT NOT NULL,
    payload BYTEA,
    run_at TIMESTAMPTZ,
    delay FLOAT8,
    dedupe_key TEXT,
    max_attempts INT4,
    priority INT8,
    exclusive_key TEXT
)

-- name: spark_stage_index
-- After the Spark write: each chunk merge then reads its own rows instead of scanning the table.
CREATE INDEX ON {stage} (chunk)

-- name: spark_server_started
-- When the server (re)started: an unlogged staging table only holds its rows while this stays the same.
SELECT pg_postmaster_start_time() AS started
