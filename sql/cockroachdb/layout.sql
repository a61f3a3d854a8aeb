-- name: shard_column_get
-- The hidden shard column of the current primary key. Read from the primary index, never from the
-- list of hidden columns: ALTER PRIMARY KEY leaves the old shard column behind, and filtering on it
-- does not fail, it silently scans everything.
SELECT column_name FROM [SHOW INDEX FROM shardq_tasks]
WHERE index_name = 'shardq_tasks_pkey' AND seq_in_index = 1 AND implicit

-- name: shard_bucket_count_get
-- The bucket count of the current primary key.
SELECT shard_bucket_count AS bucket_count FROM crdb_internal.table_indexes
WHERE descriptor_name = 'shardq_tasks' AND index_type = 'primary'
