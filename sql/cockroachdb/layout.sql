-- name: shard_layout_get
-- The hidden shard column and bucket count of the *current* primary key, read in one statement so
-- both come from the same descriptor version. The column is the first, implicit column of the
-- primary index, never taken from the list of hidden columns: ALTER PRIMARY KEY leaves the old shard
-- column behind, and filtering on it does not fail, it silently scans everything. The primary index
-- is picked by index_type, not by name. crdb_internal.table_indexes lists the current database only.
SELECT i.column_name AS shard_column, t.shard_bucket_count AS bucket_count, t.descriptor_id AS table_id
FROM [SHOW INDEX FROM shardq_tasks] AS i
JOIN crdb_internal.table_indexes AS t
  ON t.descriptor_name = 'shardq_tasks' AND t.index_type = 'primary' AND t.index_name = i.index_name
WHERE i.seq_in_index = 1 AND i.implicit
