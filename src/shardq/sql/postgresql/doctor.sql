-- name: doctor_plan_setup
-- Inside `shardq doctor`'s rolled-back transaction: plans without sequential scans unless no index
-- can serve the statement, so a missing index shows as a Seq Scan whatever the table's size (an
-- empty table would otherwise be read whole by any plan).
SET LOCAL enable_seqscan = off

-- name: doctor_tasks_owned
-- `shardq buckets resize` alters the tasks table's DEFAULT, which only its owner (or a member of the
-- owning role) may do.
SELECT pg_has_role(c.relowner, 'USAGE') AS owned
FROM pg_catalog.pg_class AS c
WHERE c.oid = to_regclass('shardq_tasks')
