"""Exclusive keys: at most one task per (queue, key) is leased at any moment.

A task may carry an ``exclusive_key``. Of all live tasks of a queue with the same key, exactly one
is *active* (ready, scheduled or leased); the others wait in the key's *backlog* (state
'backlog'), outside every claim's span, so a claim never blocks on a busy key: it simply never
sees the waiting tasks and takes other keys' tasks instead (Timestone's exclusive queues). A unique
index over active tasks enforces "one active task per key" in the database itself.

When the active task leaves for good — acked, dead-lettered (a permanent failure, its last attempt,
or a lease that expired on the last attempt) or cancelled — the first backlog entry (lowest
priority, then earliest exec_time) becomes active in the same transaction. A task that fails and is
retried stays the key's active task, so the key's tasks run one after another in order; a task
whose lease expires is handed back by the reaper and stays active too.

Concurrency: everything that adds to a backlog or releases a key runs in one transaction that
first takes the keys' locks (PostgreSQL advisory locks in a fixed order; CockroachDB relies on
serializable isolation and shardq.sessions.session's 40001 retry). Without that, an enqueue could park a task
behind a key that a concurrent ack is releasing, and the task would wait forever.

Latest-only queues (``exclusive_latest_only``, CMB's version 4): a new backlog entry replaces the
key's older ones, so only the newest waiting task per key survives.

The cost is paid only by tasks that carry a key: the claim statement and key-less acks are
unchanged."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shardq import operations
from shardq.lifecycle import key_slots
from shardq.models.tasks import NewTask
from shardq.sessions.store import TaskStore
from shardq.sql.plan import Atomically, Plan


@dataclass(frozen=True)
class ExclusiveEnqueue:
    """``skipped``: ids neither inserted nor backlogged (a live dedupe key, or a newer entry of the
    batch superseded them on a latest-only queue); ``backlogged``: ids that wait in a key's backlog."""

    skipped: set[uuid.UUID]
    backlogged: set[uuid.UUID]
    superseded: int
    paused: bool


def enqueue_plan(queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]) -> Plan[ExclusiveEnqueue]:
    """Insert tasks of which some carry exclusive keys: active where the key is free, otherwise
    into the key's backlog, as a plan (:mod:`shardq.sql.plan`) for either session. One
    transaction; may run more than once on CockroachDB (40001)."""
    result: ExclusiveEnqueue = yield Atomically(lambda: in_transaction_plan(queue, tasks, ids))
    return result


def in_transaction_plan(queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]) -> Plan[ExclusiveEnqueue]:
    """:func:`enqueue_plan`'s work, inside a transaction the caller holds open (the Spark merge
    does this in each chunk's transaction). Takes the keys' locks first, so it must be the only
    part of that transaction that touches these keys' backlogs."""
    pairs = sorted({(queue, t.exclusive_key) for t in tasks if t.exclusive_key is not None})
    yield from operations.exclusive_keys_lock(pairs)
    skipped, paused = yield from operations.task_insert_many(queue, tasks, ids)
    if paused:
        return ExclusiveEnqueue(skipped, set(), 0, True)
    waiting = [(t, i) for t, i in zip(tasks, ids) if t.exclusive_key is not None and i in skipped]
    backlogged: set[uuid.UUID] = set()
    superseded = 0
    if waiting:
        backlogged = yield from operations.task_insert_backlog_many(
            queue, [t for t, _ in waiting], [i for _, i in waiting]
        )
        settings = yield from operations.queue_get(queue)
        if settings is not None and settings.exclusive_latest_only and backlogged:
            newest: dict[str, uuid.UUID] = {}
            for task, task_id in waiting:
                if task_id in backlogged and task.exclusive_key is not None:
                    newest[task.exclusive_key] = task_id  # later in the batch wins
            superseded = yield from operations.task_backlog_supersede(queue, list(newest), list(newest.values()))
            backlogged = {i for i in backlogged if i in set(newest.values())}
    return ExclusiveEnqueue(skipped - backlogged, backlogged, superseded, False)


def remove_and_release(
    store: TaskStore,
    keys: Sequence[tuple[str, str]],
    remove: Callable[[], set[uuid.UUID]],
    key_of: dict[uuid.UUID, tuple[str, str]],
) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
    """Run ``remove`` (an ack, bury or cancel of active keyed tasks; returns the ids it removed)
    and promote the next backlog entry of every key whose active task it removed, in one
    transaction under the keys' locks. Returns (removed ids, promoted ids)."""

    def remove_plan() -> Plan[set[uuid.UUID]]:
        return remove()
        yield  # a plan that runs ``remove`` on the sync session directly

    return store.session.run(remove_and_release_plan(keys, remove_plan, key_of))


def remove_and_release_plan(
    keys: Sequence[tuple[str, str]],
    remove: Callable[[], Plan[set[uuid.UUID]]],
    key_of: dict[uuid.UUID, tuple[str, str]],
) -> Plan[tuple[set[uuid.UUID], set[uuid.UUID]]]:
    """:func:`remove_and_release` as a plan; ``remove()`` makes the plan that removes (called
    again for each attempt of the transaction)."""
    # A key slot of a limited concurrency key is locked as its key (shardq.lifecycle.key_slots).
    ordered = sorted({(queue, key_slots.lock_key(key)) for queue, key in keys})

    def body() -> Plan[tuple[set[uuid.UUID], set[uuid.UUID]]]:
        yield from operations.exclusive_keys_lock(ordered)
        removed = yield from remove()
        released = sorted({key_of[i] for i in removed if i in key_of})
        promoted = (yield from operations.task_backlog_release(released)) if released else set()
        if any(key_slots.key_of(key) is not None for _, key in released):
            promoted |= yield from key_slots.release_plan(released)
        return removed, promoted

    result: tuple[set[uuid.UUID], set[uuid.UUID]] = yield Atomically(body)
    return result
