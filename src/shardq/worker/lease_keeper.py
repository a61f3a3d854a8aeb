"""The lease keeper: renews the leases of running tasks (``heartbeat``), on its own thread and
session; and ``task.extend()``, on the calling handler's own session. Its thread runs in every
worker, also without ``heartbeat``: it keeps the worker's registry row
(:mod:`shardq.maintenance.worker_registry`), one upsert every few seconds."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time

from shardq import validation
from shardq.errors import DatabaseError
from shardq.lifecycle.claim import fenced
from shardq.lifecycle.queue_settings import QueueSettingsCache
from shardq.maintenance.worker_registry import Holding, WorkerRegistry
from shardq.models.tasks import ClaimedTask
from shardq.sessions.per_thread import SessionPerThread
from shardq.sessions.store import TaskStore
from shardq.worker.config import WorkerConfig
from shardq.worker.inflight import InFlight, InFlightTable

log = logging.getLogger("shardq.worker")

#: a beat comes at least this often, however short the leases
BEAT_MIN_SECONDS = 0.5


class LeaseKeeper:
    """Renews every running task's lease to its queue's lease length a third of the shortest
    lease before it would run out, so two beats can be missed before a lease expires. A renewal
    the database refuses (the lease passed on) leaves the task alone: its outcome will be fenced
    off when it is settled."""

    def __init__(
        self, config: WorkerConfig, sessions: SessionPerThread, table: InFlightTable, stop: threading.Event
    ) -> None:
        self.config = config
        self.sessions = sessions
        self.table = table
        self.stop_event = stop
        self.registry = WorkerRegistry(config.queues, config.concurrency, self.holding)
        self.thread = threading.Thread(target=self.run, name="shardq-lease-keeper", daemon=True)

    def holding(self) -> Holding:
        """What the worker holds now, for its registry row."""
        with self.table.lock:
            entries = list(self.table.entries.values())
        return Holding(len(entries), sum(1 for e in entries if e.running), [e.claimed.lease_token for e in entries])

    def run(self) -> None:
        settings: QueueSettingsCache | None = None
        while True:
            pause = self.registry.every
            try:
                if self.config.heartbeat:
                    if settings is None:
                        settings = QueueSettingsCache(
                            self.sessions.store(), self.config.queues, lease_override=self.config.lease_seconds
                        )
                    pause = self.beat(settings)
                pause = min(pause, self.registry.beat_if_due(self.sessions.store()))
            except DatabaseError as exc:
                log.error("lease renewal or registry beat failed: %s", exc)
                pause = BEAT_MIN_SECONDS
            if self.stop_event.wait(pause):
                self._leave()
                return

    def _leave(self) -> None:
        try:
            self.registry.leave(self.sessions.store())
        except DatabaseError as exc:  # the row is pruned once its beat is old
            log.warning("could not remove this worker's registry row: %s", exc)

    def beat(self, settings: QueueSettingsCache) -> float:
        """Renew the running tasks' leases once; returns seconds until the next beat."""
        entries = self.table.running()
        leases = {e.claimed.queue: settings.lease_for(e.claimed.queue) for e in entries}
        now = time.monotonic()
        # A lease is never renewed past its task's timeout (at least LEASE_MIN_SECONDS, as every
        # lease): the timeout keeper settles the task then, and no renewal should outlive that.
        groups: dict[float, list[InFlight]] = {}
        for e in entries:
            lease = leases[e.claimed.queue]
            if e.timeout_at is not None:
                lease = max(validation.LEASE_MIN_SECONDS, min(lease, round(e.timeout_at - now, 3)))
            groups.setdefault(lease, []).append(e)
        store = settings.store
        for lease, group in groups.items():
            claimed = [e.claimed for e in _keeping_slots(store, group, self.table)]
            renewed = store.task_extend_many([fenced(c) for c in claimed], lease)
            deadline = time.monotonic() + lease
            for c in claimed:
                if c.key.id in renewed:
                    self.table.extend_local(c.key.id, deadline)
        shortest = min(leases.values(), default=min(settings.lease_for(q) for q in self.config.queues))
        return max(BEAT_MIN_SECONDS, shortest / 3.0)

    def extend(self, claimed: ClaimedTask, seconds: float) -> dt.datetime | None:
        """``task.extend(seconds)``: renew one lease now, on the calling thread's own session.
        Returns the new expiry, or None if the lease had passed on."""
        store = self.sessions.store()
        entry = self.table.entries.get(claimed.key.id.int)
        if entry is not None and not _keeping_slots(store, [entry], self.table):
            return None
        expiry = store.task_extend_many([fenced(claimed)], seconds)
        expires = expiry.get(claimed.key.id)
        if expires is not None:
            self.table.extend_local(claimed.key.id, time.monotonic() + seconds)
        return expires


def _keeping_slots(store: TaskStore, entries: list[InFlight], table: InFlightTable) -> list[InFlight]:
    """Renew the worker's concurrency slots if due (shardq.lifecycle.flow) and return the entries whose
    leases may be renewed: all but tasks whose slot went to another worker while they ran.
    Renewing such a task's lease would keep one task more running than its queue's limit; it is
    left to run out, as if this worker had stalled."""
    flow_slots = table.flow
    if not flow_slots.pools:
        return entries
    flow_slots.renew_due(store)
    kept = [e for e in entries if not flow_slots.lost(e.claimed)]
    for e in entries:
        if flow_slots.lost(e.claimed):
            log.warning("task %s lost its %s concurrency slot; its lease is not renewed", e.claimed.id, e.claimed.queue)
    return kept
