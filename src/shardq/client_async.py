"""The asyncio client: :class:`AsyncClient`, the awaitable twin of :class:`shardq.Client`.

::

    async with shardq.connect_async() as client:            # or: client = await shardq.connect_async()
        await client.enqueue("emails", b'{"to": "a@example.com"}', dedupe_key="welcome:42")
        await client.enqueue_many("emails", [b"a", b"b", shardq.NewTask(b"c", priority=-5)])
        totals = await client.work(["emails"], send_email, until_empty=True)   # async def send_email(task)
        print(await client.stats())

Guarantees
    * The same arguments, results, errors and guarantees as the sync :class:`shardq.Client`:
      every call the two share (enqueue, enqueue_many, cancel, status, wait, stats, history, the
      queue settings calls and the workflow calls) runs the very same plan (:mod:`shardq.sql.plan`)
      after the same checks of its input, so they send the same named statements with the same
      parameters (tests/test_client_twins.py). Bad input raises
      :class:`~shardq.errors.InvalidInput` before anything is sent; errors are the
      :mod:`shardq.errors` hierarchy; a paused queue is :class:`~shardq.errors.QueuePaused`.
    * Database calls are asyncio all the way down: one ``psycopg.AsyncConnection`` per client,
      awaited on the caller's event loop (no thread pool). Calls of one client run one at a time
      (an exclusive-key enqueue or a cancel is a transaction on that connection); open several
      clients to send in parallel.
    * ``connection=`` (a psycopg ``AsyncConnection``, or a SQLAlchemy ``AsyncSession`` or
      ``AsyncConnection`` on psycopg) writes inside the caller's transaction and never commits
      it: rolled back, no task; committed, it runs.
    * :meth:`AsyncClient.work` runs a worker whose ``async def`` handlers are coroutines on the
      caller's running loop; its claim and settle parts keep their own threads and sync
      sessions, as in every worker. Awaiting it never blocks the loop. Cancelling the awaiting
      task stops the worker gracefully (see :mod:`shardq.worker`) before the cancellation
      propagates.

Does not
    * migrate, reap, resize, or handle dead letters, buckets and schedules: use the sync
      :class:`shardq.Client` (those are operators' calls, made from the command line, not an
      application's hot path);
    * belong to more than one event loop: a client is bound to the loop of its first call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Generator, Iterable, Sequence
from typing import Any, TypeVar, Unpack

from shardq import operations, validation
from shardq.admin import actions as admin
from shardq.admin.stats import collect_plan
from shardq.client import Client, stats_options
from shardq.errors import DatabaseError
from shardq.lifecycle import history, key_limits, key_slots, waiting
from shardq.lifecycle.enqueue import BATCH_SIZE_DEFAULT, enqueue_plan, prepare
from shardq.lifecycle.notify import Notifier
from shardq.models.history import FinishedTask, TaskStatus
from shardq.models.queues import QueueSettings
from shardq.models.stats import Stats
from shardq.models.tasks import EnqueueResult, NewTask, TaskOptions
from shardq.models.workflow_graph import Graph
from shardq.operations import durable
from shardq.operations.stats import EnqueueCounts
from shardq.sessions.borrowed import borrow_async
from shardq.sessions.dsn import Dsn, resolve_dsn
from shardq.sessions.session_async import AsyncSession
from shardq.sql.plan import Plan
from shardq.worker.config import WorkerTotals
from shardq.worker.contract import Handler, Resolver
from shardq.workflows import steps as workflows

log = logging.getLogger("shardq.client")

T = TypeVar("T")


class AsyncClient:
    """See the module documentation. Make one with :func:`connect_async`."""

    def __init__(self, dsn: str | Dsn | None = None, *, application_name: str = "shardq", notify: bool = True) -> None:
        """``notify``: after enqueues, wake idle workers over LISTEN/NOTIFY (PostgreSQL only,
        throttled; see :mod:`shardq.lifecycle.notify`)."""
        self.dsn = resolve_dsn(dsn)
        self.application_name = application_name
        self.notifier = Notifier() if notify else None
        self.session = AsyncSession(self.dsn, application_name=application_name)
        self.enqueue_counts = EnqueueCounts()
        self._lock = asyncio.Lock()
        self._workers: Client | None = None  # sync sessions for work()'s fetcher and settler

    async def connect(self) -> AsyncClient:
        """Open the connection now (otherwise the first call does): connection errors, an
        unsupported server, surface here."""
        async with self._lock:
            await self.session.connection()
        return self

    async def _run(self, plan: Plan[T]) -> T:
        async with self._lock:
            return await self.session.run(plan)

    async def close(self) -> None:
        """Write the enqueue counts still held in memory (failures only logged), then close the
        connection and the worker sessions."""
        async with self._lock:
            try:
                await self.session.run(self.enqueue_counts.flush())
            except DatabaseError as exc:  # counters only; closing must not fail on them
                log.debug("could not record enqueue counts at close: %s", exc)
            await self.session.close()
        if self._workers is not None:
            self._workers.close()
            self._workers = None

    def abandon(self) -> None:
        """Release the connection after its event loop has ended, without awaiting (enqueue counts
        still held in memory, at most a second's worth, are lost; the tasks are not)."""
        self.session.abandon()
        if self._workers is not None:
            self._workers.close()
            self._workers = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- producing --------------------------------------------------------------------------
    async def enqueue(
        self, queue: str, payload: bytes | str, *, connection: object | None = None, **options: Unpack[TaskOptions]
    ) -> EnqueueResult:
        """Enqueue one task with the :class:`~shardq.models.TaskOptions` (see
        :meth:`shardq.Client.enqueue`). ``connection``: a psycopg ``AsyncConnection`` or a
        SQLAlchemy ``AsyncSession``/``AsyncConnection``: the task is written inside that
        transaction, which is never committed here."""
        return await self.enqueue_many(queue, [NewTask(payload, **options)], connection=connection)

    async def enqueue_many(
        self,
        queue: str,
        tasks: Iterable[NewTask | bytes | str],
        *,
        batch_size: int = BATCH_SIZE_DEFAULT,
        connection: object | None = None,
    ) -> EnqueueResult:
        """Enqueue many tasks, ``batch_size`` per statement (see :meth:`shardq.Client.enqueue_many`).
        Every task is validated before the first statement is sent."""
        return await self.send(
            queue, prepare(queue, tasks, batch_size=batch_size), batch_size=batch_size, connection=connection
        )

    async def send(
        self,
        queue: str,
        prepared: Sequence[NewTask],
        *,
        batch_size: int = BATCH_SIZE_DEFAULT,
        connection: object | None = None,
    ) -> EnqueueResult:
        """Enqueue tasks validated already, their queue name included (see
        :meth:`shardq.lifecycle.enqueue.Producer.send`); ``connection`` as for :meth:`enqueue`."""
        if connection is None:
            return await self._run(
                enqueue_plan(queue, prepared, batch_size=batch_size, counts=self.enqueue_counts, notifier=self.notifier)
            )
        borrowed = await borrow_async(connection)
        # On the caller's connection, like the sync client: not counted (the tasks exist only if
        # the caller commits), and the caller's connection serialises its own statements.
        return await borrowed.run(enqueue_plan(queue, prepared, batch_size=batch_size, notifier=self.notifier))

    # -- operating --------------------------------------------------------------------------
    async def signal(self, task_id: object, name: str, payload: Any = None, *, key: str | None = None) -> bool:
        """:meth:`shardq.Client.signal` for asyncio code."""
        return await self._run(durable.send_signal(history.parse_task_id(task_id), name, payload, key))

    async def cancel(self, *ids: str) -> admin.CancelResult:
        """Cancel tasks by id (see :meth:`shardq.Client.cancel`)."""
        return await self._run(admin.cancel_plan(admin.parse_cancel_ids(ids)))

    async def status(self, task_id: object) -> TaskStatus:
        """A task's state now, by id (see :meth:`shardq.Client.status`)."""
        return await self._run(operations.task_status(history.parse_task_id(task_id)))

    async def wait(self, task_id: object, timeout: float | None = None) -> Any:
        """Await a task's outcome (see :meth:`shardq.Client.wait`): the process's one listener
        wakes it on PostgreSQL; it polls on CockroachDB."""
        wanted = history.parse_task_id(task_id)
        if timeout is not None:
            timeout = validation.non_negative_seconds(timeout, "timeout")
        return await waiting.wait_async(
            lambda: self._run(operations.task_status(wanted)), wanted, timeout, waiting.listener_for(self.dsn)
        )

    async def stats(self, **options: Any) -> Stats:
        """A stats snapshot (see :meth:`shardq.Client.stats`; ``follower_read`` defaults to False)."""
        return await self._run(collect_plan(stats_options(options)))

    async def history(self, queue: str, **options: Any) -> list[FinishedTask]:
        """A page of ``queue``'s finished tasks, newest first (see :meth:`shardq.Client.history`)."""
        return await self._run(history.page_plan(queue, **options))

    # -- queues -----------------------------------------------------------------------------
    async def queue_settings(self, queue: str) -> QueueSettings | None:
        """One queue's settings, or None for a queue shardq has not seen."""
        return await self._run(admin.queue_show_plan(queue))

    async def queues(self) -> list[QueueSettings]:
        """The settings of every queue shardq has seen, by name (see :meth:`shardq.Client.queues`)."""
        return await self._run(operations.queue_list())

    async def flow_usage(self) -> dict[str, tuple[int, int]]:
        """(slots held now, slots in all) of every queue with a concurrency limit (see
        :meth:`shardq.Client.flow_usage`)."""
        return await self._run(operations.flow_usage())

    async def set_queue(self, queue: str, **changes: object) -> QueueSettings | None:
        """Change queue settings (see :meth:`shardq.Client.set_queue`: the same checks and plan)."""
        return await self._run(admin.queue_set_plan(queue, changes))

    async def set_key_limit(self, queue: str, pattern: str, limit: int) -> None:
        """:meth:`shardq.Client.set_key_limit` for asyncio code."""
        await self._run(key_limits.set_plan(queue, pattern, limit))

    async def remove_key_limit(self, queue: str, pattern: str) -> bool:
        """:meth:`shardq.Client.remove_key_limit` for asyncio code."""
        return await self._run(key_limits.remove_plan(queue, pattern))

    async def key_limits(self, queue: str) -> dict[str, int]:
        """:meth:`shardq.Client.key_limits` for asyncio code."""
        return {limit.pattern: limit.max_running for limit in await self._run(key_slots.limits_plan(queue))}

    async def pause(self, queue: str, *, enqueue: bool = True, dequeue: bool = True) -> QueueSettings | None:
        """Pause enqueue and/or dequeue of ``queue`` (both by default); returns its settings."""
        return await self._run(admin.queue_set_plan(queue, admin.pause_changes(True, enqueue=enqueue, dequeue=dequeue)))

    async def resume(self, queue: str, *, enqueue: bool = True, dequeue: bool = True) -> QueueSettings | None:
        """Resume enqueue and/or dequeue of ``queue`` (both by default); returns its settings."""
        return await self._run(
            admin.queue_set_plan(queue, admin.pause_changes(False, enqueue=enqueue, dequeue=dequeue))
        )

    # -- workflows (shardq.workflows.steps) --------------------------------------------------------
    async def enqueue_workflow(self, graph: Graph, *, connection: object | None = None) -> workflows.Enqueued:
        """Write a whole workflow in one transaction (see :meth:`shardq.Client.enqueue_workflow`:
        the same plan, so the same checks before anything is sent and the same statements).
        ``connection`` as for :meth:`enqueue`: inside the caller's transaction, never committed
        here. Usually reached through :meth:`shardq.app.workflow.Workflow.enqueue_async`."""
        if connection is None:
            return await self._run(workflows.enqueue_plan(graph))
        borrowed = await borrow_async(connection)
        return await borrowed.run(workflows.enqueue_in_transaction_plan(graph))

    async def workflow_status(self, workflow_id: object) -> workflows.WorkflowStatus:
        """A workflow's state and each step's, by id (see :meth:`shardq.Client.workflow_status`)."""
        return await self._run(workflows.status_plan(workflow_id))

    async def parent_results(self, task_id: object) -> dict[str, object]:
        """The results of the parents of a workflow step, by step name (see
        :func:`shardq.workflows.steps.parent_results_plan`)."""
        return await self._run(workflows.parent_results_plan(task_id))

    async def cancel_workflow(self, workflow_id: object) -> int:
        """Cancel every step of a workflow not finished yet; returns how many (see
        :func:`shardq.workflows.steps.cancel_plan`)."""
        return await self._run(workflows.cancel_plan(workflow_id))

    # -- consuming --------------------------------------------------------------------------
    async def work(
        self, queues: Sequence[str], handler: Handler | Resolver, *, until_empty: bool = False, **options: Any
    ) -> WorkerTotals:
        """Run a worker until it stops (``until_empty=True``: once nothing is due or in flight)
        or the awaiting task is cancelled (then it stops gracefully first); returns its counts.
        ``options`` are :class:`shardq.WorkerConfig` fields. ``async def`` handlers run on this
        event loop; sync ones on the worker's threads."""
        if self._workers is None:
            self._workers = Client(self.dsn, application_name=self.application_name, notify=False)
        worker = self._workers.worker(
            queues, handler, until_empty=until_empty, loop=asyncio.get_running_loop(), **options
        )
        loop = asyncio.get_running_loop()
        done: asyncio.Future[WorkerTotals] = loop.create_future()

        def settle(outcome: WorkerTotals | BaseException) -> None:
            if done.cancelled():
                return
            if isinstance(outcome, BaseException):
                done.set_exception(outcome)
            else:
                done.set_result(outcome)

        def fetch() -> None:  # the worker's own thread: the fetcher runs here
            try:
                outcome: WorkerTotals | BaseException = worker.run(install_signal_handlers=False)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
                outcome = exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(settle, outcome)

        thread = threading.Thread(target=fetch, name="shardq-async-worker", daemon=True)
        thread.start()
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            worker.stop()
            # Keep the loop turning until the worker has handed back and settled what it holds
            # (its async handlers run here).
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.shield(done)
            raise
        finally:
            if done.done():
                thread.join()  # it has handed over its outcome: only returning is left


class _Connecting:
    """What :func:`connect_async` returns: ``await`` it for a connected client, or use it as
    ``async with`` (the client closes at the end)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    def __await__(self) -> Generator[Any, None, AsyncClient]:
        return self._client.connect().__await__()

    async def __aenter__(self) -> AsyncClient:
        return await self._client.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self._client.close()


def connect_async(dsn: str | Dsn | None = None, **options: Any) -> _Connecting:
    """An :class:`AsyncClient` for ``dsn``, ``SHARDQ_DSN``, or the embedded PostgreSQL, connected:
    ``client = await connect_async()``, ``async with connect_async() as client:`` or
    ``async with await connect_async() as client:``. ``options`` as for :class:`AsyncClient`."""
    return _Connecting(AsyncClient(dsn, **options))
