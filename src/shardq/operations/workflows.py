"""Plans of the workflow statements (``sql/common/workflows.sql``), the same on both engines; the
logic that strings them together is :mod:`shardq.workflows.steps`.

The statements of a step's ack return their rows as binary tuples (``binary=True, tuples=True``):
one row per step read, child moved or task released, and a text dict costs the worker several
times more per row (docs/workflows.md, "Costs")."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from shardq.engine.base import Engine
from shardq.models.leases import HandoffOffer
from shardq.models.tasks import MAX_ATTEMPTS_DEFAULT, RANK_BACKLOG, TaskState
from shardq.models.workflow_graph import StepSpec
from shardq.sql.plan import ENGINE, Call, Plan

#: (workflow id, step name, task id, new state) of a step a statement moved
Moved = tuple[uuid.UUID, str, uuid.UUID, str]


def workflow_insert(
    workflow_id: uuid.UUID, name: str, steps: Sequence[StepSpec], task_ids: Sequence[uuid.UUID]
) -> Plan[None]:
    """Write a whole workflow: its row, its steps, its edges, the shard rows of its wide fan-ins
    and its steps' tasks (four or five statements; the caller holds them in one transaction)."""
    engine: Engine = yield ENGINE
    counts = fan_in_counts(steps, engine.fan_in_shards)
    task_of = {s.name: task_id for s, task_id in zip(steps, task_ids)}
    yield Call("workflow_insert", {"id": workflow_id, "name": name}, rows="none")
    yield Call(
        "workflow_steps_insert",
        {
            "workflow_id": workflow_id,
            "steps": [s.name for s in steps],
            "task_ids": list(task_ids),
            "tasks": [s.task for s in steps],
            "queues": [s.queue for s in steps],
            "waiting_on": [counts.waiting_on[s.name] for s in steps],
            "on_failure": [s.on_failure for s in steps],
            "payloads": [s.payload for s in steps],
            "priorities": [s.priority for s in steps],
            "max_attempts": [s.max_attempts for s in steps],
            "child_kinds": [counts.child_kinds[s.name] for s in steps],
            "only_children": [counts.only_child.get(s.name) for s in steps],
            "sole_child_task_ids": [
                task_of[counts.sole_child[s.name]] if s.name in counts.sole_child else None for s in steps
            ],
            "only_shards": [counts.only_shard.get(s.name) for s in steps],
        },
        rows="none",
    )
    if counts.edges:
        yield Call(
            "workflow_edges_insert",
            {
                "workflow_id": workflow_id,
                "parents": [p for p, _, _ in counts.edges],
                "children": [c for _, c, _ in counts.edges],
                "shards": [shard for _, _, shard in counts.edges],
            },
            rows="none",
        )
    if counts.shards:
        yield Call(
            "workflow_counts_insert",
            {
                "workflow_id": workflow_id,
                "steps": [s for s, _, _ in counts.shards],
                "shards": [k for _, k, _ in counts.shards],
                "waiting_on": [n for _, _, n in counts.shards],
            },
            rows="none",
        )
    yield Call(
        "workflow_tasks_insert",
        {
            "workflow_id": workflow_id,
            "ids": list(task_ids),
            "queues": [s.queue for s in steps],
            "payloads": [s.payload for s in steps],
            "priorities": [s.priority for s in steps],
            "max_attempts": [s.max_attempts for s in steps],
            "waiting": [bool(s.parents) for s in steps],
            "backlog_rank": RANK_BACKLOG,
            "max_attempts_default": MAX_ATTEMPTS_DEFAULT,
        },
        rows="none",
    )


#: Bits of a step's ``child_kinds``: it has children counted in their own row / in shard rows.
OWN_ROW, IN_SHARDS = 1, 2


@dataclass(frozen=True)
class FanInCounts:
    """How a workflow's steps count their parents: ``waiting_on`` by step (its parents, or for a
    step counted in shards its shards), ``child_kinds`` by step (:data:`OWN_ROW` | :data:`IN_SHARDS`),
    ``edges`` as (parent, child, shard or None), ``shards`` as (step, shard, parents in it) and
    ``only_child``: for a step with exactly one child counted in its own row, that child; and
    ``sole_child``: that child again when it has no other parent, is not an on-failure step and
    the step has no other kind of child (a chain's step but the last): the step's ack makes the
    child's task claimable directly; and ``only_shard``: for a step whose one child is counted in
    shards (a member of a wide fan-in; ``only_child`` then names that child), its shard there,
    which the step's ack lowers by name (``workflow_counts_count_off``)."""

    waiting_on: dict[str, int]
    child_kinds: dict[str, int]
    edges: list[tuple[str, str, int | None]]
    shards: list[tuple[str, int, int]]
    only_child: dict[str, str]
    sole_child: dict[str, str]
    only_shard: dict[str, int]


def fan_in_counts(steps: Sequence[StepSpec], shards_for: Callable[[int], int]) -> FanInCounts:
    """Place each parent of a step counted in shards (``shards_for(parents)`` > 0) in shard
    ``i mod k`` by its position ``i`` among the step's parents: every shard gets as many parents
    as any other, give or take one. Pure: no database."""
    waiting_on: dict[str, int] = {}
    kinds = dict.fromkeys((s.name for s in steps), 0)
    edges: list[tuple[str, str, int | None]] = []
    rows: list[tuple[str, int, int]] = []
    own_children: dict[str, list[str]] = {}
    shard_of: dict[str, list[tuple[str, int]]] = {}  # by parent: (child counted in shards, shard)
    for step in steps:
        k = min(shards_for(len(step.parents)), len(step.parents))
        if k <= 0:
            waiting_on[step.name] = len(step.parents)
            edges += [(parent, step.name, None) for parent in step.parents]
            for parent in step.parents:
                kinds[parent] |= OWN_ROW
                own_children.setdefault(parent, []).append(step.name)
            continue
        waiting_on[step.name] = k
        edges += [(parent, step.name, i % k) for i, parent in enumerate(step.parents)]
        rows += [(step.name, shard, len(range(shard, len(step.parents), k))) for shard in range(k)]
        for i, parent in enumerate(step.parents):
            kinds[parent] |= IN_SHARDS
            shard_of.setdefault(parent, []).append((step.name, i % k))
    only_child = {parent: children[0] for parent, children in own_children.items() if len(children) == 1}
    only_shard: dict[str, int] = {}
    for parent, counted in shard_of.items():
        if kinds[parent] == IN_SHARDS and len(counted) == 1:
            only_child[parent], only_shard[parent] = counted[0]
    by_name = {step.name: step for step in steps}
    sole_child = {
        parent: child
        for parent, child in only_child.items()
        if kinds[parent] == OWN_ROW and len(by_name[child].parents) == 1 and not by_name[child].on_failure
    }
    return FanInCounts(waiting_on, kinds, edges, rows, only_child, sole_child, only_shard)


#: (workflow id, step, child kinds: :data:`OWN_ROW` | :data:`IN_SHARDS`, only child or None) of a
#: step that finished
FinishedStep = tuple[uuid.UUID, str, int, "str | None"]


#: A step just acked: :data:`FinishedStep`, then its task id, its sole child's task id (None
#: when it has no sole child) and its only child's shard (None unless that child is counted in
#: shards: :class:`FanInCounts`)
AckedStep = tuple[uuid.UUID, str, int, "str | None", uuid.UUID, "uuid.UUID | None", "int | None"]


def workflow_steps_acked(
    task_ids: Sequence[uuid.UUID], handoff: HandoffOffer | None = None, parents: bool = False
) -> Plan[tuple[list[AckedStep], list[uuid.UUID]]]:
    """The steps of these tasks, just acked (their rows deleted in this transaction), as
    :data:`AckedStep`. A read: a step that succeeded keeps its row as it was, its task row's
    absence being its success (``sql/common/workflows.sql``). ``handoff``: the acking worker's offer
    for the sole children of these steps, taken where the engine can
    (:meth:`~shardq.engine.Engine.steps_acked`, whose steps left out and ``parents`` these are)."""
    engine: Engine = yield ENGINE
    return (yield from engine.steps_acked(task_ids, handoff, parents))


def workflow_steps_keep_results(results: Sequence[tuple[uuid.UUID, str]]) -> Plan[None]:
    """Keep these (task id, result text) in the steps of tasks just acked, for their children."""
    yield Call(
        "workflow_steps_keep_results",
        {"task_ids": [t for t, _ in results], "results": [r for _, r in results]},
        rows="none",
    )


def workflow_steps_finish(task_ids: Sequence[uuid.UUID], state: str) -> Plan[list[FinishedStep]]:
    """Finish the steps of these tasks (``succeeded``: steps without children; ``dead``;
    ``cancelled``); returns those that were running, each once, as :data:`FinishedStep`."""
    rows = yield Call("workflow_steps_finish", {"task_ids": list(task_ids), "state": state}, binary=True, tuples=True)
    return rows


def workflow_counts_advance(parents: Sequence[tuple[uuid.UUID, str]]) -> Plan[list[tuple[uuid.UUID, str, int]]]:
    """Count these succeeded parents off the shard rows of their children counted in shards;
    returns (workflow id, child, shards this brought to 0) for each child with such a shard."""
    rows = yield Call(
        "workflow_counts_advance",
        {"workflow_ids": [w for w, _ in parents], "steps": [s for _, s in parents]},
        binary=True,
        tuples=True,
    )
    return _drained(rows)


def workflow_counts_count_off(
    shards: Sequence[tuple[uuid.UUID, str, int, int]],
) -> Plan[list[tuple[uuid.UUID, str, int]]]:
    """:func:`workflow_counts_advance` with the shard rows named, as (workflow id, child, shard, n
    parents): no edge read. Returns the same."""
    rows = yield Call(
        "workflow_counts_count_off",
        {
            "workflow_ids": [w for w, _, _, _ in shards],
            "children": [c for _, c, _, _ in shards],
            "shards": [k for _, _, k, _ in shards],
            "counts": [n for _, _, _, n in shards],
        },
        binary=True,
        tuples=True,
    )
    return _drained(rows)


def _drained(rows: Sequence[tuple[uuid.UUID, str, int]]) -> list[tuple[uuid.UUID, str, int]]:
    """(workflow id, child, shards brought to 0) from the shard rows a count-off lowered."""
    drained: dict[tuple[uuid.UUID, str], int] = {}
    for workflow_id, step, waiting_on in rows:
        if waiting_on == 0:
            key = (workflow_id, step)
            drained[key] = drained.get(key, 0) + 1
    return [(w, step, n) for (w, step), n in drained.items()]


def workflow_children_advance(parents: Sequence[tuple[uuid.UUID, str]]) -> Plan[list[Moved]]:
    """Count these succeeded parents off their waiting children counted in their own row; returns
    the children it released or cancelled (an on-failure child whose parents all succeeded)."""
    rows = yield Call(
        "workflow_children_advance",
        {"workflow_ids": [w for w, _ in parents], "steps": [s for _, s in parents]},
        binary=True,
        tuples=True,
    )
    waiting = TaskState.WAITING
    return [m for m in rows if m[3] != waiting]


def workflow_children_count_off(drained: Sequence[tuple[uuid.UUID, str, int]]) -> Plan[list[Moved]]:
    """Count children off their own rows by name: (workflow id, child, how many), the shards an
    ack drained or the succeeded parents whose only child it is; returns the children it released
    or cancelled, as :func:`workflow_children_advance`."""
    rows = yield Call(
        "workflow_children_count_off",
        {
            "workflow_ids": [w for w, _, _ in drained],
            "steps": [s for _, s, _ in drained],
            "counts": [n for _, _, n in drained],
        },
        binary=True,
        tuples=True,
    )
    waiting = TaskState.WAITING
    return [m for m in rows if m[3] != waiting]


def workflow_children_stop(parents: Sequence[tuple[uuid.UUID, str]], *, died: bool) -> Plan[list[Moved]]:
    """Stop the waiting children of these dead (``died``) or cancelled parents: cancelled, or
    released when an on-failure child of a dead parent."""
    rows = yield Call(
        "workflow_children_stop",
        {"workflow_ids": [w for w, _ in parents], "steps": [s for _, s in parents], "died": died},
        binary=True,
        tuples=True,
    )
    return rows


def workflow_tasks_release(task_ids: Sequence[uuid.UUID], *, wake: bool = False) -> Plan[set[uuid.UUID]]:
    """Make these waiting step tasks claimable; returns the ids released. ``wake`` (where the
    engine has wake-ups, :mod:`shardq.lifecycle.notify`): the same statement wakes the listening workers of
    each queue it released tasks into, delivered when the transaction commits."""
    engine: Engine = yield ENGINE
    params: dict[str, Any] = {"ids": list(task_ids)}
    if engine.supports_wakeups:
        params["wake"] = wake
    rows = yield Call("workflow_tasks_release", params, binary=True, tuples=True)
    return {row[0] for row in rows}


def workflow_tasks_drop(task_ids: Sequence[uuid.UUID]) -> Plan[set[uuid.UUID]]:
    rows = yield Call("workflow_tasks_drop", {"ids": list(task_ids)})
    return {row["id"] for row in rows}


def workflow_steps_revive(task_ids: Sequence[uuid.UUID]) -> Plan[list[tuple[uuid.UUID, str, uuid.UUID]]]:
    """Dead steps of these requeued tasks back to ``ready`` (not in a cancelled workflow);
    returns (workflow id, step, task id) of each."""
    rows = yield Call("workflow_steps_revive", {"task_ids": list(task_ids)})
    return [(row["workflow_id"], row["step"], row["task_id"]) for row in rows]


def workflow_tasks_rejoin(steps: Sequence[tuple[uuid.UUID, str, uuid.UUID]]) -> Plan[None]:
    yield Call(
        "workflow_tasks_rejoin",
        {"ids": [t for _w, _s, t in steps], "workflow_ids": [w for w, _s, _t in steps]},
        rows="none",
    )


def workflow_steps_reopen(parents: Sequence[tuple[uuid.UUID, str]]) -> Plan[list[tuple[uuid.UUID, str]]]:
    """The cancelled children of ``parents`` waiting again; returns (workflow id, step) of each."""
    rows = yield Call(
        "workflow_steps_reopen", {"workflow_ids": [w for w, _ in parents], "steps": [s for _, s in parents]}
    )
    return [(row["workflow_id"], row["step"]) for row in rows]


def workflow_tasks_reinsert(steps: Sequence[tuple[uuid.UUID, str]]) -> Plan[None]:
    yield Call(
        "workflow_tasks_reinsert",
        {
            "workflow_ids": [w for w, _ in steps],
            "steps": [s for _, s in steps],
            "backlog_rank": RANK_BACKLOG,
            "max_attempts_default": MAX_ATTEMPTS_DEFAULT,
        },
        rows="none",
    )


def workflow_parent_results(task_id: uuid.UUID) -> Plan[dict[str, Any]]:
    """Step name -> decoded result (None where none is kept) of each parent of this task's step."""
    rows = yield Call("workflow_parent_results", {"task_id": task_id})
    return {row["step"]: json.loads(row["result"]) if row["result"] is not None else None for row in rows}


def workflow_cancel(workflow_id: uuid.UUID) -> Plan[list[FinishedStep]]:
    """Flag the workflow cancelled, delete the task rows of its steps not finished yet and cancel
    those steps (two statements; the caller holds them in one transaction); returns the steps
    cancelled, as :func:`workflow_steps_finish` (none: unknown or already finished)."""
    rows = yield Call("workflow_cancel", {"id": workflow_id}, binary=True, tuples=True)
    if not rows:
        return []
    task_ids = sorted((task_id for task_id, _released in rows), key=attrgetter("int"))
    return (yield from workflow_steps_cancel(task_ids, [task_id for task_id, released in rows if released]))


def workflow_steps_cancel(task_ids: Sequence[uuid.UUID], released: Sequence[uuid.UUID]) -> Plan[list[FinishedStep]]:
    """Cancel the steps (waiting or ready) whose task rows were just deleted, ``released`` those
    whose tasks no longer waited (they wait on no parent); returns them, as
    :func:`workflow_steps_finish`."""
    rows = yield Call(
        "workflow_steps_cancel", {"task_ids": list(task_ids), "released": list(released)}, binary=True, tuples=True
    )
    return rows


def workflow_get(workflow_id: uuid.UUID) -> Plan[dict[str, Any] | None]:
    row: dict[str, Any] | None = yield Call("workflow_get", {"id": workflow_id}, rows="one")
    return row


def workflow_steps_list(workflow_id: uuid.UUID) -> Plan[list[dict[str, Any]]]:
    """Every step of a workflow, each with ``parents`` (a tuple of step names), in name order."""
    rows: list[dict[str, Any]] = yield Call("workflow_steps_list", {"id": workflow_id})
    edges = yield Call("workflow_edges_list", {"id": workflow_id})
    parents: dict[str, list[str]] = {}
    for edge in edges:
        parents.setdefault(edge["child"], []).append(edge["parent"])
    return [{**row, "parents": tuple(parents.get(row["step"], ()))} for row in rows]


def workflow_prune_page(
    keep_seconds: float, after: tuple[Any, uuid.UUID] | None, limit: int
) -> Plan[list[tuple[uuid.UUID, Any, bool]]]:
    """One page of workflows older than ``keep_seconds`` after the cursor ``after`` ((created_at,
    id) of the last one seen; None: from the first), each as (id, created_at, due)."""
    rows = yield Call(
        "workflow_prune_page",
        {
            "keep_seconds": keep_seconds,
            "limit": limit,
            "after_created": after[0] if after else None,
            "after_id": after[1] if after else None,
        },
    )
    return [(row["id"], row["created_at"], bool(row["due"])) for row in rows]


def workflow_counts_reopen(parents: Sequence[tuple[uuid.UUID, str]]) -> Plan[None]:
    """The shard rows of the cancelled children (counted in shards) that
    :func:`workflow_steps_reopen` is about to reopen for these parents: each counts again its
    parents that have not succeeded."""
    yield Call(
        "workflow_counts_reopen",
        {"workflow_ids": [w for w, _ in parents], "steps": [s for _, s in parents]},
        rows="none",
    )


def workflow_steps_prune(ids: Sequence[uuid.UUID], limit: int) -> Plan[int]:
    rows = yield Call("workflow_steps_prune", {"ids": list(ids), "limit": limit})
    return len(rows)


def workflow_counts_prune(ids: Sequence[uuid.UUID], limit: int) -> Plan[int]:
    rows = yield Call("workflow_counts_prune", {"ids": list(ids), "limit": limit})
    return len(rows)


def workflow_edges_prune(ids: Sequence[uuid.UUID], limit: int) -> Plan[int]:
    rows = yield Call("workflow_edges_prune", {"ids": list(ids), "limit": limit})
    return len(rows)


def workflow_prune(ids: Sequence[uuid.UUID]) -> Plan[int]:
    rows = yield Call("workflow_prune", {"ids": list(ids)})
    return len(rows)
