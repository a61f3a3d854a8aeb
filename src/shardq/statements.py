"""One plan per named statement that both clients send (see :mod:`shardq.plans`): the statement's
name, its parameters built from dataclasses, and its rows turned back into values.

:class:`shardq.store.TaskStore` runs these on a sync session; :class:`shardq.AsyncClient` runs the
same plans on an asyncio session, so both send byte-for-byte the same statements and parameters.
The activity counter of enqueues (:class:`EnqueueCounts`) lives here too, for the same reason.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .engine import Engine
from .engine.common import RANKS, task_arrays
from .errors import DatabaseError
from .models import Activity, NewTask, QueueSettings, ShardLayout
from .plans import ENGINE, Call, Plan, UseShardColumn

log = logging.getLogger("shardq.store")



#: Rows of shardq_stats per (queue, minute): concurrent writers pick one at random, so they seldom
#: wait on each other's row lock; readers sum them.
STATS_SLOTS = 8
#: A producer adds its enqueues to the counters at once for a queue it has not counted yet, then at
#: most this often (one small statement instead of an upsert inside every enqueue statement,
#: which made single-row enqueues slower).
ENQUEUE_COUNT_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class CancelledTask:
    id: uuid.UUID
    queue: str
    state: str
    exclusive_key: str | None
    backlogged: bool


# -- layout ------------------------------------------------------------------------------------

def layout() -> Plan[ShardLayout]:
    """Read the bucket layout and point the session's ``{shard_col}`` statements at it."""
    engine: Engine = yield ENGINE
    found: ShardLayout = yield from engine.read_layout()
    yield UseShardColumn(found.shard_column)
    return found


# -- producer ----------------------------------------------------------------------------------

def task_insert_many(queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]) -> Plan[tuple[set[uuid.UUID], bool]]:
    """Insert; returns (ids skipped: a live dedupe key or a busy exclusive key, queue paused for
    enqueue). When the queue is paused nothing was inserted and every id counts as skipped."""
    engine: Engine = yield ENGINE
    arrays = engine.task_arrays(tasks, ids)
    if not any(t.dedupe_key is not None or t.exclusive_key is not None for t in tasks):
        del arrays["dedupe_keys"], arrays["exclusive_keys"]
        row = yield Call("task_insert_many_fresh", {"queue": queue, **arrays}, rows="one")
        return (set(ids), True) if row and row["paused"] else (set(), False)
    rows = yield Call("task_insert_many", {"queue": queue, **arrays})
    if any(row["paused"] for row in rows):
        return set(ids), True
    return {row["id"] for row in rows}, False


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
    rows = yield Call(
        "task_backlog_release", {"queues": [q for q, _ in pairs], "keys": [k for _, k in pairs], **RANKS}
    )
    return {row["id"] for row in rows}


def task_exclusive_keys_by_id(ids: Sequence[uuid.UUID]) -> Plan[dict[uuid.UUID, tuple[str, str]]]:
    rows = yield Call("task_exclusive_keys_by_id", {"ids": list(ids)})
    return {row["id"]: (row["queue"], row["exclusive_key"]) for row in rows}


def task_cancel_many(ids: Sequence[uuid.UUID]) -> Plan[list[CancelledTask]]:
    rows = yield Call("task_cancel_many", {"ids": list(ids)})
    return [CancelledTask(row["id"], row["queue"], row["state"], row["exclusive_key"], row["backlogged"])
            for row in rows]


def queue_notify(queue: str) -> Plan[None]:
    """Wake workers listening for ``queue`` (PostgreSQL only; see :mod:`shardq.notify`)."""
    yield Call("queue_notify", {"queue": queue}, rows="none")


# -- queues ------------------------------------------------------------------------------------

def queue_get(queue: str) -> Plan[QueueSettings | None]:
    row = yield Call("queue_get", {"queue": queue}, rows="one")
    return QueueSettings.from_row(row) if row else None


def queue_list() -> Plan[list[QueueSettings]]:
    rows = yield Call("queue_list")
    return [QueueSettings.from_row(row) for row in rows]


def flow_usage() -> Plan[dict[str, tuple[int, int]]]:
    """(slots held now, slots in all) per queue with a concurrency limit (shardq.flow)."""
    rows = yield Call("flow_usage")
    return {row["queue"]: (row["in_use"], row["slots"]) for row in rows}


# -- introspection -------------------------------------------------------------------------------

def stats_snapshot(*, historical: bool) -> Plan[bool]:
    """Start the stats transaction's snapshot: one consistent, read-only view, or with
    ``historical`` a read slightly in the past where the engine has one. Must be the
    transaction's first statement. Returns whether the snapshot is historical."""
    engine: Engine = yield ENGINE
    return (yield from engine.stats_snapshot(historical))


def stats_now() -> Plan[dict[str, Any]]:
    row = yield Call("stats_now", rows="one")
    assert row is not None
    return row


def stats_window(minutes: int) -> Plan[dict[str, Activity]]:
    """Activity per queue in the current minute and the ``minutes`` full minutes before it."""
    rows = yield Call("stats_window", {"minutes": minutes})
    return {row["queue"]: Activity.from_row(row) for row in rows}


def stats_dead_count(queue: str, cap: int) -> Plan[int]:
    row = yield Call("stats_dead_count", {"queue": queue, "cap": cap}, rows="one")
    return row["dead"] if row else 0


def stats_add_many(slot: int, activity: Mapping[str, Activity]) -> Plan[None]:
    """Add each queue's activity to the current minute's counters in ``slot``."""
    queues = [q for q, a in activity.items() if not a.is_empty()]
    if not queues:
        return
    params: dict[str, Any] = {"slot": slot, "queues": queues}
    for name in Activity.FIELDS:
        params[name] = [getattr(activity[q], name) for q in queues]
    yield Call("stats_add_many", params, rows="none")


def stats_depth(queues: Sequence[str], buckets: Sequence[int], cap: int) -> Plan[list[dict[str, Any]]]:
    """One row per (queue, bucket): ``ready`` (scheduled tasks already due included: they are
    claimable as soon as a consumer passes), ``scheduled``, ``leased`` (whose lease still runs),
    ``expired`` (leased, the lease run out: waiting for a sweep), ``backlog``,
    ``oldest_ready`` (exec_time of the oldest due ready or scheduled task), and
    ``<count>_capped`` flags telling which counts stopped at a limit (the true number is
    higher). Each count reads at most ``cap`` rows (``ready``: twice that); the oldest ready
    task is looked for among the first :data:`shardq.engine.common.STATS_PRIORITIES_MAX` priorities in use."""
    if not queues or not buckets:
        return []
    engine: Engine = yield ENGINE
    return (yield from engine.depth(queues, buckets, cap))


# -- the enqueue counter -------------------------------------------------------------------------

class EnqueueCounts:
    """Tasks enqueued through one producer that the activity counters (``shardq_stats``) do not
    know of yet. They are written at once for a queue not counted before, else at most every
    :data:`ENQUEUE_COUNT_SECONDS` (one statement for all queues): :meth:`note` is a plan that
    writes when due, :meth:`flush` one that writes now. Writing never raises for the counters'
    sake: a failed write keeps the counts for the next one. Safe to share between the coroutines
    of one event loop (counts noted while a write is on its way are kept)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._uncounted: dict[str, int] = {}
        self._counted_queues: set[str] = set()
        self._counted_at = clock()

    def note(self, queue: str, count: int) -> Plan[None]:
        """Note ``count`` tasks enqueued into ``queue``; write the counts if due. Run it outside a
        transaction."""
        if count:
            self._uncounted[queue] = self._uncounted.get(queue, 0) + count
        if not self._uncounted:
            return
        if queue in self._counted_queues and self._clock() - self._counted_at < ENQUEUE_COUNT_SECONDS:
            return
        yield from self.flush()

    def flush(self) -> Plan[bool]:
        """Write the counts held here (one statement). Returns False, keeping them, when the
        database refused."""
        pending = {q: n for q, n in self._uncounted.items() if n}
        self._counted_at = self._clock()
        if not pending:
            return True
        try:
            yield from stats_add_many(random.randrange(STATS_SLOTS), {q: Activity(enqueued=n) for q, n in pending.items()})
        except DatabaseError as exc:
            log.debug("could not record enqueue counts (kept for the next try): %s", exc)
            return False
        self._counted_queues |= set(pending)
        for queue, written in pending.items():
            left = self._uncounted.get(queue, 0) - written
            if left > 0:
                self._uncounted[queue] = left
            else:
                self._uncounted.pop(queue, None)
        return True
