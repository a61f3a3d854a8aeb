"""Hand-offs: the worker whose ack releases the next step of a chain runs it itself, without a
claim (the ack hands the step off to it; "take" is kept for reserving rows that are not tasks:
docs/glossary.md).

A step with one parent that is its parent's only child (the next step of a chain) is released by
its parent's ack, in the ack's transaction (:mod:`shardq.workflows.steps`). Before that ack, the settler
offers to run such tasks (:meth:`Handoff.offer`): of the queues this worker serves without a flow
limit (no concurrency or rate limit, not paused), as many as its handlers and prefetch have room
for. The engine then leases them to this worker in the ack's transaction instead of releasing
them (:meth:`shardq.engine.Engine.steps_acked`: on PostgreSQL a row update in place, in the
statement that reads the acked steps, the task kept at the backlog rank, which writes no index
entry, where a release and a claim were two updates that moved its key); CockroachDB takes none. Once the ack committed, :meth:`Handoff.hand_over` gives the
tasks to the executor as a claim's are given: same lease, same entries, same settle. A step left
out (another queue, a limited one, no room, an exclusive key, not due) is released as before, for
any worker's claim.

Guarantees: a task taken is leased to this worker in the same transaction as the ack that
released it, so it runs here or its lease expires and the lease sweep puts it back, as with any
claimed task of a worker that died. A task taken while the worker stops is handed back (ready
again, its attempt refunded) at once. What it does not do: it takes no task of a fan-in (those
are counted off in step rows, released for any worker), and none while the worker stops."""

from __future__ import annotations

import time

from shardq.lifecycle.claim import fenced
from shardq.lifecycle.queue_settings import QueueSettingsCache
from shardq.models.leases import HandoffOffer
from shardq.sessions.store import TaskStore
from shardq.worker.config import WorkerConfig, WorkerTotals
from shardq.worker.events import EventSink
from shardq.worker.inflight import InFlightTable, entries_for
from shardq.worker.loop_executor import LoopExecutor
from shardq.worker.thread_executor import ThreadExecutor


class Handoff:
    """The settler's side of handing off released steps (see the module documentation)."""

    def __init__(
        self,
        config: WorkerConfig,
        table: InFlightTable,
        executor: ThreadExecutor | LoopExecutor,
        sink: EventSink,
        totals: WorkerTotals,
    ) -> None:
        self.config, self.table, self.executor, self.sink, self.totals = config, table, executor, sink, totals

    def offer(self, settings: QueueSettingsCache, stopping: bool, settling: int) -> HandoffOffer | None:
        """What the next ack of ``settling`` held tasks may hand off (None: nothing, while
        ``stopping`` or without room). Reads queue settings (through the settler's own cache)
        before the ack's transaction begins."""
        if stopping:
            return None
        room = self.table.handoff_room(settling)
        if room <= 0:
            return None
        queues: list[str] = []
        leases: list[float] = []
        for queue in self.config.queues:
            s = settings.settings(queue)
            if s.paused_dequeue or s.concurrency_limit is not None or s.rate_limit is not None:
                continue
            queues.append(queue)
            leases.append(settings.lease_for(queue))
        return HandoffOffer(tuple(queues), tuple(leases), room) if queues else None

    def hand_over(self, store: TaskStore, settings: QueueSettingsCache, offer: HandoffOffer | None) -> None:
        """Run what a committed ack took (``offer.tasks``), as the fetcher runs a claim's tasks;
        if the executor no longer takes tasks (the worker stops), hand them back at once."""
        if offer is None or not offer.tasks:
            return
        tasks, offer.tasks = offer.tasks, []
        by_queue: dict[str, list] = {}
        for claimed in tasks:
            by_queue.setdefault(claimed.key.queue, []).append(claimed)
        for queue, group in by_queue.items():
            entries, claims = entries_for(group, time.monotonic() + settings.lease_for(queue))
            for claim in claims:
                # Acked per key: taken tasks are not the first rows of their buckets, as a claim's
                # are, so a range from a token's first to its last would read other tasks' rows.
                claim.keyed = True
            queue_settings = settings.settings(queue)
            timeout = queue_settings.timeout_seconds or self.config.timeout
            for entry in entries:
                entry.timeout = timeout
                entry.keep_result = queue_settings.results_kept
            self.table.add_taken(entries)
            if not self.executor.submit_taken(entries):
                self.table.drop_taken(entries)
                store.task_release_many([fenced(claimed) for claimed in group])
                continue
            self.totals.add(claimed=len(group), taken=len(group))
            if self.sink.trace_claimed:
                for entry in entries:
                    self.sink.emit("claimed", entry.claimed)
