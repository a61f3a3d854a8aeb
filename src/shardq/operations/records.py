"""Plans of the statements over kept records: periodic schedules' slots (:mod:`shardq.maintenance.periodic`)
and dead-lettered tasks."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence

from shardq.errors import DatabaseError
from shardq.models.tasks import MAX_ATTEMPTS_DEFAULT, DeadTask, TaskInfo
from shardq.sql.plan import Call, Plan


def periodic_slot_take(
    name: str, slot: dt.datetime, queue: str, payload: bytes, *, priority: int, max_attempts: int | None
) -> Plan[bool]:
    """Take ``slot`` of schedule ``name`` and enqueue its task into ``queue``, one statement;
    False when the slot was taken already (by another worker, or before)."""
    row = yield Call(
        "periodic_slot_take",
        {
            "name": name,
            "slot": slot,
            "id": uuid.uuid4(),
            "queue": queue,
            "priority": priority,
            "max_attempts": max_attempts,
            "payload": payload,
            "max_attempts_default": MAX_ATTEMPTS_DEFAULT,
        },
        rows="one",
    )
    if row is None:
        raise DatabaseError("statement periodic_slot_take returned no row")
    return bool(row["taken"])


def periodic_last_slots(names: Sequence[str]) -> Plan[dict[str, dt.datetime]]:
    """The latest slot taken of each schedule named (schedules never taken are absent)."""
    rows = yield Call("periodic_last_slots", {"names": list(names)})
    return {row["name"]: row["slot"] for row in rows}


def periodic_slots_prune(keep_seconds: float, limit: int) -> Plan[int]:
    """Delete up to ``limit`` slot rows older than ``keep_seconds``, never a schedule's latest."""
    rows = yield Call("periodic_slots_prune", {"keep_seconds": keep_seconds, "limit": limit})
    return len(rows)


def dead_get(task_id: uuid.UUID) -> Plan[TaskInfo | None]:
    """A dead-lettered task by id (its primary key), or None."""
    row = yield Call("dead_get", {"id": task_id}, rows="one")
    return TaskInfo.from_dead_row(row) if row else None


def dead_list(queue: str, limit: int) -> Plan[list[DeadTask]]:
    rows = yield Call("dead_list", {"queue": queue, "limit": limit})
    return [DeadTask.from_row(row) for row in rows]


def dead_list_after(queue: str, after_at: dt.datetime, after_id: uuid.UUID, limit: int) -> Plan[list[DeadTask]]:
    """The next page of a queue's dead letters after (``after_at``, ``after_id``), keyset order."""
    rows = yield Call("dead_list_after", {"queue": queue, "after_at": after_at, "after_id": after_id, "limit": limit})
    return [DeadTask.from_row(row) for row in rows]


def dead_ids_page(queue: str, after: uuid.UUID, limit: int) -> Plan[list[uuid.UUID]]:
    rows = yield Call("dead_ids_page", {"queue": queue, "after": after, "limit": limit})
    return [row["id"] for row in rows]


def dead_requeue_ids(queue: str, ids: Sequence[uuid.UUID]) -> Plan[set[uuid.UUID]]:
    rows = yield Call("dead_requeue_ids", {"queue": queue, "ids": list(ids)})
    return {row["id"] for row in rows}


def dead_purge_batch(queue: str, limit: int) -> Plan[int]:
    rows = yield Call("dead_purge_batch", {"queue": queue, "limit": limit})
    return len(rows)
