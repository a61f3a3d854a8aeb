-- PostgreSQL staging tables for the Spark bulk enqueue (shardq.spark).

-- name: spark_stage_create
-- A per-attempt staging table: no key, no constraint, so Spark's plain INSERTs can never fail on
-- a duplicate (a retried partition just adds rows again). Logged, so crash recovery cannot empty
-- it behind a merge that goes on. Columns follow shardq.spark.frame.STAGE_FIELDS; Spark writes
-- only the ones the job maps, the others stay NULL.
CREATE TABLE {stage} (
    chunk INT4 NOT NULL,
    id TEXT NOT NULL,
    payload BYTEA,
    run_at TIMESTAMPTZ,
    delay FLOAT8,
    dedupe_key TEXT,
    max_attempts INT4
)

-- name: spark_stage_index
-- After the Spark write: each chunk merge then reads its own rows instead of scanning the table.
CREATE INDEX ON {stage} (chunk)
