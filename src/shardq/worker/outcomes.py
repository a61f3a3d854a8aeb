"""What both executors share: where a handler's outcome goes (:class:`Outbox`), how a handler
that raised is recorded (:func:`record_failure`), and whether the settler may still hand them
tasks (:class:`Intake`)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from shardq.error_text import describe
from shardq.errors import Parked, Permanent, Retry
from shardq.worker.config import WorkerTotals
from shardq.worker.inflight import FAIL, PARKED, RESCHEDULE, InFlight


def record_failure(entry: InFlight, exc: BaseException, totals: WorkerTotals) -> None:
    """Set the outcome of a handler that raised: Permanent dead-letters, Retry reschedules without
    using an attempt, Parked (a durable sleep or wait, already written) settles nothing, anything
    else is a failed attempt."""
    if isinstance(exc, Parked):
        entry.kind, entry.error = PARKED, exc.reason
    elif isinstance(exc, Permanent):
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


class Intake:
    """Whether an executor still takes tasks from the settler (the tasks its acks took,
    :mod:`shardq.worker.handoff`): until the worker stops, when the executor hands back what has not
    started (:meth:`close`, under the same lock, before it drains its queue). A task the settler
    offers after that is refused, and the settler hands it back itself: none is left in a queue
    nobody reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, put: Callable[[], None]) -> bool:
        """Run ``put`` unless closed; whether it ran."""
        with self._lock:
            if self._closed:
                return False
            put()
            return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
