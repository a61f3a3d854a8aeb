-- name: schema_tasks_table_present
-- One row when the tasks table exists (shardq migrate reports a bucket count given for an existing
-- table as ignored). information_schema lists the current database only on both engines.
SELECT 1 AS present FROM information_schema.tables WHERE table_name = 'shardq_tasks'
