-- Spark bulk enqueue (shardq.spark): run and chunk ledger, staging tables, the chunked merge.
-- A staging table's name is per attempt and fills the {stage} identifier slot (psycopg.sql.Identifier).

-- name: spark_run_register
-- Record a run and the number of chunks its rows are hashed into, unless it is known already: a
-- re-run keeps the chunking of the first attempt. Returns the row only when this call inserted it
-- (then the caller adds spark_run_mark in the same transaction); on a conflict no row comes back,
-- on CockroachDB too (cockroachdb/cockroach pkg/sql/logictest/testdata/logic_test/upsert, "Handle
-- INSERT ... ON CONFLICT DO NOTHING ... RETURNING": only the inserted row is returned).
INSERT INTO shardq_spark_runs (run_id, queue, chunks) VALUES (%(run_id)s, %(queue)s, %(chunks)s)
ON CONFLICT (run_id) DO NOTHING
RETURNING run_id

-- name: spark_run_mark
-- In the transaction that registered a run (spark_run_register returned its row): note how the
-- run splits its rows into chunks, as a ledger row with chunk -1 (merged chunks are 0..chunks-1)
-- and the scheme's number in rows_merged. Runs registered before there were schemes have none and
-- keep their chunking (shardq.spark.frame.CHUNK_BY_ID). Same shape as spark_chunk_take.
INSERT INTO shardq_spark_chunks (run_id, chunk, rows_merged) VALUES (%(run_id)s, -1, %(scheme)s)
ON CONFLICT (run_id, chunk) DO NOTHING

-- name: spark_run_get
-- One run's pinned queue, chunk count and chunking scheme (0: registered before schemes), or no row.
-- The correlated scalar subquery in the select list is supported on CockroachDB
-- (pkg/sql/logictest/testdata/logic_test/subquery_correlated, "Subqueries in projection lists").
SELECT r.run_id, r.queue, r.chunks, r.created_at,
       coalesce((SELECT c.rows_merged FROM shardq_spark_chunks AS c WHERE c.run_id = r.run_id AND c.chunk = -1), 0)
           AS scheme
FROM shardq_spark_runs AS r WHERE r.run_id = %(run_id)s

-- name: spark_run_progress
-- How many chunks of a run have been merged, and how many tasks they inserted.
SELECT count(*) AS chunks, coalesce(sum(rows_merged), 0)::INT8 AS tasks
FROM shardq_spark_chunks WHERE run_id = %(run_id)s AND chunk >= 0

-- name: spark_chunks_merged
-- The chunks of a run merged already, with the tasks each inserted (a re-run skips them without
-- opening a transaction).
SELECT chunk, rows_merged FROM shardq_spark_chunks WHERE run_id = %(run_id)s AND chunk >= 0

-- name: spark_chunk_take
-- First statement of a chunk's merge transaction: take the chunk's ledger row. No row back means
-- another attempt merged (or is merging) this chunk: the caller rolls back and moves on. A
-- concurrent attempt on the same chunk waits on this row's key until the first one commits.
INSERT INTO shardq_spark_chunks (run_id, chunk, rows_merged) VALUES (%(run_id)s, %(chunk)s, 0)
ON CONFLICT (run_id, chunk) DO NOTHING
RETURNING chunk

-- name: spark_chunk_merge
-- Insert one chunk of a staging table into the queue, in the transaction that claimed the chunk.
-- Same rules as task_insert_many: creates the queue on first use; a task due now is 'ready' with
-- rank = its priority, one due later 'scheduled' with rank = scheduled_rank; a row whose dedupe
-- key is live is skipped; the database fills the bucket (PostgreSQL default) or shard
-- (CockroachDB). Staging may hold a row several times (retried or speculative Spark tasks):
-- DISTINCT ON (id) keeps one. Rows with an exclusive key are left to spark_chunk_keyed_rows (they
-- may have to wait in their key's backlog). The dedupe index is the only arbiter: the ids are
-- distinct here and new (derived from the run, merged once per the ledger) and these rows carry no
-- exclusive key, and arbitrating on every unique index (task_insert_many's bare ON CONFLICT) slowed
-- the merge (docs/spark.md, "Before: the staging path"). When the queue is paused for enqueue nothing is inserted and paused = true: the
-- caller rolls the chunk back. Spark binds NULL for every absent value; defaults are applied here.
-- workflow_id: the run's callback workflow when the run declared then= (shardq.workflows.spark_callbacks), else NULL.
WITH settings AS (
    SELECT coalesce((SELECT q.paused_enqueue FROM shardq_queues AS q WHERE q.name = %(queue)s), false) AS paused,
           coalesce((SELECT q.max_attempts FROM shardq_queues AS q WHERE q.name = %(queue)s), 25) AS max_attempts
), new_queue AS (
    INSERT INTO shardq_queues (name) VALUES (%(queue)s) ON CONFLICT (name) DO NOTHING
    RETURNING name
), incoming AS (
    SELECT DISTINCT ON (s.id)
           s.id::UUID AS id, s.payload, s.max_attempts, s.dedupe_key, coalesce(s.priority, 0) AS priority,
           coalesce(s.run_at, now() + coalesce(s.delay, 0) * INTERVAL '1 second') AS due
    FROM {stage} AS s
    WHERE s.chunk = %(chunk)s AND s.exclusive_key IS NULL
    ORDER BY s.id
), merged AS (
    INSERT INTO shardq_tasks (state, rank, queue, exec_time, id, priority, attempts, max_attempts, payload,
                              dedupe_key, workflow_id)
    SELECT CASE WHEN i.due > now() THEN 'scheduled' ELSE 'ready' END,
           CASE WHEN i.due > now() THEN %(scheduled_rank)s ELSE i.priority END,
           %(queue)s, i.due, i.id, i.priority, 0,
           coalesce(i.max_attempts, (SELECT max_attempts FROM settings)), i.payload, i.dedupe_key,
           %(workflow_id)s::UUID
    FROM incoming AS i
    WHERE NOT (SELECT paused FROM settings)
    ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM merged) AS merged, (SELECT paused FROM settings) AS paused

-- name: spark_chunk_keyed_rows
-- The rows of one chunk that carry an exclusive key, once each: the merge enqueues them the way
-- enqueue_many does (shardq.lifecycle.exclusive: active where the key is free, else into its backlog, under
-- the keys' locks), in the chunk's transaction.
SELECT DISTINCT ON (s.id)
       s.id::UUID AS id, s.payload, s.run_at, s.delay, s.dedupe_key, s.max_attempts,
       coalesce(s.priority, 0) AS priority, s.exclusive_key
FROM {stage} AS s
WHERE s.chunk = %(chunk)s AND s.exclusive_key IS NOT NULL
ORDER BY s.id

-- name: spark_chunk_record
-- Last statement of a chunk's merge transaction: how many tasks it inserted.
UPDATE shardq_spark_chunks SET rows_merged = %(merged)s WHERE run_id = %(run_id)s AND chunk = %(chunk)s

-- name: spark_stage_register
-- Note a staging table before creating it, so a crashed attempt's table can always be found.
INSERT INTO shardq_spark_stages (stage, run_id) VALUES (%(stage)s, %(run_id)s)

-- name: spark_stage_drop
-- Drop a staging table (done with, or left behind by a crashed attempt).
DROP TABLE IF EXISTS {stage}

-- name: spark_stage_forget
-- Remove a dropped staging table from the list.
DELETE FROM shardq_spark_stages WHERE stage = %(stage)s

-- name: spark_stages_stale
-- Staging tables older than max_age_seconds: attempts that crashed or were killed.
SELECT stage, run_id, created_at FROM shardq_spark_stages
WHERE created_at <= now() - %(max_age_seconds)s::FLOAT8 * INTERVAL '1 second'
ORDER BY created_at
LIMIT %(limit)s

-- name: spark_stage_rows
-- Rows in a staging table (duplicates included).
SELECT count(*) AS n FROM {stage}

-- name: spark_runs_expire
-- Forget up to limit runs older than max_age_seconds, with their chunk ledger and their callback
-- (then=; its workflow stays). A run forgotten this way is no longer protected: running it again
-- enqueues its tasks again, and a callback still waiting is never released.
WITH old AS (
    SELECT run_id FROM shardq_spark_runs
    WHERE created_at <= now() - %(max_age_seconds)s::FLOAT8 * INTERVAL '1 second'
    ORDER BY created_at
    LIMIT %(limit)s
), chunks AS (
    DELETE FROM shardq_spark_chunks WHERE run_id IN (SELECT run_id FROM old)
    RETURNING run_id
), callbacks AS (
    DELETE FROM shardq_spark_callbacks WHERE run_id IN (SELECT run_id FROM old)
    RETURNING run_id
)
DELETE FROM shardq_spark_runs WHERE run_id IN (SELECT run_id FROM old)
RETURNING run_id
