"""A task's calls: :class:`Deferral` (per-call options, then ``defer`` and its friends) and the
:class:`TaskContext` a ``pass_context=True`` task receives. See :mod:`shardq.app`."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from . import validation
from .arguments import encode_call
from .consumer import Task
from .errors import InvalidInput
from .models import EnqueueResult, NewTask

if TYPE_CHECKING:
    from .app import AppTask

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class TaskContext:
    """What a ``pass_context=True`` task receives first: ``id``, ``queue``, ``attempt``
    (1-based), ``task`` (its name) and ``enqueued_at``; :meth:`extend` renews the lease."""

    id: str
    queue: str
    attempt: int
    task: str
    enqueued_at: dt.datetime
    _handle: Task

    def extend(self, seconds: float) -> dt.datetime:
        """Renew this task's lease to now + ``seconds``; see :meth:`shardq.Task.extend`."""
        return self._handle.extend(seconds)


#: Per-call options of :meth:`AppTask.configure`, with what each means.
CALL_OPTIONS = ("delay", "run_at", "priority", "dedupe_key", "exclusive_key", "queue", "max_attempts", "connection")


class Deferral(Generic[P, R]):
    """An :class:`AppTask` with per-call options fixed: ``delay`` (seconds) or ``run_at`` (aware
    datetime), ``priority``, ``dedupe_key``, ``exclusive_key``, ``queue``, ``max_attempts`` and
    ``connection`` (write inside the caller's transaction)."""

    def __init__(self, task: AppTask[P, R], options: Mapping[str, Any]) -> None:
        unknown = set(options) - set(CALL_OPTIONS)
        if unknown:
            raise InvalidInput(f"{task.name}: unknown option(s) {', '.join(sorted(unknown))}")
        self.task = task
        self.options = dict(options)
        # NewTask's fields other than the payload, the same for every call of this deferral.
        self._fields = (
            self.options.get("delay"), self.options.get("run_at"), self.options.get("dedupe_key"),
            self.options.get("max_attempts", task.max_attempts), self.options.get("priority", task.priority),
            self.options.get("exclusive_key"),
        )

    def _new_task(self, arguments: Mapping[str, Any]) -> NewTask:
        task = self.task
        task.check_arguments(arguments)
        delay, run_at, dedupe_key, max_attempts, priority, exclusive_key = self._fields
        return NewTask(encode_call(task.name, arguments), delay, run_at, dedupe_key, max_attempts, priority,
                       exclusive_key)

    def defer(self, **arguments: Any) -> str | None:
        """Enqueue one call; returns its task id (None when ``dedupe_key`` matched a live task)."""
        ids = self.defer_many([arguments])
        return ids[0]

    def defer_many(self, calls: Iterable[Mapping[str, Any]]) -> list[str | None]:
        """Enqueue many calls in one statement per batch of 1,000; every call is checked before
        the first is written. Returns their ids in order (None for a live ``dedupe_key``).
        ``connection`` must be a sync one here (an asyncio one is :class:`InvalidInput`: use
        :meth:`defer_many_async`)."""
        tasks = [self._new_task(arguments) for arguments in calls]
        queue = validation.queue_name(self.options.get("queue", self.task.queue))
        result = self.task.app.client.enqueue_many(queue, tasks, connection=self.options.get("connection"))
        return _ids_in_order(tasks, result)

    async def defer_async(self, **arguments: Any) -> str | None:
        """:meth:`defer` for asyncio code, through the app's :class:`~shardq.AsyncClient`; with
        ``connection`` (a psycopg ``AsyncConnection`` or a SQLAlchemy ``AsyncSession`` /
        ``AsyncConnection``) the task is written inside that transaction, never committed here."""
        ids = await self.defer_many_async([arguments])
        return ids[0]

    async def defer_many_async(self, calls: Iterable[Mapping[str, Any]]) -> list[str | None]:
        """:meth:`defer_many` for asyncio code (see :meth:`defer_async`): the same checks before
        anything is sent, the same statements, ids in order."""
        tasks = [self._new_task(arguments) for arguments in calls]
        queue = validation.queue_name(self.options.get("queue", self.task.queue))
        client = await self.task.app.async_client()
        result = await client.enqueue_many(queue, tasks, connection=self.options.get("connection"))
        return _ids_in_order(tasks, result)


def _ids_in_order(tasks: list[NewTask], result: EnqueueResult) -> list[str | None]:
    """The task id of each call, in order, None where a live dedupe key skipped it."""
    if not result.duplicate_keys:
        return list(result.enqueued_ids)
    # Map back in order. enqueue_many returns the ids of the tasks it inserted, in order, and
    # the keys of the ones a live dedupe key skipped. Of the calls sharing a key, at most the
    # first was inserted (a key live before the batch skips them all; within one statement
    # the first row wins), so per key the first (calls - skipped) calls have ids.
    skipped = Counter(result.duplicate_keys)
    remaining = Counter(t.dedupe_key for t in tasks if t.dedupe_key is not None)
    for key in remaining:
        remaining[key] -= skipped[key]
    enqueued = iter(result.enqueued_ids)
    ids: list[str | None] = []
    for t in tasks:
        if t.dedupe_key is None or remaining[t.dedupe_key] > 0:
            if t.dedupe_key is not None:
                remaining[t.dedupe_key] -= 1
            ids.append(next(enqueued))
        else:
            ids.append(None)
    return ids
