"""The callback of a Spark run (``enqueue_dataframe(..., then=task)``): one task, released in the
ack that leaves no other task of the run, exactly once, re-runs of the job included.

How
    * **The callback is a workflow of one step.** Registering it (in the run's first attempt that
      names one) writes a ``shardq_spark_callbacks`` row, a workflow (``shardq workflow ID`` shows
      it) and the callback as its one step, ``waiting``, with its task row ``waiting`` at
      ``RANK_BACKLOG`` (outside every claim, as a step that waits on its parents). The callback's
      own ack and dead letter are a workflow step's.
    * **The run's tasks carry the run's mark** in ``shardq_tasks.workflow_id`` (written by the
      Spark writers with each chunk): :func:`mark_of` the run id, a UUID version 5 where every
      workflow id is a version 4, so :func:`is_run` tells them apart without a read. They are no
      steps: no step row, no edge, no counter. The claim returns the mark, so the settler sends
      their acks and dead letters here (:func:`settle_plan`, in the ack's own transaction).
    * **Release without a counter.** An ack of run tasks asks, after its delete, whether any other
      task of the run is left: one probe of a partial index of the runs' tasks
      (``spark_callback_due``: ``shardq_tasks_by_run`` on PostgreSQL, migration 0019, which holds no
      workflow step; ``shardq_tasks_by_workflow`` on CockroachDB). The ack that finds none, once
      the run is marked ``complete`` (every row written: :func:`complete_plan`, at the end of each
      attempt of the job), releases the step and its task (``waiting`` → ``ready``; only a
      waiting step moves, so exactly once).
      Nothing is written per ack but the task's own delete: no row that every ack of a million-task
      run updates. The end of the job runs the same check, for a run whose tasks were all acked
      before its last chunk was merged, and for a re-run (which finds the callback released
      already, or releases it if its first attempt died before doing so).
    * **Two last acks at once.** PostgreSQL (READ COMMITTED): the ack locks the run's callback row
      first (``spark_callback_lock``), so the later of two last acks waits, then sees the earlier
      one's delete in its next statement's snapshot. The acks of one run take turns on that row
      lock for the rest of their transaction (a few statements). CockroachDB (SERIALIZABLE): no
      lock; of two last acks that each read the other's task one retries on 40001, then sees none
      left. The probe's read spans the run's index entries up to the first task left, so acks
      conflict only when one deletes that entry while another reads through it.
    * **A dead task** (dead-lettered by its worker or by the reaper) cancels the run's workflow in
      the transaction that dead-letters it: the callback step becomes ``cancelled``, its task is deleted, ``shardq
      workflow ID`` says ``cancelled``, and the callback never runs for that run.

Guarantees
    * The callback is enqueued once per run id, when every task of the run has been acked and the
      run is fully enqueued; never while a task of the run is queued, scheduled, running or being
      retried; never after a task of the run died.
    * Re-running the job (same ``run_id``) neither enqueues the callback again nor loses it.

Does not
    * notice tasks of the run deleted by hand (``shardq`` admin deletes, purges): they count as
      done. Requeueing a dead task from the dead letters does not revive the callback (the task
      runs, outside the run);
    * pass the tasks' results to the callback, or accept an exclusive key column in a run that
      declares one (:mod:`shardq.spark.job` refuses it), or apply to streams;
    * release a callback still waiting when its run is forgotten (``shardq spark-gc
      --forget-runs-after``).

Costs: a task of a run without ``then=`` is untouched (no workflow id, no index entry, its ack
unchanged). A task of a run with one: an index entry, and its ack goes through the keyed path
(per-task fenced delete) plus two statements per ack batch (PostgreSQL: lock, probe; CockroachDB:
read, probe). Figures: docs/spark.md, "A callback after the run"."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from shardq import operations
from shardq.models.tasks import MAX_ATTEMPTS_DEFAULT, RANK_BACKLOG, TaskState
from shardq.models.workflow_graph import StepCall
from shardq.sessions.store import TaskStore
from shardq.sql.plan import Atomically, Call, Plan

#: The namespace of :func:`mark_of` (fixed: a run's mark must not change).
RUN_NAMESPACE = uuid.UUID("5b2f6a0e-9d2c-4f3b-8a61-7c0e4d9b1a23")


def mark_of(run_id: str) -> uuid.UUID:
    """What the tasks of a run with a callback carry as their workflow id: the same for every
    attempt of the run."""
    return uuid.uuid5(RUN_NAMESPACE, f"spark-run:{run_id}")


def is_run(workflow_id: uuid.UUID | None) -> bool:
    """Whether a task's workflow id is a Spark run's mark (version 5) rather than a workflow's (4)."""
    # The version nibble read off the integer: UUID.version checks the variant first, through two
    # properties, and this runs for every claimed step (shardq.worker.inflight.acked_per_key).
    return workflow_id is not None and (workflow_id.int >> 76) & 0xF == 5


@dataclass(frozen=True)
class Callback:
    """A run's callback: the run's ``mark``, the callback's ``workflow_id``, ``step`` (the callback's
    task name), ``complete`` (every chunk of the run merged) and ``state`` (the step's: ``waiting``,
    ``ready``, ``succeeded``, ``dead``, ``cancelled``)."""

    run_id: str
    mark: uuid.UUID
    workflow_id: uuid.UUID
    step: str
    complete: bool
    state: str | None


def register_plan(run_id: str, call: StepCall) -> Plan[Callback]:
    """Register ``call`` as the run's callback unless it has one (one transaction); returns the
    callback as first registered."""
    workflow_id, task_id = uuid.uuid4(), uuid.uuid4()

    def body() -> Plan[None]:
        params = {"run_id": run_id, "run_mark": mark_of(run_id), "workflow_id": workflow_id, "step": call.task}
        if (yield Call("spark_callback_register", params, rows="one")) is None:
            return
        yield Call("workflow_insert", {"id": workflow_id, "name": f"spark run {run_id}"}, rows="none")
        # One step, waiting on the run (waiting_on 1: the run; it has no parent step, no edge).
        yield Call(
            "workflow_steps_insert",
            {
                "workflow_id": workflow_id,
                "steps": [call.task],
                "task_ids": [task_id],
                "tasks": [call.task],
                "queues": [call.queue],
                "waiting_on": [1],
                "on_failure": [False],
                "payloads": [call.payload],
                "priorities": [call.priority],
                "max_attempts": [call.max_attempts],
                "child_kinds": [0],
                "only_children": [None],
                "sole_child_task_ids": [None],
                "only_shards": [None],
            },
            rows="none",
        )
        yield Call(
            "workflow_tasks_insert",
            {
                "workflow_id": workflow_id,
                "ids": [task_id],
                "queues": [call.queue],
                "payloads": [call.payload],
                "priorities": [call.priority],
                "max_attempts": [call.max_attempts],
                "waiting": [True],
                "backlog_rank": RANK_BACKLOG,
                "max_attempts_default": MAX_ATTEMPTS_DEFAULT,
            },
            rows="none",
        )

    yield Atomically(body)
    found = yield from get_plan(run_id)
    assert found is not None  # registered just now, or before
    return found


def get_plan(run_id: str) -> Plan[Callback | None]:
    row = yield Call("spark_callback_get", {"run_id": run_id}, rows="one")
    if row is None:
        return None
    return Callback(
        row["run_id"], row["run_mark"], row["workflow_id"], row["step"], bool(row["complete"]), row["state"]
    )


def complete_plan(run_id: str) -> Plan[bool]:
    """Mark the run fully enqueued and release its callback if no task of it is left (one
    transaction); returns whether this call released it. The release wakes the listening workers
    of the callback's queue (see :func:`settle_plan`)."""

    def body(wake: bool) -> Plan[bool]:
        row = yield Call("spark_callback_complete", {"run_id": run_id}, rows="one")
        if row is None:
            return False
        released = yield from _release_due([row["run_mark"]], wake)
        return bool(released)

    result: bool = yield from operations.atomically_waking(body)
    return result


def settle_plan(marks: Collection[uuid.UUID], outcome: str, *, wake: bool = False) -> Plan[None]:
    """Inside the transaction that just acked (``outcome`` ``succeeded``) or dead-lettered
    (``dead``) tasks of the runs with these ``marks``: release the callbacks now due, or cancel the
    runs' callbacks. ``wake``: the release also wakes the listening workers of the callbacks'
    queues, as a released workflow step does (:func:`shardq.workflows.steps.remove_and_release_plan`),
    delivered at the commit, where the engine has wake-ups."""
    if outcome == TaskState.SUCCEEDED:
        yield from _release_due(sorted(marks), wake)
        return
    rows = yield Call("spark_callback_lock", {"marks": sorted(marks)})
    for row in rows:
        yield from operations.workflow_cancel(row["workflow_id"])


def _release_due(marks: list[uuid.UUID], wake: bool) -> Plan[list[uuid.UUID]]:
    yield Call("spark_callback_lock", {"marks": marks})  # sorted: one lock order on PostgreSQL
    due = yield Call("spark_callback_due", {"marks": marks})
    if not due:
        return []
    rows = yield Call("spark_callback_release", {"workflow_ids": [row["workflow_id"] for row in due]})
    task_ids = [row["task_id"] for row in rows]
    if task_ids:
        yield from operations.workflow_tasks_release(task_ids, wake=wake)
    return task_ids


def runs_of(removed: Collection[uuid.UUID], workflow_of: Mapping[uuid.UUID, uuid.UUID | None]) -> set[uuid.UUID]:
    """The Spark runs among the workflows of the ``removed`` tasks."""
    return {w for i in removed if is_run(w := workflow_of.get(i))}  # type: ignore[misc]


def settling(
    store: TaskStore,
    remove: Callable[[], set[uuid.UUID]],
    workflow_of: Mapping[uuid.UUID, uuid.UUID | None],
    outcome: str,
    *,
    wake: bool = False,
) -> Callable[[], set[uuid.UUID]]:
    """``remove`` (run inside a transaction the caller holds), followed by :func:`settle_plan` for
    the runs of the tasks it removed (a fenced-off task settles nothing)."""

    def removing() -> set[uuid.UUID]:
        removed = remove()
        runs = runs_of(removed, workflow_of)
        if runs:
            store.session.run(settle_plan(runs, outcome, wake=wake))
        return removed

    return removing


def remove_and_settle(
    store: TaskStore,
    remove: Callable[[], set[uuid.UUID]],
    workflow_of: Mapping[uuid.UUID, uuid.UUID | None],
    outcome: str,
) -> set[uuid.UUID]:
    """``remove`` and :func:`settle_plan` in one transaction (the ack of run tasks that are no
    workflow steps); returns the ids removed. A callback it releases wakes the listening workers
    of its queue; a server that refuses the wake-up at the commit (its notification queue full)
    fails the transaction, which is run again without it (``remove`` is called again)."""

    def body(wake: bool) -> Plan[set[uuid.UUID]]:
        return settling(store, remove, workflow_of, outcome, wake=wake)()
        yield  # a plan that runs the step on the sync session directly

    result: set[uuid.UUID] = store.session.run(operations.atomically_waking(body))
    return result
