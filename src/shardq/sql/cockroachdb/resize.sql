-- CockroachDB: resizing is ALTER PRIMARY KEY to the same columns with another bucket_count, run alone
-- in autocommit (shardq.resize.cockroachdb). Docs: docs/cockroachdb.md maps each statement to the
-- documented fact it relies on.

-- name: table_primary_key_alter
-- Rebuild the primary index with bucket_count buckets (the same key columns as migration 0001): an online schema change (a backfill job) that
-- reads and writes keep using meanwhile; all nodes switch when it completes. Same columns and
-- directions, so no copy of the old key is kept as a secondary index. Must run alone: no other schema
-- change of the table in the same transaction or while it runs. DDL takes no bind parameters:
-- {bucket_count} is an integer literal filled by Session.execute_ddl after validation (2..2048).
ALTER TABLE shardq_tasks ALTER PRIMARY KEY USING COLUMNS (state, queue, rank, exec_time, id)
    USING HASH WITH (bucket_count = {bucket_count})

-- name: table_schema_jobs_running
-- Unfinished schema-change jobs of shardq_tasks (what SHOW JOBS shows, filtered by the table's
-- descriptor id, which only crdb_internal.jobs carries). Runs only on a session started with
-- allow_unsafe_internals (an operator's read: buckets show, a resize), never on a worker's path:
-- from 26.1 crdb_internal outside its allowlist is refused without it. GC jobs are left out on
-- purpose: they wait for gc.ttlseconds (hours) and block nothing.
SELECT j.job_id, j.job_type, j.status, j.running_status, j.fraction_completed, j.description
FROM crdb_internal.jobs AS j
WHERE j.job_type IN ('SCHEMA CHANGE', 'NEW SCHEMA CHANGE')
  AND j.status NOT IN ('succeeded', 'failed', 'canceled', 'revert-failed')
  AND (SELECT t.descriptor_id FROM crdb_internal.table_indexes AS t
       WHERE t.descriptor_name = 'shardq_tasks' AND t.index_type = 'primary' LIMIT 1) = ANY(j.descriptor_ids)
ORDER BY j.created

-- name: shard_column_drop
-- Drop the shard column the previous primary key left behind, so a consumer still filtering on it
-- fails (and re-discovers) instead of reading every new bucket's span through a residual filter. A
-- schema-changer test drops such a column explicitly; a refusal is reported and harmless. {column} is an identifier.
ALTER TABLE shardq_tasks DROP COLUMN {column}
