"""The timeout keeper: settles sync tasks that run past their execution timeout.

A task's timeout is its app task's ``timeout``, else its queue's ``timeout_seconds``, else the
worker's ``timeout`` (none by default). An async task past its timeout is cancelled by the event
loop executor itself. A sync task's thread cannot be stopped, so this keeper, on its own thread
(no database session: it only hands outcomes to the settler):

* settles the task at once as a failed attempt whose error says ``timeout after S s`` (so it
  retries with backoff, then dead-letters, like any failure);
* abandons the handler's thread: whatever it returns later is dropped (and the lease it held is
  fenced off like any lost lease), and a new thread takes its slot, so the worker keeps its
  concurrency;
* once ``max_abandoned`` threads (default twice ``concurrency``) are left running, stops the
  worker: it claims nothing more, finishes what it holds and :meth:`shardq.Worker.run` reports
  ``abandoned_limit_reached`` (``shardq work`` then exits 1 for a supervisor to restart it).

It looks every ``TICK_SECONDS``: a timeout is enforced within that much of its deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from shardq.worker.config import WorkerTotals
from shardq.worker.inflight import FAIL, InFlight, InFlightTable, timeout_text
from shardq.worker.outcomes import Outbox

log = logging.getLogger("shardq.worker")

TICK_SECONDS = 0.1


class TimeoutKeeper:
    def __init__(
        self,
        table: InFlightTable,
        outbox: Outbox,
        totals: WorkerTotals,
        replace_slot: Callable[[InFlight], None],
        on_abandoned: Callable[[], None],
    ) -> None:
        self.table, self.outbox, self.totals = table, outbox, totals
        self.replace_slot = replace_slot
        self.on_abandoned = on_abandoned
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, name="shardq-timeout-keeper", daemon=True)

    def run(self) -> None:
        while not self.done.wait(TICK_SECONDS):
            self.check()

    def check(self, now: float | None = None) -> int:
        """Settle every running task past its deadline; returns how many."""
        now = time.monotonic() if now is None else now
        expired: list[InFlight] = []
        with self.table.lock:
            for entry in self.table.entries.values():
                if entry.running and not entry.abandoned and entry.timeout_at is not None and now >= entry.timeout_at:
                    entry.abandoned = True  # under the lock: its slot sees it when the handler returns
                    expired.append(entry)
        for entry in expired:
            assert entry.timeout is not None
            outcome = InFlight(
                entry.claimed,
                entry.local_deadline,
                entry.claim,
                kind=FAIL,
                error=timeout_text(entry.timeout),
                seconds=entry.timeout,
                timeout=entry.timeout,
                timed_out=True,
            )
            self.outbox.outcomes.append(outcome)
            self.table.note_timed_out(entry.claimed.queue)  # this thread's counter: the task no longer holds its slot
            claim = entry.claim
            if next(claim.finished) >= claim.size:
                self.outbox.wake.set()
            self.totals.add(timeouts=1, abandoned=1)
            log.warning(
                "task %s (queue %s) ran past its %g s timeout: settled as failed; its thread is left "
                "running and replaced (%d abandoned so far)",
                entry.claimed.id,
                entry.claimed.queue,
                entry.timeout,
                self.totals.abandoned,
                extra={"event": "timeout", "task_id": entry.claimed.id, "queue": entry.claimed.queue},
            )
            self.replace_slot(entry)
            self.on_abandoned()
        return len(expired)
