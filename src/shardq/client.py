"""The entry point for Python users: one object that knows the database and hands out
producers, workers and reapers.

>>> import shardq
>>> client = shardq.connect()                  # SHARDQ_DSN, or the embedded PostgreSQL
>>> client.migrate()
>>> client.enqueue("emails", b'{"to": "a@example.com"}', dedupe_key="welcome:42")
>>> client.work(["emails"], handler=send_email, concurrency=8, until_empty=True)

A :class:`Client` is thread-safe: each thread gets its own database session.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Unpack

from shardq import operations, validation
from shardq import resize as resize_module
from shardq.admin import actions as admin
from shardq.admin.stats import StatsOptions, collect_plan
from shardq.lifecycle import history, key_limits, key_slots, waiting
from shardq.lifecycle.enqueue import BATCH_SIZE_DEFAULT, Producer
from shardq.lifecycle.notify import Notifier
from shardq.maintenance import periodic
from shardq.maintenance.periodic import Schedule, ScheduleView
from shardq.maintenance.reaper import Reaper, ReaperConfig, ReapResult
from shardq.migrations import apply as migrate_module
from shardq.models.history import FinishedTask, TaskStatus
from shardq.models.queues import QueueSettings
from shardq.models.stats import Stats
from shardq.models.tasks import ClaimedTask, DeadTask, EnqueueResult, NewTask, TaskOptions
from shardq.models.workflow_graph import Graph
from shardq.operations import durable
from shardq.resize.results import ResizeResult
from shardq.sessions.borrowed import borrow
from shardq.sessions.dsn import Dsn, resolve_dsn
from shardq.sessions.per_thread import SessionPerThread
from shardq.sessions.session import Session
from shardq.sessions.store import TaskStore
from shardq.worker.config import WorkerConfig, WorkerTotals
from shardq.worker.contract import Handler, Resolver
from shardq.worker.runtime import Worker
from shardq.workflows import steps as workflows


class Client:
    def __init__(self, dsn: str | Dsn | None = None, *, application_name: str = "shardq", notify: bool = True) -> None:
        """``notify``: after enqueues, wake idle workers over LISTEN/NOTIFY (PostgreSQL only,
        throttled; see :mod:`shardq.lifecycle.notify`)."""
        self.dsn = resolve_dsn(dsn)
        self.application_name = application_name
        self.notifier = Notifier() if notify else None
        self._guard = threading.Lock()
        self._all: list[Session] = []  # every session made, for close()
        self._threads = SessionPerThread(self.new_session)
        self._producers = threading.local()

    def new_session(self, *, statement_timeout_ms: int | None = None) -> Session:
        session = Session(self.dsn, application_name=self.application_name, statement_timeout_ms=statement_timeout_ms)
        with self._guard:
            self._all.append(session)
        return session

    @property
    def store(self) -> TaskStore:
        """This thread's store (and session)."""
        return self._threads.store()

    def producer(self, connection: object | None = None) -> Producer:
        """This thread's :class:`~shardq.lifecycle.enqueue.Producer` (made on its first use), or with
        ``connection`` one that writes on the caller's connection (see :meth:`enqueue`)."""
        if connection is not None:
            return Producer(TaskStore(borrow(connection)), notifier=self.notifier)
        producer: Producer | None = getattr(self._producers, "producer", None)
        if producer is None:
            producer = self._producers.producer = Producer(self.store, notifier=self.notifier)
        return producer

    @property
    def dialect(self) -> str:
        return self.store.dialect

    def close(self) -> None:
        """Close every session (no thread may use the client meanwhile), after writing the
        enqueue counts still held in memory (see :meth:`TaskStore.count_enqueued`)."""
        threads, self._threads = self._threads, SessionPerThread(self.new_session)
        self._producers = threading.local()
        threads.close()
        with self._guard:
            for session in self._all:
                session.close()
            self._all.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema -----------------------------------------------------------------------------
    def migrate(self, *, buckets: int = 16) -> migrate_module.MigrationResult:
        return migrate_module.upgrade(self.dsn, buckets=buckets)

    # -- producing --------------------------------------------------------------------------
    def enqueue(
        self, queue: str, payload: bytes | str, *, connection: object | None = None, **options: Unpack[TaskOptions]
    ) -> EnqueueResult:
        """Enqueue one task; ``options`` are the :class:`~shardq.models.TaskOptions` (``delay``,
        ``run_at``, ``dedupe_key``, ``max_attempts``, ``priority``, ``exclusive_key``,
        ``dedupe_for``; see :meth:`shardq.lifecycle.enqueue.Producer.enqueue`). With ``connection`` (a
        psycopg ``Connection``, or a SQLAlchemy ``Session`` or ``Connection`` on psycopg) the task is written on that
        connection inside its transaction and nothing is committed: the task exists exactly when
        the caller commits (see :class:`shardq.sessions.borrowed.BorrowedSession`)."""
        return self.producer(connection).enqueue(queue, payload, **options)

    def enqueue_many(
        self,
        queue: str,
        tasks: Iterable[NewTask | bytes | str],
        *,
        batch_size: int = BATCH_SIZE_DEFAULT,
        connection: object | None = None,
    ) -> EnqueueResult:
        """Enqueue many tasks, ``batch_size`` per statement; ``connection`` as for :meth:`enqueue`."""
        return self.producer(connection).enqueue_many(queue, tasks, batch_size=batch_size)

    # -- consuming --------------------------------------------------------------------------
    def worker(
        self,
        queues: Sequence[str],
        handler: Handler | Resolver,
        *,
        on_event: Callable[[str, ClaimedTask | None, dict[str, Any]], None] | None = None,
        events: Collection[str] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        **options: Any,
    ) -> Worker:
        """A :class:`Worker` for ``queues``; ``options`` are :class:`WorkerConfig` fields;
        ``on_event``/``events`` are the worker's event hook and the events it wants; ``loop``: run
        async handlers on this running event loop (see :class:`Worker`). Its sessions carry
        ``statement_timeout`` (default 10 s)."""
        if isinstance(queues, (str, bytes)) or not isinstance(queues, Iterable):
            raise validation.InvalidInput("queues must be a list of queue names (not one string)")
        config = WorkerConfig(queues=tuple(queues), **options).validate()
        timeout_ms = validation.milliseconds(config.statement_timeout)
        return Worker(
            lambda: self.new_session(statement_timeout_ms=timeout_ms),
            handler,
            config,
            on_event=on_event,
            events=events,
            loop=loop,
        )

    def work(
        self,
        queues: Sequence[str],
        handler: Handler | Resolver,
        *,
        install_signal_handlers: bool = True,
        **options: Any,
    ) -> WorkerTotals:
        """Run a worker in this thread until it stops (signal, or ``until_empty=True``)."""
        return self.worker(queues, handler, **options).run(install_signal_handlers=install_signal_handlers)

    def reaper(self, **options: Any) -> Reaper:
        """A :class:`Reaper` on its own session; ``options`` are :class:`ReaperConfig` fields. Its
        session carries ``statement_timeout`` (default 30 s)."""
        config = ReaperConfig(**options).validate()
        session = self.new_session(statement_timeout_ms=validation.milliseconds(config.statement_timeout))
        return Reaper(TaskStore(session), config)

    def reap_once(self) -> ReapResult:
        return Reaper(self.store).run_once()

    # -- operating --------------------------------------------------------------------------
    # Every call AsyncClient shares runs the very plan it awaits, its input checked by the same
    # functions before anything is sent (tests/test_client_twins.py).
    def stats(self, **options: Any) -> Stats:
        """A stats snapshot (see :mod:`shardq.admin.stats`); ``options`` are
        :class:`shardq.admin.stats.StatsOptions` fields. Unlike the command line, this reads the current
        state by default on CockroachDB too (``follower_read=False``): a program asking usually
        wants what it just did to show; pass ``follower_read=True`` for the cheaper historical read."""
        return self.store.run(collect_plan(stats_options(options)))

    def status(self, task_id: object) -> TaskStatus:
        """A task's state now, by id: scheduled, ready, running (with its attempt), retrying (with
        the time), succeeded, dead, cancelled, or unknown (no such id, or finished in a queue that
        keeps nothing, or past its retention), with its attempts (see :mod:`shardq.lifecycle.history`). A
        malformed id raises :class:`shardq.InvalidInput`."""
        return self.store.run(operations.task_status(history.parse_task_id(task_id)))

    def wait(self, task_id: object, timeout: float | None = None) -> Any:
        """Wait for a task's outcome: its result (None when it keeps none), or its failure raised
        (:class:`shardq.TaskDead`, :class:`shardq.TaskCancelled`, :class:`shardq.OutcomeNotKept`);
        :class:`shardq.WaitTimeout` after ``timeout`` seconds, leaving the task alone. Woken by
        the process's one listener on PostgreSQL, polling on CockroachDB (see :mod:`shardq.lifecycle.waiting`)."""
        wanted = history.parse_task_id(task_id)
        if timeout is not None:
            timeout = validation.non_negative_seconds(timeout, "timeout")
        return waiting.wait(
            lambda: self.store.run(operations.task_status(wanted)), wanted, timeout, waiting.listener_for(self.dsn)
        )

    def history(self, queue: str, **options: Any) -> list[FinishedTask]:
        """A page of ``queue``'s finished tasks, newest first; ``options``: ``state``, ``since``,
        ``after``, ``limit`` (see :func:`shardq.lifecycle.history.page_plan`)."""
        return self.store.run(history.page_plan(queue, **options))

    # -- workflows (shardq.workflows.steps) --------------------------------------------------------
    def enqueue_workflow(self, graph: Graph, *, connection: object | None = None) -> workflows.Enqueued:
        """Write a whole workflow in one transaction, or with ``connection`` inside the caller's
        (never committed here); a graph :func:`shardq.models.workflow_graph.check` refuses writes nothing.
        Usually reached through :meth:`shardq.App.workflow`."""
        if connection is not None:
            return TaskStore(borrow(connection)).run(workflows.enqueue_in_transaction_plan(graph))
        return self.store.run(workflows.enqueue_plan(graph))

    def workflow_status(self, workflow_id: object) -> workflows.WorkflowStatus:
        """A workflow's state and each step's, by id (state ``unknown`` for no such workflow)."""
        return self.store.run(workflows.status_plan(workflow_id))

    def parent_results(self, task_id: object) -> dict[str, object]:
        """The results of the parents of a workflow step, by step name (see
        :func:`shardq.workflows.steps.parent_results_plan`)."""
        return self.store.run(workflows.parent_results_plan(task_id))

    def cancel_workflow(self, workflow_id: object) -> int:
        """Cancel every step of a workflow not finished yet; returns how many."""
        return self.store.run(workflows.cancel_plan(workflow_id))

    def signal(self, task_id: object, name: str, payload: Any = None, *, key: str | None = None) -> bool:
        """Send signal ``name`` with a JSON ``payload`` to a live task, for its ``ctx.wait_for``
        (docs/durable.md): stored, and a task parked waiting for it made due now, in one
        transaction. ``key``: an idempotency key (a retry with the same key sends nothing twice).
        Returns whether it was new. :class:`shardq.TaskNotLive` (an :class:`InvalidInput`) for an
        unknown or finished task; a payload over 64 KiB of JSON is refused before anything is sent."""
        plan = durable.send_signal(history.parse_task_id(task_id), name, payload, key)
        return self.store.session.run(plan)

    def cancel(self, *ids: str) -> admin.CancelResult:
        """Cancel tasks by id, whatever their state, in one transaction (see
        :func:`shardq.admin.actions.cancel_plan`): ``cancelled`` and ``not_found`` list the ids
        given. A malformed id, or none, raises :class:`shardq.InvalidInput` before anything is sent."""
        return self.store.run(admin.cancel_plan(admin.parse_cancel_ids(ids)))

    # -- queues -----------------------------------------------------------------------------
    def queue_settings(self, queue: str) -> QueueSettings | None:
        """One queue's settings, or None for a queue shardq has not seen."""
        return self.store.run(admin.queue_show_plan(queue))

    def queues(self) -> list[QueueSettings]:
        """The settings of every queue shardq has seen, by name (one read)."""
        return self.store.run(operations.queue_list())

    def flow_usage(self) -> dict[str, tuple[int, int]]:
        """(slots held now, slots in all) of every queue with a concurrency limit, by queue (one
        read; see :mod:`shardq.lifecycle.flow`)."""
        return self.store.run(operations.flow_usage())

    def set_queue(self, queue: str, **changes: object) -> QueueSettings | None:
        """Change queue settings: lease_seconds (at least 1), max_attempts, backoff_base,
        backoff_cap, retry_jitter, exclusive_latest_only, paused_enqueue, paused_dequeue,
        timeout_seconds (``timeout_clear=True`` removes it); flow control: ``concurrency`` (at most
        N tasks running at once across all workers), ``rate`` (at most R starts per second) and
        ``burst`` (default R), 0 removing a limit; the history: ``keep_finished_seconds`` and
        ``keep_results`` (see :func:`shardq.admin.actions.queue_set_plan`). None leaves a setting
        unchanged; a queue not seen yet is created with the defaults first. Every change is checked
        before anything is sent; limits change in one transaction with the rows enforcing them."""
        return self.store.run(admin.queue_set_plan(queue, changes))

    def set_key_limit(self, queue: str, pattern: str, limit: int) -> None:
        """At most ``limit`` live tasks of ``queue`` per concurrency key matching ``pattern`` (a key,
        or a prefix followed by ``*``), fleet-wide (:mod:`shardq.lifecycle.key_limits`)."""
        self.store.run(key_limits.set_plan(queue, pattern, limit))

    def remove_key_limit(self, queue: str, pattern: str) -> bool:
        """Remove a limit per key; False when there was none."""
        return self.store.run(key_limits.remove_plan(queue, pattern))

    def key_limits(self, queue: str) -> dict[str, int]:
        """The limits per key of ``queue``: pattern -> limit."""
        return {limit.pattern: limit.max_running for limit in self.store.run(key_slots.limits_plan(queue))}

    def pause(self, queue: str, *, enqueue: bool = True, dequeue: bool = True) -> QueueSettings | None:
        """Pause enqueue and/or dequeue of ``queue`` (both by default); returns its settings."""
        return self.store.run(admin.queue_set_plan(queue, admin.pause_changes(True, enqueue=enqueue, dequeue=dequeue)))

    def resume(self, queue: str, *, enqueue: bool = True, dequeue: bool = True) -> QueueSettings | None:
        """Resume enqueue and/or dequeue of ``queue`` (both by default); returns its settings."""
        return self.store.run(admin.queue_set_plan(queue, admin.pause_changes(False, enqueue=enqueue, dequeue=dequeue)))

    # -- operators' calls (the command line's; sync only) --------------------------------------------
    def dead_tasks(
        self, queue: str, *, limit: int = 100, after: tuple[dt.datetime, uuid.UUID] | None = None
    ) -> list[DeadTask]:
        """A queue's dead tasks, oldest death first: the first ``limit``, or the next ``limit``
        ``after`` the (died_at, id) of the last one seen; one index seek per page, however deep
        (see :func:`shardq.admin.actions.dead_list`)."""
        return admin.dead_list(self.store, queue, limit=limit, after=after)

    def requeue_dead(self, queue: str, ids: Sequence[str] = (), *, all_tasks: bool = False) -> admin.RequeueResult:
        """Move dead tasks of ``queue`` back into it with fresh attempts, due now: the given ids, or
        every one with ``all_tasks`` (a page of 1,000 per transaction). A dead task whose dedupe key
        is live again stays dead (counted in ``not_found_or_kept``); a requeued workflow step
        resumes its workflow. Exactly one of ids and ``all_tasks``, else :class:`shardq.InvalidInput`
        (see :func:`shardq.admin.actions.dead_requeue`)."""
        return admin.dead_requeue(self.store, queue, list(ids), all_tasks=all_tasks)

    def purge_dead(self, queue: str) -> int:
        """Delete every dead task of ``queue``, 1,000 per statement; returns how many (see
        :func:`shardq.admin.actions.dead_purge`)."""
        return admin.dead_purge(self.store, queue)

    def buckets(self, *, historical: bool = True) -> admin.BucketReport:
        """The bucket layout, rows per bucket and any resize in progress. With ``historical`` (the
        default) CockroachDB counts from a read a few seconds old, never waiting on claimers (see
        :func:`shardq.admin.actions.buckets_show`)."""
        return admin.buckets_show(self.store, historical=historical)

    def schedules(self, schedules: Sequence[Schedule]) -> list[ScheduleView]:
        """Each of ``schedules`` (an app's, :attr:`shardq.App.schedules`) with its last slot taken
        and its next one, by name (one read; see :func:`shardq.maintenance.periodic.describe`)."""
        return periodic.describe(self.store, list(schedules))

    def resize_buckets(self, buckets: int, **options: Any) -> ResizeResult:
        """Change the bucket count online while producers and consumers keep running; see
        :func:`shardq.resize.resize_buckets` for what is guaranteed and the options."""
        return resize_module.resize_buckets(self.new_session, buckets, **options)


def stats_options(options: dict[str, Any]) -> StatsOptions:
    """The options of :meth:`Client.stats` and :meth:`shardq.AsyncClient.stats`, checked before
    anything is sent: :class:`~shardq.admin.stats.StatsOptions` fields, ``follower_read`` False
    unless given."""
    return StatsOptions(**{"follower_read": False, **options}).validate()


def connect(dsn: str | Dsn | None = None, **options: Any) -> Client:
    """A :class:`Client` for ``dsn``, ``SHARDQ_DSN``, or the embedded PostgreSQL."""
    return Client(dsn, **options)
