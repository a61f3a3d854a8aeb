"""The fetcher: claims tasks in rounds over the buckets and hands them to the executor.

It claims the next batch once at most ``concurrency - 1`` claimed tasks (or ``prefetch - batch``,
if larger) still wait for a slot, keeping at most ``concurrency + prefetch`` tasks waiting or
running. While whole rounds come back empty it sleeps with a growing, capped, jittered interval;
with ``listen``, from the first round that found nothing (``LISTEN_AFTER_EMPTY_ROUNDS``), it waits
for a producer's wake-up for at most that long instead. With ``listen`` too, a round that took
every ready task (``ClaimRound.drained``) is followed by that wait rather than by a claim that
would find nothing, and a round that answered a wake-up and found nothing (another worker was
first) sleeps its pause without listening -- unless that wake-up had arrived during the round
before, which may have taken the very tasks it announced. A lost wake-up therefore costs at most
one pause. It runs on the thread that calls :meth:`shardq.Worker.run`, with that thread's own
session.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from shardq import backoff
from shardq.errors import DatabaseError
from shardq.lifecycle import flow, notify
from shardq.lifecycle.claim import PROMOTE_INTERVAL_SECONDS, Consumer
from shardq.maintenance.lease_sweeper import LeaseSweeper
from shardq.models.tasks import ClaimedTask
from shardq.sessions.per_thread import SessionPerThread
from shardq.worker.config import WorkerConfig, WorkerTotals
from shardq.worker.events import EventSink
from shardq.worker.inflight import InFlightTable, entries_for
from shardq.worker.loop_executor import LoopExecutor
from shardq.worker.thread_executor import ThreadExecutor

log = logging.getLogger("shardq.worker")

# With ``listen``, a fetcher waits for wake-ups (instead of sleeping its pause) once this many
# rounds in a row found nothing. One: a worker that has just emptied the queue is exactly the one a
# producer's next enqueue should wake. Waiting for a second empty round first left a busy fleet
# polling at 25-50 ms pauses, which was most of the steady cell's enqueue->start time
# (docs/latency.md).
LISTEN_AFTER_EMPTY_ROUNDS = 1


class Fetcher:
    def __init__(
        self,
        config: WorkerConfig,
        sessions: SessionPerThread,
        table: InFlightTable,
        executor: ThreadExecutor | LoopExecutor,
        sink: EventSink,
        totals: WorkerTotals,
        stop: threading.Event,
        *,
        sweeper: LeaseSweeper | None = None,
    ) -> None:
        self.config = config
        self.sweeper = sweeper
        self.sessions = sessions
        self.table, self.executor, self.sink, self.totals = table, executor, sink, totals
        self.stop_event = stop
        self.consumer: Consumer | None = None

    def connect(self) -> Consumer:
        """Make this thread's session and consumer (no statement yet: the claim loop connects,
        and retries while the database is unreachable)."""
        store = self.sessions.store()
        self.consumer = Consumer(
            store,
            self.config.queues,
            batch=self.config.batch,
            lease_seconds=self.config.lease_seconds,
            flow_slots=self.table.flow,
        )
        self.sessions.discover_layout = True
        return self.consumer

    def run(self) -> None:  # noqa: C901 - the fetch loop's states, one per branch
        """Claim until a stop is asked (or, with ``until_empty``, a round finds nothing due and
        nothing is in flight)."""
        consumer = self.consumer or self.connect()
        config, table, stop = self.config, self.table, self.stop_event
        empty_rounds = throttled_rounds = 0
        failures = 0
        woken = answered = False  # the next round answers a wake-up; the last one did
        echo = echoed = False  # that wake-up came during the round before, which may have taken its tasks
        drained = False  # the last round took every ready task there was
        listener = None
        if config.listen and not config.until_empty:
            listener = notify.Listener(consumer.store, config.queues)
            listener.start()  # on failure the worker polls, and retries after a claim succeeds
        flow_slots = table.flow
        while not stop.is_set():
            if flow_slots.pools and flow_slots.renew_due_in() <= 0:
                try:  # the slots of limited queues this worker holds, a third of a lease ahead
                    flow_slots.renew_due(consumer.store)
                except DatabaseError as exc:
                    log.warning("renewing concurrency slots failed (%s); retrying", exc)
            want = table.want()
            if want <= 0:
                table.fetch_wake.clear()
                if table.want() <= 0:  # re-check: a wake-up may have come just before the clear
                    table.fetch_wake.wait(0.5)
                continue
            if drained:
                # The last round took every ready task: rather than a claim that would find
                # nothing, wait for the next wake-up (an enqueue that committed during that round
                # has sent one already, kept on the connection) or, at the latest, a short poll.
                drained = False
                if listener is not None and listener.active:
                    # A wake-up already here was sent during that round and may announce what the
                    # round took itself (an "echo"): look again at once, but if that finds
                    # nothing, no other worker was first, so it is no reason to sit out (below).
                    if listener.pending():
                        woken = echo = True
                    else:
                        woken = listener.wait(
                            backoff.idle_sleep(1, minimum=config.idle_min, maximum=config.idle_max), stop
                        )
                    continue
            room = table.start_room()
            try:
                if listener is not None and listener.active:
                    listener.discard()  # whatever a wake-up announced so far, this round will see
                round_started = time.monotonic()
                # From here on, a settle sets the wake-up for the wait after this round: cleared
                # there instead, a settle during the round (an ack that released a workflow step
                # the round could not see) would be lost and the pause sat out.
                table.fetch_wake.clear()
                # Whether something was in flight as the round began: its ack may release tasks
                # (workflow steps, an exclusive key's backlog) after the round read the table.
                busy_at_start = bool(table.entries)
                answered, woken = woken, False
                echoed, echo = echo, False
                found = consumer.claim(
                    limit=want,
                    start_room=room,
                    woken=answered,
                    room=table.lane_room if table.lanes is not None else None,
                )
                failures = 0
                if listener is not None and not listener.active:
                    listener.retry()  # the database answers again (throttled: see notify.Listener)
            except DatabaseError as exc:
                if not exc.transient:
                    raise
                failures += 1
                pause = backoff.idle_sleep(failures, minimum=0.1, maximum=5.0)
                log.warning("claim failed (%s); retrying in %.1fs", exc, pause)
                stop.wait(pause)
                continue
            self.totals.add(claim_statements=found.statements)
            if self.sink.wants("claim"):
                self.sink.emit(
                    "claim", None, polls=found.polls, tasks=len(found.tasks), throttled=list(found.throttled)
                )
            if found.throttled:
                self.totals.count_throttled(found.throttled)
            if found.tasks:
                empty_rounds = throttled_rounds = 0
                self._accept(found.tasks, consumer)
                drained = found.drained
                continue
            if found.throttled:
                # A flow limit refused: wait for the next token (rate), or for slots to come back
                # (concurrency: they are freed by other workers' settles, which nobody announces,
                # so the wait doubles while refusals continue), never spinning on the database.
                throttled_rounds += 1
                slot_wait = min(flow.SLOT_WAIT_MIN_SECONDS * 2 ** (throttled_rounds - 1), flow.SLOT_WAIT_MAX_SECONDS)
                pause = min(slot_wait if wait is None else wait for wait in found.throttled.values())
                if any(wait is None for wait in found.throttled.values()):
                    table.fetch_wake.clear()
                    table.fetch_wake.wait(pause)  # a settle here frees a slot: look again at once
                else:
                    stop.wait(pause)  # the next token comes at a known time
                continue
            throttled_rounds = 0
            if found.lane_full and not found.no_room:
                # Per-queue shares: the queues with room had nothing, the others' lanes are full.
                # A handler of a full lane that returns (its settle) wakes this wait; tasks of the
                # other queues are looked for again within the idle pause.
                empty_rounds += 1  # the wake-up was cleared before the round: a settle since is kept
                table.fetch_wake.wait(
                    backoff.idle_sleep(empty_rounds, minimum=config.idle_min, maximum=config.idle_max)
                )
                continue
            if found.no_room:
                # Every handler slot is busy and limited queues claim only what starts at once:
                # wait for a handler to return (it sets the wake-up when it frees a queue slot).
                table.fetch_wake.clear()
                if table.start_room() <= 0:
                    table.fetch_wake.wait(0.5)
                continue
            if not found.round_empty:
                continue
            self.totals.add(empty_rounds=1)
            idle = not table.entries
            # until_empty stops only after a round that began with nothing in flight: an ack that
            # settled during the round may have released tasks the round could not see.
            if config.until_empty and idle and not busy_at_start and self._done(consumer, round_started):
                log.info("a full round found nothing due, nothing is in flight and no lease has expired: done")
                return
            empty_rounds += 1
            pause = backoff.idle_sleep(empty_rounds, minimum=config.idle_min, maximum=config.idle_max)
            pause = min(pause, max(0.05, flow_slots.renew_due_in()))  # busy slots stay renewed
            if config.until_empty and (busy_at_start or not idle):
                # A settle since the round began wakes us: its ack may have released tasks the
                # round could not see, or nothing may be in flight any more.
                table.fetch_wake.wait(pause)
            elif (
                listener is not None
                and listener.active
                and empty_rounds >= LISTEN_AFTER_EMPTY_ROUNDS
                and (not answered or echoed)
            ):
                # Nothing due: a producer's wake-up ends the pause early, and the back-off
                # restarts from idle_min. Every wake-up wakes every waiting worker and all but one
                # may find nothing; producers send at most one per queue per notify interval.
                if listener.wait(pause, stop):
                    empty_rounds = 0
                    woken = True
            else:
                # Polling, or this round answered a wake-up and another worker was first: sit
                # the next ones out for this pause (then poll, then listen again), so that a fleet
                # does not send every worker's claim for every wake-up while one worker keeps up.
                stop.wait(pause)

    def _done(self, consumer: Consumer, round_started: float) -> bool:
        """With ``until_empty``, once a round that began at ``round_started`` found nothing due and
        nothing is in flight: sweep every bucket for expired leases first (a crashed worker's tasks
        are not "done"), and go on while tasks of this worker's queues that a sweep put back could
        not have been seen yet (due after the round began), so they run in this run."""
        if self.sweeper is None:
            return True
        # A task put back is claimable once due and promoted (a consumer promotes a pair's due
        # tasks at most every PROMOTE_INTERVAL_SECONDS).
        if self.sweeper.put_back_due + PROMOTE_INTERVAL_SECONDS >= round_started:
            return False
        try:
            self.sweeper.sweep_all(consumer.store)
        except DatabaseError as exc:
            log.warning("sweeping expired leases before stopping failed: %s", exc)
            return not exc.transient  # a lost connection: look again next round
        if self.sweeper.put_back_due + PROMOTE_INTERVAL_SECONDS >= round_started:
            log.info("put back expired leases of this worker's queues; working on until they ran")
            return False
        return True

    def _accept(self, tasks: Sequence[ClaimedTask], consumer: Consumer) -> None:
        queue = tasks[0].queue
        deadline = time.monotonic() + consumer.lease_for(queue)
        entries, claims = entries_for(tasks, deadline)
        settings = consumer.settings(queue)
        timeout = settings.timeout_seconds or self.config.timeout  # a task's own comes later
        if timeout is not None:
            for entry in entries:
                entry.timeout = timeout
        if settings.results_kept:  # the executor encodes each return value (shardq.lifecycle.history)
            for entry in entries:
                entry.keep_result = True
        self.table.add(entries)
        self.totals.add(claimed=len(tasks))
        for claim in claims:
            self.totals.per_bucket_claims[claim.bucket] += claim.left
        if self.sink.trace_claimed:
            for entry in entries:
                self.sink.emit("claimed", entry.claimed)
        self.executor.submit(entries)
