-- The dashboard's audit log (migration 0009): what operators did, newest first.

-- name: audit_add
-- Record one action: who (the dashboard's description of the session), what, to what, details.
INSERT INTO shardq_audit (id, at, actor, action, target, detail)
VALUES (%(id)s::UUID, now(), %(actor)s::TEXT, %(action)s::TEXT, %(target)s::TEXT, %(detail)s::TEXT)

-- name: audit_list_before
-- One page of the log, newest first: the entries before (before_at, before_id), by the (at, id) index.
SELECT id, at, actor, action, target, detail FROM shardq_audit
WHERE (at, id) < (%(before_at)s::TIMESTAMPTZ, %(before_id)s::UUID)
ORDER BY at DESC, id DESC
LIMIT %(limit)s::INT8

-- name: audit_prune
-- Delete up to limit log entries older than keep_seconds, oldest first by the (at, id) index;
-- called until it deletes fewer.
DELETE FROM shardq_audit
WHERE id IN (
    SELECT id FROM shardq_audit
    WHERE at < now() - %(keep_seconds)s::FLOAT8 * INTERVAL '1 second'
    ORDER BY at, id
    LIMIT %(limit)s::INT8
)
RETURNING id
