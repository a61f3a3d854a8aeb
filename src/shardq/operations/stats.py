"""Plans of the statistics statements: the operator snapshot's reads (its depth and snapshot are
operations of :mod:`shardq.engine`), the ``shardq_stats`` activity counters, and the counter of
enqueues a producer has not written yet (:class:`EnqueueCounts`)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shardq.engine.base import Engine
from shardq.errors import DatabaseError
from shardq.models.stats import Activity
from shardq.sql.plan import ENGINE, Call, Plan

log = logging.getLogger("shardq.sessions.store")

#: Rows of shardq_stats per (queue, minute): concurrent writers pick one at random, so they seldom
#: wait on each other's row lock; readers sum them.
ACTIVITY_ROWS_PER_MINUTE = 8
#: A producer adds its enqueues to the counters at once for a queue it has not counted yet, then at
#: most this often (one small statement instead of an upsert inside every enqueue statement,
#: which made single-row enqueues slower).
ENQUEUE_COUNT_SECONDS = 1.0


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


def stats_add_many(row: int, activity: Mapping[str, Activity]) -> Plan[None]:
    """Add each queue's activity to the current minute's counters in writer row ``row`` (the
    ``slot`` column of ``shardq_stats``, one of :data:`ACTIVITY_ROWS_PER_MINUTE`)."""
    queues = [q for q, a in activity.items() if not a.is_empty()]
    if not queues:
        return
    params: dict[str, Any] = {"slot": row, "queues": queues}
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


def stats_prune(keep_seconds: float, limit: int) -> Plan[int]:
    """Delete up to ``limit`` counter rows older than ``keep_seconds``; returns how many."""
    rows = yield Call("stats_prune", {"keep_seconds": keep_seconds, "limit": limit})
    return len(rows)


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
            yield from stats_add_many(
                random.randrange(ACTIVITY_ROWS_PER_MINUTE), {q: Activity(enqueued=n) for q, n in pending.items()}
            )
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
