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

-- name: spark_chunk_open
-- COPY writer (shardq.spark.writer), in a chunk's transaction after spark_chunk_take: create the
-- queue on first use and read what the chunk's rows need from the database: whether the queue is
-- paused for enqueue (then the caller rolls the chunk back), its max_attempts (for rows that give
-- none) and the transaction's now() (the due time of rows due at once, as in spark_chunk_merge).
WITH new_queue AS (
    INSERT INTO shardq_queues (name) VALUES (%(queue)s) ON CONFLICT (name) DO NOTHING
    RETURNING name
)
SELECT coalesce((SELECT q.paused_enqueue FROM shardq_queues AS q WHERE q.name = %(queue)s), false) AS paused,
       coalesce((SELECT q.max_attempts FROM shardq_queues AS q WHERE q.name = %(queue)s), 25) AS max_attempts,
       now() AS now

-- name: spark_chunk_copy_tasks
-- COPY writer: a chunk of rows that are due at once and carry no dedupe or exclusive key, straight
-- into the tasks table, in COPY's binary format (shardq.spark.writer._plain_rows: state 'ready',
-- rank = the priority, due at the transaction's now(), max_attempts filled in): the rows
-- spark_chunk_merge would insert for them. Nothing can conflict: the ids are new (derived from the
-- run, written once per the ledger row claimed in the same transaction) and distinct within the
-- chunk. The bucket is the column default, as for every enqueue.
COPY shardq_tasks (id, rank, priority, payload, max_attempts, state, queue, exec_time) FROM STDIN (FORMAT binary)

-- name: spark_chunk_copy_run_tasks
-- spark_chunk_copy_tasks for a run that declared then=: each row also carries the run's workflow id
-- (shardq.workflows.spark_callbacks), the last field of every row.
COPY shardq_tasks (id, rank, priority, payload, max_attempts, state, queue, exec_time, workflow_id)
FROM STDIN (FORMAT binary)

-- name: spark_chunk_table_create
-- COPY writer: the connection's own table for one chunk's rows, when the run maps a run_at, delay,
-- dedupe key or exclusive key (those rows take spark_chunk_merge's and shardq.lifecycle.exclusive's SQL rules).
-- TEMP: no WAL, no other session sees it; ON COMMIT DELETE ROWS empties it after each chunk (a
-- rolled-back chunk's rows go with the rollback). Columns as the staging table's.
CREATE TEMP TABLE IF NOT EXISTS {stage} (
    chunk INT4 NOT NULL,
    id TEXT NOT NULL,
    payload BYTEA,
    run_at TIMESTAMPTZ,
    delay FLOAT8,
    dedupe_key TEXT,
    max_attempts INT4,
    priority INT8,
    exclusive_key TEXT
) ON COMMIT DELETE ROWS

-- name: spark_chunk_copy_rows
-- COPY writer: one chunk's rows into the connection's chunk table (spark_chunk_table_create), in
-- the chunk's transaction; spark_chunk_merge then reads them from there.
COPY {stage} (id, chunk, payload, run_at, delay, dedupe_key, max_attempts, priority, exclusive_key)
FROM STDIN (FORMAT csv)
