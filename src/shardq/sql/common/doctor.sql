-- name: doctor_settings
-- The session settings `shardq doctor` reports: a session that defaults to read-only transactions
-- cannot enqueue or work; the isolation is reported (CockroachDB sessions pin SERIALIZABLE).
-- current_setting, current_user and current_schema() exist on both engines
-- (CockroachDB: pkg/sql/sem/builtins/pg_builtins.go, builtins.go).
SELECT current_setting('default_transaction_read_only') AS read_only,
       current_setting('default_transaction_isolation') AS isolation,
       current_user AS user_name, current_schema() AS schema_name

-- name: doctor_table_privileges
-- What `shardq work` needs on each shardq table: SELECT, INSERT, UPDATE, DELETE (has_table_privilege
-- takes one privilege per call; CockroachDB implements these four in pkg/sql/sem/builtins/pg_builtins.go).
SELECT t.table_name,
       has_table_privilege(t.table_name, 'SELECT') AS can_select,
       has_table_privilege(t.table_name, 'INSERT') AS can_insert,
       has_table_privilege(t.table_name, 'UPDATE') AS can_update,
       has_table_privilege(t.table_name, 'DELETE') AS can_delete
FROM information_schema.tables AS t
WHERE t.table_schema = current_schema() AND t.table_name = ANY(%(tables)s::TEXT[])
ORDER BY t.table_name

-- name: doctor_schema_create
-- What `shardq migrate` needs to create tables: CREATE on the current schema (has_schema_privilege
-- with CREATE exists on both engines; CockroachDB: pkg/sql/sem/builtins/pg_builtins.go).
SELECT has_schema_privilege(current_schema(), 'CREATE') AS can_create

-- name: doctor_schema_revision
-- The migration revision the database is at (Alembic's table); missing on an unmigrated database.
SELECT version_num FROM alembic_version
