"""The worker: its parts wired together, started, and stopped gracefully."""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import threading
import time
from collections.abc import Callable, Collection

from shardq.errors import DatabaseError, InvalidInput
from shardq.maintenance.lease_sweeper import LeaseSweeper
from shardq.maintenance.periodic import Scheduler
from shardq.models.tasks import Task
from shardq.sessions.per_thread import SessionPerThread
from shardq.sessions.session import Session
from shardq.worker.collector import paced
from shardq.worker.config import WorkerConfig, WorkerTotals
from shardq.worker.contract import Application, Handler, Resolver
from shardq.worker.events import EventHook, EventSink
from shardq.worker.fetcher import Fetcher
from shardq.worker.handoff import Handoff
from shardq.worker.inflight import InFlightTable
from shardq.worker.lease_keeper import LeaseKeeper
from shardq.worker.loop_executor import LoopExecutor
from shardq.worker.outcomes import Outbox
from shardq.worker.settler import Settler
from shardq.worker.thread_executor import ThreadExecutor
from shardq.worker.timeouts import TimeoutKeeper

log = logging.getLogger("shardq.worker")

__all__ = ["Handler", "Worker", "runs_on_loop"]


def runs_on_loop(handler: Handler | Resolver) -> bool:
    """Whether ``handler`` needs the event loop: an ``async def`` function (or a callable object
    whose ``__call__`` is one), or a resolver with async functions."""
    if isinstance(handler, Resolver):
        return handler.has_async
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - a callable object's own __call__
    )


class Worker:
    """Runs ``handler`` over tasks of ``config.queues`` until stopped.

    ``handler`` is a function of one :class:`~shardq.Task` (sync or ``async def``), or a resolver
    (an app's dispatch). ``session_factory`` makes a new :class:`~shardq.sessions.session.Session` for each
    thread that needs one: the fetcher, the settler, the lease keeper, and handler threads that
    call ``task.extend``. ``loop`` (async handlers only): run them on this event loop, which must
    be running in another thread (``await client.work(...)``); default: a loop of the worker's
    own. ``on_event`` (optional) is called with (event name, task or None, details dict) for each
    claim, handler run, ack, retry, dead letter, release and lost lease (see :mod:`shardq.worker`).
    """

    def __init__(
        self,
        session_factory: Callable[[], Session],
        handler: Handler | Resolver,
        config: WorkerConfig,
        *,
        on_event: EventHook | None = None,
        events: Collection[str] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not callable(handler) and not isinstance(handler, Resolver):
            raise InvalidInput(f"a handler must be callable, not {type(handler).__name__}")
        self.config = config.validate()
        self.handler = handler
        # An app's periodic schedules: every worker running the app takes their due slots.
        app = handler if isinstance(handler, Application) else None
        schedules = list(app.schedules.values()) if app is not None and self.config.periodic else []
        self.session_factory = session_factory
        self.totals = WorkerTotals()
        self.sink = EventSink(on_event, events)
        self._stop = threading.Event()
        self._force = threading.Event()
        self.sessions = SessionPerThread(session_factory)
        self.table = InFlightTable(
            config.concurrency,
            batch=config.batch,
            prefetch=config.effective_prefetch,
            ack_batch=config.ack_batch,
            lanes=self.config.lanes,
        )
        self.outbox = Outbox()
        self.lease_keeper = LeaseKeeper(self.config, self.sessions, self.table, self._stop)
        self.executor: ThreadExecutor | LoopExecutor
        self.timeout_keeper: TimeoutKeeper | None = None
        if runs_on_loop(handler):
            self.executor = LoopExecutor(
                handler,
                self.table,
                self.outbox,
                self.sink,
                self.totals,
                self._stop,
                self.lease_keeper.extend,
                blocked_loop_seconds=config.blocked_loop_seconds,
                loop=loop,
                on_abandoned=self._after_abandoned,
            )
        else:
            resolve = None
            run: Handler
            if app is not None:  # an app, all of its tasks sync
                if app.has_timeouts:
                    resolve = app.resolve  # per-task timeouts: resolved before each run
                run = app.dispatch
            elif isinstance(handler, Resolver):  # another resolver: its tasks may carry timeouts
                resolve = handler.resolve
                run = _sync_dispatch(handler)
            else:
                run = handler
            self.executor = ThreadExecutor(
                run,
                self.table,
                self.outbox,
                self.sink,
                self.totals,
                self._stop,
                self.lease_keeper.extend,
                resolve=resolve,
            )
            self.timeout_keeper = TimeoutKeeper(
                self.table, self.outbox, self.totals, self.executor.replace_slot, self._after_abandoned
            )
        self.scheduler = Scheduler(self.sessions.store, schedules) if schedules else None
        handoff = Handoff(self.config, self.table, self.executor, self.sink, self.totals)
        self.settler = Settler(
            self.config, self.sessions, self.table, self.outbox, self.sink, self.totals, self._stop, handoff=handoff
        )
        self.sweeper = LeaseSweeper(self.sessions, self._stop, queues=self.config.queues) if self.config.sweep else None
        self.fetcher = Fetcher(
            self.config,
            self.sessions,
            self.table,
            self.executor,
            self.sink,
            self.totals,
            self._stop,
            sweeper=self.sweeper,
        )
        self.stopped = threading.Event()

    @property
    def on_event(self) -> EventHook | None:
        """The event hook (settable before :meth:`run`)."""
        return self.sink.hook

    @on_event.setter
    def on_event(self, hook: EventHook | None) -> None:
        self.sink.hook = hook
        self.sink.refresh()

    def _after_abandoned(self) -> None:
        """A handler thread was left running past its task's timeout (the timeout keeper's, or
        the loop executor's pool): at ``max_abandoned`` of them, stop so a supervisor restarts
        the process (:attr:`WorkerTotals.abandoned_limit_reached`)."""
        if self.totals.reached_abandoned_limit(self.config.abandoned_limit):
            log.error(
                "%d handler threads abandoned after their timeouts (limit %d): stopping this worker so a "
                "supervisor can restart it",
                self.totals.abandoned,
                self.config.abandoned_limit,
            )
            self.stop()

    # -- control ----------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask for a graceful stop; :meth:`run` returns once it is done."""
        self._stop.set()
        self.table.fetch_wake.set()

    def handle_signal(self, signum: int, _frame: object) -> None:
        if self._stop.is_set():
            log.warning("second signal %s: handing back running tasks without waiting", signum)
            self._force.set()
        else:
            log.info("signal %s: stopping gracefully", signum)
        self.stop()

    # -- main -------------------------------------------------------------------------------
    def run(self, *, install_signal_handlers: bool = True) -> WorkerTotals:
        """Work until stopped; return the counters. Installs SIGTERM/SIGINT handlers when called
        from the main thread and ``install_signal_handlers`` is true. The calling thread is the
        fetcher's."""
        previous = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self.handle_signal)
        started: list[Callable[[], None]] = []
        try:
            with paced(self.config):  # shardq.worker.collector: until the parts have stopped
                try:
                    self._start_and_fetch(started)
                finally:
                    self._shutdown(started)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.sessions.close()
            self.stopped.set()
        return self.totals

    def _start_and_fetch(self, started: list[Callable[[], None]]) -> None:
        """Start the parts (``started`` collects what :meth:`_shutdown` must finish), then claim
        on this thread until stopped."""
        self.fetcher.connect()
        self.executor.start()
        started.append(self._finish_executor)
        if self.timeout_keeper is not None:
            self.timeout_keeper.thread.start()
        self.settler.thread.start()
        self.lease_keeper.thread.start()  # renews leases with heartbeat; keeps the registry row always
        if self.scheduler is not None:
            self.scheduler.thread.start()
        if self.sweeper is not None:
            self.sweeper.thread.start()
        self.fetcher.run()

    @property
    def stats(self) -> WorkerTotals:
        """The former name of :attr:`totals`, kept so existing code runs; new code reads ``totals``
        (*stats* is the operator's snapshot, ``shardq stats``)."""
        return self.totals

    # -- shutdown ---------------------------------------------------------------------------
    def _finish_executor(self) -> None:
        self.executor.hand_back_unstarted()
        deadline = time.monotonic() + self.config.grace_seconds
        finished = self.executor.finish(deadline, self._force)
        if self.timeout_keeper is not None:
            self.timeout_keeper.done.set()
            self.timeout_keeper.thread.join(timeout=5.0)
        if not finished:
            stuck = self.table.running()
            log.warning("%d tasks still running after the grace period; handing them back", len(stuck))
            for entry in stuck:
                self.outbox.outcomes.append(entry.released())

    def _shutdown(self, started: list[Callable[[], None]]) -> None:
        """No new claims; unstarted tasks go back at once; running handlers get ``grace_seconds``;
        then every outcome is settled and the settler and lease keeper stop."""
        self._stop.set()
        if self.scheduler is not None:
            self.scheduler.stop_event.set()
            if self.scheduler.thread.is_alive():
                self.scheduler.thread.join(timeout=10.0)
        for finish in started:
            finish()
        if self.table.flow.pools:
            try:  # on this (the fetcher's) thread and session; if it fails the slots expire
                self.table.flow.release_all(self.sessions.store())
            except DatabaseError as exc:
                log.warning("could not give back concurrency slots (they expire within a lease): %s", exc)
        self.outbox.outcomes.append(None)
        self.outbox.wake.set()
        if self.settler.thread.is_alive():
            self.settler.thread.join(timeout=max(5.0, self.config.grace_seconds))
        if self.lease_keeper.thread.is_alive():
            self.lease_keeper.thread.join(timeout=5.0)
        if self.sweeper is not None and self.sweeper.thread.is_alive():
            self.sweeper.thread.join(timeout=5.0)


def _sync_dispatch(resolver: Resolver) -> Handler:
    """A resolver whose functions are all sync, as a plain handler for the thread executor."""
    resolve = resolver.resolve

    def dispatch(task: Task) -> object:
        call, _is_async, _timeout = resolve(task)
        return call()

    return dispatch
