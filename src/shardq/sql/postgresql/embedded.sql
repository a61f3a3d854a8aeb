-- name: embedded_database_present
-- The embedded server's bootstrap, on its maintenance database before shardq's own exists: one row
-- when the database named %(name)s exists.
SELECT 1 AS present FROM pg_database WHERE datname = %(name)s

-- name: embedded_database_create
-- Create the embedded server's database (the name is a fixed identifier, quoted by psycopg.sql).
CREATE DATABASE {database}
