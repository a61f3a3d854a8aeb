-- name: workflow_insert
-- One row per workflow (shardq.workflows.steps): its id and name.
INSERT INTO shardq_workflows (id, name) VALUES (%(id)s::UUID, %(name)s::TEXT)

-- name: workflow_steps_insert
-- Every step of one workflow (parallel arrays): a step without parents starts 'ready' (its task is
-- inserted ready), the others 'waiting' on their parents' count.
-- A step with parents keeps its task's payload, priority and attempts, to enqueue it again if it is
-- cancelled by a dead parent that is then requeued (workflow_steps_reopen). A step counted in shards
-- waits on its shards (workflow_counts_insert); child_kinds says which statements its ack needs
-- (shardq.operations.workflows.OWN_ROW, IN_SHARDS); only_child, its one child counted in its own
-- row when it has exactly one (migration 0016), lets its ack count it off without reading edges;
-- sole_child_task_id, that child's task when it has no other parent (migration 0017), lets its ack
-- make that task claimable without counting anything off. only_shard, for a step whose one child is
-- counted in shards (only_child then names that child; migration 0020), the shard it counts in:
-- its ack lowers that shard row without reading its edge.
INSERT INTO shardq_workflow_steps (workflow_id, step, task_id, task, queue, state, waiting_on, on_failure,
                                   payload, priority, max_attempts, child_kinds, only_child, sole_child_task_id,
                                   only_shard)
SELECT %(workflow_id)s::UUID, s.step, s.task_id, s.task, s.queue,
       CASE WHEN s.waiting_on = 0 THEN 'ready' ELSE 'waiting' END, s.waiting_on, s.on_failure,
       CASE WHEN s.waiting_on > 0 THEN s.payload END, s.priority, s.max_attempts, s.child_kinds, s.only_child,
       s.sole_child_task_id, s.only_shard
FROM unnest(%(steps)s::TEXT[], %(task_ids)s::UUID[], %(tasks)s::TEXT[], %(queues)s::TEXT[],
            %(waiting_on)s::INT4[], %(on_failure)s::BOOL[], %(payloads)s::BYTEA[], %(priorities)s::INT8[],
            %(max_attempts)s::INT4[], %(child_kinds)s::INT2[], %(only_children)s::TEXT[],
            %(sole_child_task_ids)s::UUID[], %(only_shards)s::INT4[])
     AS s(step, task_id, task, queue, waiting_on, on_failure, payload, priority, max_attempts, child_kinds,
          only_child, sole_child_task_id, only_shard)

-- name: workflow_edges_insert
-- Every (parent, child) edge of one workflow, with the shard of the child's count the parent is in
-- (NULL: the child counts its parents in its own row).
INSERT INTO shardq_workflow_edges (workflow_id, parent, child, shard)
SELECT %(workflow_id)s::UUID, e.parent, e.child, e.shard
FROM unnest(%(parents)s::TEXT[], %(children)s::TEXT[], %(shards)s::INT4[]) AS e(parent, child, shard)

-- name: workflow_counts_insert
-- The shard rows of one workflow's steps counted in shards (a wide fan-in): each row counts the
-- parents of its shard (docs/workflows.md, "Fan-in in shards").
INSERT INTO shardq_workflow_counts (workflow_id, step, shard, waiting_on)
SELECT %(workflow_id)s::UUID, c.step, c.shard, c.waiting_on
FROM unnest(%(steps)s::TEXT[], %(shards)s::INT4[], %(waiting_on)s::INT4[]) AS c(step, shard, waiting_on)

-- name: workflow_tasks_insert
-- The task rows of every step of one workflow, over any number of queues (created on first use):
-- a root is 'ready' at rank = its priority; a step with parents is 'waiting' at backlog_rank, beyond
-- every priority and so outside every claim's span (migration 0001), until its last parent's ack
-- releases it. Paused queues are not consulted: a workflow is enqueued whole or not at all.
WITH new_queues AS (
    INSERT INTO shardq_queues (name)
    SELECT DISTINCT u.q FROM unnest(%(queues)s::TEXT[]) AS u(q)
    ON CONFLICT (name) DO NOTHING
    RETURNING name
)
INSERT INTO shardq_tasks (state, rank, queue, exec_time, id, priority, attempts, max_attempts, payload,
                          workflow_id)
SELECT CASE WHEN n.waiting THEN 'waiting' ELSE 'ready' END,
       CASE WHEN n.waiting THEN %(backlog_rank)s ELSE n.priority END,
       n.queue, now(), n.id, n.priority, 0,
       coalesce(n.max_attempts, (SELECT q.max_attempts FROM shardq_queues AS q WHERE q.name = n.queue),
                %(max_attempts_default)s::INT4),
       n.payload, %(workflow_id)s::UUID
FROM unnest(%(ids)s::UUID[], %(queues)s::TEXT[], %(payloads)s::BYTEA[], %(priorities)s::INT8[],
            %(max_attempts)s::INT4[], %(waiting)s::BOOL[])
     AS n(id, queue, payload, priority, max_attempts, waiting)

-- name: workflow_steps_acked
-- The steps whose tasks an ack just deleted, in its transaction: which kinds of children each has,
-- its only child counted in its own row, if it has one, and its sole child's task (that child has
-- no other parent: migration 0017), for the ack to make claimable directly. Reads; writes
-- nothing: a step that
-- succeeded stays 'ready', or 'waiting' when its sole parent released its task directly, and its
-- task row's absence is its success (every statement that reads a step's state says so:
-- workflow_steps_list, workflow_cancel, workflow_prune_page, workflow_steps_prune,
-- workflow_counts_reopen, workflow_steps_reopen). A task row is deleted once, by the fenced ack,
-- so each step moves its children once. A step without children is finished by
-- workflow_steps_finish: it is what records when the workflow ended.
-- only_shard (migration 0020): the shard of its only child counted in shards (workflow_counts_count_off).
SELECT workflow_id, step, child_kinds, only_child, task_id, sole_child_task_id, only_shard
FROM shardq_workflow_steps
WHERE task_id = ANY(%(task_ids)s::UUID[]) AND state IN ('waiting', 'ready')

-- name: workflow_steps_keep_results
-- The results of steps with children just acked, in the ack's transaction, when their queue keeps
-- no finished tasks (migration 0018): their children read them in workflow_parent_results, where
-- a kept queue's history row would be. Only steps whose tasks are declared result=True send one.
UPDATE shardq_workflow_steps AS s
SET result = r.result
FROM unnest(%(task_ids)s::UUID[], %(results)s::TEXT[]) AS r(task_id, result)
WHERE s.task_id = r.task_id

-- name: workflow_steps_finish
-- Steps whose tasks just left for good, in the transaction that removed them: dead-lettered
-- ('dead') or acked without children ('succeeded': a step with children records nothing, see
-- workflow_steps_acked). Only a step still 'ready' finishes — or 'waiting', released directly by
-- its sole parent (a task is claimed, so removed by an ack or a dead-lettering, only once
-- released) — so each step finishes once, whatever re-sends a retried transaction makes. Returns
-- what moving the workflow on needs: which kinds of children each has, and its only child counted
-- in its own row. A finished step waits on no parent (one released directly still counted its
-- sole parent).
UPDATE shardq_workflow_steps
SET state = %(state)s::TEXT, finished_at = now(), waiting_on = 0
WHERE task_id = ANY(%(task_ids)s::UUID[]) AND state IN ('waiting', 'ready')
RETURNING workflow_id, step, child_kinds, only_child

-- name: workflow_counts_advance
-- Parents that succeeded, of children counted in shards: each shard row of theirs drops by its
-- parents among them (each parent is in one shard of each such child). Returns every row it
-- lowered: a row at 0 is a shard this ack drained, and only this ack (the row lock below, then
-- PostgreSQL's re-read of a row a concurrent ack changed, or CockroachDB's retry on 40001), which
-- then counts the shard off its child's own row in workflow_children_advance. Shard rows are
-- locked in key order, before any step row, in every ack (docs/workflows.md, "Fan-in in shards").
-- Edges read per parent, as in workflow_children_advance (the LATERAL subquery).
WITH hits AS (
    SELECT e.workflow_id, e.child, e.shard, count(*) AS n
    FROM unnest(%(workflow_ids)s::UUID[], %(steps)s::TEXT[]) AS d(workflow_id, step)
    CROSS JOIN LATERAL (
        SELECT e.workflow_id, e.child, e.shard FROM shardq_workflow_edges AS e
        WHERE e.workflow_id = d.workflow_id AND e.parent = d.step AND e.shard IS NOT NULL
        OFFSET 0
    ) AS e
    GROUP BY e.workflow_id, e.child, e.shard
), locked AS (
    SELECT c.workflow_id, c.step, c.shard, h.n
    FROM shardq_workflow_counts AS c
    JOIN hits AS h ON c.workflow_id = h.workflow_id AND c.step = h.child AND c.shard = h.shard
    ORDER BY c.workflow_id, c.step, c.shard
    FOR UPDATE OF c
)
UPDATE shardq_workflow_counts AS c
SET waiting_on = (c.waiting_on - l.n)::INT4
FROM locked AS l
WHERE c.workflow_id = l.workflow_id AND c.step = l.step AND c.shard = l.shard
RETURNING c.workflow_id, c.step, c.waiting_on

-- name: workflow_counts_count_off
-- workflow_counts_advance with the shards named: each shard row (workflow, child, shard) drops by n,
-- its parents among the succeeded ones whose only child it counts (only_shard, migration 0020), so
-- no edge is read. The same row locks, in the same key order, and the same outcome as
-- workflow_counts_advance (keep them in step); an ack sends one or the other for all its parents
-- counted in shards, never both (two statements would lock two sets, each in key order but not in
-- one order between them).
WITH hits AS (
    SELECT r.workflow_id, r.child, r.shard, sum(r.n) AS n
    FROM unnest(%(workflow_ids)s::UUID[], %(children)s::TEXT[], %(shards)s::INT4[], %(counts)s::INT8[])
         AS r(workflow_id, child, shard, n)
    GROUP BY r.workflow_id, r.child, r.shard
), locked AS (
    SELECT c.workflow_id, c.step, c.shard, h.n
    FROM shardq_workflow_counts AS c
    JOIN hits AS h ON c.workflow_id = h.workflow_id AND c.step = h.child AND c.shard = h.shard
    ORDER BY c.workflow_id, c.step, c.shard
    FOR UPDATE OF c
)
UPDATE shardq_workflow_counts AS c
SET waiting_on = (c.waiting_on - l.n)::INT4
FROM locked AS l
WHERE c.workflow_id = l.workflow_id AND c.step = l.step AND c.shard = l.shard
RETURNING c.workflow_id, c.step, c.waiting_on

-- name: workflow_children_advance
-- Parents that succeeded: each waiting child counted in its own row drops by its parents among
-- them (children counted in shards: workflow_counts_advance, then workflow_children_count_off).
-- The child whose count reaches 0 is released ('ready'; an on-failure child, whose parents all
-- succeeded, is 'cancelled' instead). The children's row locks are taken first, in key order (locked): two
-- acks sharing children then queue on the first one they share instead of each holding what
-- the other waits for — the UPDATE alone locks in whatever order its plan walks (the key's hash
-- order for one parent, the table's for a batch with a large fan-out: a deadlock between them).
-- PostgreSQL re-reads a row that a concurrent ack changed before applying its own decrement;
-- CockroachDB's serializable transactions retry on 40001; so of two last parents acked at once
-- exactly one sees 0.
-- Each parent's edges are read by key in the LATERAL subquery. Its OFFSET 0 keeps PostgreSQL from
-- flattening it into a join, which it planned as a hash of the whole edges table (every workflow's)
-- once per ack whenever the batch was a large share of the table (tests/test_explain.py);
-- CockroachDB drops the OFFSET 0 (docs/workflows.md, "CockroachDB").
WITH hits AS (
    SELECT e.workflow_id, e.child, count(*) AS n
    FROM unnest(%(workflow_ids)s::UUID[], %(steps)s::TEXT[]) AS d(workflow_id, step)
    CROSS JOIN LATERAL (
        SELECT e.workflow_id, e.child FROM shardq_workflow_edges AS e
        WHERE e.workflow_id = d.workflow_id AND e.parent = d.step AND e.shard IS NULL
        OFFSET 0
    ) AS e
    GROUP BY e.workflow_id, e.child
), locked AS (
    SELECT s.workflow_id, s.step, h.n
    FROM shardq_workflow_steps AS s
    JOIN hits AS h ON s.workflow_id = h.workflow_id AND s.step = h.child
    WHERE s.state = 'waiting'
    ORDER BY s.workflow_id, s.step
    FOR UPDATE OF s
)
UPDATE shardq_workflow_steps AS s
SET waiting_on = (s.waiting_on - l.n)::INT4,
    state = CASE WHEN s.waiting_on - l.n > 0 THEN 'waiting' WHEN s.on_failure THEN 'cancelled' ELSE 'ready' END,
    finished_at = CASE WHEN s.waiting_on - l.n = 0 AND s.on_failure THEN now() END
FROM locked AS l
WHERE s.workflow_id = l.workflow_id AND s.step = l.step AND s.state = 'waiting'
RETURNING s.workflow_id, s.step, s.task_id, s.state

-- name: workflow_children_count_off
-- workflow_children_advance with the children named: each child's own row drops by n, with the
-- same row locks, re-read and outcome as workflow_children_advance (keep them in step). Sent for
-- the shards an ack drained (n shards, from workflow_counts_advance), and for the only children of
-- succeeded parents (n parents; shardq.workflows.steps groups them), which then read no edge. The
-- children come in as arrays and are grouped. One statement for arrays and edges (hits as a UNION
-- ALL of the grouped edges and the arrays) lost decrements on PostgreSQL: a row the FOR UPDATE had
-- waited for was skipped once its holder committed (tests/test_workflows_locking.py: 49 of 50
-- fan-ins left waiting), so an ack never mixes them in one statement.
WITH hits AS (
    SELECT r.workflow_id, r.child, sum(r.n) AS n
    FROM unnest(%(workflow_ids)s::UUID[], %(steps)s::TEXT[], %(counts)s::INT8[]) AS r(workflow_id, child, n)
    GROUP BY r.workflow_id, r.child
), locked AS (
    SELECT s.workflow_id, s.step, h.n
    FROM shardq_workflow_steps AS s
    JOIN hits AS h ON s.workflow_id = h.workflow_id AND s.step = h.child
    WHERE s.state = 'waiting'
    ORDER BY s.workflow_id, s.step
    FOR UPDATE OF s
)
UPDATE shardq_workflow_steps AS s
SET waiting_on = (s.waiting_on - l.n)::INT4,
    state = CASE WHEN s.waiting_on - l.n > 0 THEN 'waiting' WHEN s.on_failure THEN 'cancelled' ELSE 'ready' END,
    finished_at = CASE WHEN s.waiting_on - l.n = 0 AND s.on_failure THEN now() END
FROM locked AS l
WHERE s.workflow_id = l.workflow_id AND s.step = l.step AND s.state = 'waiting'
RETURNING s.workflow_id, s.step, s.task_id, s.state

-- name: workflow_children_stop
-- Parents that died (died = true) or were cancelled: each waiting child is cancelled, except that
-- an on-failure child of a dead parent is released instead (once: it is no longer waiting after).
-- Children are locked in key order first, as in workflow_children_advance (the same rows).
-- Edges read per parent, as in workflow_children_advance (the LATERAL subquery).
WITH hits AS (
    SELECT DISTINCT e.workflow_id, e.child
    FROM unnest(%(workflow_ids)s::UUID[], %(steps)s::TEXT[]) AS d(workflow_id, step)
    CROSS JOIN LATERAL (
        SELECT e.workflow_id, e.child FROM shardq_workflow_edges AS e
        WHERE e.workflow_id = d.workflow_id AND e.parent = d.step
        OFFSET 0
    ) AS e
), locked AS (
    SELECT s.workflow_id, s.step
    FROM shardq_workflow_steps AS s
    JOIN hits AS h ON s.workflow_id = h.workflow_id AND s.step = h.child
    WHERE s.state = 'waiting'
    ORDER BY s.workflow_id, s.step
    FOR UPDATE OF s
)
UPDATE shardq_workflow_steps AS s
SET state = CASE WHEN s.on_failure AND %(died)s::BOOL THEN 'ready' ELSE 'cancelled' END,
    finished_at = CASE WHEN s.on_failure AND %(died)s::BOOL THEN NULL ELSE now() END
FROM locked AS l
WHERE s.workflow_id = l.workflow_id AND s.step = l.step AND s.state = 'waiting'
RETURNING s.workflow_id, s.step, s.task_id, s.state

-- name: workflow_tasks_release
-- Waiting step tasks become claimable: state 'ready' at rank = their priority.
UPDATE shardq_tasks
SET state = 'ready', rank = priority
WHERE id = ANY(%(ids)s::UUID[]) AND state = 'waiting'
RETURNING id

-- name: workflow_tasks_drop
-- Delete the tasks of cancelled steps whatever their state (a leased one's ack then deletes
-- nothing and finishes no step: it is fenced by its row).
DELETE FROM shardq_tasks
WHERE id = ANY(%(ids)s::UUID[])
RETURNING id

-- name: workflow_steps_revive
-- Dead steps whose tasks were just requeued from the dead letters (in the same transaction): 'ready'
-- again, unless their workflow was cancelled. Returns them, with their workflow ids for their tasks.
UPDATE shardq_workflow_steps AS s
SET state = 'ready', finished_at = NULL
WHERE s.task_id = ANY(%(task_ids)s::UUID[]) AND s.state = 'dead'
  AND NOT EXISTS (SELECT 1 FROM shardq_workflows AS w WHERE w.id = s.workflow_id AND w.cancelled_at IS NOT NULL)
RETURNING s.workflow_id, s.step, s.task_id

-- name: workflow_tasks_rejoin
-- A requeued step's task row (shardq_dead keeps no workflow id) is a step again.
UPDATE shardq_tasks AS t
SET workflow_id = r.workflow_id
FROM unnest(%(ids)s::UUID[], %(workflow_ids)s::UUID[]) AS r(id, workflow_id)
WHERE t.id = r.id
RETURNING t.id

-- name: workflow_counts_reopen
-- Before workflow_steps_reopen: the shard rows of the cancelled children (not on-failure ones,
-- counted in shards) of these revived or reopened parents count again, each, the parents of its
-- shard that have not succeeded (a parent 'ready' or 'waiting' without its task row succeeded:
-- workflow_steps_acked).
-- Edges read per parent, as in workflow_children_advance (the LATERAL subquery).
WITH hits AS (
    SELECT DISTINCT e.workflow_id, e.child
    FROM unnest(%(workflow_ids)s::UUID[], %(steps)s::TEXT[]) AS d(workflow_id, step)
    CROSS JOIN LATERAL (
        SELECT e.workflow_id, e.child FROM shardq_workflow_edges AS e
        WHERE e.workflow_id = d.workflow_id AND e.parent = d.step AND e.shard IS NOT NULL
        OFFSET 0
    ) AS e
), pending AS (
    SELECT h.workflow_id, h.child, e.shard,
           sum(CASE WHEN p.state = 'succeeded' OR (p.state IN ('waiting', 'ready') AND t.id IS NULL)
                    THEN 0 ELSE 1 END) AS n
    FROM hits AS h
    JOIN shardq_workflow_steps AS s ON s.workflow_id = h.workflow_id AND s.step = h.child
    JOIN shardq_workflow_edges AS e ON e.workflow_id = h.workflow_id AND e.child = h.child
    JOIN shardq_workflow_steps AS p ON p.workflow_id = e.workflow_id AND p.step = e.parent
    LEFT JOIN shardq_tasks AS t ON t.id = p.task_id
    WHERE s.state = 'cancelled' AND NOT s.on_failure
    GROUP BY h.workflow_id, h.child, e.shard
)
UPDATE shardq_workflow_counts AS c
SET waiting_on = p.n::INT4
FROM pending AS p
WHERE c.workflow_id = p.workflow_id AND c.step = p.child AND c.shard = p.shard
RETURNING c.workflow_id

-- name: workflow_steps_reopen
-- The cancelled children (not on-failure ones) of these revived or reopened parents wait again,
-- on every parent of theirs that has not succeeded (a child counted in shards: on each shard that
-- has such a parent; workflow_counts_reopen has reset the shard rows). A parent 'ready' or 'waiting'
-- without its task row succeeded (workflow_steps_acked).
-- Edges read per parent, as in workflow_children_advance (the LATERAL subquery).
WITH hits AS (
    SELECT DISTINCT e.workflow_id, e.child
    FROM unnest(%(workflow_ids)s::UUID[], %(steps)s::TEXT[]) AS d(workflow_id, step)
    CROSS JOIN LATERAL (
        SELECT e.workflow_id, e.child FROM shardq_workflow_edges AS e
        WHERE e.workflow_id = d.workflow_id AND e.parent = d.step
        OFFSET 0
    ) AS e
), counts AS (
    SELECT h.workflow_id, h.child,
           CASE WHEN count(e.shard) > 0 THEN count(DISTINCT e.shard) ELSE count(*) END AS n
    FROM hits AS h
    JOIN shardq_workflow_edges AS e ON e.workflow_id = h.workflow_id AND e.child = h.child
    JOIN shardq_workflow_steps AS p ON p.workflow_id = e.workflow_id AND p.step = e.parent
    LEFT JOIN shardq_tasks AS t ON t.id = p.task_id
    WHERE p.state <> 'succeeded' AND (p.state NOT IN ('waiting', 'ready') OR t.id IS NOT NULL)
    GROUP BY h.workflow_id, h.child
)
UPDATE shardq_workflow_steps AS s
SET state = 'waiting', waiting_on = c.n::INT4, finished_at = NULL
FROM counts AS c
WHERE s.workflow_id = c.workflow_id AND s.step = c.child AND s.state = 'cancelled' AND NOT s.on_failure
RETURNING s.workflow_id, s.step, s.task_id

-- name: workflow_tasks_reinsert
-- The task rows of reopened steps, 'waiting' again at backlog_rank, from what their step kept.
INSERT INTO shardq_tasks (state, rank, queue, exec_time, id, priority, attempts, max_attempts, payload,
                          workflow_id)
SELECT 'waiting', %(backlog_rank)s, s.queue, now(), s.task_id, s.priority, 0,
       coalesce(s.max_attempts, (SELECT q.max_attempts FROM shardq_queues AS q WHERE q.name = s.queue),
                %(max_attempts_default)s::INT4),
       s.payload, s.workflow_id
FROM shardq_workflow_steps AS s
JOIN unnest(%(workflow_ids)s::UUID[], %(steps)s::TEXT[]) AS r(workflow_id, step)
  ON s.workflow_id = r.workflow_id AND s.step = r.step
WHERE s.payload IS NOT NULL
RETURNING id

-- name: workflow_parent_results
-- The parents of the step whose task this is, each with its kept result: its history row's, else
-- the one its step row keeps when its queue keeps no finished tasks (workflow_steps_keep_results);
-- NULL when its task keeps no result. What a step's ``results`` argument receives.
SELECT p.step, coalesce(h.result, p.result) AS result
FROM shardq_workflow_steps AS c
JOIN shardq_workflow_edges AS e ON e.workflow_id = c.workflow_id AND e.child = c.step
JOIN shardq_workflow_steps AS p ON p.workflow_id = e.workflow_id AND p.step = e.parent
LEFT JOIN shardq_history AS h ON h.id = p.task_id
WHERE c.task_id = %(task_id)s::UUID

-- name: workflow_cancel
-- Mark a workflow cancelled and delete the task rows of its steps not finished yet; returns their
-- ids, for workflow_steps_cancel, and whether each had been released (its task no longer 'waiting'). The task rows go first: a step whose ack deletes its task row
-- meanwhile succeeded (workflow_steps_acked) and is not cancelled — this DELETE waits for that
-- ack's row lock and then finds the row gone (PostgreSQL re-checks a row a concurrent transaction
-- changed; CockroachDB orders the two or retries one with 40001). A running step's row goes too:
-- its ack then deletes nothing and moves nothing on.
WITH flagged AS (
    UPDATE shardq_workflows SET cancelled_at = coalesce(cancelled_at, now()) WHERE id = %(id)s::UUID
    RETURNING id
)
DELETE FROM shardq_tasks
WHERE id IN (SELECT s.task_id FROM shardq_workflow_steps AS s
             WHERE s.workflow_id = %(id)s::UUID AND s.state IN ('waiting', 'ready'))
RETURNING id, state <> 'waiting' AS released

-- name: workflow_steps_cancel
-- The steps whose task rows were just deleted by a cancel, in its transaction (workflow_cancel, or
-- shardq.admin.actions.cancel_plan by task id): 'cancelled', waiting or not. Those whose tasks had been
-- released wait on no parent (a step released directly by its sole parent still counted it).
-- Returns what workflow_steps_finish returns, for the cancel by id to stop their dependents.
UPDATE shardq_workflow_steps
SET state = 'cancelled', finished_at = now(),
    waiting_on = CASE WHEN task_id = ANY(%(released)s::UUID[]) THEN 0 ELSE waiting_on END
WHERE task_id = ANY(%(task_ids)s::UUID[]) AND state IN ('waiting', 'ready')
RETURNING workflow_id, step, child_kinds, only_child

-- name: workflow_get
-- A workflow's own row, or none.
SELECT id, name, created_at, cancelled_at FROM shardq_workflows WHERE id = %(id)s::UUID

-- name: workflow_steps_list
-- Every step of a workflow, in name order (one span of the key); waiting_on is its parents not yet
-- succeeded, summed over its shard rows for a step counted in shards (one span of their key). A
-- step 'ready' or 'waiting' whose task row is gone succeeded (workflow_steps_acked); one whose task
-- a worker holds ('leased') is shown 'running'; and one 'waiting' whose task row is no longer
-- 'waiting' was released by its sole parent: ready, waiting on none. One probe of the task's id
-- (shardq_tasks_id), a LEFT JOIN, as in every statement that reads a step's state.
SELECT s.step, s.task_id, s.task, s.queue,
       CASE WHEN s.state IN ('waiting', 'ready') AND t.id IS NULL THEN 'succeeded'
            WHEN s.state IN ('waiting', 'ready') AND t.state = 'leased' THEN 'running'
            WHEN s.state = 'waiting' AND t.state <> 'waiting' THEN 'ready'
            ELSE s.state END AS state,
       CASE WHEN s.state = 'waiting' AND (t.id IS NULL OR t.state <> 'waiting') THEN 0
            ELSE coalesce(c.waiting_on, s.waiting_on) END AS waiting_on,
       s.on_failure, s.finished_at
FROM shardq_workflow_steps AS s
LEFT JOIN shardq_tasks AS t ON t.id = s.task_id
LEFT JOIN (SELECT n.step, sum(n.waiting_on)::INT4 AS waiting_on
           FROM shardq_workflow_counts AS n
           WHERE n.workflow_id = %(id)s::UUID
           GROUP BY n.step) AS c ON c.step = s.step
WHERE s.workflow_id = %(id)s::UUID
ORDER BY s.step

-- name: workflow_edges_list
-- Every (parent, child) edge of a workflow (one span of the key).
SELECT parent, child FROM shardq_workflow_edges WHERE workflow_id = %(id)s::UUID ORDER BY parent, child

-- name: workflow_prune_page
-- One page of the workflows enqueued more than keep_seconds ago, in (created_at, id) order after
-- the cursor (NULL: from the first), through shardq_workflows_created (migration 0014). Each
-- comes with whether it is due: no step waiting or ready with its task row still there (gone: it
-- succeeded, workflow_steps_acked), and its last step finished longer ago
-- than the longest of keep_seconds and its steps' queues' keep_finished_seconds (a workflow left
-- without steps by an interrupted prune counts from its creation). Each workflow's steps are read
-- once, as one span of their key (one correlated aggregate: a separate NOT EXISTS over the steps'
-- states was planned as a hashed scan of every waiting and ready step, which shardq doctor refused).
SELECT w.id, w.created_at,
       coalesce((SELECT bool_and(s.state NOT IN ('waiting', 'ready') OR t.id IS NULL)
                        AND max(s.finished_at)
                            + greatest(%(keep_seconds)s::FLOAT8, max(coalesce(q.keep_finished_seconds, 0)))
                              * INTERVAL '1 second' < now()
                 FROM shardq_workflow_steps AS s
                 LEFT JOIN shardq_queues AS q ON q.name = s.queue
                 LEFT JOIN shardq_tasks AS t ON t.id = s.task_id
                 WHERE s.workflow_id = w.id), w.created_at < now()) AS due
FROM shardq_workflows AS w
WHERE w.created_at < now() - %(keep_seconds)s::FLOAT8 * INTERVAL '1 second'
  AND (%(after_created)s::TIMESTAMPTZ IS NULL
       OR (w.created_at, w.id) > (%(after_created)s::TIMESTAMPTZ, %(after_id)s::UUID))
ORDER BY w.created_at, w.id
LIMIT %(limit)s

-- name: workflow_steps_prune
-- Delete up to limit finished steps of these (due) workflows; called until it deletes fewer. A
-- step revived meanwhile (its dead task requeued) is not finished and stays, and so does its
-- workflow's row (workflow_prune).
DELETE FROM shardq_workflow_steps
WHERE (workflow_id, step) IN (
    SELECT s.workflow_id, s.step FROM shardq_workflow_steps AS s
    LEFT JOIN shardq_tasks AS t ON t.id = s.task_id
    WHERE s.workflow_id = ANY(%(ids)s::UUID[])
      AND (s.state IN ('succeeded', 'dead', 'cancelled') OR (s.state IN ('waiting', 'ready') AND t.id IS NULL))
    LIMIT %(limit)s
)
RETURNING workflow_id

-- name: workflow_counts_prune
-- Delete up to limit shard rows of these (due) workflows; called until it deletes fewer.
DELETE FROM shardq_workflow_counts
WHERE (workflow_id, step, shard) IN (
    SELECT workflow_id, step, shard FROM shardq_workflow_counts
    WHERE workflow_id = ANY(%(ids)s::UUID[])
    LIMIT %(limit)s
)
RETURNING workflow_id

-- name: workflow_edges_prune
-- Delete up to limit edges of these (due) workflows; called until it deletes fewer.
DELETE FROM shardq_workflow_edges
WHERE (workflow_id, parent, child) IN (
    SELECT workflow_id, parent, child FROM shardq_workflow_edges
    WHERE workflow_id = ANY(%(ids)s::UUID[])
    LIMIT %(limit)s
)
RETURNING workflow_id

-- name: workflow_prune
-- Delete the rows of these workflows that have no step left (their steps pruned first).
DELETE FROM shardq_workflows AS w
WHERE w.id = ANY(%(ids)s::UUID[])
  AND NOT EXISTS (SELECT 1 FROM shardq_workflow_steps AS s WHERE s.workflow_id = w.id)
RETURNING w.id
