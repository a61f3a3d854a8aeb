"""Limits per key: at most N live tasks of a queue per concurrency key, fleet-wide.

A task may carry a ``concurrency_key`` (``enqueue(..., concurrency_key="tenant:42")``). A queue sets
limits per key, for one key or for every key with a prefix (``tenant:*``; the exact key wins, then
the longest prefix): ``client.set_key_limit("q", "tenant:*", 3)``. A key no limit matches is not
limited: its tasks are enqueued as plain tasks.

**Design: key slots are exclusive keys.** A key limited to N has N *key slots*, named
``key + chr(31) + i`` for i in 0 .. N-1. Each live (ready, scheduled or leased) task of the key holds
one slot as its exclusive key; a task that finds every slot held waits in the key's backlog under
the *waiting key* ``key + chr(31) + "*"`` (state 'backlog', outside every claim's span). So:

* **Exact across workers, with nothing new in the claim.** The unique index over active exclusive
  keys (migration 0001) admits one task per slot, so a key never has more than N live tasks, hence
  never more than N running, whichever workers claim them; the claim statement is the ordinary one.
* **Releases ride on exclusive keys.** Every path that removes an active keyed task (ack, dead
  letter by the settler or the reaper, cancel) already releases its exclusive key under the key's
  lock (:func:`shardq.lifecycle.exclusive.remove_and_release_plan`); for a key slot it then fills
  every free slot of the key (below the current limit) from the waiting key's backlog, lowest
  priority then earliest first (:func:`release_plan`). A retried task keeps its slot.
* **The same lock.** Enqueue and release of a limited key both lock (queue, waiting key), the lock
  exclusive keys use (PostgreSQL advisory lock; CockroachDB's serializable isolation and 40001
  retries), so a task can never be parked just as the key's last slot comes free.
* **Costs only busy keys.** No row per key: a key exists only in its tasks' rows. An enqueue of a
  limited key reads the queue's limits and which of its slots are held (two small statements in
  the enqueue's transaction); a release reads the same and promotes one row per free slot.

Exclusive keys are this with N = 1 and stay exactly as they were (a task may carry one or the other,
not both). Limits count *live* tasks, so a task waiting for its retry backoff keeps its slot: the
bound on running tasks is exact, and under retries it is conservative. Lowering a limit lets the
tasks already in higher slots finish; raising one fills the new slots at the key's next enqueue or
release. ``task.exclusive_key`` of a handler's task shows the slot (``tenant:42\\x1f1``);
:func:`shardq.lifecycle.key_slots.key_of` gives the concurrency key back."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace

from shardq import operations, validation
from shardq.errors import InvalidInput
from shardq.lifecycle import exclusive
from shardq.lifecycle.key_slots import (
    KEY_LIMIT_MAX,
    KEY_LIMITS_MAX,
    KEY_MAX,
    SEPARATOR,
    limits_plan,
    resolve,
    slot_key,
    waiting_key,
)
from shardq.models.tasks import NewTask
from shardq.sql.plan import Atomically, Call, Plan


def concurrency_key(key: object) -> str | None:
    """A task's concurrency key, checked: a non-empty string of at most :data:`KEY_MAX` characters,
    without NUL or chr(31)."""
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        raise InvalidInput("concurrency key must be a non-empty string")
    if len(key) > KEY_MAX:
        raise InvalidInput(f"concurrency key longer than {KEY_MAX} characters")
    if "\x00" in key or SEPARATOR in key:
        raise InvalidInput("concurrency key may not contain NUL or chr(31)")
    return key


def pattern(text: object) -> str:
    """A limit's pattern: a concurrency key, or a prefix followed by ``*`` (``*`` alone: every key)."""
    if not isinstance(text, str) or not text:
        raise InvalidInput("a key pattern must be a key or a prefix followed by *")
    prefix = text[:-1] if text.endswith("*") else text
    if prefix:
        concurrency_key(prefix)
    return text


def limit_value(value: object) -> int:
    return validation.positive_int(value, "limit per key", maximum=KEY_LIMIT_MAX)


# -- plans --------------------------------------------------------------------------------------
def set_plan(queue: str, key_pattern: str, max_running: int) -> Plan[None]:
    validation.queue_name(queue)
    key_pattern, max_running = pattern(key_pattern), limit_value(max_running)
    existing = yield from limits_plan(queue)
    if len(existing) >= KEY_LIMITS_MAX and key_pattern not in {limit.pattern for limit in existing}:
        raise InvalidInput(f"queue {queue!r} has {KEY_LIMITS_MAX} key limits already")
    yield Call("key_limit_set", {"queue": queue, "pattern": key_pattern, "max_running": max_running}, rows="none")


def remove_plan(queue: str, key_pattern: str) -> Plan[bool]:
    rows = yield Call("key_limit_remove", {"queue": validation.queue_name(queue), "pattern": pattern(key_pattern)})
    return bool(rows)


def enqueue_plan(queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]) -> Plan[exclusive.ExclusiveEnqueue]:
    """Enqueue a batch of which some tasks carry a concurrency key, in one transaction: each
    limited key's tasks take its free slots in batch order, the rest wait in its backlog; tasks of
    keys no limit matches, and the others of the batch, are enqueued as usual (exclusive keys
    included)."""
    result: exclusive.ExclusiveEnqueue = yield Atomically(lambda: _enqueue_body(queue, tasks, ids))
    return result


def _enqueue_body(queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]) -> Plan[exclusive.ExclusiveEnqueue]:
    keys = sorted({t.concurrency_key for t in tasks if t.concurrency_key is not None})
    limits = yield from limits_plan(queue)
    limited = {key: n for key in keys if (n := resolve(limits, key)) is not None}
    pairs = sorted(
        {(queue, waiting_key(k)) for k in limited}
        | {(queue, t.exclusive_key) for t in tasks if t.exclusive_key is not None}
    )
    yield from operations.exclusive_keys_lock(pairs)
    free: dict[str, list[int]] = {}
    if limited:
        slots = [slot_key(k, i) for k, n in limited.items() for i in range(n)]
        held = yield from operations.task_exclusive_active(queue, slots)
        free = {k: [i for i in range(n) if slot_key(k, i) not in held][::-1] for k, n in limited.items()}
    admitted: list[NewTask] = []
    admitted_ids: list[uuid.UUID] = []
    waiting: list[NewTask] = []
    waiting_ids: list[uuid.UUID] = []
    for task, task_id in zip(tasks, ids):
        key = task.concurrency_key
        if key is None or key not in limited:
            admitted.append(replace(task, concurrency_key=None))
        elif free[key]:
            admitted.append(replace(task, concurrency_key=None, exclusive_key=slot_key(key, free[key].pop())))
        else:
            waiting.append(replace(task, concurrency_key=None, exclusive_key=waiting_key(key)))
            waiting_ids.append(task_id)
            continue
        admitted_ids.append(task_id)
    outcome = exclusive.ExclusiveEnqueue(set(), set(), 0, False)
    if admitted:
        # Under the locks taken above: exclusive's own locks are the same keys again (re-entrant).
        outcome = yield from exclusive.in_transaction_plan(queue, admitted, admitted_ids)
        if outcome.paused:
            return outcome
    elif waiting:
        settings = yield from operations.queue_get(queue)
        if settings is not None and settings.paused_enqueue:
            return exclusive.ExclusiveEnqueue(set(ids), set(), 0, True)
    backlogged = set(outcome.backlogged)
    skipped = set(outcome.skipped)
    if waiting:
        parked = yield from operations.task_insert_backlog_many(queue, waiting, waiting_ids)
        backlogged |= parked
        skipped |= set(waiting_ids) - parked  # a live dedupe key
    return exclusive.ExclusiveEnqueue(skipped, backlogged, outcome.superseded, False)
