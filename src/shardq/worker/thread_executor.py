"""Sync handlers on threads: :class:`ThreadExecutor` (see :mod:`shardq.worker`)."""

from __future__ import annotations

import queue as queue_module
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from shardq.lifecycle.flow import SEAT_WAIT_SECONDS
from shardq.models.history import KeptResult, encode_result
from shardq.models.tasks import Task
from shardq.worker.config import WorkerTotals
from shardq.worker.events import EventSink
from shardq.worker.inflight import HAND_BACK, InFlight, InFlightTable
from shardq.worker.outcomes import Intake, Outbox, record_failure

Extend = Callable[..., Any]


class ThreadExecutor:
    """``table.slots`` handler threads over one hand-off queue."""

    def __init__(
        self,
        handler: Callable[[Task], object],
        table: InFlightTable,
        outbox: Outbox,
        sink: EventSink,
        totals: WorkerTotals,
        stop: threading.Event,
        extend: Extend,
        *,
        resolve: Callable[[Task], tuple[Callable[[], Any], bool, float | None]] | None = None,
    ) -> None:
        self.handler = handler
        #: an app's dispatch whose tasks may carry their own timeouts (else None: plain calls)
        self.resolve = resolve
        self.table, self.outbox, self.sink, self.totals = table, outbox, sink, totals
        self.stop_event = stop
        self.extend = extend
        # SimpleQueue (C, no task accounting): one put and one get per task are the whole
        # hand-off cost between the fetcher and the handlers.
        self._work: queue_module.SimpleQueue[InFlight | None] = queue_module.SimpleQueue()
        #: one hand-off queue per lane (a worker with per-queue shares, shardq.worker.shares): slot i
        #: takes from its lane's; without shares the one queue above
        self._lanes = [self._work] + [queue_module.SimpleQueue() for _ in table.lane_sizes[1:]]
        self._threads = [
            threading.Thread(target=self._slot, args=(i,), name=f"shardq-handler-{i}", daemon=True)
            for i in range(table.slots)
        ]
        self._abandoned_slots: set[int] = set()  # slot i runs on self._threads[i]
        self._intake = Intake()

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def replace_slot(self, abandoned: InFlight) -> None:
        """A new handler thread in place of the one running ``abandoned`` past its timeout (that
        one is not waited for at shutdown)."""
        self._abandoned_slots.add(abandoned.slot)
        lane = self.table.slot_lane[abandoned.slot] if abandoned.slot >= 0 else 0
        slot = self.table.add_slot(lane)
        thread = threading.Thread(target=self._slot, args=(slot,), name=f"shardq-handler-{slot}", daemon=True)
        self._threads.append(thread)
        thread.start()
        if self.stop_event.is_set():
            self._lanes[lane].put(None)  # stopping: the new slot's end marker (finish queued the others' already)

    def submit(self, entries: Sequence[InFlight]) -> None:
        if self.table.lanes is not None:
            lanes, lane_of = self._lanes, self.table.lane_of
            for entry in entries:
                lanes[lane_of(entry.claimed.queue)].put(entry)
            return
        put = self._work.put
        for entry in entries:
            put(entry)

    def submit_taken(self, entries: Sequence[InFlight]) -> bool:
        """:meth:`submit` tasks the settler's ack took, unless the worker is stopping (False)."""
        return self._intake.submit(lambda: self.submit(entries))

    def _slot(self, slot: int) -> None:  # noqa: C901 - a handler slot's outcomes, one per branch
        lane = self.table.slot_lane[slot]
        work, put, stop = self._lanes[lane], self.outbox.outcomes.append, self.stop_event
        wake, settle_wake = self.table.fetch_wake, self.outbox.wake
        started, finished = self.table.started, self.table.finished
        low_water = self.table.low_water if self.table.lanes is None else self.table.lane_low_water[lane]
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
            if (
                stop.is_set()
                or monotonic() >= entry.local_deadline
                or (flow_pools and (not flow_seat(entry.claimed, SEAT_WAIT_SECONDS) or stop.is_set()))
            ):
                # Not started: hand it back rather than run a task that may be elsewhere (or, claimed
                # ahead, one that found no idle slot of its queue's limit in time).
                entry.kind = HAND_BACK
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
                    value = handler(Task(entry.claimed, extend)) if call is None else call()
                    if type(value) is KeptResult:  # an app's task declared with result=True
                        entry.result = value.text
                    elif entry.keep_result and value is not None:  # a queue that keeps results
                        entry.result = encode_result(value).text  # one that cannot be kept fails
                except BaseException as exc:  # noqa: BLE001 - any handler failure is a task failure
                    record_failure(entry, exc, self.totals)
                entry.seconds = perf_counter() - t0
                entry.ended_at = time.time()  # the latency counters' clock (worker.latency)
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
        self._intake.close()
        for work in self._lanes:
            while True:
                try:
                    entry = work.get_nowait()
                except queue_module.Empty:
                    break
                if entry is not None:
                    entry.kind = HAND_BACK
                    self.outbox.outcomes.append(entry)

    def finish(self, deadline: float, force: threading.Event) -> bool:
        """Let running handlers finish until ``deadline`` (monotonic) or ``force``; True if all did."""
        for slot in range(len(self._threads)):
            self._lanes[self.table.slot_lane[slot]].put(None)

        def waiting() -> list[threading.Thread]:  # a slot abandoned meanwhile is not waited for
            return [t for i, t in enumerate(list(self._threads)) if i not in self._abandoned_slots and t.is_alive()]

        while waiting() and not force.is_set() and time.monotonic() < deadline:
            waiting()[0].join(timeout=0.1)
        return not waiting()
