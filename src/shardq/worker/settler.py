"""The settler: turns outcomes into statements, in batches, on its own thread and session.

It collects outcomes until the claims they belong to are complete (at most
``ACK_LINGER_SECONDS``), then settles them: acks of a whole claim in one statement by key range and
token (PostgreSQL; for a claim of workflow steps, with the moves of their workflows in the same
transaction), other acks in one statement by key, failures through
:func:`shardq.lifecycle.failures.settle_failures` (the reaper's function too), hand-backs and reschedules.
Every statement is fenced by the lease token. It also adds what it settled to ``shardq_stats``
every ``stats_interval`` seconds and prunes old rows there.

A batch's statements are planned once, and claim counts are lowered at planning, so a batch re-run
after a lost connection never counts an outcome twice. A batch that fails for good is left to the
reaper (the leases expire; at-least-once holds).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import cast

from shardq import backoff
from shardq.arguments import task_name_of
from shardq.error_text import storable
from shardq.errors import DatabaseError
from shardq.lifecycle.claim import fenced
from shardq.lifecycle.failures import Failure, settle_failures
from shardq.lifecycle.queue_settings import QueueSettingsCache
from shardq.lifecycle.waiting import ListenerPresence
from shardq.maintenance.pruning import prune_counters, prune_history
from shardq.models.leases import HandoffOffer, WholeClaim
from shardq.operations import activity
from shardq.sessions.per_thread import SessionPerThread
from shardq.sessions.store import TaskStore
from shardq.worker import latency
from shardq.worker.claims import close_claims, split_steps
from shardq.worker.config import WorkerConfig, WorkerTotals
from shardq.worker.events import EventSink
from shardq.worker.handoff import Handoff
from shardq.worker.inflight import ACK, FAIL, PARKED, RESCHEDULE, InFlight, InFlightTable, acked_per_key
from shardq.worker.outcomes import Outbox
from shardq.worker.settle_records import (
    ack_claims_kept,
    ack_keyed_kept,
    ack_keys_kept,
    ack_whole_steps_kept,
    split_kept,
)
from shardq.worker.settlements import Batch, Settlement, remove_keyed, remove_whole

log = logging.getLogger("shardq.worker")

# How long the settler keeps collecting outcomes of tasks still in progress before it settles
# what it has: one ack statement per claimed batch instead of one per handful of tasks. A finished
# task's row stays leased (and its lease record open) at most this much longer; no task's start
# is delayed by it.
ACK_LINGER_SECONDS = 0.02
# How long an idle settler waits for outcomes before it looks at its other chores (stats flush).
SETTLER_IDLE_WAIT_SECONDS = 0.05
# Old counter rows are pruned by whoever runs; a worker does it this often (bounded deletes).
STATS_PRUNE_SECONDS = 60.0


def _queue_of(o: InFlight) -> str:
    return o.claimed.key.queue


class Settler:
    """Settles what the executor hands to ``outbox``; runs :meth:`run` on its own thread until it
    takes the end marker (``None``) the worker queues at shutdown."""

    def __init__(
        self,
        config: WorkerConfig,
        sessions: SessionPerThread,
        table: InFlightTable,
        outbox: Outbox,
        sink: EventSink,
        totals: WorkerTotals,
        stop: threading.Event,
        *,
        handoff: Handoff | None = None,
    ) -> None:
        self.config = config
        #: runs the next steps of chains its acks release (shardq.worker.handoff); None: runs none
        self.handoff = handoff
        self.sessions = sessions
        self.table, self.outbox, self.sink, self.totals = table, outbox, sink, totals
        self.stop_event = stop
        self.thread = threading.Thread(target=self.run, name="shardq-settler", daemon=True)
        self._tally = activity.ActivityTally()
        self._settled_counts: dict[tuple[str, str], int] = {}  # one "settled" event per batch
        self._settings: QueueSettingsCache | None = None
        self._presence = ListenerPresence()
        self._settling = 0  # outcomes of the batch being applied (what an ack may hand off: shardq.worker.handoff)

    def run(self) -> None:
        store: TaskStore | None = None
        batch: Batch | None = None
        finished = False
        last_flush = next_prune = time.monotonic()
        failures = 0
        while not finished or batch is not None:
            self.sink.refresh()
            if batch is None and not finished:
                pending: list[InFlight] = []
                finished = self._collect(pending)
                if pending:
                    batch = self._plan(pending)
            try:
                if store is None:
                    store = self.sessions.store()
                    self._settings = QueueSettingsCache(
                        store, self.config.queues, lease_override=self.config.lease_seconds
                    )
                if batch is not None:
                    self._apply(store, batch)
                    batch = None
                if time.monotonic() - last_flush >= self.config.stats_interval:
                    last_flush = self._flush_stats(store, last_flush)
                    if last_flush >= next_prune:
                        next_prune = last_flush + STATS_PRUNE_SECONDS
                        self._prune_stats(store)
                failures = 0
            except DatabaseError as exc:
                if exc.transient:  # lost connection, statement timeout: the rest of the batch may work later
                    failures += 1
                    pause = backoff.idle_sleep(failures, minimum=0.1, maximum=5.0)
                    count = len(batch.outcomes) if batch else 0
                    log.warning("settling %d outcomes failed (%s); retrying in %.1fs", count, exc, pause)
                    time.sleep(pause)
                    continue
                # Not a batch (_apply isolates those): a chore, tried again at its next turn.
                log.error("settler chore failed: %s", exc)
        if store is not None:
            try:
                self._flush_stats(store, last_flush)
            except DatabaseError as exc:
                log.warning("could not record the last activity counts: %s", exc)

    # -- collecting -----------------------------------------------------------------------------
    def _collect(self, pending: list[InFlight]) -> bool:
        """Gather outcomes into ``pending`` so that one statement settles many: wait up to
        ``ACK_LINGER_SECONDS`` for a claim to complete, then keep taking outcomes until
        ``ack_batch`` are pending, every claim they belong to is complete, nothing is in progress
        any more, a stop was asked, or ``ACK_LINGER_SECONDS`` passed since the first was seen.
        Returns True once the end-of-work marker was taken.

        The executor sets the wake event only when it queues a claim's last outcome (and the
        worker when it queues the marker): this thread wakes about once per claim, not once per
        task. The event is cleared before the deque is drained, and the executor appends before
        it sets, so no outcome can be left unseen while this thread waits."""
        outcomes, wake = self.outbox.outcomes, self.outbox.wake
        limit = self.config.ack_batch
        seen: Counter = Counter()  # outcomes per claim in pending
        until = time.monotonic() + SETTLER_IDLE_WAIT_SECONDS  # then back to the loop's chores
        lingering = False
        while True:
            wake.clear()
            while outcomes:
                item = outcomes.popleft()
                if item is None:
                    return True
                pending.append(item)
                seen[item.claim] += 1
                if len(pending) >= limit:
                    return False
            if pending:
                if self.stop_event.is_set() or self.table.in_progress() == 0:
                    return False
                # Settle whole claims together: stop as soon as every claim seen is complete
                # (only this thread lowers a claim's count, so the read is stable).
                if all(claim.left <= n for claim, n in seen.items()):
                    return False
                if not lingering:
                    lingering = True
                    until = time.monotonic() + ACK_LINGER_SECONDS
            remaining = until - time.monotonic()
            if remaining <= 0:
                return False
            wake.wait(remaining)

    # -- planning -------------------------------------------------------------------------------
    def _plan(self, outcomes: list[InFlight]) -> Batch:  # noqa: C901 - one settlement per outcome kind, in one transaction
        """Decide, once, the statements that settle ``outcomes``: hand-backs, failures,
        reschedules, acks of whole claims by key range, the remaining acks by key (which also
        drop the lease records of claims this batch closes)."""
        acks: list[InFlight] = []
        keyed_acks: list[InFlight] = []
        fails: list[InFlight] = []
        hand_backs: list[InFlight] = []
        reschedules: list[InFlight] = []
        handled: dict[str, list[InFlight]] = {}  # per queue, the outcomes whose handler ran
        for o in outcomes:
            kind = o.kind
            if kind == ACK:
                claimed = o.claimed
                (keyed_acks if acked_per_key(claimed) else acks).append(o)
            elif kind == FAIL:
                fails.append(o)
            elif kind == RESCHEDULE:
                reschedules.append(o)
            elif kind == PARKED:
                pass  # its run parked it, fenced (shardq.app.durable): only its claim is counted off
            else:
                hand_backs.append(o)
            if o.seconds is not None:
                handled.setdefault(o.claimed.key.queue, []).append(o)
        self._settled_counts = {}
        for o in fails:
            if o.timed_out:
                self._tally.of(o.claimed.key.queue).timeouts += 1
                key = ("timeouts", o.claimed.key.queue)
                self._settled_counts[key] = self._settled_counts.get(key, 0) + 1
        for queue_name, ran in handled.items():
            latency.count(self._tally.of(queue_name), ran)
        whole, partial, closed = close_claims(outcomes, acks)
        whole, whole_steps, partial, partial_steps = split_steps(whole, partial, acks)
        keyed_acks += partial_steps
        settlements: list[Settlement] = []
        if hand_backs:

            def hand_back(store: TaskStore, items: list[InFlight]) -> None:
                self._count(items, store.task_release_many([fenced(o.claimed) for o in items]), "released")

            settlements.append(Settlement(hand_back, hand_backs))
        if fails:
            settlements.append(Settlement(self._settle_failures, fails, writes_errors=True))
        if reschedules:

            def reschedule(store: TaskStore, items: list[InFlight]) -> None:
                done = store.task_retry_many(
                    [fenced(o.claimed) for o in items],
                    [o.delay for o in items],
                    [o.error for o in items],
                    require_expired=False,
                    refund=True,
                )
                self._count(items, done, "retried")

            settlements.append(Settlement(reschedule, reschedules, writes_errors=True))
        # Acks of queues that keep finished tasks also write their history rows in the ack's own
        # statement; the others send what they always did (see settle_records).
        if keyed_acks:

            def ack_keyed(store: TaskStore, items: list[InFlight]) -> None:
                plain, kept = split_kept(items, _queue_of, self._keeps)
                if plain:
                    self._count(
                        plain,
                        self._offering(
                            store, lambda handoff: remove_keyed(store, plain, store.task_ack_many, handoff=handoff)
                        ),
                        "acked",
                    )
                if kept:
                    self._count(kept, ack_keyed_kept(store, kept, self._presence.present(store)), "acked")

            settlements.append(Settlement(ack_keyed, keyed_acks))
        if whole_steps:

            def ack_whole_steps(store: TaskStore, items: list[tuple[WholeClaim, list[InFlight]]]) -> None:
                plain, kept = split_kept(items, lambda item: item[0].queue, self._keeps)
                if plain:
                    self._count(
                        [o for _, acks in plain for o in acks],
                        self._offering(store, lambda handoff: remove_whole(store, plain, handoff=handoff)),
                        "acked",
                    )
                if kept:
                    self._count(
                        [o for _, acks in kept for o in acks],
                        ack_whole_steps_kept(store, kept, self._presence.present(store)),
                        "acked",
                    )

            settlements.append(Settlement(ack_whole_steps, whole_steps))
        if whole:

            def ack_whole(store: TaskStore, items: list[tuple[WholeClaim, list[InFlight]]]) -> None:
                plain, kept = split_kept(items, lambda item: item[0].queue, self._keeps)
                if plain:
                    lost = store.task_ack_claims([claim for claim, _ in plain])
                    self._count([o for _, acks in plain for o in acks], None, "acked", lost=lost)
                if kept:
                    acked, lost = ack_claims_kept(store, kept, self._presence.present(store))
                    self._count(acked, None, "acked", lost=lost)

            settlements.append(Settlement(ack_whole, whole))
        if partial or closed:

            def ack_by_key(store: TaskStore, items: list[InFlight]) -> None:
                plain, kept = split_kept(items, _queue_of, self._keeps)
                if kept:  # before the lease records of their claims are dropped below
                    self._count(kept, ack_keys_kept(store, kept, self._presence.present(store)), "acked")
                # With no items the engine drops the closed claims' lease records, if it keeps any.
                if plain or closed:
                    self._count(plain, store.task_ack_many([fenced(o.claimed) for o in plain], closed), "acked")

            settlements.append(Settlement(ack_by_key, partial))
        flow_slots = self.table.flow
        if flow_slots.pools:
            for o in hand_backs:  # handed back unstarted: the executor never freed their slots
                flow_slots.finished(o.claimed)
        return Batch(outcomes, settlements)

    def _offering(self, store: TaskStore, ack: Callable[[HandoffOffer | None], set[uuid.UUID]]) -> set[uuid.UUID]:
        """``ack(offer)``, offering to run the chain steps it releases, then run those handed off."""
        assert self._settings is not None
        offer = (
            self.handoff.offer(self._settings, self.stop_event.is_set(), self._settling)
            if self.handoff is not None
            else None
        )
        try:
            return ack(offer)
        finally:  # what a committed transaction took runs here, whatever came after it
            if offer is not None and self.handoff is not None:
                self.handoff.hand_over(store, self._settings, offer)

    def _apply(self, store: TaskStore, batch: Batch) -> None:
        self._settling = len(batch.outcomes)
        while batch.settlements:
            settlement = batch.settlements[0]
            try:
                settlement.run(store, settlement.items)
            except Exception as exc:  # whatever refused it, the other outcomes go on
                if isinstance(exc, DatabaseError) and exc.transient:
                    raise  # the whole rest of the batch again, later (see run)
                batch.settlements[0:1] = self._isolate(store, settlement, exc)
                continue
            batch.settlements.pop(0)
        self.table.forget(batch.outcomes)
        if self._settled_counts and self.sink.wants("settled"):
            self.sink.emit("settled", None, counts=self._settled_counts)
        self._settled_counts = {}

    def _isolate(self, store: TaskStore, settlement: Settlement, exc: Exception) -> list[Settlement]:
        """A settlement the database refused for good: settle its items one by one, so one bad outcome
        does not cost the others theirs. Returns the settlements that replace it. A single item refused
        again is settled with a plain reason where it is a failure; anything else is left to the
        lease sweep (its lease expires: at-least-once holds)."""
        if len(settlement.items) > 1:
            log.warning(
                "settling %d outcomes together failed (%s); settling them one by one", len(settlement.items), exc
            )
            return [replace(settlement, items=[item]) for item in settlement.items]
        if settlement.writes_errors and settlement.items:
            outcome: InFlight = settlement.items[0]
            refusal = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.error(
                "task %s: settling it with its error text failed (%s); settling it with a plain reason (was: %r)",
                outcome.claimed.key.id,
                refusal,
                (outcome.error or "")[:200],
            )
            outcome.error = storable(f"the handler's error text could not be stored: {refusal}")
            try:
                settlement.run(store, settlement.items)
                return []
            except Exception as again:
                if isinstance(again, DatabaseError) and again.transient:
                    raise
                exc = again
        log.error("could not settle an outcome, leaving it to the lease sweep: %s", exc)
        return []

    def _settle_failures(self, store: TaskStore, fails: list[InFlight]) -> None:
        assert self._settings is not None
        failures = [
            Failure(
                fenced(o.claimed),
                o.claimed.attempt,
                o.claimed.max_attempts,
                o.error,
                o.claimed.exclusive_key,
                permanent=o.permanent,
                ref=o,
                workflow_id=o.claimed.workflow_id,
            )
            for o in fails
        ]
        for failure in failures:  # what the history records, for queues that keep it
            if self._keeps(failure.queue):
                o = cast(InFlight, failure.ref)
                failure.task, failure.run_seconds = task_name_of(o.claimed.payload), o.seconds
        result = settle_failures(store, failures, self._settings.settings, require_expired=False)
        retried = [f.ref for f in result.retried] + [f.ref for f in result.refused_retry]
        dead = [f.ref for f in result.dead] + [f.ref for f in result.refused_dead]
        self._count(retried, {f.item.key.id for f in result.retried}, "retried")  # type: ignore[arg-type]
        self._count(dead, {f.item.key.id for f in result.dead}, "dead")  # type: ignore[arg-type]

    def _keeps(self, queue: str) -> bool:
        """Whether ``queue`` keeps finished tasks (its settings, cached: see QueueSettingsCache)."""
        assert self._settings is not None
        return self._settings.settings(queue).keep_finished_seconds > 0

    # -- counting -------------------------------------------------------------------------------
    def _count(
        self, outcomes: list[InFlight], done: set[uuid.UUID] | None, event: str, *, lost: set[uuid.UUID] | None = None
    ) -> None:
        """Count (and report) the outcomes the database applied — those in ``done``, or, when
        ``lost`` is given instead, all but those — and the ones it refused because the lease had
        passed to someone else."""
        if lost is not None:
            refused = [o for o in outcomes if o.claimed.key.id in lost] if lost else []
            applied = [o for o in outcomes if o.claimed.key.id not in lost] if lost else outcomes
        else:
            applied, refused = [], []
            settled = done or set()
            for o in outcomes:
                (applied if o.claimed.key.id in settled else refused).append(o)
        self.totals.add(**{event: len(applied), "lease_lost": len(refused)})
        counts = self._settled_counts
        for queue_name, n in Counter([o.claimed.key.queue for o in applied]).items():
            counts[(event, queue_name)] = counts.get((event, queue_name), 0) + n
            if event in ("acked", "retried", "dead"):
                tally = self._tally.of(queue_name)
                setattr(tally, event, getattr(tally, event) + n)
        if self.sink.trace_outcomes or event in ("retried", "dead"):  # the others log at DEBUG only
            for o in applied:
                if o.error is None:
                    self.sink.emit(event, o.claimed)
                else:
                    self.sink.emit(event, o.claimed, last_error=o.error)
        for o in refused:
            counts[("lease_lost", o.claimed.queue)] = counts.get(("lease_lost", o.claimed.queue), 0) + 1
            self.sink.emit("lease_lost", o.claimed, outcome=event)

    # -- activity counters ----------------------------------------------------------------------
    def _flush_stats(self, store: TaskStore, since: float) -> float:
        """Add what was settled since the last flush, and the handler capacity offered meanwhile,
        to ``shardq_stats``. Returns the time of this flush."""
        now = time.monotonic()
        offered = self.config.concurrency * (now - since)
        for queue_name in self.config.queues:
            self._tally.of(queue_name).capacity_seconds += offered
        for queue_name, refused in self.totals.take_throttled().items():
            self._tally.of(queue_name).throttled += refused
        self._tally.flush(store.run)
        return now

    @staticmethod
    def _prune_stats(store: TaskStore) -> None:
        try:
            prune_counters(store)
            prune_history(store)
        except DatabaseError as exc:  # housekeeping: the next prune tries again
            log.debug("pruning old queue activity or history rows failed: %s", exc)
