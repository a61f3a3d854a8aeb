"""What the settler records for queues that keep finished tasks (:mod:`shardq.lifecycle.history`): the
history row of an acked task, and the split of a step's items into the queues that keep and those
that do not. A queue that keeps nothing is settled with exactly the statements it had before:
no extra statement, no extra parameter, no payload decoded."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TypeVar

from shardq.arguments import task_name_of
from shardq.lifecycle.claim import fenced
from shardq.models.history import Finished, SucceededColumns
from shardq.models.leases import WholeClaim
from shardq.models.tasks import TaskState
from shardq.sessions.store import TaskStore
from shardq.worker.inflight import InFlight
from shardq.worker.settlements import remove_keyed, remove_whole

T = TypeVar("T")


def split_kept(
    items: Sequence[T], queue_of: Callable[[T], str], keeps: Callable[[str], bool]
) -> tuple[list[T], list[T]]:
    """(items of queues that keep nothing, items of queues that keep finished tasks); asks
    ``keeps`` once per queue."""
    answers: dict[str, bool] = {}
    plain: list[T] = []
    kept: list[T] = []
    for item in items:
        queue = queue_of(item)
        keep = answers.get(queue)
        if keep is None:
            keep = answers[queue] = keeps(queue)
        (kept if keep else plain).append(item)
    return plain, kept


def succeeded(o: InFlight) -> Finished:
    """The history row of a task whose handler returned (``o.result``: its encoded return value,
    for a task that keeps one)."""
    c = o.claimed
    return Finished(
        c.key.id,
        c.key.queue,
        TaskState.SUCCEEDED,
        task_name_of(c.payload),
        c.created_at,
        c.attempt,
        o.seconds,
        None,
        o.result,
    )


def ack_keyed_kept(store: TaskStore, kept: list[InFlight], notify: bool) -> set[uuid.UUID]:
    """Acks holding exclusive keys, with their history rows, releasing the keys' backlogs in the
    same transaction; returns the ids deleted."""
    records = [succeeded(o) for o in kept]
    return remove_keyed(
        store, kept, lambda items: store.task_ack_many_recorded(items, records, notify=notify), step_results=False
    )


def ack_claims_kept(
    store: TaskStore, claims: list[tuple[WholeClaim, list[InFlight]]], notify: bool
) -> tuple[list[InFlight], set[uuid.UUID]]:
    """Whole claims acked with their history rows: (the acks, the ids not deleted)."""
    acked = [o for _, acks in claims for o in acks]  # each claim's acks are in its keys' order
    columns = SucceededColumns(
        [task_name_of(o.claimed.payload) for o in acked], [o.seconds for o in acked], [o.result for o in acked]
    )
    lost = store.task_ack_claims_recorded([claim for claim, _ in claims], columns, notify=notify)
    return acked, lost


def ack_whole_steps_kept(
    store: TaskStore, claims: list[tuple[WholeClaim, list[InFlight]]], notify: bool
) -> set[uuid.UUID]:
    """Whole claims of workflow steps acked with their history rows (:func:`ack_claims_kept`),
    the steps' workflows moved on in the same transaction (:func:`remove_whole`); returns the ids
    deleted."""
    return remove_whole(store, claims, lambda: ack_claims_kept(store, claims, notify)[1], step_results=False)


def ack_keys_kept(store: TaskStore, kept: list[InFlight], notify: bool) -> set[uuid.UUID]:
    """Acks by whole key with their history rows; returns the ids deleted."""
    return store.task_ack_many_recorded([fenced(o.claimed) for o in kept], [succeeded(o) for o in kept], notify=notify)
