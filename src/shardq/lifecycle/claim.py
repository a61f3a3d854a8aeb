"""Claiming tasks: the round-robin walk over buckets (the handle a handler gets,
:class:`shardq.models.Task`, is importable from here too).

A :class:`Consumer` starts at its own offset and walks (group of buckets, queue) pairs
round-robin. The engine decides how a round over the buckets is cut into groups
(:meth:`shardq.engine.Engine.claim_groups`): on PostgreSQL one group of every bucket (one
statement does a whole round for a queue, bucket after bucket, until ``batch`` tasks are leased,
so a queue whose tasks trickle into every bucket costs one statement per round), on CockroachDB
one group per bucket (empty buckets cost one short statement each). Each step is one statement
that leases up to ``batch`` ready tasks of one queue, lowest priority first, with
``FOR UPDATE SKIP LOCKED``: consumers never wait on each other and never hold the same task at
once. When a step finds nothing, the consumer also promotes that group's due scheduled tasks (at
most every ``PROMOTE_INTERVAL_SECONDS`` per group and queue) and claims again; when it comes back
short, it hands out what it has and promotes first at its next visit of the pair.

The layout (bucket count, CockroachDB's shard column) is re-discovered every
``LAYOUT_REFRESH_SECONDS`` (5 s), whenever a whole round finds nothing, and at once when a claim
fails because the shard column it used was dropped (a CockroachDB resize), so a consumer follows
an online resize without restarting. A round after which the layout turned out to have changed
does not count as empty: the buckets it did not walk may hold tasks.

A claim whose outcome is unknown (CockroachDB's 40003) or that kept failing with 40001 is counted
as empty for its bucket and the walk goes on: if it did commit, its tasks stay leased under a
token nobody holds and the reaper returns them when the lease expires (see :mod:`shardq.sessions.rules`)."""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from shardq import validation
from shardq.errors import AmbiguousResult, SerializationConflict, ShardLayoutChanged
from shardq.lifecycle import flow
from shardq.lifecycle.queue_settings import QueueSettingsCache
from shardq.models.layout import ShardLayout
from shardq.models.leases import Fenced
from shardq.models.queues import QueueSettings
from shardq.models.tasks import (
    ClaimedTask,  # the handler's task lives in shardq.models; this path keeps working
)
from shardq.sessions.store import TaskStore

log = logging.getLogger("shardq.lifecycle.claim")


BATCH_DEFAULT = 100


# Short enough that after a resize a busy consumer (one that never has an empty round) reaches
# new buckets within seconds, and on CockroachDB stops filtering on a stale shard column that
# the resize could not drop; one catalog read per consumer per interval.
LAYOUT_REFRESH_SECONDS = 5.0


# How often one consumer promotes due scheduled tasks of one (bucket, queue) when its claim there
# comes back short. Many consumers share the pairs, so a due task waits about this long at most.
PROMOTE_INTERVAL_SECONDS = 0.25


PROMOTE_BATCH = 500


# A round that answers a wake-up and finds nothing reads the layout and the queue settings again
# only when they are older than this (see Consumer.claim): every waiting worker wakes for each
# wake-up, and reading both after each such round tripled the statements of a fleet that producers
# wake every few milliseconds (docs/latency.md). A polled round always reads them.
WOKEN_REFRESH_SECONDS = 0.25


# A consumer whose claims a flow limit refuses reads the queue settings again at most this often
# (otherwise after every empty round), so a limit removed meanwhile stops applying within about this.
THROTTLED_SETTINGS_REFRESH_SECONDS = 1.0


@dataclass
class ClaimRound:
    """What one call to :meth:`Consumer.claim` found."""

    tasks: list[ClaimedTask] = field(default_factory=list)
    #: True when the call walked every (bucket, queue) pair once and all were empty
    round_empty: bool = False
    statements: int = 0
    #: one (bucket, queue, seconds, tasks found) per claim statement, for metrics; a claim over
    #: several buckets gives one per bucket it took tasks from, its seconds on the first only
    #: (None on the others)
    polls: list[tuple[int, str, float | None, int]] = field(default_factory=list)
    #: queues whose flow limit refused this call's claim, with the seconds until their next token
    #: (a rate) or None (every concurrency slot is held)
    throttled: dict[str, float | None] = field(default_factory=dict)
    #: a queue with a flow limit was skipped: every handler slot of the caller was busy
    #: (``start_room`` 0), so nothing could be claimed that would start at once
    no_room: bool = False
    #: tasks were found by a round that saw every ready task there was: one statement over every
    #: bucket of the only queue came back with fewer than it asked for (PostgreSQL: one group of
    #: all buckets), so a claim right after it would most likely find nothing
    drained: bool = False
    #: a queue was skipped because its lane of the caller's handlers had no room (a worker with
    #: per-queue shares, shardq.worker.shares): not an empty round, tasks wait there
    lane_full: bool = False


class Consumer:
    """Claims batches for a set of queues, walking buckets round-robin from ``offset``.

    Options (defaults): ``batch`` tasks per claim statement (100); ``lease_seconds`` overrides
    each queue's lease setting (None: use the queue's, 30 s by default). Leases are at least
    ``LEASE_MIN_SECONDS`` (1 s, see :mod:`shardq.validation`): a queue row holding a shorter one
    (written by hand in SQL) is used as 1 s.
    """

    def __init__(
        self,
        store: TaskStore,
        queues: Sequence[str],
        *,
        batch: int = BATCH_DEFAULT,
        lease_seconds: float | None = None,
        offset: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        flow_slots: flow.FlowSlots | None = None,
    ) -> None:
        if not queues:
            raise validation.InvalidInput("at least one queue is needed")
        self.queues = [validation.queue_name(q) for q in queues]
        self.batch = validation.positive_int(batch, "batch", maximum=validation.BATCH_MAX)
        self.store = store
        #: this consumer's own view of its queues' settings, read through its own store
        self.queue_settings = QueueSettingsCache(store, self.queues, lease_override=lease_seconds, clock=clock)
        self._clock = clock
        self._offset = offset if offset is not None else uuid.uuid4().int
        self._position = 0
        self._turn = 0
        self._layout: ShardLayout | None = None
        self._layout_at = 0.0
        self._promoted_at: dict[tuple[int, str], float] = {}
        #: (group, queue) pairs whose last claim came back short: their next claim promotes first
        self._promote_owed: set[tuple[int, str]] = set()
        #: the concurrency slots this consumer's claims run in (shardq.lifecycle.flow; a worker's are shared
        #: with its executor, which frees them)
        self.flow_slots = flow_slots if flow_slots is not None else flow.FlowSlots()

    # -- layout and settings ----------------------------------------------------------------
    def layout(self, *, refresh: bool = False) -> ShardLayout:
        now = self._clock()
        if refresh or self._layout is None or now - self._layout_at >= LAYOUT_REFRESH_SECONDS:
            self._layout = self.store.layout()
            self._layout_at = now
        return self._layout

    def settings(self, queue: str) -> QueueSettings:
        return self.queue_settings.settings(queue)

    def lease_for(self, queue: str) -> float:
        return self.queue_settings.lease_for(queue)

    # -- claiming ---------------------------------------------------------------------------
    def _promote(self, group: int, buckets: list[int], queue: str, result: ClaimRound) -> bool:
        """Promote due scheduled tasks of ``queue`` in ``buckets`` (group ``group`` of the round)
        unless this consumer did so recently."""
        now = self._clock()
        if now - self._promoted_at.get((group, queue), -PROMOTE_INTERVAL_SECONDS) < PROMOTE_INTERVAL_SECONDS:
            return False
        self._promoted_at[(group, queue)] = now
        result.statements += 1
        return self.store.promote_due(buckets, queue, PROMOTE_BATCH) > 0

    def _claim(self, buckets: list[int], queue: str, limit: int, lease: float, result: ClaimRound) -> list[ClaimedTask]:
        """One claim statement over ``buckets``, timed into ``result.polls``: one entry per bucket
        it took tasks from (the statement's time on the first; None on the others), or one empty
        poll."""
        started = time.perf_counter()
        # Durable only where a flow limit's slots or tokens share the claim's transaction: the
        # rest may commit without waiting for disk (see shardq.engine.Engine.claim).
        tasks = self.store.claim(buckets, queue, limit, lease, durable=self.settings(queue).limited)
        seconds: float | None = time.perf_counter() - started
        if len(buckets) == 1 or not tasks:
            result.polls.append((buckets[0], queue, seconds, len(tasks)))
            return tasks
        found = Counter(t.key.bucket for t in tasks)
        for bucket in buckets:
            if bucket in found:
                result.polls.append((bucket, queue, seconds, found[bucket]))
                seconds = None
        return tasks

    def _gated(
        self, queue: str, claim: Callable[[int], list[ClaimedTask]], result: ClaimRound
    ) -> Callable[[int], list[ClaimedTask]]:
        """``claim`` for a queue with a flow limit (:mod:`shardq.lifecycle.flow`): at most as many tasks
        as this consumer has idle slots and the queue has tokens; a refusal is noted in
        ``result.throttled``."""
        settings = self.settings(queue)

        def gated(limit: int) -> list[ClaimedTask]:
            tasks, refused = self.flow_slots.claim(self.store, settings, limit, self.lease_for(queue), claim)
            if refused is flow.NO_ROOM:
                result.no_room = True
            elif refused is not None:
                result.throttled[queue] = refused if isinstance(refused, float) else None
            return tasks

        return gated

    def _limit_for(self, queue: str, want: int, start_room: int | None) -> int:
        """How many tasks of ``queue`` to ask for: a queue with a concurrency limit claims only
        as many as can start now (``start_room``), not a prefetch, while the limit binds this
        consumer (it holds fewer slots than it has handlers): a task waiting in its buffer would
        keep a task from another worker's free slot. Once it holds one slot per handler it claims
        ahead like any worker (see :mod:`shardq.lifecycle.flow`). (A rate-limited task spends its token
        when it is claimed, so starting it a moment later keeps the rate; it may be prefetched.)"""
        if (
            start_room is not None
            and self.settings(queue).concurrency_limit is not None
            and not self.flow_slots.saturated(queue)
        ):
            return min(want, start_room)
        return want

    @staticmethod
    def _claim_then_promote(
        claim: Callable[[int], list[ClaimedTask]],
        promote: Callable[[], bool],
        want: int,
        result: ClaimRound,
        *,
        promote_first: bool = False,
    ) -> tuple[list[ClaimedTask], bool]:
        """Claim; when that found nothing, promote due scheduled tasks and claim again. Returns the
        tasks and whether a promote is owed: a claim that found some tasks but fewer than
        ``want`` hands them out at once, and the caller's next visit of the pair promotes first
        (``promote_first``) — promoting before the hand-off held an idle queue's task back by a
        statement (docs/latency.md). So no statement follows a claim that leased tasks: nothing can
        fail while they wait to be handed out."""
        if promote_first:
            promote()
        tasks = claim(want)
        if tasks:
            return tasks, len(tasks) < want
        if promote():
            result.statements += 1
            tasks = claim(want)
        return tasks, False

    def claim(
        self,
        limit: int | None = None,
        *,
        start_room: int | None = None,
        woken: bool = False,
        room: Callable[[str], tuple[int, int]] | None = None,
    ) -> ClaimRound:
        """Walk (group of buckets, queue) pairs from where the last call stopped until a claim
        returns tasks or every pair has been tried once. The engine cuts a round into groups
        (:meth:`shardq.engine.Engine.claim_groups`): every bucket in one statement (PostgreSQL,
        starting one bucket further each call, so each bucket gets its turn to be drained first)
        or one bucket per statement (CockroachDB). At most ``limit`` (default ``batch``) tasks,
        and of a queue with a flow limit at most ``start_room`` (tasks the caller can start at
        once; None: ``limit``). ``woken``: the round answers a wake-up (:mod:`shardq.lifecycle.notify`); if
        it finds nothing, the layout and settings are read again only when older than
        ``WOKEN_REFRESH_SECONDS``: a wake-up wakes every waiting worker, and finding nothing then
        mostly means another worker was first, not that anything changed (a polled round that
        finds nothing always reads them). ``room`` (a worker with per-queue shares): per queue, how
        many tasks its lane may take and how many of them could start at once, in place of
        ``limit`` and ``start_room``; a queue whose lane is full is skipped."""
        want = min(limit or self.batch, self.batch)
        layout = self.layout()
        groups = self.store.claim_groups(layout.visit_count, self._offset + self._turn)
        self._turn += 1
        pairs = len(groups) * len(self.queues)
        result = ClaimRound()
        failed = False
        for _ in range(pairs):
            step = (self._offset + self._position) % pairs
            self._position += 1
            group, queue_index = divmod(step, len(self.queues))
            queue = self.queues[queue_index]
            if self.settings(queue).paused_dequeue or queue in result.throttled:
                continue
            if room is None:
                queue_want = self._limit_for(queue, want, start_room)
            else:
                lane_want, lane_start = room(queue)
                if lane_want <= 0:
                    result.lane_full = True
                    continue
                queue_want = self._limit_for(queue, min(want, lane_want), lane_start)
            if queue_want <= 0:
                result.no_room = True
                continue
            buckets = groups[group]
            result.statements += 1
            try:
                claim = partial(self._claim, buckets, queue, lease=self.lease_for(queue), result=result)
                pair = (group, queue)
                tasks, owed = self._claim_then_promote(
                    self._gated(queue, claim, result) if self.settings(queue).limited else claim,
                    partial(self._promote, group, buckets, queue, result),
                    queue_want,
                    result,
                    promote_first=pair in self._promote_owed,
                )
                if owed:
                    self._promote_owed.add(pair)
                else:
                    self._promote_owed.discard(pair)
            except ShardLayoutChanged as exc:
                log.info("layout changed under a claim (%s); re-discovering", exc)
                self.layout(refresh=True)
                return result  # not an empty round: the new layout has not been walked yet
            except (AmbiguousResult, SerializationConflict) as exc:
                log.warning("claim in bucket %d of queue %s failed (%s); moving on", buckets[0], queue, exc)
                failed = True
                continue
            if tasks:
                result.tasks = tasks
                # One statement walked every bucket of the only queue and took all it found.
                result.drained = pairs == 1 and len(tasks) < queue_want and not self.settings(queue).limited
                return result
        return self._end_empty_round(layout, result, failed, woken)

    def _end_empty_round(
        self, layout: ShardLayout, result: ClaimRound, failed: bool, woken: bool = False
    ) -> ClaimRound:
        """Nothing was claimed: the cheap moment to notice a resize or new settings. The round
        counts as empty only if the layout it walked is still the layout, no claim failed and no
        flow limit refused a claim (tasks may be waiting behind it)."""
        if result.no_room or result.lane_full:
            return result  # not a round at all: a limited queue was not asked, for want of room
        if (
            woken
            and not failed
            and not result.throttled
            and not self.flow_slots.pools
            and self._clock() - self._layout_at < WOKEN_REFRESH_SECONDS
            and self.queue_settings.age() < WOKEN_REFRESH_SECONDS
        ):
            result.round_empty = True  # read moments ago, by a round that found nothing either
            return result
        refreshed = self.layout(refresh=True)
        if self.flow_slots.pools:
            self.flow_slots.release_idle(self.store)  # nothing to run here: other workers may have work
        if not result.throttled or self.queue_settings.age() >= THROTTLED_SETTINGS_REFRESH_SECONDS:
            self.queue_settings.expire()  # a removed limit is seen soon, without a read per refusal
            # Read now, while nothing waits: read lazily, it delayed the claim of the next round,
            # the one a wake-up starts (docs/latency.md).
            self.settings(self.queues[0])
        unchanged = (refreshed.visit_count, refreshed.shard_column) == (layout.visit_count, layout.shard_column)
        result.round_empty = unchanged and not failed and not result.throttled
        return result


def fenced(task: ClaimedTask) -> Fenced:
    return Fenced(task.key, task.lease_token)
