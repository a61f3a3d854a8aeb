-- CockroachDB staging tables for the Spark bulk enqueue (shardq.spark).

-- name: spark_stage_create
-- A per-attempt staging table. Its primary key leads with the chunk, so each chunk merge reads one
-- span. A new table is one range until it splits (by size or load), so the Spark writers share that
-- range at first (spreading chunks does not help a table that has not split yet: docs/cockroachdb.md,
-- "Spark staging"). rid only makes rows unique (Spark never writes it). No UNLOGGED or TEMP tables:
-- CockroachDB has neither for this (temp tables are per session, and Spark writes from its own
-- connections).
CREATE TABLE {stage} (
    chunk INT4 NOT NULL,
    rid UUID NOT NULL DEFAULT gen_random_uuid(),
    id STRING NOT NULL,
    payload BYTES,
    run_at TIMESTAMPTZ,
    delay FLOAT8,
    dedupe_key STRING,
    max_attempts INT4,
    priority INT8,
    exclusive_key STRING,
    PRIMARY KEY (chunk, rid)
)

-- name: spark_server_started
-- Staging is an ordinary (replicated, durable) table on CockroachDB, so no restart can empty it:
-- nothing to compare.
SELECT NULL::TIMESTAMPTZ AS started
