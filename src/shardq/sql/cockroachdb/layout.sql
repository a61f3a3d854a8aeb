-- name: shard_layout_get
-- The hidden shard column and bucket count of the hash-sharded primary key, read in one statement
-- so both come from the same descriptor version, without crdb_internal (gated behind
-- allow_unsafe_internals from 26.1). The shard column is the first, implicit column of the index
-- (SHOW INDEX marks it implicit at seq_in_index 1), never taken from the list of hidden columns:
-- ALTER PRIMARY KEY leaves the old shard column behind. The bucket count is parsed from
-- pg_indexes.indexdef, which renders "USING HASH WITH (bucket_count=N)"
-- (pkg/sql/logictest/testdata/logic_test/hash_sharded_index); the engine picks the primary index
-- (shardq_tasks_pkey) when more than one row comes back. pg_catalog lists the current database only.
SELECT i.index_name, i.column_name AS shard_column, x.indexdef AS index_definition
FROM [SHOW INDEX FROM shardq_tasks] AS i
JOIN pg_catalog.pg_indexes AS x
  ON x.tablename = 'shardq_tasks' AND x.schemaname = current_schema() AND x.indexname = i.index_name
WHERE i.seq_in_index = 1 AND i.implicit
