"""The settler's units of work: a :class:`Settlement` (one statement, or a few for failures, over
a list of outcomes that can be re-run on any part of it), a :class:`Batch` of them, and the helpers
that build the settlements of acks that release other tasks: exclusive-key acks, workflow steps,
tasks of Spark runs. (A settlement is not a workflow step: docs/glossary.md, "settle".)"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from shardq.lifecycle import exclusive
from shardq.lifecycle.claim import fenced
from shardq.models.leases import Fenced, HandoffOffer, WholeClaim
from shardq.models.tasks import TaskState
from shardq.sessions.store import TaskStore
from shardq.worker.inflight import InFlight
from shardq.workflows import spark_callbacks as run_callbacks
from shardq.workflows import steps as workflows


@dataclass(slots=True)
class Settlement:
    """One statement (or a few, for failures) settling ``items``: ``run(store, items)``. A
    settlement can be re-run on any part of its items, which is how one bad outcome is kept from failing
    the others (:meth:`Settler._isolate`). ``writes_errors``: its items carry error texts, which a
    last try replaces with a plain reason."""

    run: Callable[[TaskStore, list], None]
    items: list
    writes_errors: bool = False


@dataclass(slots=True)
class Batch:
    """Outcomes taken together, and the statements still to run to settle them."""

    outcomes: list[InFlight]
    settlements: list[Settlement]


def remove_keyed(
    store: TaskStore,
    outcomes: list[InFlight],
    remove: Callable[[list[Fenced]], set[uuid.UUID]],
    *,
    step_results: bool = True,
    handoff: HandoffOffer | None = None,
) -> set[uuid.UUID]:
    """Ack tasks that hold exclusive keys, releasing each key's backlog in the same transaction
    (see :mod:`shardq.lifecycle.exclusive`), and workflow steps, releasing the children they were the last
    parent of in the same transaction (see :mod:`shardq.workflows.steps`), and tasks of Spark runs with
    a callback, releasing it in the ack that leaves none of its run (:mod:`shardq.workflows.spark_callbacks`).
    ``step_results``: the steps' results (of tasks declared ``result=True``) are kept with their
    workflow — for a queue that keeps no finished tasks; one that keeps them has them in its
    history rows. ``handoff``: the acking worker's offer to run the next steps of chains the acks
    release (:mod:`shardq.worker.handoff`)."""
    steps = [o for o in outcomes if o.claimed.workflow_id is not None]
    if not steps:
        return _remove_keyed(store, outcomes, remove)
    keyed = [o for o in outcomes if o.claimed.workflow_id is None]
    runs = [o for o in steps if run_callbacks.is_run(o.claimed.workflow_id)]
    if runs:
        steps = [o for o in steps if not run_callbacks.is_run(o.claimed.workflow_id)]
    removed: set[uuid.UUID] = set()
    if steps:
        step_items = [fenced(o.claimed) for o in steps]
        results = {o.claimed.key.id: o.result for o in steps if o.result is not None} if step_results else None
        removed = workflows.remove_and_release(store, lambda: remove(step_items), TaskState.SUCCEEDED, results, handoff)
    if runs:
        run_items = [fenced(o.claimed) for o in runs]
        workflow_of = {o.claimed.key.id: o.claimed.workflow_id for o in runs}
        removed |= run_callbacks.remove_and_settle(store, lambda: remove(run_items), workflow_of, TaskState.SUCCEEDED)
    return removed | (_remove_keyed(store, keyed, remove) if keyed else set())


def remove_whole(
    store: TaskStore,
    claims: list[tuple[WholeClaim, list[InFlight]]],
    ack: Callable[[], set[uuid.UUID]] | None = None,
    *,
    step_results: bool = True,
    handoff: HandoffOffer | None = None,
) -> set[uuid.UUID]:
    """Ack claims of workflow steps (no exclusive key, no Spark run's task) whose every task
    finished: each claim's rows by key range and token, as a claim of plain tasks (no key arrays
    travel), and the acked steps' workflows moved on (:func:`shardq.workflows.steps.remove_and_release`),
    in one transaction. ``ack()`` deletes the claims' rows and returns the ids it did not delete (by
    default :meth:`~shardq.sessions.store.TaskStore.task_ack_claims` inside that transaction); ``step_results`` as in
    :func:`remove_keyed`, and ``handoff``. Returns the ids deleted."""
    outcomes = [o for _, acks in claims for o in acks]
    held = {o.claimed.key.id for o in outcomes}
    results = (
        {o.claimed.key.id: o.result for o in outcomes if o.result is not None and o.claimed.workflow_id}
        if step_results
        else None
    )
    whole = [claim for claim, _ in claims]
    lost = ack if ack is not None else (lambda: store.task_ack_claims(whole, in_transaction=True))
    return workflows.remove_and_release(store, lambda: held - lost(), TaskState.SUCCEEDED, results, handoff)


def _remove_keyed(
    store: TaskStore, outcomes: list[InFlight], remove: Callable[[list[Fenced]], set[uuid.UUID]]
) -> set[uuid.UUID]:
    items = [fenced(o.claimed) for o in outcomes]
    key_of = {o.claimed.key.id: (o.claimed.queue, o.claimed.exclusive_key or "") for o in outcomes}
    removed, _promoted = exclusive.remove_and_release(store, list(key_of.values()), lambda: remove(items), key_of)
    return removed
