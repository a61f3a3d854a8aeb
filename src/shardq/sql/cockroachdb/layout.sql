-- name: shard_layout_get
-- The hidden shard column and bucket count of the hash-sharded primary key, read in one statement
-- so both come from the same descriptor version, from catalogs the unsafe-internals gate does not
-- cover (it guards crdb_internal and system tables: pkg/sql/unsafesql/unsafesql.go,
-- CheckInternalsAccess), so neither crdb_internal nor a nested [SHOW INDEX] delegate (which reads
-- crdb_internal.table_indexes, pkg/sql/delegate/show_table.go) is needed from 26.1 on.
-- information_schema.statistics (pkg/sql/information_schema.go, informationSchemaStatisticsTable)
-- has one row per index key column: table_schema, table_name, index_name, seq_in_index (1-based),
-- column_name, and implicit = 'YES' for key columns before ExplicitColumnStartIdx() (yesOrNoDatum:
-- the strings YES/NO), which counts the shard column of a hash-sharded index
-- (pkg/sql/catalog/descpb/index.go). So the shard column is the key's first, implicit column, never
-- taken from the list of hidden columns: ALTER PRIMARY KEY leaves the old shard column behind.
-- The bucket count is parsed from pg_catalog.pg_indexes.indexdef (pkg/sql/pg_catalog.go), which
-- renders "USING HASH WITH (bucket_count=N)" (pkg/sql/catalog/catformat/index.go, FmtPGCatalog);
-- the engine picks the primary index (shardq_tasks_pkey) when more than one row comes back. Both
-- catalogs list the current database only.
SELECT s.index_name, s.column_name AS shard_column, x.indexdef AS index_definition
FROM information_schema.statistics AS s
JOIN pg_catalog.pg_indexes AS x
  ON x.schemaname = s.table_schema AND x.tablename = s.table_name AND x.indexname = s.index_name
WHERE s.table_schema = current_schema() AND s.table_name = 'shardq_tasks'
  AND s.seq_in_index = 1 AND s.implicit = 'YES'
