"""The task lifecycle's vocabulary: what is written when a task finishes or fails an attempt
(:class:`Finished`, :class:`FailedAttempt`) and what a caller reads back (:class:`TaskStatus`,
:class:`AttemptRecord`, :class:`FinishedTask`). No I/O: rows become objects here.

States a :class:`TaskStatus` reports (``state``, :data:`shardq.models.tasks.STATUS_STATES`,
members of :class:`shardq.models.tasks.TaskState`):

* ``scheduled`` — waiting for its time (a delay, or its exclusive key's backlog);
* ``ready`` — due, waiting for a worker;
* ``running`` — leased by a worker, its handler started or not (``attempt`` is the attempt);
* ``retrying`` — a failed attempt put it back; it runs again at ``run_at``;
* ``succeeded``, ``dead``, ``cancelled`` — finished (``succeeded`` and ``cancelled`` only while
  its queue keeps finished tasks; ``dead`` also from the dead letters);
* ``unknown`` — no such id, or finished in a queue that keeps nothing, or past its retention."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from shardq.errors import ResultNotStorable
from shardq.models.tasks import FINISHED_STATES

#: the largest JSON text of a result kept (bytes of UTF-8); a larger one fails its attempt
RESULT_MAX_BYTES = 256 * 1024


_RESULT_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)


class KeptResult(NamedTuple):
    """A handler's return value encoded for the history: what a task declared with
    ``result=True`` hands the worker in place of the value."""

    text: str


def encode_result(value: Any) -> KeptResult:
    """The JSON text of a task's return value; :class:`shardq.errors.ResultNotStorable` (one
    line naming the type, or the size) when it cannot be kept."""
    try:
        text = _RESULT_ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise ResultNotStorable(
            f"the task's result cannot be kept: {type(value).__name__} is not JSON-encodable "
            f"({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})"
        ) from None
    size = len(text.encode())
    if size > RESULT_MAX_BYTES:
        raise ResultNotStorable(
            f"the task's result cannot be kept: {size:,} bytes of JSON, over the limit of {RESULT_MAX_BYTES:,}"
        )
    return KeptResult(text)


def keeping_result(call: Callable[[], Any], is_async: bool) -> Callable[[], Any]:
    """``call`` returning its value encoded (:class:`KeptResult`), which
    the worker hands to the settler; encoding in the handler's own call makes a value that cannot
    be kept fail the attempt like any handler error."""
    if is_async:

        async def encoded_async() -> KeptResult:
            return encode_result(await call())

        return encoded_async

    def encoded() -> KeptResult:
        return encode_result(call())

    return encoded


@dataclass(slots=True)
class Finished:
    """One task that just finished, as the history records it (the final attempt's row)."""

    id: uuid.UUID
    queue: str
    state: str
    task: str | None
    created_at: dt.datetime
    attempts: int
    run_seconds: float | None = None
    error: str | None = None
    #: the JSON text of the task's return value (tasks declared with result=True)
    result: str | None = None
    dedupe_key: str | None = None


class SucceededColumns(NamedTuple):
    """The history columns of acked tasks, one list per column in the order of their claims'
    keys (:class:`shardq.models.leases.WholeClaim`), as the whole-claim kept ack unnests them beside the
    ids: built straight from the outcomes, with no per-task record or lookup by id (the ack path
    of every kept task; figures: docs/lifecycle.md, "What a kept ack costs")."""

    tasks: list[str | None]
    run_seconds: list[float | None]
    results: list[str | None]


@dataclass(slots=True)
class FailedAttempt:
    """One failed attempt that was put back to retry."""

    id: uuid.UUID
    queue: str
    attempt: int
    run_seconds: float | None
    error: str | None


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt as a status shows it: its number, when it ended, how long it ran (None when
    unknown: a lease that ran out), its outcome (``failed``, or the final state) and error text."""

    attempt: int
    ended_at: dt.datetime | None
    run_seconds: float | None
    outcome: str
    error: str | None

    @property
    def started_at(self) -> dt.datetime | None:
        if self.ended_at is None or self.run_seconds is None:
            return None
        return self.ended_at - dt.timedelta(seconds=self.run_seconds)

    def as_json(self) -> dict[str, Any]:
        started = self.started_at
        return {
            "attempt": self.attempt,
            "started_at": started.isoformat() if started else None,
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            "run_seconds": self.run_seconds,
            "outcome": self.outcome,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class FinishedTask:
    """One row of a queue's history (``shardq history``)."""

    id: str
    queue: str
    state: str
    task: str | None
    created_at: dt.datetime
    finished_at: dt.datetime
    attempts: int
    run_seconds: float | None
    last_error: str | None
    result: str | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> FinishedTask:
        return cls(
            str(row["id"]),
            row["queue"],
            row["state"],
            row["task"],
            row["created_at"],
            row["finished_at"],
            row["attempts"],
            row["run_seconds"],
            row["last_error"],
            row["result"],
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "queue": self.queue,
            "state": self.state,
            "task": self.task,
            "created_at": self.created_at.isoformat(),
            "finished_at": self.finished_at.isoformat(),
            "attempts": self.attempts,
            "run_seconds": self.run_seconds,
            "last_error": self.last_error,
            "result": json.loads(self.result) if self.result is not None else None,
        }


@dataclass(frozen=True, slots=True)
class TaskStatus:
    """A task's state now, by id (see the module documentation for ``state``).

    ``attempts`` counts attempts started; ``attempt`` is the one running (``running`` only);
    ``run_at`` when a waiting task becomes due; ``finished_at`` when it finished; ``history`` the
    attempts recorded (failed ones, and the final one), oldest first; ``total_run_seconds`` their
    run time summed (None when none is known); ``result`` the JSON text of the return value of a
    task declared with ``result=True``."""

    id: str
    state: str
    queue: str | None = None
    task: str | None = None
    created_at: dt.datetime | None = None
    attempts: int = 0
    attempt: int | None = None
    run_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    last_error: str | None = None
    result: str | None = None
    history: tuple[AttemptRecord, ...] = field(default_factory=tuple)
    #: a durable task's last progress (JSON text, ``ctx.progress``; docs/durable.md)
    progress: str | None = None
    #: the signal a ``waiting`` task waits for
    waiting_for: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def total_run_seconds(self) -> float | None:
        known = [a.run_seconds for a in self.history if a.run_seconds is not None]
        return sum(known) if known else None

    def value(self) -> Any:
        """The decoded result (None when none was kept)."""
        return json.loads(self.result) if self.result is not None else None

    def as_json(self) -> dict[str, Any]:
        def iso(t: dt.datetime | None) -> str | None:
            return t.isoformat() if t else None

        return {
            "id": self.id,
            "state": self.state,
            "queue": self.queue,
            "task": self.task,
            "created_at": iso(self.created_at),
            "attempts": self.attempts,
            "attempt": self.attempt,
            "run_at": iso(self.run_at),
            "finished_at": iso(self.finished_at),
            "last_error": self.last_error,
            "total_run_seconds": self.total_run_seconds,
            "result": self.value(),
            "history": [a.as_json() for a in self.history],
            "progress": json.loads(self.progress) if self.progress is not None else None,
            "waiting_for": self.waiting_for,
        }
