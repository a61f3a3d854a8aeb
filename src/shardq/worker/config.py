"""A worker's options, their defaults, and the counters of one run."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from shardq import validation
from shardq.worker import shares as worker_shares

# Far above any healthy claim or ack (milliseconds), far below a lease: long enough not to fire in
# normal operation, short enough that a blocked statement fails while its tasks are still leased.
STATEMENT_TIMEOUT_DEFAULT = 10.0
CONCURRENCY_DEFAULT = 4
BATCH_DEFAULT = 100
GRACE_SECONDS_DEFAULT = 30.0
IDLE_MIN_DEFAULT = 0.05
IDLE_MAX_DEFAULT = 1.0
ACK_BATCH_DEFAULT = 1000
STATS_INTERVAL_DEFAULT = 2.0
#: an async handler that keeps the event loop from running other handlers this long is logged
BLOCKED_LOOP_SECONDS_DEFAULT = 0.5


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker runs and how; see :mod:`shardq.worker` for what each option means."""

    queues: tuple[str, ...]
    concurrency: int = CONCURRENCY_DEFAULT
    batch: int = BATCH_DEFAULT
    prefetch: int | None = None
    lease_seconds: float | None = None
    grace_seconds: float = GRACE_SECONDS_DEFAULT
    idle_min: float = IDLE_MIN_DEFAULT
    idle_max: float = IDLE_MAX_DEFAULT
    ack_batch: int = ACK_BATCH_DEFAULT
    heartbeat: bool = False
    until_empty: bool = False
    stats_interval: float = STATS_INTERVAL_DEFAULT
    statement_timeout: float | None = STATEMENT_TIMEOUT_DEFAULT
    listen: bool = True
    blocked_loop_seconds: float = BLOCKED_LOOP_SECONDS_DEFAULT
    #: execution timeout for tasks whose task and queue set none (None: no limit)
    timeout: float | None = None
    #: sync handlers abandoned after their timeout before the worker stops and exits non-zero
    #: (None: twice ``concurrency``)
    max_abandoned: int | None = None
    #: schedule the app's periodic tasks (``shardq work --no-periodic``: False)
    periodic: bool = True
    #: sweep expired leases of crashed workers (``shardq work --no-sweep``: False; see
    #: :mod:`shardq.maintenance.lease_sweeper`)
    sweep: bool = True
    #: raise the garbage collector's youngest threshold while the worker runs (``shardq work
    #: --no-gc-tuning``: False; see :mod:`shardq.worker.collector`)
    gc_tuning: bool = True
    #: per-queue shares of the handlers (``shardq work --share emails=8``): queue -> handlers of its
    #: own; the queues without a share use the rest (see :mod:`shardq.worker.shares`)
    shares: Mapping[str, int] | Iterable[tuple[str, int]] | None = None

    def validate(self) -> WorkerConfig:
        if not isinstance(self.queues, (tuple, list)) or not self.queues:
            raise validation.InvalidInput("queues must be a non-empty list of queue names")
        for q in self.queues:
            validation.queue_name(q)
        validation.positive_int(self.concurrency, "concurrency", maximum=1024)
        validation.positive_int(self.batch, "batch", maximum=validation.BATCH_MAX)
        if self.prefetch is not None and (
            isinstance(self.prefetch, bool) or not isinstance(self.prefetch, int) or self.prefetch < 0
        ):
            raise validation.InvalidInput("prefetch must be a whole number >= 0")
        if self.lease_seconds is not None:
            validation.lease_seconds(self.lease_seconds)
        validation.non_negative_seconds(self.grace_seconds, "grace period")
        idle_min = validation.positive_seconds(self.idle_min, "idle sleep minimum")
        if idle_min > validation.positive_seconds(self.idle_max, "idle sleep maximum"):
            raise validation.InvalidInput("idle sleep bounds must satisfy 0 < min <= max")
        validation.positive_int(self.ack_batch, "ack batch", maximum=validation.BATCH_MAX)
        validation.positive_seconds(self.stats_interval, "stats interval")
        validation.statement_timeout(self.statement_timeout)
        validation.positive_seconds(self.blocked_loop_seconds, "blocked loop report threshold")
        if self.timeout is not None:
            validation.positive_seconds(self.timeout, "timeout")
        if self.max_abandoned is not None:
            validation.positive_int(self.max_abandoned, "max abandoned", maximum=1_000_000)
        self.lanes  # noqa: B018 - the shares are checked against the queues and the concurrency
        return self

    @property
    def lanes(self) -> worker_shares.Lanes | None:
        """How the handlers are split between the queues (None: no shares, one pool)."""
        return worker_shares.plan(self.queues, self.concurrency, worker_shares.normalise(self.shares))

    @property
    def handlers(self) -> int:
        """Handlers the worker runs: ``concurrency``, or the shares' sum when every queue has one."""
        lanes = self.lanes
        return self.concurrency if lanes is None else lanes.total

    @property
    def abandoned_limit(self) -> int:
        return self.max_abandoned if self.max_abandoned is not None else 2 * self.concurrency

    @property
    def effective_prefetch(self) -> int:
        """Claimed tasks allowed to wait for a free slot (``prefetch``, default ``batch``)."""
        return self.batch if self.prefetch is None else self.prefetch


@dataclass
class WorkerTotals:
    """Counters of one worker run (what :meth:`shardq.Worker.run` returns). ``lease_lost`` counts
    outcomes the database refused because the lease had already passed to someone else."""

    claimed: int = 0
    #: of ``claimed``: workflow steps leased by the ack that released them (shardq.worker.handoff)
    taken: int = 0
    acked: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0
    lease_lost: int = 0
    handler_errors: int = 0
    claim_statements: int = 0
    empty_rounds: int = 0
    blocked_loop_reports: int = 0
    #: attempts that ran past their timeout (settled as failures)
    timeouts: int = 0
    #: sync handler threads left running after their task's timeout
    abandoned: int = 0
    #: the worker stopped because ``max_abandoned`` threads were abandoned (exit non-zero)
    abandoned_limit_reached: bool = False
    #: claims a flow limit refused (shardq.lifecycle.flow): in all, and per queue until the settler takes them
    throttled: int = 0
    per_bucket_claims: Counter = field(default_factory=Counter)
    _throttled_by_queue: Counter = field(default_factory=Counter, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count_throttled(self, queues: Iterable[str]) -> None:
        with self._lock:
            for queue in queues:
                self.throttled += 1
                self._throttled_by_queue[queue] += 1

    def take_throttled(self) -> Counter:
        """Refusals per queue since the last call (for the activity counters)."""
        with self._lock:
            taken, self._throttled_by_queue = self._throttled_by_queue, Counter()
        return taken

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def reached_abandoned_limit(self, limit: int) -> bool:
        """True once: the first time ``abandoned`` is at least ``limit`` (which then sets
        ``abandoned_limit_reached``)."""
        with self._lock:
            if self.abandoned >= limit and not self.abandoned_limit_reached:
                self.abandoned_limit_reached = True
                return True
            return False
