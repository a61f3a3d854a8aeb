"""What ``shardq stats`` reports, as values: per-queue activity counters, bounded depth counts
with their accuracy, and the snapshot of every queue (no I/O; :mod:`shardq.admin.stats` reads them)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from shardq.models.tasks import TaskState


@dataclass
class Activity:
    """What happened to one queue over some span: the rows of ``shardq_stats`` summed, or what a
    writer (worker, reaper) has gathered since its last flush.

    ``completed`` tasks left the queue (acked or dead); ``failures`` are attempts that did not
    succeed (retried by a worker, returned by the reaper after their lease expired, or
    dead-lettered). ``capacity_seconds`` is handler-thread time workers offered the queue (a
    worker serving several queues offers its threads to each), so ``capacity_seconds / span`` is
    the number of handler threads serving it.
    """

    enqueued: int = 0
    acked: int = 0
    retried: int = 0
    expired: int = 0
    dead: int = 0
    handled: int = 0
    handler_seconds: float = 0.0
    capacity_seconds: float = 0.0
    #: attempts that ran past their execution timeout (also counted in ``retried`` or ``dead``)
    timeouts: int = 0
    #: claims a flow limit (concurrency or rate) refused
    throttled: int = 0
    #: first attempts started, and the seconds they waited from due (enqueue, unless delayed) to start
    first_starts: int = 0
    start_wait_seconds: float = 0.0
    #: tasks acked, and the seconds from their enqueue to their ack (lead time), summed
    lead_acks: int = 0
    lead_seconds: float = 0.0

    FIELDS = (
        "enqueued",
        "acked",
        "retried",
        "expired",
        "dead",
        "handled",
        "handler_seconds",
        "capacity_seconds",
        "timeouts",
        "throttled",
        "first_starts",
        "start_wait_seconds",
        "lead_acks",
        "lead_seconds",
    )

    @property
    def completed(self) -> int:
        return self.acked + self.dead

    @property
    def failures(self) -> int:
        return self.retried + self.expired + self.dead

    def is_empty(self) -> bool:
        return not any(getattr(self, name) for name in self.FIELDS)

    def add(self, other: Activity) -> None:
        for name in self.FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Activity:
        return cls(**{name: row[name] or 0 for name in cls.FIELDS})


class Accuracy(str, Enum):
    """How far a count can be trusted."""

    EXACT = "exact"  # every matching row was counted (as of the snapshot)
    AT_LEAST = "at_least"  # some bucket reached the per-bucket cap: the true count is higher
    ESTIMATE = "estimate"  # only a sample of buckets was counted and the sum scaled up


#: the depth counts of a queue, as named in :class:`QueueStats` and the stats JSON: stored states
#: (:class:`shardq.models.tasks.TaskState`), except that ``leased`` counts only the leases still
#: running and ``expired`` the ones run out (the browser's ``running`` and ``expired``), and
#: ``dead`` counts the dead letters
COUNTS = (
    TaskState.READY,
    TaskState.SCHEDULED,
    TaskState.LEASED,
    TaskState.EXPIRED,
    TaskState.BACKLOG,
    TaskState.WAITING,
    TaskState.DEAD,
)


@dataclass(frozen=True)
class BucketDepth:
    """Tasks of one queue in one bucket (each count capped at the per-bucket cap)."""

    ready: int = 0
    scheduled: int = 0
    #: leased tasks whose lease still runs (being worked on)
    leased: int = 0
    backlog: int = 0
    #: leased tasks whose lease has run out (their worker is likely gone; a sweep puts them back)
    expired: int = 0
    #: workflow steps waiting for their parents (shardq.workflows.steps)
    waiting: int = 0


@dataclass(frozen=True)
class QueueStats:
    """One queue's depth, lag, rates and lead time.

    Counts are as of the snapshot; see ``accuracy`` for which are exact. Rates are per second,
    averaged over the stats window (idle time included). ``None`` means "cannot be known from what
    was recorded" (no completions in the window, no handler timings, no workers)."""

    ready: int = 0
    scheduled: int = 0
    #: tasks being worked on: leased, the lease still running
    leased: int = 0
    dead: int = 0
    oldest_ready_age_s: float | None = None
    #: tasks waiting in an exclusive key's backlog for the key's active task to finish
    backlog: int = 0
    accuracy: Mapping[str, Accuracy] = field(default_factory=dict)
    activity: Activity = field(default_factory=Activity)
    window_s: float = 0.0
    per_bucket: Mapping[int, BucketDepth] = field(default_factory=dict)
    #: flow control (shardq.lifecycle.flow): the queue's limits, and its concurrency slots held now
    concurrency_limit: int | None = None
    slots_in_use: int | None = None
    rate_limit: int | None = None
    #: leased tasks whose lease has run out: not running any more (the worker likely crashed),
    #: waiting for a worker's sweep or ``shardq reap`` to put them back
    expired: int = 0
    #: workflow steps waiting for their parents (shardq.workflows.steps): not due, not in any backlog;
    #: their last parent's ack makes them ready
    waiting: int = 0

    def accuracy_of(self, count: str) -> Accuracy:
        return self.accuracy.get(count, Accuracy.EXACT)

    def _rate(self, value: float) -> float:
        return value / self.window_s if self.window_s > 0 else 0.0

    @property
    def enqueue_rate(self) -> float:
        return self._rate(self.activity.enqueued)

    @property
    def completion_rate(self) -> float:
        """Tasks leaving the queue per second (acked or dead-lettered)."""
        return self._rate(self.activity.completed)

    @property
    def failure_rate(self) -> float:
        """Failed attempts per second (retried, lease expired, or dead-lettered)."""
        return self._rate(self.activity.failures)

    @property
    def failure_ratio(self) -> float | None:
        """Share of finished attempts that failed, or None when none finished in the window."""
        attempts = self.activity.acked + self.activity.failures
        return self.activity.failures / attempts if attempts else None

    @property
    def mean_handler_s(self) -> float | None:
        a = self.activity
        return a.handler_seconds / a.handled if a.handled else None

    @property
    def handler_threads(self) -> float | None:
        """Handler threads that served this queue on average over the window (None: no worker)."""
        threads = self._rate(self.activity.capacity_seconds)
        return threads if threads > 0 else None

    @property
    def utilization(self) -> float | None:
        """Share of the offered handler time spent in handlers (near 1: adding workers helps)."""
        a = self.activity
        return min(1.0, a.handler_seconds / a.capacity_seconds) if a.capacity_seconds > 0 else None

    @property
    def due_depth(self) -> int:
        """Tasks a task enqueued now waits behind: due ready ones, those being worked on and those
        whose lease expired (not the backlog: those wait for their exclusive key, not for the
        queue)."""
        return self.ready + self.leased + self.expired

    @property
    def lead_time_s(self) -> float | None:
        """:attr:`due_depth` divided by the recent completion rate: how long until what is due now
        is done, if the queue keeps completing tasks as fast as it did over the window."""
        if self.due_depth == 0:
            return 0.0
        rate = self.completion_rate
        return self.due_depth / rate if rate > 0 else None

    @property
    def lead_time_by_duration_s(self) -> float | None:
        """:attr:`due_depth` times the mean handler duration, spread over the handler threads that served
        the queue: the drain time if every thread worked on this queue without pause. Differs
        from :attr:`lead_time_s` when workers idle (poll gaps, other queues) or are saturated."""
        if self.due_depth == 0:
            return 0.0
        mean, threads = self.mean_handler_s, self.handler_threads
        if mean is None or threads is None:
            return None
        return self.due_depth * mean / threads


@dataclass(frozen=True)
class Stats:
    """A stats snapshot of every queue. ``as_json`` keeps the contract keys (``buckets``, and per
    queue ``ready``, ``scheduled``, ``leased``, ``dead``, ``oldest_ready_age_s``, ``backlog``) and
    adds more beside them."""

    buckets: int
    queues: dict[str, QueueStats] = field(default_factory=dict)
    as_of: dt.datetime | None = None
    #: the engine's name ("postgresql" or "cockroachdb"): a public field (and JSON key) named before
    #: "engine name" was the word (docs/glossary.md, "engine")
    dialect: str | None = None
    follower_read: bool = False
    bucket_cap: int | None = None
    buckets_counted: tuple[int, ...] = ()
    window_s: float = 0.0

    def as_json(self, *, per_bucket: bool = False) -> dict[str, Any]:
        def rounded(value: float | None, digits: int = 3) -> float | None:
            return None if value is None else round(value, digits)

        queues = {}
        for name, q in sorted(self.queues.items()):
            entry: dict[str, Any] = {
                "ready": q.ready,
                "scheduled": q.scheduled,
                "leased": q.leased,
                "expired": q.expired,
                "dead": q.dead,
                "oldest_ready_age_s": q.oldest_ready_age_s,
                "backlog": q.backlog,
                "waiting": q.waiting,
                "accuracy": {k: q.accuracy_of(k).value for k in COUNTS},
                "enqueue_rate": rounded(q.enqueue_rate),
                "completion_rate": rounded(q.completion_rate),
                "failure_rate": rounded(q.failure_rate),
                "failure_ratio": rounded(q.failure_ratio, 4),
                "mean_handler_s": rounded(q.mean_handler_s, 6),
                "handler_threads": rounded(q.handler_threads, 2),
                "utilization": rounded(q.utilization, 3),
                "lead_time_s": rounded(q.lead_time_s, 1),
                "lead_time_by_duration_s": rounded(q.lead_time_by_duration_s, 1),
                "window": {k: getattr(q.activity, k) for k in Activity.FIELDS},
            }
            if q.concurrency_limit is not None:
                entry["concurrency_limit"] = q.concurrency_limit
                entry["slots_in_use"] = q.slots_in_use
            if q.rate_limit is not None:
                entry["rate_limit"] = q.rate_limit
            if per_bucket:
                entry["per_bucket"] = {
                    str(b): {
                        "ready": d.ready,
                        "scheduled": d.scheduled,
                        "leased": d.leased,
                        "expired": d.expired,
                        "backlog": d.backlog,
                        "waiting": d.waiting,
                    }
                    for b, d in sorted(q.per_bucket.items())
                }
            queues[name] = entry
        return {
            "buckets": self.buckets,
            "queues": queues,
            "as_of": self.as_of.isoformat() if self.as_of else None,
            "dialect": self.dialect,
            "follower_read": self.follower_read,
            "bucket_cap": self.bucket_cap,
            "buckets_counted": len(self.buckets_counted),
            "window_s": round(self.window_s, 1),
        }
