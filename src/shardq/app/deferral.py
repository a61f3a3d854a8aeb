"""A task's calls: :class:`Deferral` (a declared task with its per-call options fixed, then
``defer`` and its friends) and the :class:`TaskContext` a ``pass_context=True`` task receives.
See :mod:`shardq.app.application`.

A deferral is handed everything it needs when it is made: the task's :class:`TaskTemplate`
(plain values) and the :class:`Enqueuer` it enqueues through (the app, which owns the clients),
so it never reaches back into the app. Its options are checked then, once; a call checks only its
arguments, and goes from :meth:`Deferral.defer` to the producer's :meth:`~shardq.lifecycle.enqueue.Producer.send`."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar

from shardq import instrumentation, validation
from shardq.app import durable
from shardq.arguments import encode_call
from shardq.errors import InvalidInput
from shardq.lifecycle.enqueue import normalise
from shardq.models.tasks import EnqueueResult, NewTask, Task, TaskOptions
from shardq.models.workflow_graph import StepCall

if TYPE_CHECKING:
    from shardq.app.durable import DurableRun
    from shardq.client import Client
    from shardq.client_async import AsyncClient


P = ParamSpec("P")


R = TypeVar("R")


_PAYLOAD_MAX = validation.PAYLOAD_MAX_BYTES


@dataclass(frozen=True)
class TaskContext:
    """What a ``pass_context=True`` task receives first: ``id``, ``queue``, ``attempt``
    (1-based), ``task`` (its name) and ``enqueued_at``; :meth:`extend` renews the lease.

    Durable execution (docs/durable.md): :meth:`step` runs a function once and records its JSON
    value, :meth:`sleep` / :meth:`sleep_until` and :meth:`wait_for` end the run and resume the
    task later, replaying the recorded steps. In an ``async def`` task use the ``_async`` twins
    (``await ctx.step_async(...)``)."""

    id: str
    queue: str
    attempt: int
    task: str
    enqueued_at: dt.datetime
    _handle: Task
    _durable: DurableRun | None = None

    def extend(self, seconds: float) -> dt.datetime:
        """Renew this task's lease to now + ``seconds``; see :meth:`shardq.Task.extend`."""
        return self._handle.extend(seconds)

    @property
    def _run(self) -> DurableRun:
        if self._durable is None:
            raise InvalidInput("durable steps need a task declared on an App (this context has no database)")
        return self._durable

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` once: its JSON value is recorded (fenced by the lease) and a
        later run of this task returns the recorded value without calling ``fn``. The value comes
        back as JSON decodes it (a tuple as a list), on the first run too."""
        return self._run.step(name, fn, *args, **kwargs)

    async def step_async(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """:meth:`step` in an ``async def`` task; ``fn`` may be a coroutine function."""
        return await self._run.step_async(name, fn, *args, **kwargs)

    def sleep(self, seconds: float) -> None:
        """Sleep durably: the run ends (no attempt used, nothing held) and the task runs again
        after ``seconds``, where this call returns."""
        self._run.sleep(seconds)

    def sleep_until(self, when: dt.datetime) -> None:
        """:meth:`sleep` until the aware datetime ``when``."""
        self._run.sleep_until(when)

    async def sleep_async(self, seconds: float) -> None:
        await self._run.sleep_async(seconds)

    async def sleep_until_async(self, when: dt.datetime) -> None:
        await self._run.sleep_until_async(when)

    def wait_for(self, name: str, timeout: float | None = None) -> Any:
        """The payload of the next signal ``name`` sent to this task (``client.signal``), each
        consumed once; without one yet the run ends and the task waits holding nothing, resumed
        by the signal's own transaction. :class:`shardq.SignalTimeout` after ``timeout``
        seconds (None: no timeout)."""
        return self._run.wait_for(name, timeout)

    async def wait_for_async(self, name: str, timeout: float | None = None) -> Any:
        return await self._run.wait_for_async(name, timeout)

    def progress(self, value: Any) -> None:
        """Report progress (JSON, at most 4 KiB), shown by status by id (``progress``); written
        at most once a second, however often this is called: a call within a second of the last
        write writes nothing (the next call after that second writes its value)."""
        durable.progress(self._run, value)

    async def progress_async(self, value: Any) -> None:
        await durable.progress_async(self._run, value)

    @property
    def cancelled(self) -> bool:
        """Whether this run no longer holds its task: cancelled (``shardq cancel``), or its lease
        passed to another worker. Reads the database at most once a second; stop soon when True
        (the outcome of a cancelled task is ignored)."""
        return durable.cancelled(self._run)

    async def cancelled_async(self) -> bool:
        """:attr:`cancelled` for an ``async def`` task."""
        return await durable.cancelled_async(self._run)


class CallOptions(TaskOptions, total=False):
    """Per-call options of :meth:`AppTask.configure`: the :class:`~shardq.models.TaskOptions`,
    plus ``queue`` (another queue than the task's) and ``connection`` (write inside the caller's
    transaction)."""

    queue: str
    connection: object | None


#: The names of the per-call options (:class:`CallOptions`).
CALL_OPTIONS = tuple(CallOptions.__annotations__)
#: NewTask's fields after the payload, in order (the same as :class:`TaskOptions`').
_TASK_FIELDS = tuple(f.name for f in dataclasses.fields(NewTask))[1:]


@dataclass(frozen=True, slots=True)
class TaskTemplate:
    """What a deferral needs of a declared task: its ``name``, its default ``queue``,
    ``priority`` and ``max_attempts``, and ``check`` (refuses keyword arguments the function
    does not take, :class:`InvalidInput`)."""

    name: str
    queue: str
    priority: int
    max_attempts: int | None
    check: Callable[[Mapping[str, Any]], None]


class Enqueuer(Protocol):
    """What a deferral enqueues through (a :class:`shardq.App`): a sync client, and an asyncio
    client for the running event loop."""

    @property
    def client(self) -> Client: ...

    async def async_client(self) -> AsyncClient: ...


class TaskHandle(str):
    """The id of a deferred task — a ``str`` equal to the id, usable wherever the id was — that
    can also wait for the task's outcome (see :mod:`shardq.lifecycle.waiting`):

    * ``handle.wait(timeout=None)``: the task's result (None when it keeps none), or its failure
      raised (:class:`shardq.TaskDead`, :class:`shardq.TaskCancelled`,
      :class:`shardq.OutcomeNotKept`); :class:`shardq.WaitTimeout` after ``timeout`` seconds,
      leaving the task alone;
    * ``await handle`` or ``await handle.wait_async(timeout)`` in asyncio code.

    The outcome is known only while the task's queue keeps finished tasks (``shardq queue set Q
    --keep-finished DURATION``); a result only for a task declared with ``result=True``."""

    _enqueuer: Enqueuer

    def __new__(cls, task_id: str, enqueuer: Enqueuer) -> TaskHandle:
        handle = super().__new__(cls, task_id)
        handle._enqueuer = enqueuer
        return handle

    def wait(self, timeout: float | None = None) -> Any:
        return self._enqueuer.client.wait(str(self), timeout)

    async def wait_async(self, timeout: float | None = None) -> Any:
        client = await self._enqueuer.async_client()
        return await client.wait(str(self), timeout)

    def __await__(self) -> Generator[Any, None, Any]:
        return self.wait_async().__await__()


class Deferral(Generic[P, R]):
    """A declared task with per-call options fixed: ``delay`` (seconds) or ``run_at`` (aware
    datetime), ``priority``, ``dedupe_key``, ``exclusive_key``, ``queue``, ``max_attempts`` and
    ``connection`` (write inside the caller's transaction); see :class:`CallOptions`. The options
    are checked when it is made (:class:`InvalidInput`); options not given are the task's."""

    def __init__(self, template: TaskTemplate, enqueuer: Enqueuer, options: Mapping[str, Any]) -> None:
        unknown = set(options) - set(CALL_OPTIONS)
        if unknown:
            raise InvalidInput(f"{template.name}: unknown option(s) {', '.join(sorted(unknown))}")
        self.template = template
        self.enqueuer = enqueuer
        self.options = dict(options)
        get = self.options.get
        self.name = template.name
        self.queue = validation.queue_name(get("queue", template.queue))
        self.connection = get("connection")
        given: dict[str, Any] = {name: get(name) for name in _TASK_FIELDS}
        given["max_attempts"] = get("max_attempts", template.max_attempts)
        given["priority"] = get("priority", template.priority)
        fixed = normalise(NewTask(b"", **given))
        # NewTask's fields other than the payload, the same for every call of this deferral.
        self._fields = tuple(getattr(fixed, name) for name in _TASK_FIELDS)
        self._check = template.check

    def _new_task(self, arguments: Mapping[str, Any], trace: Mapping[str, str] | None = None) -> NewTask:
        self._check(arguments)
        payload = encode_call(self.name, arguments, trace)
        if len(payload) > _PAYLOAD_MAX:
            validation.payload(payload)  # refuses it, worded as for every payload
        return NewTask(payload, *self._fields)

    def defer(self, **arguments: Any) -> TaskHandle | None:
        """Enqueue one call; returns its task id as a :class:`TaskHandle` (a ``str``, which can
        also wait for the outcome), or None when ``dedupe_key`` matched a live task."""
        instrument = instrumentation.active
        if instrument is not None:
            with instrument.sending(self.name, self.queue, 1) as trace:
                return self._defer(arguments, trace)
        return self._defer(arguments, None)

    def _defer(self, arguments: Mapping[str, Any], trace: Mapping[str, str] | None) -> TaskHandle | None:
        task = self._new_task(arguments, trace)
        result = self.enqueuer.client.producer(self.connection).send(self.queue, [task])
        found = result.enqueued_ids or result.debounced_ids  # debounced: the task that now carries it
        return TaskHandle(found[0], self.enqueuer) if found else None

    def defer_many(self, calls: Iterable[Mapping[str, Any]]) -> list[str | None]:
        """Enqueue many calls in one statement per batch of 1,000; every call is checked before
        the first is written. Returns their ids in order (None for a live ``dedupe_key``).
        ``connection`` must be a sync one here (an asyncio one is :class:`InvalidInput`: use
        :meth:`defer_many_async`)."""
        calls = list(calls)
        instrument = instrumentation.active
        if instrument is not None:
            with instrument.sending(self.name, self.queue, len(calls)) as trace:
                return self._defer_many(calls, trace)
        return self._defer_many(calls, None)

    def _defer_many(self, calls: list[Mapping[str, Any]], trace: Mapping[str, str] | None) -> list[str | None]:
        tasks = [self._new_task(arguments, trace) for arguments in calls]
        if tasks and (tasks[0].debounce is not None or tasks[0].throttle is not None):
            raise InvalidInput(f"{self.name}: debounce and throttle take one call at a time (defer)")
        result = self.enqueuer.client.producer(self.connection).send(self.queue, tasks)
        return _ids_in_order(tasks, result)

    def step(self, **arguments: Any) -> StepCall:
        """This call as a workflow step (see :meth:`shardq.App.workflow`): the arguments are
        checked and encoded now. A step starts when its parents succeeded, so ``delay``,
        ``run_at``, ``dedupe_key`` and ``exclusive_key`` are refused (:class:`InvalidInput`)."""
        delay, run_at, dedupe_key, max_attempts, priority, exclusive_key = self._fields[:6]
        if delay or run_at is not None or dedupe_key is not None or exclusive_key is not None:
            raise InvalidInput(f"{self.name}: a workflow step takes no delay, run_at, dedupe_key or exclusive_key")
        if any(value is not None for value in self._fields[7:]):  # concurrency_key, debounce, throttle
            raise InvalidInput(f"{self.name}: a workflow step takes no concurrency_key, debounce or throttle")
        task = self._new_task(arguments)
        payload = task.payload if isinstance(task.payload, bytes) else task.payload.encode()
        return StepCall(self.name, payload, self.queue, priority, max_attempts)

    async def defer_async(self, **arguments: Any) -> TaskHandle | None:
        """:meth:`defer` for asyncio code, through the app's :class:`~shardq.AsyncClient`; with
        ``connection`` (a psycopg ``AsyncConnection`` or a SQLAlchemy ``AsyncSession`` /
        ``AsyncConnection``) the task is written inside that transaction, never committed here."""
        ids = await self.defer_many_async([arguments])
        return TaskHandle(ids[0], self.enqueuer) if ids[0] is not None else None

    async def defer_many_async(self, calls: Iterable[Mapping[str, Any]]) -> list[str | None]:
        """:meth:`defer_many` for asyncio code (see :meth:`defer_async`): the same checks before
        anything is sent, the same statements, ids in order."""
        calls = list(calls)
        instrument = instrumentation.active
        if instrument is not None:
            with instrument.sending(self.name, self.queue, len(calls)) as trace:
                return await self._defer_many_async(calls, trace)
        return await self._defer_many_async(calls, None)

    async def _defer_many_async(
        self, calls: list[Mapping[str, Any]], trace: Mapping[str, str] | None
    ) -> list[str | None]:
        tasks = [self._new_task(arguments, trace) for arguments in calls]
        client = await self.enqueuer.async_client()
        result = await client.send(self.queue, tasks, connection=self.connection)
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
