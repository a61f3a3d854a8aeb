"""Plans of the task statements both engines send the same way: layout, enqueue, exclusive keys,
cancel, and settling leased tasks by fenced key (retry, dead-letter, release, extend). The claim,
the ack and the reaping differ per engine: they are operations of :mod:`shardq.engine`."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shardq.engine.base import Engine
from shardq.engine.common import RANKS, key_arrays, task_arrays
from shardq.error_text import storable
from shardq.errors import DatabaseError
from shardq.models.layout import ShardLayout
from shardq.models.leases import Fenced
from shardq.models.tasks import NewTask, TaskInfo
from shardq.operations.queues import notify_queue_full
from shardq.sql.plan import ENGINE, Call, Plan, UseShardColumn


@dataclass(frozen=True, slots=True)
class CancelledTask:
    id: uuid.UUID
    queue: str
    state: str
    exclusive_key: str | None
    backlogged: bool
    #: what the history records of a cancelled task (shardq.lifecycle.history)
    payload: bytes = b""
    created_at: dt.datetime | None = None
    attempts: int = 0
    last_error: str | None = None
    dedupe_key: str | None = None
    #: a workflow step's workflow, or a Spark run's mark (shardq.workflows.spark_callbacks)
    workflow_id: uuid.UUID | None = None


# -- layout ------------------------------------------------------------------------------------


def layout() -> Plan[ShardLayout]:
    """Read the bucket layout and point the session's ``{shard_col}`` statements at it."""
    engine: Engine = yield ENGINE
    found: ShardLayout = yield from engine.read_layout()
    yield UseShardColumn(found.shard_column)
    return found


# -- enqueue -----------------------------------------------------------------------------------


def task_insert_many(
    queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID], *, wake: bool = False
) -> Plan[tuple[set[uuid.UUID], bool]]:
    """Insert; returns (ids skipped: a live dedupe key or a busy exclusive key, queue paused for
    enqueue). When the queue is paused nothing was inserted and every id counts as skipped.
    ``wake`` (where the engine has wake-ups; see :meth:`shardq.lifecycle.notify.Notifier.wake_in_insert`):
    for a batch without dedupe or exclusive keys, the same statement wakes the queue's listening
    workers unless the queue is paused."""
    engine: Engine = yield ENGINE
    arrays = engine.task_arrays(tasks, ids)
    if not any(t.dedupe_key is not None or t.exclusive_key is not None for t in tasks):
        del arrays["dedupe_keys"], arrays["exclusive_keys"]
        params: dict[str, Any] = {"queue": queue, **arrays}
        if engine.supports_wakeups:
            params["wake"] = wake
        try:
            row = yield Call("task_insert_many_fresh", params, rows="one")
        except DatabaseError as exc:
            if not (wake and notify_queue_full(exc)):
                raise
            # A wake-up is an optimisation: a server whose notification queue is full (behind a
            # listener that stopped reading) must not refuse the tasks. The statement failed whole
            # at its commit, so nothing was inserted: insert again without it.
            params["wake"] = False
            row = yield Call("task_insert_many_fresh", params, rows="one")
        return (set(ids), True) if row and row["paused"] else (set(), False)
    rows = yield Call("task_insert_many", {"queue": queue, **arrays})
    if any(row["paused"] for row in rows):
        return set(ids), True
    return {row["id"] for row in rows}, False


def task_exclusive_active(queue: str, keys: Sequence[str]) -> Plan[set[str]]:
    """The exclusive keys of ``keys`` that a live task of ``queue`` holds."""
    rows = yield Call("task_exclusive_active", {"queue": queue, "keys": list(keys)})
    return {row["exclusive_key"] for row in rows}


def task_insert_backlog_many(queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]) -> Plan[set[uuid.UUID]]:
    rows = yield Call("task_insert_backlog_many", {"queue": queue, **task_arrays(tasks, ids)})
    return {row["id"] for row in rows}


def task_backlog_supersede(queue: str, keys: Sequence[str], keep: Sequence[uuid.UUID]) -> Plan[int]:
    rows = yield Call("task_backlog_supersede", {"queue": queue, "keys": list(keys), "keep": list(keep)})
    return len(rows)


def exclusive_keys_lock(pairs: Sequence[tuple[str, str]]) -> Plan[None]:
    """Take the per-key locks (PostgreSQL; a no-op statement on CockroachDB) for this transaction."""
    yield Call("exclusive_keys_lock", {"queues": [q for q, _ in pairs], "keys": [k for _, k in pairs]})


def task_backlog_release(pairs: Sequence[tuple[str, str]]) -> Plan[set[uuid.UUID]]:
    rows = yield Call("task_backlog_release", {"queues": [q for q, _ in pairs], "keys": [k for _, k in pairs], **RANKS})
    return {row["id"] for row in rows}


def task_exclusive_keys_by_id(ids: Sequence[uuid.UUID]) -> Plan[dict[uuid.UUID, tuple[str, str]]]:
    rows = yield Call("task_exclusive_keys_by_id", {"ids": list(ids)})
    return {row["id"]: (row["queue"], row["exclusive_key"]) for row in rows}


def task_cancel_many(ids: Sequence[uuid.UUID]) -> Plan[list[CancelledTask]]:
    rows = yield Call("task_cancel_many", {"ids": list(ids)})
    return [
        CancelledTask(
            row["id"],
            row["queue"],
            row["state"],
            row["exclusive_key"],
            row["backlogged"],
            bytes(row["payload"]),
            row["created_at"],
            row["attempts"],
            row["last_error"],
            row["dedupe_key"],
            row["workflow_id"],
        )
        for row in rows
    ]


# -- settling by fenced key --------------------------------------------------------------------


def task_retry_many(
    items: Sequence[Fenced],
    delays: Sequence[float],
    errors: Sequence[str | None],
    *,
    require_expired: bool,
    refund: bool = False,
) -> Plan[set[uuid.UUID]]:
    """Put leased tasks back at now() + delay with their error text (made storable: see
    :mod:`shardq.error_text`). With ``refund`` the attempt each claim charged is given back
    (the handler asked for the retry). Returns the ids put back."""
    params = key_arrays(items)
    params.update(
        delays=list(delays),
        errors=[storable(e) for e in errors],
        require_expired=require_expired,
        refunds=[1 if refund else 0] * len(items),
    )
    rows = yield Call("task_retry_many", params, resend_ambiguous=True)
    return {row["id"] for row in rows}


def task_bury_many(
    items: Sequence[Fenced], errors: Sequence[str | None], *, require_expired: bool
) -> Plan[set[uuid.UUID]]:
    """Move leased tasks to the dead letters with their error text; returns the ids moved."""
    params = key_arrays(items)
    params.update(errors=[storable(e) for e in errors], require_expired=require_expired)
    rows = yield Call("task_bury_many", params, resend_ambiguous=True)
    return {row["id"] for row in rows}


def task_release_many(items: Sequence[Fenced]) -> Plan[set[uuid.UUID]]:
    """Hand leased tasks back unstarted (the attempt is not charged); returns the ids released."""
    rows = yield Call("task_release_many", key_arrays(items), resend_ambiguous=True)
    return {row["id"] for row in rows}


def task_extend_many(items: Sequence[Fenced], lease_seconds: float) -> Plan[dict[uuid.UUID, dt.datetime]]:
    """Renew leases to now + ``lease_seconds``; returns the new expiry of each still held."""
    params: dict[str, Any] = key_arrays(items)
    params["lease_seconds"] = lease_seconds
    rows = yield Call("task_extend_many", params, resend_ambiguous=True)
    return {row["id"]: row["lease_expires_at"] for row in rows}


def sweep_turns_take(buckets: Sequence[int], every_seconds: float) -> Plan[list[int]]:
    """Take the sweeping turn of each of ``buckets`` not swept in the last ``every_seconds``;
    returns the buckets taken (each taken by one caller at a time: see sql/common/sweeps.sql)."""
    rows = yield Call("sweep_turns_take", {"buckets": list(buckets), "every_seconds": every_seconds})
    return sorted(row["bucket"] for row in rows)


def task_get(task_id: uuid.UUID) -> Plan[TaskInfo | None]:
    """A task of the tasks table by id (one index descent), or None."""
    row = yield Call("task_get", {"id": task_id}, rows="one")
    return TaskInfo.from_task_row(row) if row else None
