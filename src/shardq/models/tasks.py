"""shardq's vocabulary: frozen dataclasses, named tuples (the per-task records) and enums, no I/O.

Rows become objects only here (``from_row``), so the rest of the library never handles
database tuples."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple, TypedDict

from shardq import validation
from shardq.errors import LeaseLost

# The stats snapshot's values and the records operators read live in their own modules; they are
# part of this vocabulary too.


class TaskState(StrEnum):
    """The one vocabulary of task states: every word a task's state is stored or shown as.

    A :class:`~enum.StrEnum` (a ``str, Enum`` whose ``str()`` and ``format()`` are the value), so
    each member compares equal to, hashes like and serialises as its word: rows read from the
    database (plain strings) compare equal to the members, and JSON, CLI text and SQL values are
    the words themselves. Each view shows a sub-vocabulary, listed below the class.

    *Stored* in ``shardq_tasks.state`` (a live task's row; :data:`LIVE_STATES`):
    """

    READY = "ready"  # due and claimable, ordered by (priority, exec_time)
    SCHEDULED = "scheduled"  # waiting for exec_time (a delay, or a retry's backoff); not the backlog
    LEASED = "leased"  # held by a worker under a lease until lease_expires_at (started or not)
    BACKLOG = "backlog"  # waiting for its exclusive key (shardq.lifecycle.exclusive), at RANK_BACKLOG
    WAITING = "waiting"  # a workflow step waiting for its parents (shardq.workflows.steps), at RANK_BACKLOG
    # *Finished* (FINISHED_STATES): in shardq_history.state and shardq_workflow_steps.state; a dead
    # task's row is in shardq_dead.
    SUCCEEDED = "succeeded"  # its handler returned (acked)
    DEAD = "dead"  # its last attempt failed (dead-lettered) or its lease ran out with none left
    CANCELLED = "cancelled"  # deleted by id before it finished
    # *Shown*, never stored: words a view derives from a stored state.
    RUNNING = "running"  # leased, as a status, a step or the browser shows it (see below)
    RETRYING = "retrying"  # status: scheduled again after a failed attempt (it has an error text)
    EXPIRED = "expired"  # leased with its lease run out (the worker is likely gone; a sweep puts it back)
    FAILED = "failed"  # an attempt's outcome (AttemptRecord); a workflow's state when a step died
    UNKNOWN = "unknown"  # status: no such id, or finished past what its queue keeps


#: the states a live task's row holds (``shardq_tasks.state``)
LIVE_STATES = (TaskState.READY, TaskState.SCHEDULED, TaskState.LEASED, TaskState.BACKLOG, TaskState.WAITING)


#: the states of a finished task (history rows, workflow steps, ``shardq history --state``)
FINISHED_STATES = (TaskState.SUCCEEDED, TaskState.DEAD, TaskState.CANCELLED)


#: what a status reports (:class:`shardq.models.history.TaskStatus`): ``running`` is leased (expired
#: leases too); ``scheduled`` is waiting for its time *or* its key (the backlog and a waiting
#: workflow step are folded in: the status's caller cannot act on the difference); ``retrying``
#: is scheduled after a failed attempt; ``waiting`` is a durable task parked on ``ctx.wait_for``
#: until its signal or timeout (docs/durable.md)
STATUS_STATES = (
    TaskState.SCHEDULED,
    TaskState.READY,
    TaskState.RUNNING,
    TaskState.RETRYING,
    TaskState.WAITING,
    *FINISHED_STATES,
    TaskState.UNKNOWN,
)


#: a workflow step's states (:class:`shardq.workflows.steps.StepStatus`), in the order a step moves
#: through them: ``running`` is leased; a step whose attempt failed is ``ready`` again
STEP_STATES = (TaskState.WAITING, TaskState.READY, TaskState.RUNNING, *FINISHED_STATES)


#: the states a queue's live tasks are browsed by (:mod:`shardq.admin.browse`): the browser splits
#: leased into ``running`` (lease live) and ``expired`` (lease run out); ``scheduled`` is the
#: stored state (the backlog has its own list)
BROWSE_STATES = (TaskState.READY, TaskState.SCHEDULED, TaskState.RUNNING, TaskState.EXPIRED, TaskState.BACKLOG)


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
    #: the concurrency slot the task runs in, in a queue with a concurrency limit (shardq.lifecycle.flow)
    flow_slot: int | None = None
    #: the workflow the task is a step of (shardq.workflows.steps); its ack releases the step's children
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
        return _new_tuple(
            cls,
            (
                _new_tuple(TaskKey, (bucket, queue, rank, exec_time, task_id)),
                attempts,
                max_attempts,
                payload,
                token,
                expires,
                created,
                rank,
                exclusive,
                None,
                workflow,
            ),
        )

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
    * ``exclusive_key``: one task of the queue with this key runs at a time (:mod:`shardq.lifecycle.exclusive`);
    * ``dedupe_for`` (seconds, with ``dedupe_key``): nothing is inserted either while a task of the
      queue with this key finished less than this long ago (kept in the queue's history: see
      :mod:`shardq.lifecycle.history`);
    * ``concurrency_key``: at most the queue's limit for this key run at a time, fleet-wide
      (:mod:`shardq.lifecycle.key_limits`; no limit set for it: no effect);
    * ``debounce`` (seconds, with ``dedupe_key``): the key's task that has not started takes this
      payload and waits until the key has been quiet this long (:mod:`shardq.lifecycle.debounce`);
    * ``throttle`` (seconds, with ``dedupe_key``): the first task of the key in a window this long
      is enqueued, the others are dropped.
    """

    delay: float | None
    run_at: dt.datetime | None
    dedupe_key: str | None
    max_attempts: int | None
    priority: int
    exclusive_key: str | None
    dedupe_for: float | None
    concurrency_key: str | None
    debounce: float | None
    throttle: float | None


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
    concurrency_key: str | None = None
    debounce: float | None = None
    throttle: float | None = None


@dataclass(frozen=True)
class EnqueueResult:
    """What an enqueue did: the ids it inserted (``backlogged_ids``: those of them that wait in an
    exclusive key's backlog), the dedupe keys that were already live, how many older backlog
    entries a latest-only queue dropped for the new ones, and what debounce and throttle did."""

    enqueued_ids: tuple[str, ...]
    duplicate_keys: tuple[str, ...] = ()
    backlogged_ids: tuple[str, ...] = ()
    superseded: int = 0
    #: ids of tasks whose payload a debounced enqueue replaced (they wait again), one per such call
    debounced_ids: tuple[str, ...] = ()
    #: keys whose task a throttle dropped (its window was open), one per dropped call
    throttled_keys: tuple[str, ...] = ()

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
class DeadTask:
    """A task in ``shardq_dead``."""

    id: str
    queue: str
    payload: bytes
    attempts: int
    last_error: str | None
    died_at: dt.datetime
    created_at: dt.datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DeadTask:
        return cls(
            id=str(row["id"]),
            queue=row["queue"],
            payload=bytes(row["payload"]),
            attempts=row["attempts"],
            last_error=row["last_error"],
            died_at=row["died_at"],
            created_at=row["created_at"],
        )


@dataclass(frozen=True)
class TaskInfo:
    """One task as an operator inspects it: from ``shardq_tasks`` (``state`` ready, scheduled,
    leased or backlog) or from ``shardq_dead`` (``state`` dead, with ``died_at``). Fields a state
    does not have are None (a dead task has no lease nor run time; only a leased task has a lease
    expiry). ``attempts`` counts attempts started so far."""

    id: str
    queue: str
    state: str
    payload: bytes
    attempts: int
    max_attempts: int
    created_at: dt.datetime
    priority: int = 0
    exclusive_key: str | None = None
    dedupe_key: str | None = None
    exec_time: dt.datetime | None = None
    lease_expires_at: dt.datetime | None = None
    last_error: str | None = None
    died_at: dt.datetime | None = None

    @classmethod
    def from_task_row(cls, row: Mapping[str, Any]) -> TaskInfo:
        return cls(
            id=str(row["id"]),
            queue=row["queue"],
            state=row["state"],
            payload=bytes(row["payload"]),
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
            created_at=row["created_at"],
            priority=row["priority"],
            exclusive_key=row["exclusive_key"],
            dedupe_key=row["dedupe_key"],
            exec_time=row["exec_time"],
            lease_expires_at=row["lease_expires_at"] if row["state"] == TaskState.LEASED else None,
            last_error=row["last_error"],
        )

    @classmethod
    def from_dead_row(cls, row: Mapping[str, Any]) -> TaskInfo:
        return cls(
            id=str(row["id"]),
            queue=row["queue"],
            state=TaskState.DEAD,
            payload=bytes(row["payload"]),
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
            created_at=row["created_at"],
            priority=row["priority"],
            exclusive_key=row["exclusive_key"],
            dedupe_key=row["dedupe_key"],
            last_error=row["last_error"],
            died_at=row["died_at"],
        )
