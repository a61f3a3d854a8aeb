"""Tasks declared as Python functions, called with arguments, run by name.

::

    app = shardq.App()                       # dsn=None: $SHARDQ_DSN, else the embedded server

    @app.task                                # name "module.function", queue "default"
    def resize_image(path: str, width: int) -> None: ...

    @app.task(name="emails.send", queue="emails", priority=-5, max_attempts=5, pass_context=True)
    def send(ctx: shardq.TaskContext, to: str, when: datetime) -> None: ...

    resize_image("a.png", 64)                         # a plain call, as ever
    task_id = resize_image.defer(path="a.png", width=64)
    resize_image.configure(delay=30, connection=conn).defer(path="b.png", width=32)
    resize_image.defer_many([{"path": "c.png", "width": 8}, {"path": "d.png", "width": 8}])
    app.work(until_empty=True)                       # run what is due, in this process

Guarantees
    * ``defer`` checks the keyword arguments against the function's signature and their types
      against what a payload can carry (:mod:`shardq.arguments`) before anything is written:
      a missing, unknown or unstorable argument is :class:`~shardq.errors.InvalidInput`.
    * The handler receives the arguments as they were given: ``datetime`` (aware or naive),
      ``date``, ``UUID`` and ``Decimal`` come back as the same types with equal values.
    * With ``connection=`` the task is written on the caller's connection inside its transaction
      and nothing is committed (:class:`shardq.sessions.borrowed.BorrowedSession`): rolled back, no task;
      committed, it runs. Such enqueues are not counted in the enqueue rate of ``stats``.
    * ``await task.defer_async(...)``, ``await task.configure(...).defer_async(...)`` and
      ``await task.defer_many_async([...])`` do the same for asyncio code through the app's
      :class:`~shardq.AsyncClient` (:meth:`App.async_client`), with the same checks and
      statements; their ``connection=`` takes a psycopg ``AsyncConnection`` or a SQLAlchemy
      ``AsyncSession``/``AsyncConnection``. The sync ``defer`` refuses an asyncio connection with
      one :class:`~shardq.errors.InvalidInput` line, before anything is written.
    * A worker running the app (``shardq work --app mod:app``, :meth:`App.work`) dispatches by
      task name. A task whose name it does not know is dead-lettered at once with the reason
      ``unknown task 'NAME'``, one whose payload is not a task call (bytes written into an app's
      queue) with ``payload is not valid task JSON: …``; neither is retried. Raising
      :class:`~shardq.errors.Retry` reschedules without using an attempt;
      :class:`~shardq.errors.Permanent` dead-letters; anything else retries with backoff.

Does not
    * take positional arguments in ``defer`` (keyword arguments only: they are stored by name);
    * deduplicate calls: give ``dedupe_key=`` for that (``defer`` then returns None for a call
      whose key is live)."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any, ParamSpec, TypeVar, Unpack

from shardq import instrumentation, validation
from shardq.app.deferral import CallOptions, Deferral, TaskContext, TaskTemplate
from shardq.app.durable import DurableRun
from shardq.app.workflow import Workflow
from shardq.arguments import decode_traced_call
from shardq.client import Client, connect
from shardq.client_async import AsyncClient
from shardq.errors import InvalidInput, Permanent
from shardq.maintenance.periodic import Schedule, takes_timestamp
from shardq.models.history import TaskStatus, keeping_result
from shardq.models.tasks import Task
from shardq.sessions.dsn import Dsn
from shardq.worker.config import WorkerTotals
from shardq.workflows.steps import WorkflowStatus

P = ParamSpec("P")


R = TypeVar("R")


DEFAULT_QUEUE = "default"


class AppTask(Deferral[P, R]):
    """A function declared with ``@app.task``: call it to run it here, :meth:`defer` to enqueue
    it. ``name``, ``queue``, ``priority`` and ``max_attempts`` are its defaults: it is its own
    :class:`Deferral` without per-call options, and :meth:`configure` makes one with some."""

    def __init__(
        self,
        app: App,
        function: Callable[P, R],
        *,
        name: str,
        queue: str,
        priority: int,
        max_attempts: int | None,
        pass_context: bool,
        timeout: float | None = None,
        result: bool = False,
        version: str | None = None,
    ) -> None:
        self.app = app
        #: the durable steps' version (docs/durable.md): steps recorded under another are forgotten
        self.version = version
        #: keep the return value (JSON) with the outcome, in queues that keep finished tasks
        self.keeps_result = result
        #: execution timeout in seconds (over the queue's and the worker's; None: theirs apply)
        self.timeout = timeout
        self.function: Callable[..., R] = function
        self.name = name
        self.queue = queue
        self.priority = priority
        self.max_attempts = max_attempts
        self.pass_context = pass_context
        signature = inspect.signature(function)
        parameters = list(signature.parameters.values())
        if pass_context:
            if not parameters:
                raise InvalidInput(f"task {name}: pass_context=True needs a first parameter for the context")
            parameters = parameters[1:]
        self._signature = signature.replace(parameters=parameters)
        #: an ``async def`` task: the worker awaits it on its event loop
        self.is_async = inspect.iscoroutinefunction(function)
        # What a keyword call may carry, for the fast check in check_arguments; the signature's
        # own bind() runs only to word the refusal (it costs as much as encoding the call).
        keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        self._accepted = frozenset(p.name for p in parameters if p.kind in keyword)
        self._required = frozenset(p.name for p in parameters if p.kind in keyword and p.default is p.empty)
        self._open = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
        #: as a workflow step, receives its parents' results as ``results`` (shardq.workflows.steps)
        self.takes_results = "results" in self._accepted
        self._fast_check = not any(
            p.kind is inspect.Parameter.POSITIONAL_ONLY and p.default is p.empty for p in parameters
        )
        self.__doc__ = function.__doc__
        self.__wrapped__ = function
        super().__init__(TaskTemplate(name, queue, priority, max_attempts, self.check_arguments), app, {})

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.function(*args, **kwargs)

    def check_arguments(self, arguments: Mapping[str, Any]) -> None:
        """:class:`InvalidInput` unless ``arguments`` bind to the function's keyword parameters."""
        if self._fast_check:
            names = arguments.keys()
            if self._required <= names and (self._open or names <= self._accepted):
                return
        try:
            self._signature.bind(**arguments)
        except TypeError as exc:
            raise InvalidInput(f"{self.name}: {exc}") from None

    def configure(self, **options: Unpack[CallOptions]) -> Deferral[P, R]:
        """This task with per-call options (see :class:`Deferral`); an unknown or invalid option is
        :class:`InvalidInput` here. ``defer``, ``defer_many``, ``defer_async`` and
        ``defer_many_async`` of the task itself are :class:`Deferral`'s without options."""
        return Deferral(self.template, self.enqueuer, options)

    def run(self, handle: Task, arguments: dict[str, Any]) -> object:
        """Run the function for a claimed task (the worker's side)."""
        if self.pass_context:
            durable = DurableRun(handle, self.version, lambda: self.app.client, self.app.async_client)
            context = TaskContext(
                handle.id, handle.queue, handle.attempt, self.name, handle.created_at, handle, durable
            )
            return self.function(context, **arguments)
        return self.function(**arguments)

    def __repr__(self) -> str:
        return f"<shardq task {self.name} on {self.queue!r}>"


class App:
    """A set of tasks and the database they run on (``dsn``: a URL, or None for ``$SHARDQ_DSN``,
    else the embedded PostgreSQL). Connects on first use; thread-safe to declare and defer."""

    def __init__(self, dsn: str | Dsn | None = None) -> None:
        self._dsn = dsn
        self._client: Client | None = None
        self._async_clients: dict[asyncio.AbstractEventLoop, AsyncClient] = {}
        self._lock = threading.Lock()
        self.tasks: dict[str, AppTask[Any, Any]] = {}
        #: periodic schedules (``@app.periodic``), by schedule name
        self.schedules: dict[str, Schedule] = {}

    @property
    def client(self) -> Client:
        """The :class:`~shardq.Client` the app enqueues and works through."""
        with self._lock:
            if self._client is None:
                self._client = connect(self._dsn)
            return self._client

    async def async_client(self) -> AsyncClient:
        """The :class:`~shardq.AsyncClient` the app's ``defer_async`` calls enqueue through: one
        per running event loop, made on first use (its connection belongs to that loop). Close
        it with :meth:`aclose` before the loop ends."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._drop_ended_loops()
            client = self._async_clients.get(loop)
            if client is None:
                client = self._async_clients[loop] = AsyncClient(self._dsn)
        return client

    def task(
        self,
        function: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        max_attempts: int | None = None,
        pass_context: bool = False,
        timeout: float | None = None,
        result: bool = False,
        version: str | None = None,
    ) -> Any:
        """Declare a task, as ``@app.task`` or ``@app.task(name=…, queue=…, priority=…,
        max_attempts=…, pass_context=…, timeout=…)``. The name defaults to ``module.function``;
        a name declared twice is :class:`InvalidInput`. ``timeout`` (seconds, > 0): an attempt
        running longer fails with ``timeout after S s`` (async tasks are cancelled; see
        :mod:`shardq.worker.timeouts` for sync ones). ``result=True``: the return value is
        stored, JSON-encoded, with the task's success, in the same transaction as the ack, and
        read back by :meth:`status` and a handle's ``wait``; it needs a queue that keeps finished
        tasks (``shardq queue set Q --keep-finished DURATION``). A value that is not JSON, or is
        over 256 KiB of it, fails that attempt with one line naming its type or size.
        ``version``: the version of its durable steps (docs/durable.md): a run finding steps
        recorded under another version starts afresh instead of failing on a changed sequence."""
        validation.queue_name(queue)
        validation.priority(priority)
        if max_attempts is not None:
            validation.positive_int(max_attempts, "max_attempts", maximum=10_000)
        if timeout is not None:
            validation.positive_seconds(timeout, "timeout")

        def declare(fn: Callable[..., Any]) -> AppTask[Any, Any]:
            task_name = name or f"{fn.__module__}.{fn.__qualname__}"
            if not task_name or len(task_name) > validation.QUEUE_NAME_MAX:
                raise InvalidInput(
                    f"task name {task_name[:60]!r}… has {len(task_name)} characters, at most "
                    f"{validation.QUEUE_NAME_MAX}: give a shorter name="
                )
            declared: AppTask[Any, Any] = AppTask(
                self,
                fn,
                name=task_name,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                pass_context=pass_context,
                timeout=timeout,
                result=validation.flag(result, "result"),
                version=_version(version),
            )
            with self._lock:
                if task_name in self.tasks:
                    raise InvalidInput(f"a task named {task_name!r} is already declared")
                self.tasks[task_name] = declared
            return declared

        return declare(function) if function is not None else declare

    def periodic(
        self,
        *,
        cron: str | None = None,
        every: float | None = None,
        args: Mapping[str, Any] | None = None,
        tz: str = "UTC",
        name: str | None = None,
        catch_up: int = 0,
    ) -> Callable[[AppTask[P, R]], AppTask[P, R]]:
        """Run a task on a schedule, above ``@app.task``: ``cron`` (five fields, in ``tz``) or
        ``every`` seconds; ``args`` the task's arguments (``timestamp``, if the function takes it,
        is the slot's time in Unix seconds); ``name`` the schedule's (default: the task's);
        ``catch_up`` missed slots to run after downtime besides the latest (0). Refused at once
        (:class:`InvalidInput`): a cron that does not parse, ``every`` <= 0, args that leave a
        required argument out. See :mod:`shardq.maintenance.periodic` for the guarantees."""

        def declare(task: AppTask[P, R]) -> AppTask[P, R]:
            if not isinstance(task, AppTask):
                raise InvalidInput("@app.periodic goes above @app.task (it schedules a declared task)")
            fixed = dict(args or {})
            schedule = Schedule(
                name or task.name,
                task.name,
                task.queue,
                cron=cron,
                every=every,
                args=fixed,
                tz=tz,
                catch_up=catch_up,
                priority=task.priority,
                max_attempts=task.max_attempts,
                takes_timestamp=takes_timestamp(task.function, fixed),
            ).validate(task.check_arguments)
            with self._lock:
                if schedule.name in self.schedules:
                    raise InvalidInput(f"a schedule named {schedule.name!r} is already declared (give name=)")
                self.schedules[schedule.name] = schedule
            return task

        return declare

    def status(self, task_id: object) -> TaskStatus:
        """A task's state now, by id (see :meth:`shardq.Client.status`)."""
        return self.client.status(task_id)

    def workflow(self, name: str) -> Workflow:
        """Declare a workflow of this app's tasks (chains, groups, fan-ins, any graph), then
        ``.enqueue()`` it whole; see :mod:`shardq.app.workflow` and :mod:`shardq.workflows.steps`."""
        return Workflow(name, lambda: self.client, lambda task: task in self.tasks, self.async_client)

    def workflow_status(self, workflow_id: object) -> WorkflowStatus:
        """A workflow's state and each step's (see :meth:`shardq.Client.workflow_status`)."""
        return self.client.workflow_status(workflow_id)

    async def workflow_status_async(self, workflow_id: object) -> WorkflowStatus:
        """:meth:`workflow_status` from asyncio code, through :meth:`async_client`."""
        return await (await self.async_client()).workflow_status(workflow_id)

    def queues(self) -> list[str]:
        """Every queue the app's tasks use, sorted."""
        return sorted({t.queue for t in self.tasks.values()})

    def _declared(self, handle: Task) -> tuple[AppTask[Any, Any], dict[str, Any], dict[str, str] | None]:
        try:
            name, arguments, trace = decode_traced_call(handle.payload)
        except ValueError as exc:
            raise Permanent(f"payload is not valid task JSON: {exc}") from None
        declared = self.tasks.get(name)
        if declared is None:
            raise Permanent(f"unknown task '{name}'")
        return declared, arguments, trace

    def dispatch(self, handle: Task) -> object:
        """Run the task the payload names with its arguments (sync tasks; for an async one this
        returns its coroutine)."""
        declared, arguments, trace = self._declared(handle)
        call: Callable[[], Any] = partial(declared.run, handle, arguments)
        if declared.takes_results and handle.claimed.workflow_id is not None and "results" not in arguments:
            call = partial(self._run_step, declared, handle, arguments)
        if declared.keeps_result and not declared.is_async:
            call = keeping_result(call, False)  # the worker keeps it (see keeping_result)
        instrument = instrumentation.active
        if instrument is None:
            return call()
        return instrument.running(call, is_async=declared.is_async, task=declared.name, handle=handle, carrier=trace)()

    @property
    def has_async(self) -> bool:
        """Whether any task is ``async def`` (the worker then runs the app on an event loop)."""
        return any(t.is_async for t in self.tasks.values())

    @property
    def has_timeouts(self) -> bool:
        """Whether any task declares its own ``timeout``."""
        return any(t.timeout is not None for t in self.tasks.values())

    def resolve(self, handle: Task) -> tuple[Callable[[], Any], bool, float | None]:
        """The worker's dispatch: the call that runs ``handle``'s task, whether it is async, and
        its own timeout."""
        declared, arguments, trace = self._declared(handle)
        call: Callable[[], Any] = partial(declared.run, handle, arguments)
        if declared.takes_results and handle.claimed.workflow_id is not None and "results" not in arguments:
            call = partial(self._run_step, declared, handle, arguments)
        if declared.keeps_result:
            call = keeping_result(call, declared.is_async)
        instrument = instrumentation.active
        if instrument is not None:
            call = instrument.running(
                call, is_async=declared.is_async, task=declared.name, handle=handle, carrier=trace
            )
        return call, declared.is_async, declared.timeout

    def _run_step(self, declared: AppTask[Any, Any], handle: Task, arguments: dict[str, Any]) -> object:
        """Run a workflow step that takes ``results``: its parents' results, read first (for an
        ``async def`` task, awaited through this loop's asyncio client: the read never blocks the
        worker's event loop)."""
        if declared.is_async:
            return self._run_step_async(declared, handle, arguments)
        return declared.run(handle, {**arguments, "results": self.client.parent_results(handle.id)})

    async def _run_step_async(self, declared: AppTask[Any, Any], handle: Task, arguments: dict[str, Any]) -> object:
        results = await (await self.async_client()).parent_results(handle.id)
        running = declared.run(handle, {**arguments, "results": results})
        assert inspect.isawaitable(running)  # an async def task's call is its coroutine
        return await running

    def work(self, queues: Iterable[str] | None = None, *, until_empty: bool = False, **options: Any) -> WorkerTotals:
        """Run the app's tasks in this thread: ``queues`` (default: every queue of the app's
        tasks) until stopped, or with ``until_empty=True`` until nothing is due or in flight
        (what a test suite wants after deferring). ``options`` are :class:`WorkerConfig`
        fields; ``periodic`` (take due slots of periodic tasks) defaults to True only without
        ``until_empty``, so a test's run does not enqueue the current slots. Returns the counts."""
        chosen = list(queues) if queues is not None else self.queues()
        if not chosen:
            raise InvalidInput("the app declares no tasks: nothing to work on")
        options.setdefault("periodic", not until_empty)
        return self.client.work(chosen, self, until_empty=until_empty, install_signal_handlers=False, **options)

    def _drop_ended_loops(self) -> None:
        """Release the asyncio clients of event loops that have ended (they cannot be used or
        awaited again). Call under the lock."""
        for loop in [loop for loop in self._async_clients if loop.is_closed()]:
            self._async_clients.pop(loop).abandon()

    def close(self) -> None:
        """Close the sync client, and the asyncio clients of event loops that have ended (one of
        a running loop is closed by :meth:`aclose` on that loop)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
            self._drop_ended_loops()

    async def aclose(self) -> None:
        """Close this event loop's :class:`~shardq.AsyncClient` (writing its held enqueue counts)."""
        with self._lock:
            client = self._async_clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()


def _version(version: object) -> str | None:
    if version is not None and (not isinstance(version, str) or not version or len(version) > 200):
        raise InvalidInput("version must be a non-empty string of at most 200 characters")
    return version


def load_app(spec: str) -> App:
    """The :class:`App` named by ``module:attribute`` (``shardq work --app``)."""
    from shardq.app.loading import load_attribute  # the same import rules as --handler

    found = load_attribute(spec, "app", "app")
    if not isinstance(found, App):
        raise InvalidInput(f"{spec!r} is a {type(found).__name__}, not a shardq.App")
    return found
