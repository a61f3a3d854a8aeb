-- Outcome notifications for callers waiting on a task (PostgreSQL only; CockroachDB has no
-- LISTEN/NOTIFY and its waiters poll). Sent in the transaction that records finished tasks
-- (shardq.lifecycle.history), so a waiter is woken only once the outcome is committed and readable. The
-- payload is task ids joined by commas, in chunks under NOTIFY's 8000-byte limit: one notification
-- per chunk, not per task. Each waiting process LISTENs on one connection (shardq.lifecycle.waiting).

-- name: outcome_notify
-- Wake the processes waiting for these tasks' outcomes (delivered at commit).
SELECT count(pg_notify('shardq_done', c)) AS sent FROM unnest(%(chunks)s::TEXT[]) AS c

-- name: outcome_listen
-- Subscribe this connection to outcome notifications.
LISTEN shardq_done
