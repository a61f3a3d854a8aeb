"""The reaper: returns expired leases to the queue, or to the dead-letter table.

Importable as :mod:`shardq.maintenance.reaper` (and ``shardq.Reaper``) too; it lives here beside the other
background services (:mod:`shardq.maintenance`).

A lease expires when its worker died, hung, or lost its connection. ``run_once`` walks every
bucket and, per bucket, in batches of at most ``batch``: finds tasks whose lease has expired,
decides each with :func:`shardq.backoff.decide_failure` (the expired attempt counts), and applies
the decisions with one fenced statement per kind — back to ready at now + exponential backoff with
full jitter, or to ``shardq_dead`` when the attempt was the last one. On PostgreSQL it then settles
the bucket's expired lease records (see migration 0001 for why they exist). A pass then runs the
promotion backstop (:mod:`shardq.maintenance.promotion`), adds its counts to ``shardq_stats`` and
prunes old counter rows, the task history and finished workflows past their retention, and the audit
log past 90 days
(:mod:`shardq.maintenance.pruning`).

Guarantees
    * Safe with any number of reapers and consumers at once: every change is fenced by the lease
      token *and* re-checks that the lease is still expired, so a task that was acked, extended or
      already reaped meanwhile is left alone, and a task is never reaped twice for one lease.
    * Bounded work per statement (``batch`` rows) and a cost that follows the number of expired
      leases, not the size of the table.

Does not
    * know whether the expired worker is really gone: a handler that outlives its lease may still
      be running when its task is handed to another worker (that worker's outcome will be refused).

Logs and counters
    Each reaped task is logged at DEBUG on ``shardq.maintenance.reaper`` with ``extra`` fields ``event``
    (``expired``: back to ready; ``dead``), ``task_id``, ``queue``, ``bucket``, ``attempt``; a run
    that reaped anything logs one INFO line. A run adds its counts to ``shardq_stats`` (one
    statement) and prunes counter rows older than an hour.

Options (defaults): ``interval`` seconds between runs in :meth:`Reaper.run_forever` (5.0, jittered
±20 %), ``batch`` tasks per statement (500), ``statement_timeout`` seconds (30; the server cancels a
statement of the session :meth:`shardq.Client.reaper` makes after this long; ``None``: no limit; a
Reaper built on your own store uses that store's session as it is).

``run_forever`` never dies of a database error: a failed pass (lost connection, cancelled
statement, anything the database refused) is logged and retried with exponential backoff from
``interval`` up to ``RETRY_PAUSE_MAX`` seconds, jittered, until a pass succeeds.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from shardq import validation
from shardq.errors import DatabaseError
from shardq.lifecycle.failures import Failure, settle_failures
from shardq.maintenance.loop import repeat
from shardq.maintenance.promotion import promote_due
from shardq.maintenance.pruning import prune_audit, prune_counters, prune_durable, prune_history, prune_workflows
from shardq.models.leases import ExpiredLease, Fenced
from shardq.models.queues import QueueSettings
from shardq.operations.activity import ActivityTally
from shardq.sessions.store import TaskStore

log = logging.getLogger("shardq.maintenance.reaper")

REAP_INTERVAL_DEFAULT = 5.0
REAP_BATCH_DEFAULT = 500
# Upper bound on batches per bucket per run, so one run always finishes even while workers keep
# expiring leases faster than it reaps; the next run continues.
MAX_BATCHES_PER_BUCKET = 100
REAP_STATEMENT_TIMEOUT_DEFAULT = 30.0  # bounded batches take milliseconds; this only catches a stall
RETRY_PAUSE_MAX = 60.0  # longest pause between failed passes of run_forever


@dataclass(frozen=True)
class ReaperConfig:
    interval: float = REAP_INTERVAL_DEFAULT
    batch: int = REAP_BATCH_DEFAULT
    statement_timeout: float | None = REAP_STATEMENT_TIMEOUT_DEFAULT

    def validate(self) -> ReaperConfig:
        validation.positive_seconds(self.interval, "reap interval")
        validation.positive_int(self.batch, "reap batch", maximum=validation.BATCH_MAX)
        validation.statement_timeout(self.statement_timeout)
        return self


@dataclass(frozen=True)
class ReapResult:
    """What a pass did: tasks put back to retry and dead-lettered, buckets swept, lease records
    dropped, and per queue the longest backoff among the tasks it put back (seconds until the last
    of them is due again)."""

    retried: int = 0
    dead: int = 0
    buckets: int = 0
    leases_dropped: int = 0
    retry_due_in: Mapping[str, float] = field(default_factory=dict)

    @property
    def reaped(self) -> int:
        return self.retried + self.dead


class Reaper:
    """Reaps expired leases through one :class:`TaskStore`."""

    def __init__(
        self, store: TaskStore, config: ReaperConfig | None = None, *, rng: random.Random | None = None
    ) -> None:
        self.store = store
        self.config = (config or ReaperConfig()).validate()
        self.rng = rng or random.Random()
        self._tally = ActivityTally()
        self._workflows_after: tuple[object, object] | None = None  # where the workflow prune goes on

    def run_once(self) -> ReapResult:
        """One pass over every bucket: reap (:meth:`reap`), promote due scheduled tasks of queues
        no consumer may be polling, record the counts; returns what it reaped."""
        buckets = range(self.store.layout().visit_count)
        settings = self._settings()
        result = self.reap(buckets, settings)
        promote_due(self.store, buckets, settings, batch=self.config.batch, max_batches=MAX_BATCHES_PER_BUCKET)
        self.flush_counts()
        try:
            prune_counters(self.store)
            prune_history(self.store)
            prune_audit(self.store)
            prune_durable(self.store)
            self._workflows_after = prune_workflows(self.store, after=self._workflows_after).resume_after
        except DatabaseError as exc:  # housekeeping: the next run tries again
            log.debug("pruning old queue activity, history, audit or workflow rows failed: %s", exc)
        return result

    def reap(self, buckets: Iterable[int], settings: dict[str, QueueSettings] | None = None) -> ReapResult:
        """Reap the expired leases of ``buckets`` (in batches of ``batch``, at most
        ``MAX_BATCHES_PER_BUCKET`` per bucket) and, on PostgreSQL, settle their expired lease
        records. ``settings``: the queues' settings (default: read now). The counts are kept for
        :meth:`flush_counts`."""
        settings = self._settings() if settings is None else settings
        retried = dead = dropped = swept = 0
        due_in: dict[str, float] = {}
        for bucket in buckets:
            swept += 1
            for _ in range(MAX_BATCHES_PER_BUCKET):
                expired = self.store.task_reap_candidates(bucket, self.config.batch)
                r, d = self._apply(expired, settings, due_in)
                retried, dead = retried + r, dead + d
                if len(expired) < self.config.batch:
                    break
            dropped += self.store.lease_records_settle(bucket, self.config.batch)[0]
        if retried or dead:
            log.info("reaped %d expired leases: %d back to ready, %d dead", retried + dead, retried, dead)
        return ReapResult(retried, dead, swept, dropped, due_in)

    def flush_counts(self) -> None:
        """Add what was reaped since the last flush to ``shardq_stats`` (one statement)."""
        self._tally.flush(self.store.run)

    def _settings(self) -> dict[str, QueueSettings]:
        return {s.name: s for s in self.store.queue_list()}

    def _apply(
        self, expired: list[ExpiredLease], settings: dict[str, QueueSettings], due_in: dict[str, float]
    ) -> tuple[int, int]:
        """Retry or dead-letter expired leases through :func:`shardq.lifecycle.failures.settle_failures`
        (the worker's settler uses the same function and defaults); notes in ``due_in`` the
        longest backoff per queue among those put back."""
        failures = [
            Failure(
                Fenced(lease.key, lease.token),
                lease.attempts,
                lease.max_attempts,
                f"lease expired (attempt {lease.attempts})",
                lease.exclusive_key,
                dead_error=f"lease expired on the last attempt ({lease.attempts} of {lease.max_attempts})",
                ref=lease,
                workflow_id=lease.workflow_id,
            )
            for lease in expired
        ]
        result = settle_failures(
            self.store,
            failures,
            lambda queue: settings.get(queue) or QueueSettings(queue),
            require_expired=True,
            rng=self.rng,
        )
        for failure in result.retried:
            due_in[failure.queue] = max(due_in.get(failure.queue, 0.0), failure.delay or 0.0)
        return self._record(result.retried, "expired"), self._record(result.dead, "dead")

    def _record(self, applied: list[Failure], event: str) -> int:
        """Count (and at DEBUG, log) the leases a statement actually changed."""
        debug = log.isEnabledFor(logging.DEBUG)
        for failure in applied:
            key = failure.item.key
            activity = self._tally.of(key.queue)
            setattr(activity, event, getattr(activity, event) + 1)
            if debug:
                log.debug(
                    "task %s %s (queue %s, bucket %s, attempt %d)",
                    key.id,
                    event,
                    key.queue,
                    key.bucket,
                    failure.attempts,
                    extra={
                        "event": event,
                        "task_id": str(key.id),
                        "queue": key.queue,
                        "bucket": key.bucket,
                        "attempt": failure.attempts,
                    },
                )
        return len(applied)

    def run_forever(self, stop: threading.Event) -> None:
        """Call :meth:`run_once` every ``interval`` (±20 % jitter) until ``stop`` is set. Only
        schedules (:func:`shardq.maintenance.loop.repeat`); a failed pass is logged and retried
        with backoff (see the module docstring)."""
        repeat(
            self.run_once,
            stop,
            every=self.config.interval,
            retry_max=RETRY_PAUSE_MAX,
            what="reaper run",
            log=log,
            rng=self.rng,
        )
