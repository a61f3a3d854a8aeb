-- Flow control (docs/flow-control.md): global concurrency slots and rate tokens per queue. Only
-- queues with a limit ever run these statements; a queue without one claims exactly as before.
--
-- Slots (shardq.lifecycle.flow.FlowSlots): a worker takes free slots (take + hold, one transaction) and keeps
-- them while it has work, renewing them every third of a lease and giving idle ones back; its
-- claims of the queue ask for at most as many tasks as it has idle slots. Tokens
-- (shardq.lifecycle.flow.claim_with_tokens): one transaction locks the bucket, claims at most as many tasks
-- as there are whole tokens with the queue's ordinary claim statement, and writes back the rest.
-- Statements address shardq_slots by its whole key (queue, free_at, slot), by its unique
-- (queue, slot) index, or scan the span (queue, free_at <= now()) in key order, and
-- shardq_rate_tokens by its key (queue).
--
-- CockroachDB: the slot scan's WHERE is exactly the key span and the ORDER BY is key order, so the
-- LIMIT is a hard limit on the scan and SKIP LOCKED locks only the rows returned; a residual filter
-- would make the vectorized scan lock every row it reads (cockroachdb#121917, see
-- ../shared/reference/cockroachdb.md). Its FOR UPDATE locks are best-effort under SERIALIZABLE
-- (docs known-limitations/select-for-update-limitations.md); correctness does not rest on them:
-- two transactions that take the same slot or token row both write it, and one of them gets 40001
-- and is re-run whole by shardq.sessions.session (the claim is in that transaction, so no task is leased twice).
-- Changing free_at (a key column) rewrites the row's key, as a task's change of state does
-- (pkg/sql/row/updater.go, Updater.primaryKeyColChange: "rows must be deleted and re-added").
-- Checked by the conformance suite: tests/conformance/rules.py HARD_LIMITED holds flow_slots_take
-- to a key span; generate_series with a column alias list is what CockroachDB's own tests use
-- (pkg/sql/row/external_row_data_test.go: INSERT INTO t SELECT … FROM generate_series(1, 3) AS g(i)).

-- name: flow_slots_take
-- Lock up to limit free slots of one queue (free: free_at has passed), earliest free first.
SELECT slot, free_at
FROM shardq_slots
WHERE queue = %(queue)s AND free_at <= now()
ORDER BY free_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: flow_slots_hold
-- Hold the slots just taken for one worker (its token) until now() + lease_seconds; the rows are
-- addressed by their whole key as the take read it.
UPDATE shardq_slots AS s
SET free_at = now() + %(lease_seconds)s::FLOAT8 * INTERVAL '1 second', token = %(token)s::UUID
FROM unnest(%(slots)s::INT4[], %(olds)s::TIMESTAMPTZ[]) AS k(slot, old)
WHERE s.queue = %(queue)s AND s.free_at = k.old AND s.slot = k.slot
RETURNING s.slot, s.free_at

-- name: flow_slots_extend
-- Keep a worker's slots until now() + lease_seconds, through the unique (queue, slot) index and
-- fenced by the worker's token: a slot that expired and went to another worker is not touched
-- (missing from the result). One that expired and nobody took is simply the worker's again.
UPDATE shardq_slots AS s
SET free_at = now() + %(lease_seconds)s::FLOAT8 * INTERVAL '1 second'
FROM unnest(%(slots)s::INT4[]) AS k(slot)
WHERE s.queue = %(queue)s AND s.slot = k.slot AND s.token = %(token)s::UUID
RETURNING s.slot, s.free_at

-- name: flow_slots_release
-- Give a worker's slots back (free at once), fenced like flow_slots_extend.
UPDATE shardq_slots AS s
SET free_at = '1970-01-01 00:00:00+00', token = NULL
FROM unnest(%(slots)s::INT4[]) AS k(slot)
WHERE s.queue = %(queue)s AND s.slot = k.slot AND s.token = %(token)s::UUID
RETURNING s.slot

-- name: flow_slots_add
-- Make sure slots 0 .. slots - 1 of a queue exist (new ones free). The unique (queue, slot) index
-- is the conflict target: a held slot keeps its holder.
INSERT INTO shardq_slots (queue, slot)
SELECT %(queue)s::TEXT, g.slot FROM generate_series(0, %(slots)s::INT4 - 1) AS g(slot)
ON CONFLICT (queue, slot) DO NOTHING

-- name: flow_slots_trim
-- Drop a queue's slots numbered slots and above (all of them for 0: the limit is removed). A task
-- running in a dropped slot finishes; its release then finds nothing to free.
DELETE FROM shardq_slots WHERE queue = %(queue)s AND slot >= %(slots)s::INT4

-- name: flow_tokens_take
-- Lock a rate-limited queue's token bucket and read it with the transaction's clock; the refill is
-- computed by the caller (shardq.lifecycle.flow.RateTokens) from these three values.
SELECT tokens, refilled_at, now() AS now FROM shardq_rate_tokens WHERE queue = %(queue)s FOR UPDATE

-- name: flow_tokens_spend
-- Store what is left after a claim (tokens) as of refilled_at, in the same transaction as the take.
UPDATE shardq_rate_tokens SET tokens = %(tokens)s::FLOAT8, refilled_at = %(refilled_at)s::TIMESTAMPTZ
WHERE queue = %(queue)s

-- name: flow_tokens_reset
-- A rate was set: a full bucket (burst tokens) as of now.
INSERT INTO shardq_rate_tokens (queue, tokens, refilled_at) VALUES (%(queue)s::TEXT, %(tokens)s::FLOAT8, now())
ON CONFLICT (queue) DO UPDATE SET tokens = excluded.tokens, refilled_at = excluded.refilled_at

-- name: flow_tokens_drop
-- A rate was removed.
DELETE FROM shardq_rate_tokens WHERE queue = %(queue)s

-- name: flow_usage
-- Slots held now and slots in all, per queue with a concurrency limit (shardq stats, queue show).
SELECT queue, count(CASE WHEN free_at > now() THEN 1 END) AS in_use, count(*) AS slots
FROM shardq_slots GROUP BY queue ORDER BY queue
