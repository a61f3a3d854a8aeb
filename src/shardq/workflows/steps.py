"""Workflows: tasks that run once their parent steps succeeded, released without a scheduler.

A workflow is a graph of steps (:mod:`shardq.models.workflow_graph`; built with
:meth:`shardq.App.workflow`). Every step is a task of its own — its queue, priority, attempts,
timeout and retries are its task's — and also a row of ``shardq_workflow_steps`` that counts the
parents it still waits on.

Guarantees:

* **Atomic enqueue.** The workflow's row, its steps, its edges and every step's task are written
  in one transaction (also inside the caller's own, with ``connection=``). A graph with a cycle,
  an unknown parent or task, or over :data:`~shardq.models.workflow_graph.MAX_STEPS` steps is refused
  before anything is written.
* **Release in the ack.** A step with parents waits as a task row in state ``waiting`` at rank
  ``RANK_BACKLOG``, outside every claim's span. Its last parent's ack — fenced by the lease token
  like every ack — counts it off and makes it ``ready`` in the same transaction: no loop polls.
  A sole child (no other parent, not an on-failure step: a chain's next step) is not counted:
  its parent's row keeps its task id, and the parent's ack makes that task claimable directly,
  the child's row staying ``waiting`` (status reads it by its task row: ``ready``).
  Where the engine has wake-ups (PostgreSQL), that transaction also wakes the listening workers
  of the released steps' queues (:mod:`shardq.lifecycle.notify`), so an idle worker need not wait its poll.
* **Exactly once.** A step's success is its task row's deletion by the fenced ack, which happens
  once (the step's own row is not written: status reads a ``ready`` or ``waiting`` step without
  its task row as succeeded; a step without children is written ``succeeded``, which dates its
  workflow's end); a step dies or is cancelled only once released (``ready``, or ``waiting`` for a
  sole child); a sole child is released by its one parent's ack alone; and
  a child's count is lowered by an UPDATE that holds its row lock (PostgreSQL re-reads the row a
  concurrent ack changed; CockroachDB retries the transaction on 40001), so of two last parents
  acked at once on two workers exactly one releases the child. A wide fan-in (from
  :data:`~shardq.engine.base.FAN_IN_SHARD_FROM` parents) counts its parents in shard rows: the
  ack that drains a shard (one per shard, by that row's lock) counts it off the child's row, and
  the same row lock decides which drained shard releases it. A worker killed before the ack's
  commit leaves everything as it was: the lease runs out, the parent runs again.
* **Results.** A step whose function takes a keyword parameter ``results`` (and whose call does
  not give it) receives its parents' results as a dict by step name, read when it runs
  (:func:`parent_results_plan`; a parent's result is kept when its task is declared ``result=True``
  or, in a queue that keeps finished tasks, when the queue keeps results; else None). Where the
  parent's queue keeps finished tasks its history row has the result; where it keeps none, the
  ack keeps it in the parent's step row, until the workflow is pruned.
* **Failure.** A dead step (dead-lettered by its worker, or by the reaper when its lease ran out
  on its last attempt) cancels its waiting children, and theirs,
  and releases an on-failure child instead of cancelling it; an on-failure child whose parents
  all succeeded is cancelled. Requeueing a dead step from the dead letters resumes its workflow
  from it, in the requeue's transaction (:func:`dead_requeue_plan`): the step is ready again and its
  cancelled dependents wait again. :func:`cancel_plan` cancels every step not finished yet and deletes
  their tasks (a running one's ack then deletes nothing and releases nothing); cancelling a step's
  task by id (:func:`shardq.admin.actions.cancel_plan`) cancels that step and its dependents.

Does not:

* reopen a dependent cancelled by *another* dead parent than the one requeued: requeue each
  dead parent (a dependent waits on every parent of its that has not succeeded);
* accept a delay, run_at, dedupe or exclusive key on a step (a step starts when released).

Costs: a task outside every workflow pays one NULL column in its row and in the claim's result;
its claim and its ack send the statements they always did. A step's ack is one transaction of
one more statement (read the steps; a step without children is also written finished) and one
more when it has children other than a sole child (count it off them, by name when it is its
parents' only child; a parent of a wide fan-in lowers its shard, and the ack that drains a shard
one more), plus one per released or cancelled group of children (sole children included). A fan-in's count below the threshold is one row
that every parent's ack updates: on PostgreSQL those acks queue on its row lock, on CockroachDB
on its lock wait-queue, each until the previous one commits; a wider one spreads them over its
shard rows (docs/workflows.md, "Fan-in in shards" and "Costs")."""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from shardq import operations
from shardq.errors import InvalidInput
from shardq.models.leases import HandoffOffer
from shardq.models.tasks import TaskState
from shardq.models.workflow_graph import Graph, check
from shardq.operations.workflows import FinishedStep, Moved
from shardq.sessions.store import TaskStore
from shardq.sql.plan import Atomically, Plan

#: UUIDs in their own order, compared as integers in C: ``sorted`` on the UUIDs themselves calls
#: ``UUID.__lt__`` in Python once per comparison, thousands of times per settle batch
_by_value = attrgetter("int")


@dataclass(frozen=True)
class StepStatus:
    """One step: its ``name``, ``task_id``, ``task`` (name), ``queue``, ``state`` (one of
    :data:`shardq.models.tasks.STEP_STATES`: ``ready`` is queued, ``running`` held by a worker under
    a lease; a step whose attempt failed and waits for its retry is ``ready`` again), ``parents``, ``waiting_on`` (parents
    not yet succeeded), ``on_failure`` and ``finished_at``: when it died, was cancelled or, for a
    step without children, succeeded; None for a step with children that succeeded (its ack writes
    nothing of it: docs/workflows.md, "Costs"; its queue's history has the time when it keeps
    finished tasks)."""

    name: str
    task_id: str
    task: str
    queue: str
    state: str
    parents: tuple[str, ...]
    waiting_on: int
    on_failure: bool
    finished_at: dt.datetime | None


@dataclass(frozen=True)
class WorkflowStatus:
    """A workflow by id: ``state`` is ``unknown`` (no such workflow), ``cancelled`` (the workflow,
    or once every step finished, a step's task by id), ``running`` (some step not finished),
    ``succeeded`` (every step finished and none died; cancelled on-failure steps count as
    finished) or ``failed`` (every step finished, some died)."""

    id: str
    state: str
    name: str | None = None
    created_at: dt.datetime | None = None
    steps: tuple[StepStatus, ...] = ()

    def to_json(self) -> dict[str, object]:
        def when(value: dt.datetime | None) -> str | None:
            return value.isoformat() if value is not None else None

        return {
            "id": self.id,
            "state": self.state,
            "name": self.name,
            "created_at": when(self.created_at),
            "steps": [
                {
                    "name": s.name,
                    "task_id": s.task_id,
                    "task": s.task,
                    "queue": s.queue,
                    "state": s.state,
                    "parents": list(s.parents),
                    "waiting_on": s.waiting_on,
                    "on_failure": s.on_failure,
                    "finished_at": when(s.finished_at),
                }
                for s in self.steps
            ],
        }


@dataclass(frozen=True)
class Enqueued:
    """A workflow written: its ``id`` and each step's task id by step name."""

    id: str
    task_ids: dict[str, str]


def enqueue_plan(graph: Graph) -> Plan[Enqueued]:
    """Check ``graph`` (nothing is sent when it is refused) and write it in one transaction."""
    order = check(graph)
    workflow_id, task_ids = uuid.uuid4(), [uuid.uuid4() for _ in order]

    def body() -> Plan[None]:
        return operations.workflow_insert(workflow_id, graph.name, order, task_ids)

    yield Atomically(body)
    return Enqueued(str(workflow_id), {s.name: str(i) for s, i in zip(order, task_ids)})


def enqueue_in_transaction_plan(graph: Graph) -> Plan[Enqueued]:
    """:func:`enqueue_plan` inside a transaction the caller holds open (``connection=``)."""
    order = check(graph)
    workflow_id, task_ids = uuid.uuid4(), [uuid.uuid4() for _ in order]
    yield from operations.workflow_insert(workflow_id, graph.name, order, task_ids)
    return Enqueued(str(workflow_id), {s.name: str(i) for s, i in zip(order, task_ids)})


def remove_and_release_plan(
    remove: Callable[[], Plan[set[uuid.UUID]]],
    outcome: str,
    results: Mapping[uuid.UUID, str] | None = None,
    handoff: HandoffOffer | None = None,
) -> Plan[set[uuid.UUID]]:
    """Run ``remove`` (the fenced ack — ``outcome`` ``succeeded`` — or dead-lettering — ``dead`` —
    of step tasks; returns the ids it removed) and move their workflows on, in one transaction.
    ``remove()`` is called again for each attempt of the transaction. Returns the ids removed.
    ``results`` (by task id, JSON text): the results of acked steps whose queue keeps no finished
    tasks, kept in the step rows of those with children, for their children to read.

    Where the engine has wake-ups, the statement that releases steps also wakes the listening
    workers of their queues (delivered at the commit). A server that refuses the wake-up at the
    commit (its notification queue full) fails the transaction: it is run again without it.

    ``handoff`` (an acking worker's offer): the sole children this ack releases (the next steps of
    chains) are leased to it where the engine can, in the statement that reads the acked steps,
    into ``handoff.tasks`` (:meth:`~shardq.engine.Engine.steps_acked`); the others are released as
    usual."""

    def body(wake: bool) -> Plan[set[uuid.UUID]]:
        if handoff is not None:
            handoff.tasks = []  # this attempt's: an attempt rolled back took nothing
        removed = yield from remove()
        if not removed:
            return removed
        task_ids = sorted(removed, key=_by_value)
        if outcome == TaskState.SUCCEEDED:
            yield from _succeeded(task_ids, wake, results, handoff)
        else:
            finished = yield from operations.workflow_steps_finish(task_ids, outcome)
            if finished:
                yield from _move_on(finished, outcome, wake)
        return removed

    try:
        result: set[uuid.UUID] = yield from operations.atomically_waking(body)
    except BaseException:
        if handoff is not None:
            handoff.tasks = []  # rolled back: nothing was taken
        raise
    return result


def _succeeded(
    task_ids: list[uuid.UUID],
    wake: bool,
    results: Mapping[uuid.UUID, str] | None = None,
    handoff: HandoffOffer | None = None,
) -> Plan[None]:
    """The steps of ``task_ids``, just acked. A step that succeeded is written only when it has no
    children (its finish is when its workflow may have ended: pruning and status read it); the
    others' success is their task row's absence, read, not written. A sole parent's child (the
    next step of a chain) is made claimable directly; the other children are counted off."""
    acked, taken_parents = yield from operations.workflow_steps_acked(task_ids, handoff, parents=bool(results))
    leaves = sorted((task for _w, _s, kinds, _c, task, _ct, _k in acked if not kinds), key=_by_value)
    if leaves:
        yield from operations.workflow_steps_finish(leaves, TaskState.SUCCEEDED)
    if results:
        kept = [(task, results[task]) for _w, _s, kinds, _c, task, _ct, _k in acked if kinds and task in results]
        kept += [(task, results[task]) for task in taken_parents if task in results]
        if kept:
            yield from operations.workflow_steps_keep_results(sorted(kept, key=lambda item: _by_value(item[0])))
    direct = [child_task for _w, _s, _k, _c, _t, child_task, _sh in acked if child_task is not None]
    counted = [
        (w, step, kinds, child) for w, step, kinds, child, _t, child_task, _sh in acked if kinds and child_task is None
    ]
    shards = {(w, step): shard for w, step, _k, _c, _t, _ct, shard in acked if shard is not None}
    yield from _move_on(counted, TaskState.SUCCEEDED, wake, direct, shards)


def _move_on(
    finished: list[FinishedStep],
    outcome: str,
    wake: bool,
    released: Sequence[uuid.UUID] = (),
    shards: Mapping[tuple[uuid.UUID, str], int] | None = None,
) -> Plan[None]:
    """Count ``finished`` parents off their children; release the children that are due (with
    the tasks in ``released``, in one statement) and stop (cancel) the descendants of every
    cancelled one, level by level. ``shards``: by (workflow id, step), the shard of a succeeded
    parent's only child counted in shards (that child is its ``only_child``)."""
    if not finished:
        moved: list[Moved] = []
    elif outcome == TaskState.SUCCEEDED:
        moved = yield from _advance(finished, shards)
    else:
        moved = yield from operations.workflow_children_stop(
            [(w, step) for w, step, _, _ in finished], died=outcome == TaskState.DEAD
        )
    while True:
        yield from _apply(moved, wake, released)
        cancelled = [(w, step) for w, step, _task, state in moved if state == TaskState.CANCELLED]
        if not cancelled:
            return
        moved = yield from operations.workflow_children_stop(cancelled, died=False)
        released = ()


def _advance(
    finished: list[FinishedStep], shards: Mapping[tuple[uuid.UUID, str], int] | None = None
) -> Plan[list[Moved]]:
    """Succeeded parents: their children counted in shards first (every shard row an ack locks,
    it locks before any step row: one lock order for every ack), then the children's own rows —
    those counted there, and those counted in shards that this ack drained. A parent without
    children sends neither statement.

    The children counted in their own rows are locked by one statement, in key order: by name,
    grouped here, when every such parent of the batch has only one (``only_child``: the members
    of a group fanning in, the steps of a chain), else through the parents' edges. Two statements
    there would lock two sets each in key order, but not in one order between them. The shard
    rows likewise: by name when every parent counted in shards has one such child and no other
    (``shards``: the members of a wide fan-in, migration 0020), else through the edges."""
    in_shards = [(w, step, child) for w, step, kinds, child in finished if kinds & operations.IN_SHARDS]
    own_row = [(w, step, child) for w, step, kinds, child in finished if kinds & operations.OWN_ROW]
    drained: list[tuple[uuid.UUID, str, int]] = []
    shards = shards or {}
    if in_shards and all((w, step) in shards and child is not None for w, step, child in in_shards):
        named = Counter((w, child, shards[(w, step)]) for w, step, child in in_shards if child is not None)
        drained = yield from operations.workflow_counts_count_off([(w, c, k, n) for (w, c, k), n in named.items()])
    elif in_shards:
        drained = yield from operations.workflow_counts_advance([(w, step) for w, step, _ in in_shards])
    moved: list[Moved] = []
    if own_row:
        if all(child is not None for _, _, child in own_row):
            counted = Counter((w, child) for w, _, child in own_row if child is not None)
            moved += yield from operations.workflow_children_count_off([(w, c, n) for (w, c), n in counted.items()])
        else:
            moved += yield from operations.workflow_children_advance([(w, step) for w, step, _ in own_row])
    if drained:
        moved += yield from operations.workflow_children_count_off(drained)
    return moved


def _apply(moved: list[Moved], wake: bool, released: Sequence[uuid.UUID] = ()) -> Plan[None]:
    released = [*released, *(task for _w, _s, task, state in moved if state == TaskState.READY)]
    dropped = [task for _w, _s, task, state in moved if state == TaskState.CANCELLED]
    if released:
        yield from operations.workflow_tasks_release(sorted(released, key=_by_value), wake=wake)
    if dropped:
        yield from operations.workflow_tasks_drop(dropped)


def cancelled_by_id_plan(task_ids: Sequence[uuid.UUID], released: Sequence[uuid.UUID]) -> Plan[None]:
    """Steps whose task rows :func:`shardq.admin.actions.cancel_plan` just deleted by id, in its transaction
    (``released``: those whose tasks no longer waited): cancelled (waiting or ready), and their
    dependents with them, level by level (an on-failure child too: its parent did not die).
    Without it a step ready would read as succeeded, its task row being gone, and one waiting
    would be released into no task."""
    finished = yield from operations.workflow_steps_cancel(sorted(task_ids, key=_by_value), released)
    if finished:
        yield from _move_on(finished, TaskState.CANCELLED, wake=False)


def dead_requeue_plan(queue: str, ids: Sequence[uuid.UUID]) -> Plan[set[uuid.UUID]]:
    """Requeue dead tasks (:func:`shardq.admin.actions.dead_requeue`) and resume the workflows of
    those that were steps, in one transaction; returns the ids requeued. The requeued step is
    ``ready`` again and a step of its workflow again; its dependents cancelled when it died wait
    again (their tasks enqueued again from what their steps kept), level by level down the graph."""

    def body() -> Plan[set[uuid.UUID]]:
        done = yield from operations.dead_requeue_ids(queue, ids)
        if not done:
            return done
        revived = yield from operations.workflow_steps_revive(sorted(done, key=_by_value))
        if revived:
            yield from operations.workflow_tasks_rejoin(revived)
            parents = [(w, step) for w, step, _task in revived]
            while parents:
                yield from operations.workflow_counts_reopen(parents)
                parents = yield from operations.workflow_steps_reopen(parents)
                if parents:
                    yield from operations.workflow_tasks_reinsert(parents)
        return done

    result: set[uuid.UUID] = yield Atomically(body)
    return result


def parent_results_plan(task_id: object) -> Plan[dict[str, object]]:
    """The results of the parents of the step whose task is ``task_id``, by step name (None where
    a parent keeps none: its task is not declared ``result=True`` or its queue keeps no finished
    tasks). One read; run by the sync and the asyncio client alike. A malformed id raises
    :class:`InvalidInput` here, before anything is sent."""
    return operations.workflow_parent_results(_parse(task_id))


def cancel_plan(workflow_id: object) -> Plan[int]:
    """Cancel every step of the workflow not finished yet and delete their tasks, one
    transaction; returns how many steps it cancelled (0: unknown or already finished)."""
    wid = _parse(workflow_id)

    def body() -> Plan[int]:
        return len((yield from operations.workflow_cancel(wid)))

    result: int = yield Atomically(body)
    return result


def status_plan(workflow_id: object) -> Plan[WorkflowStatus]:
    """The workflow's state and each step's (two reads)."""
    wid = _parse(workflow_id)
    row = yield from operations.workflow_get(wid)
    if row is None:
        return WorkflowStatus(str(wid), TaskState.UNKNOWN)
    rows = yield from operations.workflow_steps_list(wid)
    steps = tuple(
        StepStatus(
            r["step"],
            str(r["task_id"]),
            r["task"],
            r["queue"],
            r["state"],
            tuple(r["parents"]),
            r["waiting_on"],
            r["on_failure"],
            r["finished_at"],
        )
        for r in rows
    )
    return WorkflowStatus(
        str(wid), _state(row["cancelled_at"] is not None, steps), row["name"], row["created_at"], steps
    )


def _state(cancelled: bool, steps: tuple[StepStatus, ...]) -> str:
    if cancelled:
        return TaskState.CANCELLED
    if any(s.state in (TaskState.WAITING, TaskState.READY, TaskState.RUNNING) for s in steps):
        return TaskState.RUNNING
    if any(s.state == TaskState.DEAD for s in steps):
        return TaskState.FAILED
    # A step cancelled by its task's id (shardq.admin.actions.cancel_plan); an on-failure step is cancelled
    # when its parents all succeeded, which is how a workflow succeeds.
    cancelled_step = any(s.state == TaskState.CANCELLED and not s.on_failure for s in steps)
    return TaskState.CANCELLED if cancelled_step else TaskState.SUCCEEDED


def _parse(workflow_id: object) -> uuid.UUID:
    if isinstance(workflow_id, uuid.UUID):
        return workflow_id
    try:
        return uuid.UUID(str(workflow_id))
    except ValueError:
        raise InvalidInput(f"not a workflow id: {workflow_id!r}") from None


def remove_and_release(
    store: TaskStore,
    remove: Callable[[], set[uuid.UUID]],
    outcome: str,
    results: Mapping[uuid.UUID, str] | None = None,
    handoff: HandoffOffer | None = None,
) -> set[uuid.UUID]:
    """:func:`remove_and_release_plan` on a sync store, with ``remove`` run on its session."""

    def remove_plan() -> Plan[set[uuid.UUID]]:
        return remove()
        yield  # a plan that runs ``remove`` on the sync session directly

    return store.session.run(remove_and_release_plan(remove_plan, outcome, results, handoff))
