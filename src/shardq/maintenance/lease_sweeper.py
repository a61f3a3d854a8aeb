"""The lease sweeper: every worker returns crashed workers' tasks to the queue, with no reaper.

A task whose worker died (SIGKILL, lost machine, a hung process) stays leased until someone sees
that its lease expired. ``shardq reap`` does that for every bucket; a fleet of workers alone does
it through this part of each worker: every ``every / TURNS_PER_ROUND`` seconds (jittered ±20 %)
the sweeper offers the next share of the buckets (``1 / TURNS_PER_ROUND`` of them, round-robin from
a random offset), takes the sweeping turn of those not swept fleet-wide in the last ``every``
seconds (one statement, see sql/common/sweeps.sql), and reaps exactly the buckets it took, with
the reaper's own code (:meth:`shardq.Reaper.reap`: the same fencing, backoff and dead letters).

Guarantees
    * Without any reaper process, a crashed worker's task runs again within its lease plus about
      ``every + every / TURNS_PER_ROUND`` seconds (3 s by default) plus its retry backoff, as long
      as one worker runs.
    * The fleet's sweeping work does not grow with the fleet: each bucket is swept about once per
      ``every`` seconds in all, however many workers run. What each worker adds is one small
      statement per turn offered (its share of the bucket rows, keyed writes).
    * Safe beside ``shardq reap`` processes and other workers: every change is fenced by the lease
      token and re-checks the expiry, as the reaper's are.

Does not
    * know whether the worker behind an expired lease is really gone (see :mod:`shardq.maintenance.reaper`).
    * promote scheduled tasks or prune counters: consumers promote as they claim, and workers
      already prune the counters they write.

Options (defaults): ``every`` seconds between sweeps of one bucket (:data:`SWEEP_EVERY_SECONDS`,
2.0); ``shardq work --no-sweep`` / ``WorkerConfig(sweep=False)`` turns the sweeper off (leave it to
``shardq reap``). It runs on its own thread with its own session.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Collection
from typing import Protocol

from shardq.maintenance.loop import repeat
from shardq.maintenance.reaper import Reaper, ReapResult
from shardq.sessions.store import TaskStore

log = logging.getLogger("shardq.worker")

#: Each bucket's expired leases are swept about this often, fleet-wide.
SWEEP_EVERY_SECONDS = 2.0
#: A worker offers this share (1/n) of the buckets per turn, so one worker alone still visits every
#: bucket once per ``every`` seconds, and many workers spread the sweeping between them.
TURNS_PER_ROUND = 2
RETRY_PAUSE_MAX = 30.0


class StoreSource(Protocol):
    """Where the sweeper's thread gets its store (a worker's :class:`shardq.sessions.per_thread.SessionPerThread`)."""

    def store(self) -> TaskStore: ...


class LeaseSweeper:
    """A worker's share of reaping; :meth:`run_once` is one turn, :meth:`run` only schedules turns
    on :attr:`thread` until ``stop`` is set."""

    def __init__(
        self,
        sessions: StoreSource,
        stop: threading.Event,
        *,
        queues: Collection[str] = (),
        every: float = SWEEP_EVERY_SECONDS,
        rng: random.Random | None = None,
    ) -> None:
        self.sessions = sessions
        self.queues = frozenset(queues)
        #: (monotonic) when the last task of ``queues`` that a sweep put back is due again: a run
        #: with ``until_empty`` is not done before (one writer at a time: a float, set whole)
        self.put_back_due = 0.0
        self.stop_event = stop
        self.every = every
        self.rng = rng or random.Random()
        self._next: int | None = None  # the first bucket of the next share (random at first)
        self._reaper: Reaper | None = None
        self.thread = threading.Thread(target=self.run, name="shardq-sweeper", daemon=True)

    def run_once(self) -> ReapResult:
        """Offer the next share of the buckets, reap the ones whose turn this worker took."""
        reaper = self._reaper_for(self.sessions.store())
        count = reaper.store.layout().visit_count
        share = max(1, math.ceil(count / TURNS_PER_ROUND))
        start = self.rng.randrange(count) if self._next is None else self._next % count
        self._next = (start + share) % count
        offered = [(start + i) % count for i in range(min(share, count))]
        taken = reaper.store.sweep_turns_take(offered, self.every)
        if not taken:
            return ReapResult()
        result = reaper.reap(taken)
        reaper.flush_counts()
        self._note(result)
        return result

    def sweep_all(self, store: TaskStore) -> ReapResult:
        """Reap every bucket now through ``store`` (the calling thread's), whoever's turn it is:
        for a run that must not end while expired leases remain (``until_empty``)."""
        reaper = Reaper(store, rng=self.rng)
        result = reaper.reap(range(store.layout().visit_count))
        reaper.flush_counts()
        self._note(result)
        return result

    def _note(self, result: ReapResult) -> None:
        mine = [delay for queue, delay in result.retry_due_in.items() if queue in self.queues]
        if mine:
            self.put_back_due = max(self.put_back_due, time.monotonic() + max(mine))

    def run(self) -> None:
        """Take turns until ``stop`` is set (:func:`shardq.maintenance.loop.repeat`). The first
        comes one round (``every``) plus a random part of a pause after the start: a worker just
        started opens its sweeping session when the others are busy claiming, not with them, and
        the fleet's workers do not all take turns at once."""
        pause = self.every / TURNS_PER_ROUND
        repeat(
            self.run_once,
            self.stop_event,
            every=pause,
            retry_max=RETRY_PAUSE_MAX,
            what="sweeping expired leases",
            log=log,
            rng=self.rng,
            first_wait=self.every + self.rng.uniform(0, pause),
        )

    def _reaper_for(self, store: TaskStore) -> Reaper:
        if self._reaper is None or self._reaper.store is not store:
            self._reaper = Reaper(store, rng=self.rng)
        return self._reaper
