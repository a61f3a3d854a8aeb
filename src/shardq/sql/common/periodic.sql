-- name: periodic_slot_take
-- Take one slot of a periodic schedule and enqueue its task, in one statement: the insert into
-- shardq_periodic is the compare-and-set (its primary key (name, slot) lets exactly one worker
-- take a slot, for as long as the row is kept), and the task is inserted only from the row this
-- statement took. The task is due now ('ready', rank = priority), in a queue created on first use;
-- a queue paused for enqueue gets no task (the slot is still taken: it is skipped, not deferred).
-- Returns taken = 1 when this call took the slot, inserted = 1 when it enqueued the task. Every
-- data-modifying CTE has RETURNING: CockroachDB rejects one without (pkg/sql/opt/optbuilder/with.go,
-- getCTECols; the conformance rule CTE_RETURNING).
WITH taken AS (
    INSERT INTO shardq_periodic (name, slot, task_id) VALUES (%(name)s, %(slot)s, %(id)s)
    ON CONFLICT (name, slot) DO NOTHING
    RETURNING task_id
), settings AS (
    SELECT coalesce((SELECT q.paused_enqueue FROM shardq_queues AS q WHERE q.name = %(queue)s), false) AS paused,
           coalesce((SELECT q.max_attempts FROM shardq_queues AS q WHERE q.name = %(queue)s), %(max_attempts_default)s::INT4) AS max_attempts
), new_queue AS (
    INSERT INTO shardq_queues (name) SELECT %(queue)s FROM taken ON CONFLICT (name) DO NOTHING
    RETURNING name
), inserted AS (
    INSERT INTO shardq_tasks (state, rank, queue, exec_time, id, priority, attempts, max_attempts, payload)
    SELECT 'ready', %(priority)s::INT8, %(queue)s, now(), t.task_id, %(priority)s::INT8, 0,
           coalesce(%(max_attempts)s::INT4, (SELECT max_attempts FROM settings)), %(payload)s::BYTEA
    FROM taken AS t
    WHERE NOT (SELECT paused FROM settings)
    RETURNING id
)
SELECT (SELECT count(*) FROM taken)::INT8 AS taken, (SELECT count(*) FROM inserted)::INT8 AS inserted

-- name: periodic_last_slots
-- The latest slot taken of each schedule named, and when (for `shardq periodic list` and a
-- scheduler's catch-up after downtime).
SELECT name, max(slot) AS slot FROM shardq_periodic WHERE name = ANY(%(names)s::TEXT[]) GROUP BY name

-- name: periodic_slots_prune
-- Delete up to limit slot rows taken more than keep_seconds ago, never a schedule's latest one (the
-- slot a late worker could still try to take again).
DELETE FROM shardq_periodic AS p
WHERE (p.name, p.slot) IN (
    SELECT o.name, o.slot FROM shardq_periodic AS o
    WHERE o.taken_at < now() - %(keep_seconds)s::FLOAT8 * INTERVAL '1 second'
      AND o.slot < (SELECT max(l.slot) FROM shardq_periodic AS l WHERE l.name = o.name)
    LIMIT %(limit)s
)
RETURNING p.name
