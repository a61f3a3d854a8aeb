"""The worker registry: each worker keeps one row in ``shardq_workers`` (migration 0009) saying
who it is and what it holds, for the dashboard's Workers page and a leased task's "held by".

A worker beats on its lease keeper's thread (:mod:`shardq.worker.lease_keeper`), which runs in
every worker: one keyed upsert every :data:`BEAT_SECONDS` (host, pid, queues, concurrency, tasks in
hand and running, the lease tokens of its claims in hand, start time, beat time). Nothing is
written on the claim, run or ack path: a leased task's worker is found by its lease token among the
registry rows.

Guarantees
    * One statement per beat; every :data:`PRUNE_EVERY_BEATS` beats one more, which removes the
      rows of workers silent for :data:`STALE_SECONDS` (crashed, or cut off), so the registry does
      not grow with every worker that ever ran.
    * A worker that stops removes its own row (best effort: if that fails, the row is pruned).

Does not
    * prove a worker is alive: a row is as fresh as its ``beat_at`` (the dashboard shows its age);
      a task claimed since the worker's last beat shows no worker until the next one.

Options (defaults): ``every`` seconds between beats (:data:`BEAT_SECONDS`, 5.0); ``stale``
seconds of silence before a row is pruned (:data:`STALE_SECONDS`, 60.0).
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shardq.operations import registry
from shardq.sessions.store import TaskStore

BEAT_SECONDS = 5.0
STALE_SECONDS = 60.0
PRUNE_EVERY_BEATS = 12
#: Lease tokens written per beat at most (claims in hand: a worker holds few).
TOKENS_MAX = 1000


@dataclass(frozen=True)
class Holding:
    """What a worker holds at a beat: tasks in hand (claimed, not settled), running, and the lease
    tokens of its claims in hand."""

    in_hand: int
    running: int
    tokens: Sequence[uuid.UUID]


class WorkerRegistry:
    """One worker's registry row. :meth:`beat_if_due` is called from a loop that runs anyway;
    ``holding`` says what the worker holds (read under its own lock by the caller)."""

    def __init__(
        self,
        queues: Sequence[str],
        concurrency: int,
        holding: Callable[[], Holding],
        *,
        every: float = BEAT_SECONDS,
        stale: float = STALE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.id = uuid.uuid4()
        self.queues = list(queues)
        self.concurrency = concurrency
        self.holding = holding
        self.every = every
        self.stale = stale
        self.clock = clock
        self.started_at = dt.datetime.now(dt.UTC)
        self.beats = 0
        self._next = 0.0

    def beat_if_due(self, store: TaskStore) -> float:
        """Beat if the time has come; returns seconds until the next beat is due."""
        now = self.clock()
        if now >= self._next:
            self.beat(store)
            self._next = now + self.every
        return max(0.0, self._next - now)

    def beat(self, store: TaskStore) -> None:
        held = self.holding()
        store.run(
            registry.worker_beat(
                {
                    "id": self.id,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "queues": self.queues,
                    "concurrency": self.concurrency,
                    "in_hand": held.in_hand,
                    "running": held.running,
                    "tokens": list(dict.fromkeys(held.tokens))[:TOKENS_MAX],
                    "started_at": self.started_at,
                }
            )
        )
        self.beats += 1
        if self.beats % PRUNE_EVERY_BEATS == 0:
            store.run(registry.worker_prune(self.stale))

    def leave(self, store: TaskStore) -> None:
        store.run(registry.worker_leave(self.id))
