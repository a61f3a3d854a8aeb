"""shardq's vocabulary: frozen dataclasses, named tuples (the per-task records) and enums, no I/O.

Rows become objects only here (``from_row``), so the rest of the library never handles
database tuples.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple, TypedDict

from . import validation
from .errors import LeaseLost

# The stats snapshot's values and the records operators read live in their own modules; they are
# part of this vocabulary too.
from .operator_records import DeadTask, ResizeProgress, ResizeResult, SchemaJob, TaskInfo
from .stats_figures import COUNTS, Accuracy, Activity, BucketDepth, QueueStats, Stats
from .validation import PRIORITY_MAX, PRIORITY_MIN

__all__ = ["COUNTS", "PRIORITY_MAX", "PRIORITY_MIN", "Accuracy", "Activity", "BucketDepth", "DeadTask",
           "QueueStats", "ResizeProgress", "ResizeResult", "SchemaJob", "Stats", "TaskInfo"]


class TaskState(str, Enum):
    """Where a task is in its life. Finished tasks are deleted; failed ones move to ``shardq_dead``."""

    READY = "ready"  # due and claimable, ordered by (priority, exec_time)
    SCHEDULED = "scheduled"  # waiting for exec_time (a delay, or a retry's backoff)
    LEASED = "leased"  # held by a consumer until lease_expires_at
    BACKLOG = "backlog"  # waiting for its exclusive key to be released
    WAITING = "waiting"  # a workflow step waiting for its parents (shardq.workflows), at RANK_BACKLOG


# Ranks beyond every priority keep scheduled and backlogged tasks out of a claim's span
# (see migration 0001). Priorities must stay inside [PRIORITY_MIN, PRIORITY_MAX] (shardq.validation).
RANK_SCHEDULED = 2**63 - 1
RANK_BACKLOG = 2**63 - 2


class TaskKey(NamedTuple):
    """The whole primary key of a task row, as hot-path statements address it.

    ``bucket`` is the PostgreSQL bucket column, or on CockroachDB the bucket the task was claimed
    from (informational there: the key is (state, queue, rank, exec_time, id) and the database
    derives the shard itself).

    A named tuple rather than a frozen dataclass, like :class:`ClaimedTask`: one is built per
    claimed task, and a tuple is built in C (a frozen dataclass pays a Python-level
    ``object.__setattr__`` per field; figures: docs/loadtest.md, "What the hot path was tuned with").
    """

    bucket: int
    queue: str
    rank: int
    exec_time: dt.datetime
    id: uuid.UUID


class ClaimedTask(NamedTuple):
    """A task a consumer holds under a lease. Handlers see it through :class:`shardq.Task`."""

    key: TaskKey
    #: how many times the task has been claimed, this claim included (1-based)
    attempt: int
    max_attempts: int
    payload: bytes
    lease_token: uuid.UUID
    lease_expires_at: dt.datetime
    created_at: dt.datetime
    priority: int = 0
    exclusive_key: str | None = None
    #: the concurrency slot the task runs in, in a queue with a concurrency limit (shardq.flow)
    flow_slot: int | None = None
    #: the workflow the task is a step of (shardq.workflows); its ack releases the step's children
    workflow_id: uuid.UUID | None = None

    @property
    def id(self) -> str:
        return str(self.key.id)

    @property
    def queue(self) -> str:
        return self.key.queue

    @classmethod
    def from_claim_row(cls, row: tuple, queue: str, token: uuid.UUID) -> ClaimedTask:
        """From a ``task_claim_round`` tuple (bucket, rank, exec_time, id, attempts, max_attempts,
        payload, lease_expires_at, created_at, exclusive_key, workflow_id): a claimed task is ready,
        so its priority is its rank. Positional on purpose: this runs once per claimed task."""
        bucket, rank, exec_time, task_id, attempts, max_attempts, payload, expires, created, exclusive, workflow = row
        return _new_tuple(cls, (_new_tuple(TaskKey, (bucket, queue, rank, exec_time, task_id)), attempts,
                                max_attempts, payload, token, expires, created, rank, exclusive, None, workflow))

    @classmethod
    def from_row(cls, row: Mapping[str, Any], token: uuid.UUID) -> ClaimedTask:
        return cls(
            key=TaskKey(row["bucket"], row["queue"], row["rank"], row["exec_time"], row["id"]),
            attempt=row["attempts"],
            max_attempts=row["max_attempts"],
            payload=bytes(row["payload"]),
            lease_token=token,
            lease_expires_at=row["lease_expires_at"],
            created_at=row["created_at"],
            priority=row["priority"],
            exclusive_key=row["exclusive_key"],
            workflow_id=row.get("workflow_id"),
        )


# tuple.__new__ straight from C: the named tuples' generated __new__ is a Python-level call.
_new_tuple = tuple.__new__


class Task:
    """What a handler receives.

    Attributes: ``id`` (str), ``queue``, ``payload`` (bytes), ``attempt`` (1-based),
    ``max_attempts``, ``priority``, ``exclusive_key``, ``created_at``, ``lease_expires_at``. :meth:`extend` renews the lease for
    long work; it raises :class:`shardq.errors.LeaseLost` if the lease already passed to someone
    else.
    """

    __slots__ = ("_extend", "claimed", "lease_expires_at")

    def __init__(self, claimed: ClaimedTask, extend: Callable[[ClaimedTask, float], dt.datetime | None]) -> None:
        self.claimed = claimed
        self._extend = extend
        self.lease_expires_at = claimed.lease_expires_at

    @property
    def id(self) -> str:
        return self.claimed.id

    @property
    def queue(self) -> str:
        return self.claimed.queue

    @property
    def payload(self) -> bytes:
        return self.claimed.payload

    @property
    def attempt(self) -> int:
        return self.claimed.attempt

    @property
    def max_attempts(self) -> int:
        return self.claimed.max_attempts

    @property
    def priority(self) -> int:
        return self.claimed.priority

    @property
    def exclusive_key(self) -> str | None:
        return self.claimed.exclusive_key

    @property
    def created_at(self) -> dt.datetime:
        return self.claimed.created_at

    def extend(self, seconds: float) -> dt.datetime:
        """Renew this task's lease to now + ``seconds`` (server clock; at least 1, as every
        lease). Returns the new expiry."""
        seconds = validation.lease_seconds(seconds, "lease extension")
        expires = self._extend(self.claimed, seconds)
        if expires is None:
            raise LeaseLost(f"task {self.id}: lease lost before it could be extended")
        self.lease_expires_at = expires
        return expires

    def __repr__(self) -> str:
        return f"Task(id={self.id!r}, queue={self.queue!r}, attempt={self.attempt})"


class TaskOptions(TypedDict, total=False):
    """How a task is enqueued, besides its payload: the keyword arguments of every enqueue call
    (``Client.enqueue``, ``AsyncClient.enqueue``, ``Producer.enqueue``, ``AppTask.configure``),
    declared here once. Their defaults are :class:`NewTask`'s, which carries the same fields.

    * ``delay`` (seconds) or ``run_at`` (an aware datetime), not both: when it becomes due
      (neither: now);
    * ``dedupe_key``: nothing is inserted while a task of the queue with this key is live;
    * ``max_attempts``: None takes the queue's;
    * ``priority``: lower runs first (0);
    * ``exclusive_key``: one task of the queue with this key runs at a time (:mod:`shardq.exclusive`);
    * ``dedupe_for`` (seconds, with ``dedupe_key``): nothing is inserted either while a task of the
      queue with this key finished less than this long ago (kept in the queue's history: see
      :mod:`shardq.history`).
    """

    delay: float | None
    run_at: dt.datetime | None
    dedupe_key: str | None
    max_attempts: int | None
    priority: int
    exclusive_key: str | None
    dedupe_for: float | None


@dataclass(frozen=True, slots=True)
class NewTask:
    """One task to enqueue: its payload and the :class:`TaskOptions` with their defaults (the
    fields are the same, in that order; a test holds them together)."""

    payload: bytes | str  # str is sent as UTF-8
    delay: float | None = None
    run_at: dt.datetime | None = None
    dedupe_key: str | None = None
    max_attempts: int | None = None
    priority: int = 0
    exclusive_key: str | None = None
    dedupe_for: float | None = None


@dataclass(frozen=True)
class EnqueueResult:
    """What an enqueue did: the ids it inserted (``backlogged_ids``: those of them that wait in an
    exclusive key's backlog), the dedupe keys that were already live, and how many older backlog
    entries a latest-only queue dropped for the new ones."""

    enqueued_ids: tuple[str, ...]
    duplicate_keys: tuple[str, ...] = ()
    backlogged_ids: tuple[str, ...] = ()
    superseded: int = 0

    @property
    def enqueued(self) -> int:
        return len(self.enqueued_ids)

    @property
    def duplicates(self) -> int:
        return len(self.duplicate_keys)


#: Attempts a task gets when neither it nor its queue says otherwise. The statements that enqueue
#: take it as a parameter (``max_attempts_default``); only migration 0001's column defaults, which
#: are history, repeat it.
MAX_ATTEMPTS_DEFAULT = 25


@dataclass(frozen=True)
class QueueSettings:
    """Per-queue settings from ``shardq_queues``; a queue created by enqueue gets the defaults."""

    name: str
    lease_seconds: float = 30.0
    max_attempts: int = MAX_ATTEMPTS_DEFAULT
    backoff_base: float = 1.0
    backoff_cap: float = 3600.0
    #: share of the backoff drawn at random: 1.0 = full jitter, 0.0 = none
    retry_jitter: float = 1.0
    #: an exclusive key's backlog keeps only the newest entry
    exclusive_latest_only: bool = False
    paused_enqueue: bool = False
    paused_dequeue: bool = False
    #: a task running longer is settled as a failed attempt (None: no limit)
    timeout_seconds: float | None = None
    #: at most this many tasks run at once across all workers (None: no limit; shardq.flow)
    concurrency_limit: int | None = None
    #: at most this many task starts per second across all workers (None: no limit) ...
    rate_limit: int | None = None
    #: ... in bursts of up to this many (None: the rate)
    rate_burst: int | None = None
    #: finished tasks (succeeded, dead, cancelled) are kept this long in the history (0: not kept,
    #: and nothing is written for them; see shardq.history)
    keep_finished_seconds: float = 0.0
    #: while finished tasks are kept, every succeeded task keeps its JSON-encoded return value, as
    #: a task declared with ``result=True`` does (see shardq.history)
    keep_results: bool = False

    @property
    def burst(self) -> int:
        """The rate limit's burst: ``rate_burst``, by default the rate itself."""
        return self.rate_burst if self.rate_burst is not None else (self.rate_limit or 0)

    @property
    def results_kept(self) -> bool:
        """Every succeeded task of this queue keeps its return value: ``keep_results`` while the
        queue keeps finished tasks (the result lives in the history row)."""
        return self.keep_results and self.keep_finished_seconds > 0

    @property
    def limited(self) -> bool:
        """Claims of this queue go through flow control (a concurrency or rate limit is set)."""
        return self.concurrency_limit is not None or self.rate_limit is not None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> QueueSettings:
        return cls(
            name=row["name"],
            lease_seconds=row["lease_seconds"],
            max_attempts=row["max_attempts"],
            backoff_base=row["backoff_base"],
            backoff_cap=row["backoff_cap"],
            retry_jitter=row["retry_jitter"],
            exclusive_latest_only=row["exclusive_latest_only"],
            paused_enqueue=row["paused_enqueue"],
            paused_dequeue=row["paused_dequeue"],
            timeout_seconds=row.get("timeout_seconds"),
            concurrency_limit=row.get("concurrency_limit"),
            rate_limit=row.get("rate_limit"),
            rate_burst=row.get("rate_burst"),
            keep_finished_seconds=row.get("keep_finished_seconds") or 0.0,
            keep_results=bool(row.get("keep_results")),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "lease_seconds": self.lease_seconds,
            "max_attempts": self.max_attempts,
            "backoff_base": self.backoff_base,
            "backoff_cap": self.backoff_cap,
            "retry_jitter": self.retry_jitter,
            "exclusive_latest_only": self.exclusive_latest_only,
            "paused_enqueue": self.paused_enqueue,
            "paused_dequeue": self.paused_dequeue,
            "timeout_seconds": self.timeout_seconds,
            "concurrency_limit": self.concurrency_limit,
            "rate_limit": self.rate_limit,
            "rate_burst": self.rate_burst if self.rate_limit is not None else None,
            "keep_finished_seconds": self.keep_finished_seconds,
            "keep_results": self.keep_results,
        }


@dataclass(frozen=True)
class RateTokens:
    """A rate-limited queue's tokens as read under its lock, with the transaction's clock."""

    tokens: float
    refilled_at: dt.datetime
    now: dt.datetime

    def available(self, rate: int, burst: int) -> float:
        """Tokens available now: what was left, plus ``rate`` per second since, at most ``burst``."""
        elapsed = max(0.0, (self.now - self.refilled_at).total_seconds())
        return min(float(burst), self.tokens + rate * elapsed)


@dataclass(frozen=True)
class ShardLayout:
    """How the tasks table is split into buckets right now.

    ``visit_count`` is how many buckets consumers must walk: during a shrink on
    PostgreSQL it stays at the old, larger count until the rows of the dropped buckets
    have moved. ``shard_column`` is CockroachDB's hidden shard column (None on PostgreSQL,
    where the bucket is the ordinary ``bucket`` column), ``table_id`` CockroachDB's descriptor id
    of ``shardq_tasks`` (to find its schema-change jobs).
    """

    bucket_count: int
    shard_column: str | None = None
    visit_count: int = 0
    resizing_from: int | None = None
    table_id: int | None = None

    def __post_init__(self) -> None:
        if self.visit_count == 0:
            object.__setattr__(self, "visit_count", self.bucket_count)
