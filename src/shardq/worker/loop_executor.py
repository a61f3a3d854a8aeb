"""Async handlers on one event loop: :class:`LoopExecutor` (see :mod:`shardq.worker`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, cast

from shardq.errors import ResultNotStorable
from shardq.models.history import KeptResult, encode_result
from shardq.models.tasks import Task
from shardq.worker.config import WorkerTotals
from shardq.worker.contract import Resolver
from shardq.worker.events import EventSink
from shardq.worker.inflight import ACK, FAIL, HAND_BACK, InFlight, InFlightTable, timeout_text
from shardq.worker.outcomes import Intake, Outbox, record_failure
from shardq.worker.thread_executor import Extend

log = logging.getLogger("shardq.worker")


class LoopExecutor:
    """``table.slots`` coroutines on an event loop: ``loop`` (the caller's, running in another
    thread) or, when None, a loop on a thread of its own."""

    def __init__(
        self,
        handler: Callable[[Task], Any] | Resolver,
        table: InFlightTable,
        outbox: Outbox,
        sink: EventSink,
        totals: WorkerTotals,
        stop: threading.Event,
        extend: Extend,
        *,
        blocked_loop_seconds: float,
        loop: asyncio.AbstractEventLoop | None = None,
        on_abandoned: Callable[[], None] | None = None,
    ) -> None:
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
        #: one queue per lane (per-queue shares, shardq.worker.shares); the first is ``_queue``
        self._queues: list[asyncio.Queue[InFlight | None]] = []
        self._main: concurrent.futures.Future[None] | None = None
        self._ready = threading.Event()
        self._abandoned = False
        self._done = threading.Event()
        #: the slot coroutine's asyncio task -> the entry it runs (for the blocked-loop report)
        self._current: dict[asyncio.Task[Any], InFlight] = {}
        # Sync functions of a mixed app: at most one per slot at a time.
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=table.slots, thread_name_prefix="shardq-sync-task"
        )
        self._watchdog = threading.Thread(target=self._watch, name="shardq-loop-watchdog", daemon=True)
        self._probe_sent: float | None = None
        self._intake = Intake()

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

    def submit_taken(self, entries: Sequence[InFlight]) -> bool:
        """:meth:`submit` tasks the settler's ack took, unless the worker is stopping (False). The
        loop runs callbacks in the order they were scheduled, so a put before :meth:`hand_back_unstarted`
        closed the intake is drained by it."""
        return self._intake.submit(lambda: self.submit(entries))

    def hand_back_unstarted(self) -> None:
        self._intake.close()
        asyncio.run_coroutine_threadsafe(self._drain(), self._loop).result()

    def finish(self, deadline: float, force: threading.Event) -> bool:
        assert self._main is not None
        self._loop.call_soon_threadsafe(self._put_ends)
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
        self._queues = [self._queue] + [asyncio.Queue() for _ in self.table.lane_sizes[1:]]
        slots = [asyncio.ensure_future(self._slot(i)) for i in range(self.table.slots)]
        self._ready.set()
        try:
            await asyncio.gather(*slots)
        finally:
            for slot in slots:
                slot.cancel()

    def _put_many(self, entries: Sequence[InFlight]) -> None:
        assert self._queue is not None
        if self.table.lanes is not None:
            lane_of = self.table.lane_of
            for entry in entries:
                self._queues[lane_of(entry.claimed.queue)].put_nowait(entry)
            return
        for entry in entries:
            self._queue.put_nowait(entry)

    def _put_ends(self) -> None:
        """One end marker per slot, into its lane's queue."""
        for slot in range(self.table.slots):
            self._queues[self.table.slot_lane[slot]].put_nowait(None)

    async def _drain(self) -> None:
        for work in self._queues:
            while not work.empty():
                entry = work.get_nowait()
                if entry is not None:
                    entry.kind = HAND_BACK
                    self.outbox.outcomes.append(entry)
                else:
                    work.put_nowait(None)  # a slot's end marker: keep it (after this loop)
                    break

    async def _slot(self, slot: int) -> None:  # noqa: C901 - a handler slot's outcomes, one per branch
        assert self._queue is not None
        lane = self.table.slot_lane[slot]
        work, put, stop = self._queues[lane], self.outbox.outcomes.append, self.stop_event
        wake, settle_wake = self.table.fetch_wake, self.outbox.wake
        started, finished = self.table.started, self.table.finished
        low_water = self.table.low_water if self.table.lanes is None else self.table.lane_low_water[lane]
        handler, extend, monotonic, perf_counter = self.handler, self.extend, time.monotonic, time.perf_counter
        resolve: Callable[[Task], tuple[Callable[[], Any], bool, float | None]] | None = (
            handler.resolve if isinstance(handler, Resolver) else None
        )
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
                entry.kind = HAND_BACK
            else:
                entry.running = True
                current[me] = entry
                t0 = perf_counter()
                value: Any = None
                try:
                    task = Task(entry.claimed, extend)
                    call: Callable[[], Any]
                    if resolve is None:
                        call, is_async = partial(cast(Callable[[Task], Any], handler), task), True
                    else:
                        call, is_async, own_timeout = resolve(task)
                        if own_timeout is not None:
                            entry.timeout = own_timeout
                    running = call() if is_async else loop.run_in_executor(self._pool, call)
                    if entry.timeout is None:
                        value = await running
                    else:
                        entry.timeout_at = monotonic() + entry.timeout
                        try:
                            # In a task of its own (wait_for's), a KeyboardInterrupt or SystemExit
                            # from the handler would be re-raised out of the event loop.
                            value = await asyncio.wait_for(_contained(running) if is_async else running, entry.timeout)
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
                if entry.kind == ACK and value is not None:
                    kept_result(entry, value, self.totals)
                entry.seconds = perf_counter() - t0
                entry.ended_at = time.time()  # the latency counters' clock (worker.latency)
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
        log.warning(
            "task %s (queue %s) ran past its %g s timeout: %s",
            entry.claimed.id,
            entry.claimed.queue,
            entry.timeout,
            "its thread is left running" if abandoned_thread else "cancelled",
            extra={"event": "timeout", "task_id": entry.claimed.id, "queue": entry.claimed.queue},
        )
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
                        claimed.id,
                        claimed.queue,
                        blocked,
                        extra={"event": "blocked_loop", "task_id": claimed.id, "queue": claimed.queue},
                    )


def kept_result(entry: InFlight, value: object, totals: WorkerTotals) -> None:
    """Keep what an acked task's handler returned: the text of a task declared with
    ``result=True`` (encoded in its own call), or, for a queue that keeps results, the value
    encoded here; one that cannot be kept fails the attempt, as for a declared task."""
    if type(value) is KeptResult:
        entry.result = value.text
    elif entry.keep_result:
        try:
            entry.result = encode_result(value).text
        except ResultNotStorable as exc:
            record_failure(entry, exc, totals)


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
