"""Running handlers under the worker's concurrency limit: threads for sync handlers, one event
loop for async ones.

Both executors take claimed tasks from the fetcher (:meth:`submit`), run at most ``slots`` of them
at once, record each outcome on its entry and hand it to the settler, waking the settler only when
a claim's last outcome is in. A task whose lease ran out while it waited, or that was still waiting
when a stop was asked, is handed back instead of being started.

* :class:`ThreadExecutor`: ``slots`` threads, each running one task at a time. For sync handlers
  (and apps whose tasks are all sync): the fastest hand-off (one ``SimpleQueue`` put and get per
  task).
* :class:`LoopExecutor`: ``slots`` coroutines on one asyncio event loop (the worker's own loop
  thread, or the caller's loop for ``await client.work(...)``). Async handlers overlap while they
  await; sync tasks of a mixed app run on a pool of ``slots`` threads, so ``concurrency`` bounds
  both together. A handler that blocks the loop for ``blocked_loop_seconds`` or longer is logged
  on ``shardq.worker`` at WARNING with its task id, once per block.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue as queue_module
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol, cast

from ..consumer import Task
from ..errors import Permanent, Retry
from ..flow import SEAT_WAIT_SECONDS
from .config import WorkerTotals
from .events import EventSink
from .inflight import FAIL, RELEASE, RESCHEDULE, InFlight, InFlightTable, describe, timeout_text

log = logging.getLogger("shardq.worker")

Extend = Callable[..., Any]


class Resolver(Protocol):
    """A handler that picks the function per task (an app dispatching by task name):
    ``resolve(task)`` returns a zero-argument callable, whether it returns an awaitable, and the
    task's own execution timeout (None: the queue's or the worker's applies). ``has_async`` says
    whether any of its functions is async (then the loop executor runs it)."""

    @property
    def has_async(self) -> bool: ...

    def resolve(self, task: Task) -> tuple[Callable[[], Any], bool, float | None]: ...


def record_failure(entry: InFlight, exc: BaseException, totals: WorkerTotals) -> None:
    """Set the outcome of a handler that raised: Permanent dead-letters, Retry reschedules without
    using an attempt, anything else is a failed attempt."""
    if isinstance(exc, Permanent):
        entry.kind, entry.error, entry.permanent = FAIL, describe(exc), True
    elif isinstance(exc, Retry):
        entry.kind, entry.error, entry.delay = RESCHEDULE, describe(exc), exc.in_seconds
    else:
        totals.add(handler_errors=1)
        entry.kind, entry.error = FAIL, describe(exc)


class Outbox:
    """Where outcomes go: the settler's deque, and the event that wakes it. A deque rather than a
    blocking queue: the settler is woken once per claim, not once per task, so it does not take
    the GIL from the handlers per task."""

    def __init__(self) -> None:
        self.outcomes: deque[InFlight | None] = deque()
        self.wake = threading.Event()


class ThreadExecutor:
    """``table.slots`` handler threads over one hand-off queue."""

    def __init__(self, handler: Callable[[Task], object], table: InFlightTable, outbox: Outbox, sink: EventSink,
                 totals: WorkerTotals, stop: threading.Event, extend: Extend, *,
                 resolve: Callable[[Task], tuple[Callable[[], Any], bool, float | None]] | None = None) -> None:
        self.handler = handler
        #: an app's dispatch whose tasks may carry their own timeouts (else None: plain calls)
        self.resolve = resolve
        self.table, self.outbox, self.sink, self.totals = table, outbox, sink, totals
        self.stop_event = stop
        self.extend = extend
        # SimpleQueue (C, no task accounting): one put and one get per task are the whole
        # hand-off cost between the fetcher and the handlers.
        self._work: queue_module.SimpleQueue[InFlight | None] = queue_module.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._slot, args=(i,), name=f"shardq-handler-{i}", daemon=True)
            for i in range(table.slots)
        ]
        self._abandoned_slots: set[int] = set()  # slot i runs on self._threads[i]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def replace_slot(self, abandoned: InFlight) -> None:
        """A new handler thread in place of the one running ``abandoned`` past its timeout (that
        one is not waited for at shutdown)."""
        self._abandoned_slots.add(abandoned.slot)
        slot = self.table.add_slot()
        thread = threading.Thread(target=self._slot, args=(slot,), name=f"shardq-handler-{slot}", daemon=True)
        self._threads.append(thread)
        thread.start()
        if self.stop_event.is_set():
            self._work.put(None)  # stopping: the new slot's end marker (finish queued the others' already)

    def submit(self, entries: Sequence[InFlight]) -> None:
        put = self._work.put
        for entry in entries:
            put(entry)

    def _slot(self, slot: int) -> None:
        work, put, stop = self._work, self.outbox.outcomes.append, self.stop_event
        wake, settle_wake = self.table.fetch_wake, self.outbox.wake
        started, finished, low_water = self.table.started, self.table.finished, self.table.low_water
        handler, extend, monotonic, perf_counter = self.handler, self.extend, time.monotonic, time.perf_counter
        sink, resolve, lock = self.sink, self.resolve, self.table.lock
        flow_pools, flow_done, flow_seat = self.table.flow.pools, self.table.flow.finished, self.table.flow.seat
        while True:
            entry = work.get()
            if entry is None:
                return
            started[slot] += 1
            if work.qsize() <= low_water and not wake.is_set():
                wake.set()  # the buffer ran low: time for the fetcher's next claim
            if (stop.is_set() or monotonic() >= entry.local_deadline
                    or (flow_pools and (not flow_seat(entry.claimed, SEAT_WAIT_SECONDS) or stop.is_set()))):
                # Not started: hand it back rather than run a task that may be elsewhere (or, claimed
                # ahead, one that found no idle slot of its queue's limit in time).
                entry.kind = RELEASE
            else:
                t0 = perf_counter()
                try:
                    if resolve is None:
                        call = None
                    else:
                        call, _is_async, own_timeout = resolve(Task(entry.claimed, extend))
                        if own_timeout is not None:
                            entry.timeout = own_timeout
                    if entry.timeout is not None:
                        entry.slot = slot
                        entry.timeout_at = monotonic() + entry.timeout  # the timeout keeper watches it
                    entry.running = True  # one attribute store (atomic); the keepers read it under the lock
                    if call is None:
                        handler(Task(entry.claimed, extend))
                    else:
                        call()
                except BaseException as exc:  # noqa: BLE001 - any handler failure is a task failure
                    record_failure(entry, exc, self.totals)
                entry.seconds = perf_counter() - t0
                if entry.timeout is None:
                    entry.running = False  # awaiting its settle: nothing for the lease keeper to renew
                else:
                    with lock:
                        if entry.abandoned:
                            if flow_pools:
                                flow_done(entry.claimed)  # the abandoned thread is done at last
                            return  # settled as timed out meanwhile, and this slot already replaced
                        entry.running = False
                if sink.trace_handled:
                    sink.emit("handled", entry.claimed, seconds=entry.seconds, outcome=entry.kind)
            put(entry)
            finished[slot] += 1  # after the put: once nothing is in progress, every outcome is queued
            if flow_pools:
                flow_done(entry.claimed)  # its queue's slot is free: after the count the fetcher reads
            claim = entry.claim
            if next(claim.finished) >= claim.size:
                settle_wake.set()  # the claim's last outcome: settle it now

    def hand_back_unstarted(self) -> None:
        """Queue every task that has not started as handed back (at stop, even while every slot
        is busy; a slot that takes one first sees the stop and hands it back itself)."""
        while True:
            try:
                entry = self._work.get_nowait()
            except queue_module.Empty:
                return
            if entry is not None:
                entry.kind = RELEASE
                self.outbox.outcomes.append(entry)

    def finish(self, deadline: float, force: threading.Event) -> bool:
        """Let running handlers finish until ``deadline`` (monotonic) or ``force``; True if all did."""
        for _ in self._threads:
            self._work.put(None)

        def waiting() -> list[threading.Thread]:  # a slot abandoned meanwhile is not waited for
            return [t for i, t in enumerate(list(self._threads)) if i not in self._abandoned_slots and t.is_alive()]

        while waiting() and not force.is_set() and time.monotonic() < deadline:
            waiting()[0].join(timeout=0.1)
        return not waiting()


class LoopExecutor:
    """``table.slots`` coroutines on an event loop: ``loop`` (the caller's, running in another
    thread) or, when None, a loop on a thread of its own."""

    def __init__(self, handler: Callable[[Task], Any] | Resolver, table: InFlightTable, outbox: Outbox,
                 sink: EventSink, totals: WorkerTotals, stop: threading.Event, extend: Extend, *,
                 blocked_loop_seconds: float, loop: asyncio.AbstractEventLoop | None = None,
                 on_abandoned: Callable[[], None] | None = None) -> None:
        self.handler = handler
        self.table, self.outbox, self.sink, self.totals = table, outbox, sink, totals
        self.stop_event = stop
        self.extend = extend
        self.blocked_loop_seconds = blocked_loop_seconds
        #: called after a pool thread is abandoned (a sync task past its timeout)
        self.on_abandoned = on_abandoned
        self._own_loop = loop is None
        self._loop = loop or asyncio.new_event_loop()
        self._loop_thread: threading.Thread | None = None
        self._queue: asyncio.Queue[InFlight | None] | None = None
        self._main: concurrent.futures.Future[None] | None = None
        self._ready = threading.Event()
        self._abandoned = False
        self._done = threading.Event()
        #: the slot coroutine's asyncio task -> the entry it runs (for the blocked-loop report)
        self._current: dict[asyncio.Task[Any], InFlight] = {}
        # Sync functions of a mixed app: at most one per slot at a time.
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=table.slots,
                                                           thread_name_prefix="shardq-sync-task")
        self._watchdog = threading.Thread(target=self._watch, name="shardq-loop-watchdog", daemon=True)
        self._probe_sent: float | None = None

    # -- lifecycle (called from the worker's thread) ------------------------------------------
    def start(self) -> None:
        if self._own_loop:
            self._loop_thread = threading.Thread(target=self._loop.run_forever, name="shardq-event-loop", daemon=True)
            self._loop_thread.start()
        self._main = asyncio.run_coroutine_threadsafe(self._run(), self._loop)
        self._ready.wait()
        self._watchdog.start()

    def submit(self, entries: Sequence[InFlight]) -> None:
        self._loop.call_soon_threadsafe(self._put_many, entries)

    def hand_back_unstarted(self) -> None:
        asyncio.run_coroutine_threadsafe(self._drain(), self._loop).result()

    def finish(self, deadline: float, force: threading.Event) -> bool:
        assert self._main is not None
        self._loop.call_soon_threadsafe(self._put_many, [None] * self.table.slots)
        finished = False
        while not force.is_set() and time.monotonic() < deadline:
            try:
                self._main.result(timeout=0.1)
                finished = True
                break
            except concurrent.futures.TimeoutError:
                continue
        if not finished:
            # The worker hands back copies of the running entries; the slots must not queue theirs.
            self._abandoned = True
            self._main.cancel()  # thread-safe: cancels the slots' task on its loop
            concurrent.futures.wait([self._main], timeout=5.0)  # let the cancellation unwind
        self._done.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._own_loop and self._loop_thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(timeout=5.0)
            if not self._loop_thread.is_alive():
                self._loop.close()
        return finished

    # -- on the loop ----------------------------------------------------------------------------
    async def _run(self) -> None:
        self._queue = asyncio.Queue()
        slots = [asyncio.ensure_future(self._slot(i)) for i in range(self.table.slots)]
        self._ready.set()
        try:
            await asyncio.gather(*slots)
        finally:
            for slot in slots:
                slot.cancel()

    def _put_many(self, entries: Sequence[InFlight | None]) -> None:
        assert self._queue is not None
        for entry in entries:
            self._queue.put_nowait(entry)

    async def _drain(self) -> None:
        assert self._queue is not None
        while not self._queue.empty():
            entry = self._queue.get_nowait()
            if entry is not None:
                entry.kind = RELEASE
                self.outbox.outcomes.append(entry)
            else:
                self._queue.put_nowait(None)  # a slot's end marker: keep it (after this loop)
                break

    async def _slot(self, slot: int) -> None:
        assert self._queue is not None
        work, put, stop = self._queue, self.outbox.outcomes.append, self.stop_event
        wake, settle_wake = self.table.fetch_wake, self.outbox.wake
        started, finished, low_water = self.table.started, self.table.finished, self.table.low_water
        handler, extend, monotonic, perf_counter = self.handler, self.extend, time.monotonic, time.perf_counter
        resolve = getattr(handler, "resolve", None)
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        assert me is not None
        sink, current = self.sink, self._current
        flow_pools, flow_done, flow_seat = self.table.flow.pools, self.table.flow.finished, self.table.flow.seat
        while True:
            entry = await work.get()
            if entry is None:
                return
            started[slot] += 1
            if work.qsize() <= low_water and not wake.is_set():
                wake.set()
            # No wait for a slot here: it would block the loop (and this pool frees a timed-out task's
            # slot at its timeout, so its coroutines never outnumber the slots).
            if stop.is_set() or monotonic() >= entry.local_deadline or (flow_pools and not flow_seat(entry.claimed)):
                entry.kind = RELEASE
            else:
                entry.running = True
                current[me] = entry
                t0 = perf_counter()
                try:
                    task = Task(entry.claimed, extend)
                    if resolve is None:
                        call, is_async = partial(cast(Callable[[Task], Any], handler), task), True
                    else:
                        call, is_async, own_timeout = resolve(task)
                        if own_timeout is not None:
                            entry.timeout = own_timeout
                    running = call() if is_async else loop.run_in_executor(self._pool, call)
                    if entry.timeout is None:
                        await running
                    else:
                        entry.timeout_at = monotonic() + entry.timeout
                        try:
                            # In a task of its own (wait_for's), a KeyboardInterrupt or SystemExit
                            # from the handler would be re-raised out of the event loop.
                            await asyncio.wait_for(_contained(running) if is_async else running, entry.timeout)
                        except TimeoutError:
                            if monotonic() < entry.timeout_at:
                                raise  # the handler's own timeout, not ours
                            self._timed_out(entry, abandoned_thread=not is_async)
                except asyncio.CancelledError:
                    if self._abandoned or stop.is_set():
                        return  # handed back by the worker already (a copy was queued)
                    record_failure(entry, RuntimeError("the task's coroutine was cancelled"), self.totals)
                except BaseException as exc:  # noqa: BLE001 - any handler failure is a task failure
                    record_failure(entry, exc.raised if isinstance(exc, _Contained) else exc, self.totals)
                finally:
                    current.pop(me, None)
                entry.seconds = perf_counter() - t0
                entry.running = False
                if sink.trace_handled:
                    sink.emit("handled", entry.claimed, seconds=entry.seconds, outcome=entry.kind)
            if self._abandoned:
                return
            put(entry)
            finished[slot] += 1
            if flow_pools:
                flow_done(entry.claimed)  # its queue's slot is free: after the count the fetcher reads
            claim = entry.claim
            if next(claim.finished) >= claim.size:
                settle_wake.set()

    def _timed_out(self, entry: InFlight, *, abandoned_thread: bool) -> None:
        """Settle ``entry`` as a failed attempt: its coroutine was cancelled (async), or its pool
        thread is left running (sync task of a mixed app; counted as abandoned)."""
        assert entry.timeout is not None
        entry.kind, entry.error, entry.timed_out = FAIL, timeout_text(entry.timeout), True
        self.totals.add(timeouts=1, abandoned=1 if abandoned_thread else 0)
        log.warning("task %s (queue %s) ran past its %g s timeout: %s", entry.claimed.id, entry.claimed.queue,
                    entry.timeout, "its thread is left running" if abandoned_thread else "cancelled",
                    extra={"event": "timeout", "task_id": entry.claimed.id, "queue": entry.claimed.queue})
        if abandoned_thread and self.on_abandoned is not None:
            self.on_abandoned()

    def _probe_answered(self) -> None:
        self._probe_sent = None

    # -- watchdog thread ----------------------------------------------------------------------
    def _watch(self) -> None:
        """Send the loop a no-op now and then; when it stays unanswered for
        ``blocked_loop_seconds``, something on the loop is not awaiting: report the handler
        that is running (once per block)."""
        threshold = self.blocked_loop_seconds
        reported = False
        while not self._done.wait(threshold / 4):
            sent = self._probe_sent
            if sent is None:
                reported = False
                self._probe_sent = time.monotonic()
                try:
                    self._loop.call_soon_threadsafe(self._probe_answered)
                except RuntimeError:  # the loop is closed
                    return
                continue
            blocked = time.monotonic() - sent
            if blocked >= threshold and not reported:
                reported = True
                running = asyncio.current_task(self._loop)
                entry = self._current.get(running) if running is not None else None
                self.totals.add(blocked_loop_reports=1)
                if entry is None:
                    log.warning("the event loop has been blocked for %.1f s (not by a task handler)", blocked)
                else:
                    claimed = entry.claimed
                    log.warning(
                        "async handler of task %s (queue %s) has blocked the event loop for %.1f s: "
                        "other async tasks cannot run; await, or run blocking work in a thread",
                        claimed.id, claimed.queue, blocked,
                        extra={"event": "blocked_loop", "task_id": claimed.id, "queue": claimed.queue},
                    )


class _Contained(Exception):
    """A KeyboardInterrupt or SystemExit a handler raised, carried as an ordinary exception."""

    def __init__(self, raised: BaseException) -> None:
        super().__init__(raised)
        self.raised = raised


async def _contained(awaitable: Any) -> Any:
    """Await ``awaitable``, turning the exceptions asyncio re-raises out of a task's step (and so
    out of the event loop: KeyboardInterrupt, SystemExit) into :class:`_Contained`, so a handler
    that raises them fails its task instead of stopping the worker's loop."""
    try:
        return await awaitable
    except (KeyboardInterrupt, SystemExit) as exc:
        raise _Contained(exc) from exc
