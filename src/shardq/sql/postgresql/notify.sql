-- Optional wake-ups for idle workers (PostgreSQL only; CockroachDB has no LISTEN/NOTIFY and its
-- workers always poll). One fixed channel per database; the payload is the queue name. Producers
-- send at most one NOTIFY per queue per short interval after an enqueue commits (never a per-row
-- trigger); workers LISTEN on their fetcher's connection. See shardq.lifecycle.notify.

-- name: queue_notify
-- Tell listening workers that a queue has new work due now.
SELECT pg_notify('shardq_wake', %(queue)s)

-- name: notify_listen
-- Subscribe this connection to queue wake-ups.
LISTEN shardq_wake
