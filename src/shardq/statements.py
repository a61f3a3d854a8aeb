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
from .errors import DatabaseError
from .models import MAX_ATTEMPTS_DEFAULT, RANK_BACKLOG, RANK_SCHEDULED, Activity, NewTask, QueueSettings, ShardLayout
from .plans import ENGINE, Call, Plan, UseShardColumn

log = logging.getLogger("shardq.store")

_RANKS: dict[str, Any] = {"scheduled_rank": RANK_SCHEDULED, "backlog_rank": RANK_BACKLOG}

#: Rows of shardq_stats per (queue, minute): concurrent writers pick one at random, so they seldom
#: wait on each other's row lock; readers sum them.
STATS_SLOTS = 8
#: A producer adds its enqueues to the counters at once for a queue it has not counted yet, then at
#: most this often (one small statement; an upsert inside every enqueue statement slowed single-row
#: enqueues: docs/introspection.md, "What the hooks cost the hot path").
ENQUEUE_COUNT_SECONDS = 1.0
#: The oldest ready task of a (queue, bucket) is looked for among this many priorities (one index
#: descent each); with more priorities in use in one bucket its age is a lower bound.
STATS_PRIORITIES_MAX = 32


@dataclass(frozen=True, slots=True)
class CancelledTask:
    id: uuid.UUID
    queue: str
    state: str
    exclusive_key: str | None
    backlogged: bool


def _task_arrays(tasks: Sequence[NewTask], ids: Sequence[uuid.UUID], *, compact: bool = False) -> dict[str, Any]:
    """The parallel arrays of the task_insert_* statements. With ``compact`` (PostgreSQL), an
    optional column no task sets is sent as NULL instead of an array of defaults: multi-argument
    unnest pads it with NULLs, and most batches then carry just ids and payloads."""
    arrays: dict[str, list | None] = {
        "ids": list(ids),
        "payloads": [t.payload for t in tasks],
        "delays": [t.delay for t in tasks],
        "run_ats": [t.run_at for t in tasks],
        "max_attempts": [t.max_attempts for t in tasks],
        "dedupe_keys": [t.dedupe_key for t in tasks],
        "priorities": [t.priority for t in tasks],
        "exclusive_keys": [t.exclusive_key for t in tasks],
    }
    if compact:
        for name, default in _OPTIONAL_DEFAULTS.items():
            if not any(value != default for value in arrays[name] or ()):
                arrays[name] = None
    return {**arrays, **_RANKS, "max_attempts_default": MAX_ATTEMPTS_DEFAULT}


# Optional task columns and the value that means "not set" (what the statements' coalesce supplies).
_OPTIONAL_DEFAULTS: dict[str, Any] = {"delays": None, "run_ats": None, "max_attempts": None, "dedupe_keys": None,
                      "priorities": 0, "exclusive_keys": None}


def _depth_row(queue: str, bucket: int, cap: int, *, ready: int, due_scheduled: int, scheduled: int,
               leased: int, expired: int, leased_capped: bool, backlog: int, oldest: list) -> dict[str, Any]:
    """``leased`` counts every leased task; the row's ``leased`` is those whose lease still runs,
    ``expired`` the others."""
    known = [t for t in oldest if t is not None]
    return {
        "queue": queue, "bucket": bucket,
        "ready": ready + due_scheduled, "scheduled": scheduled, "leased": max(0, leased - expired),
        "expired": expired, "backlog": backlog,
        "oldest_ready": min(known) if known else None,
        "ready_capped": ready >= cap or due_scheduled >= cap, "scheduled_capped": scheduled >= cap,
        "leased_capped": leased_capped, "expired_capped": leased_capped, "backlog_capped": backlog >= cap,
    }


# -- layout ------------------------------------------------------------------------------------

def layout() -> Plan[ShardLayout]:
    """Read the bucket layout and point the session's ``{shard_col}`` statements at it."""
    engine: Engine = yield ENGINE
    found: ShardLayout = yield from engine.layout_plan()
    yield UseShardColumn(found.shard_column)
    return found


# -- producer ----------------------------------------------------------------------------------

def task_insert_many(queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]) -> Plan[tuple[set[uuid.UUID], bool]]:
    """Insert; returns (ids skipped: a live dedupe key or a busy exclusive key, queue paused for
    enqueue). When the queue is paused nothing was inserted and every id counts as skipped."""
    engine: Engine = yield ENGINE
    arrays = _task_arrays(tasks, ids, compact=engine.accepts_null_arrays)
    if not any(t.dedupe_key is not None or t.exclusive_key is not None for t in tasks):
        del arrays["dedupe_keys"], arrays["exclusive_keys"]
        row = yield Call("task_insert_many_fresh", {"queue": queue, **arrays}, rows="one")
        return (set(ids), True) if row and row["paused"] else (set(), False)
    rows = yield Call("task_insert_many", {"queue": queue, **arrays})
    if any(row["paused"] for row in rows):
        return set(ids), True
    return {row["id"] for row in rows}, False


def task_insert_backlog_many(queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]) -> Plan[set[uuid.UUID]]:
    rows = yield Call("task_insert_backlog_many", {"queue": queue, **_task_arrays(tasks, ids)})
    return {row["id"] for row in rows}


def task_backlog_supersede(queue: str, keys: Sequence[str], keep: Sequence[uuid.UUID]) -> Plan[int]:
    rows = yield Call("task_backlog_supersede", {"queue": queue, "keys": list(keys), "keep": list(keep)})
    return len(rows)


def exclusive_keys_lock(pairs: Sequence[tuple[str, str]]) -> Plan[None]:
    """Take the per-key locks (PostgreSQL; a no-op statement on CockroachDB) for this transaction."""
    yield Call("exclusive_keys_lock", {"queues": [q for q, _ in pairs], "keys": [k for _, k in pairs]})


def task_backlog_release(pairs: Sequence[tuple[str, str]]) -> Plan[set[uuid.UUID]]:
    rows = yield Call(
        "task_backlog_release", {"queues": [q for q, _ in pairs], "keys": [k for _, k in pairs], **_RANKS}
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

def stats_snapshot(*, historical: bool) -> Plan[None]:
    """Start the stats transaction's snapshot: one consistent, read-only view (PostgreSQL), or
    on CockroachDB with ``historical`` a follower read. Must be the transaction's first
    statement."""
    engine: Engine = yield ENGINE
    if historical and engine.historical_reads:
        yield Call("stats_snapshot_historical", rows="none")
    else:
        yield Call("stats_snapshot_begin", rows="none")


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
    task is looked for among the first :data:`STATS_PRIORITIES_MAX` priorities in use."""
    if not queues or not buckets:
        return []
    engine: Engine = yield ENGINE
    if engine.counts_depth_in_one_statement:
        return (yield from _stats_depth_postgresql(queues, buckets, cap))
    # CockroachDB: one statement per (queue, bucket), each a handful of capped single-shard
    # spans with bound values (no correlated subquery for the optimizer to get wrong), and one
    # short scan per priority in use for the oldest ready task.
    out = []
    for queue in queues:
        for bucket in buckets:
            row = yield Call("stats_depth_one", {"queue": queue, "bucket": bucket, "cap": cap, **_RANKS}, rows="one")
            assert row is not None
            heads = []
            after = -(2**63)
            for _ in range(STATS_PRIORITIES_MAX):
                head = yield Call("stats_ready_head_after", {"queue": queue, "bucket": bucket, "after": after},
                                  rows="one")
                if head is None:
                    break
                heads.append(head["exec_time"])
                after = head["rank"]
            out.append(_depth_row(
                queue, bucket, cap, ready=row["ready"], due_scheduled=row["due_scheduled"],
                scheduled=row["scheduled"], leased=row["leased"], expired=row["expired"],
                leased_capped=row["leased"] >= cap,
                backlog=row["backlog"], oldest=[*heads, row["oldest_due_scheduled"]],
            ))
    return out


def _stats_depth_postgresql(queues: Sequence[str], buckets: Sequence[int], cap: int) -> Plan[list[dict[str, Any]]]:
    # Leased tasks through the lease records; the active span minus those is the ready ones.
    limit = cap * len(buckets)
    leased_rows = yield Call("stats_leased_by_bucket", {"buckets": list(buckets), "limit": limit})
    leased = {(row["queue"], int(row["bucket"])): row["leased"] for row in leased_rows}
    expired = {(row["queue"], int(row["bucket"])): row["expired"] for row in leased_rows}
    leased_capped = sum(leased.values()) >= limit
    rows = yield Call(
        "stats_depth_many",
        {"queues": list(queues), "buckets": list(buckets), "cap": cap, "rank_cap": STATS_PRIORITIES_MAX, **_RANKS},
    )
    out = []
    for row in rows:
        key = (row["queue"], int(row["bucket"]))
        n_leased = leased.get(key, 0)
        depth = _depth_row(
            row["queue"], int(row["bucket"]), cap, ready=max(0, row["active"] - n_leased),
            due_scheduled=row["due_scheduled"], scheduled=row["scheduled"], leased=n_leased,
            expired=expired.get(key, 0),
            leased_capped=leased_capped, backlog=row["backlog"],
            oldest=[row["oldest_ready"], row["oldest_due_scheduled"]],
        )
        depth["ready_capped"] = row["active"] >= cap or row["due_scheduled"] >= cap
        out.append(depth)
    return out


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
