"""What a worker holds between claim and settle, shared in memory by its parts.

Nothing here touches the database. The fetcher adds claimed tasks, the executor marks them running
and records their outcome, the settler forgets them once settled, the lease keeper reads which are
running. Each counter has one writer (named below), so the hot path takes no lock; the table of
held tasks itself is guarded by :attr:`InFlightTable.lock`.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from shardq.lifecycle.flow import FlowSlots
from shardq.models.tasks import ClaimedTask
from shardq.worker.shares import Lanes
from shardq.workflows.spark_callbacks import is_run

# How a held task ends, as the settler applies it (plain strings: compared per task).
ACK = "ack"  # the handler returned: delete the row
FAIL = "fail"  # the handler raised: retry with backoff or dead-letter
HAND_BACK = "hand_back"  # never started (stop, lease ran out in the buffer): ready again, attempt refunded
RESCHEDULE = "reschedule"  # shardq.Retry: run again after a delay, attempt refunded
PARKED = "parked"  # a durable task's sleep or wait put it back itself (fenced): nothing to settle


@dataclass(slots=True, eq=False)  # eq=False: hashed by identity, counted per claim
class Claim:
    """The tasks one claim statement leased under one token: where their rows are (one bucket and
    queue, between the first and last (rank, exec_time, id) in key order) and how many are unsettled."""

    bucket: int
    queue: str
    first: tuple
    last: tuple
    left: int  # unsettled; lowered by the settler only, when it plans a batch (0: closed)
    #: some task holds an exclusive key or is a Spark run's task: acked per key (its ack releases
    #: others); a claim of workflow steps is acked by key range when it is acked whole
    keyed: bool
    token: uuid.UUID
    size: int = 0  # tasks claimed
    #: the executor takes the next number as it queues an outcome; the one that takes ``size``
    #: wakes the settler (next() on a count is one C call: atomic under the GIL, no lock needed)
    finished: Iterator[int] = field(default_factory=lambda: itertools.count(1))


@dataclass(slots=True)
class InFlight:
    """A claimed task while this worker holds it and, once its handler is done or it is handed
    back, its outcome on the way to the settler (one object per task, not two)."""

    claimed: ClaimedTask
    local_deadline: float
    claim: Claim
    running: bool = False
    kind: str = ACK
    error: str | None = None
    #: seconds until a rescheduled task runs again (kind RESCHEDULE)
    delay: float = 0.0
    permanent: bool = False
    #: how long the handler ran (None: it did not run)
    seconds: float | None = None
    #: when the handler returned (wall clock, seconds since 1970; None: it did not run)
    ended_at: float | None = None
    #: execution timeout in seconds (None: none), and when it runs out (monotonic; set at start)
    timeout: float | None = None
    timeout_at: float | None = None
    #: the timeout keeper settled this task as timed out: its slot must drop its own outcome
    abandoned: bool = False
    timed_out: bool = False
    #: the executor slot running it (kept only for tasks with a timeout)
    slot: int = -1
    #: the JSON text of the handler's return value, for a task declared with result=True or of a
    #: queue that keeps results
    result: str | None = None
    #: its queue keeps every task's result (QueueSettings.results_kept): the executor encodes
    #: whatever the handler returns
    keep_result: bool = False

    def released(self) -> InFlight:
        """A copy handed back: the executor still owns this entry and may queue it later."""
        return InFlight(self.claimed, self.local_deadline, self.claim, kind=HAND_BACK)


class InFlightTable:
    """The tasks a worker holds and the counters that pace its claims.

    Writers: the fetcher adds tasks and owns ``claimed_total``; the settler adds the tasks its acks
    hand off (:mod:`shardq.worker.handoff`) and owns ``taken_total``; executor slot ``i`` owns
    ``started[i]`` and ``finished[i]``; the settler removes settled tasks (:meth:`forget`). Reads of
    the counters from other threads see a value at most a few tasks old, which only moves the next
    claim by as much."""

    def __init__(self, slots: int, *, batch: int, prefetch: int, ack_batch: int, lanes: Lanes | None = None) -> None:
        if lanes is not None:
            slots = lanes.total
        #: the concurrency slots of limited queues this worker holds (shardq.lifecycle.flow): the fetcher fills
        #: them, the executor frees one when its handler returns; a queue with a share holds at most its share
        capacities = {q: lanes.sizes[lane] for q, lane in lanes.of_queue.items()} if lanes is not None else None
        self.flow = FlowSlots(capacity=slots, on_free=self._wake_fetcher, capacities=capacities)
        # Keyed by a UUID's .int, not the UUID: uuid.UUID.__hash__ is a Python-level call, and
        # this dict is touched several times per task.
        self.entries: dict[int, InFlight] = {}
        self.lock = threading.Lock()
        self.claimed_total = 0
        self.taken_total = 0
        self.started = [0] * slots
        self.finished = [0] * slots
        #: tasks the timeout keeper settled while their handler still ran (its own counter)
        self.timed_out = 0
        self.slots = slots
        self.batch = batch
        self.prefetch = prefetch
        self.ack_batch = ack_batch
        # Claim again once this few claimed tasks wait for a slot, so claims are (nearly) full
        # batches instead of topping the buffer up a few tasks at a time.
        self.low_water = max(slots - 1, prefetch - batch)
        #: set when the fetcher should look again: the buffer ran low, a settle freed room, a stop
        self.fetch_wake = threading.Event()
        #: per-queue shares (shardq.worker.shares; None: one lane of every slot). Per lane: which
        #: slots run it, and its own counters, each with the same single writer as the totals above
        self.lanes = lanes
        sizes = lanes.sizes if lanes is not None else (slots,)
        self.slot_lane = [lane for lane, size in enumerate(sizes) for _ in range(size)]
        self.lane_slots = [[i for i, lane in enumerate(self.slot_lane) if lane == n] for n in range(len(sizes))]
        self.lane_claimed = [0] * len(sizes)
        self.lane_taken = [0] * len(sizes)
        self.lane_timed_out = [0] * len(sizes)
        self.lane_prefetch = [lanes.prefetch(n, prefetch) if lanes is not None else prefetch for n in range(len(sizes))]
        self.lane_low_water = [max(size - 1, pf - batch) for size, pf in zip(sizes, self.lane_prefetch)]
        self.lane_sizes = list(sizes)

    def lane_of(self, queue: str) -> int:
        """The lane whose handlers run ``queue``'s tasks (0 without shares)."""
        return 0 if self.lanes is None else self.lanes.of_queue.get(queue, len(self.lane_sizes) - 1)

    def _count_lanes(self, entries: Sequence[InFlight], counts: list[int]) -> None:
        if self.lanes is not None:
            for entry in entries:
                counts[self.lane_of(entry.claimed.queue)] += 1

    def note_timed_out(self, queue: str) -> None:
        """A task of ``queue`` was settled as timed out while its handler ran (the timeout keeper's
        counter): it no longer holds its slot."""
        self.timed_out += 1
        if self.lanes is not None:
            self.lane_timed_out[self.lane_of(queue)] += 1

    def _wake_fetcher(self) -> None:
        self.fetch_wake.set()

    def add(self, entries: Sequence[InFlight]) -> None:
        with self.lock:
            table = self.entries
            for entry in entries:
                table[entry.claimed.key.id.int] = entry
        self._count_lanes(entries, self.lane_claimed)
        self.claimed_total += len(entries)  # before the hand-off, so "waiting" never looks negative

    def add_taken(self, entries: Sequence[InFlight]) -> None:
        """Tasks the settler's ack took (the settler's counter, like :meth:`add` the fetcher's)."""
        with self.lock:
            table = self.entries
            for entry in entries:
                table[entry.claimed.key.id.int] = entry
        self._count_lanes(entries, self.lane_taken)
        self.taken_total += len(entries)

    def drop_taken(self, entries: Sequence[InFlight]) -> None:
        """Tasks :meth:`add_taken` added that will not run here after all (the worker is stopping)."""
        with self.lock:
            for entry in entries:
                self.entries.pop(entry.claimed.key.id.int, None)
        if self.lanes is not None:
            for entry in entries:
                self.lane_taken[self.lane_of(entry.claimed.queue)] -= 1
        self.taken_total -= len(entries)

    def handoff_room(self, settling: int) -> int:
        """How many tasks an ack of ``settling`` held tasks may hand off now: up to the most leases a
        worker holds (slots, prefetch and an ack batch, as :meth:`want` counts them), the tasks it
        acks no longer counted. Taken ahead of claims: a claim waits for the room they leave."""
        held = len(self.entries) - settling
        return max(0, self.slots + self.prefetch + self.ack_batch - held)

    def forget(self, outcomes: Iterable[InFlight]) -> None:
        with self.lock:
            for o in outcomes:
                self.entries.pop(o.claimed.key.id.int, None)
        self.fetch_wake.set()  # room for more leases, or nothing in flight any more (until_empty)

    def in_progress(self) -> int:
        """Claimed tasks whose handler has not finished yet (waiting or running)."""
        return self.claimed_total + self.taken_total - sum(self.finished) - self.timed_out

    def want(self) -> int:
        """How many tasks to claim now (0: not yet). Room is counted in slots plus the prefetch
        buffer; tasks that finished and only await their ack take none (acks overlap the next
        claim), but all leases held stay under ``slots + prefetch + ack_batch``. With shares: the
        most any lane may claim (:meth:`lane_room` says how much each queue may)."""
        if self.lanes is not None:
            return max(self.lane_room_of(lane)[0] for lane in range(len(self.lane_sizes)))
        started = sum(self.started)
        waiting = self.claimed_total + self.taken_total - started
        if waiting > self.low_water:
            return 0
        running = started - sum(self.finished) - self.timed_out
        room = min(
            self.slots + self.prefetch - waiting - running,
            self.slots + self.prefetch + self.ack_batch - len(self.entries),
        )
        return max(0, min(room, self.batch))

    def start_room(self) -> int:
        """Tasks that could start at once: free slots not already promised to claimed tasks (what
        a queue with a flow limit may claim while the limit binds this worker: no prefetch, see
        :meth:`shardq.lifecycle.claim.Consumer._limit_for`)."""
        started = sum(self.started)
        waiting = self.claimed_total + self.taken_total - started
        running = started - sum(self.finished) - self.timed_out
        return max(0, self.slots - waiting - running)

    def lane_room(self, queue: str) -> tuple[int, int]:
        """With shares: how many tasks of ``queue`` to claim now (as :meth:`want`, counted in its
        lane's slots and part of the prefetch) and how many of them could start at once (as
        :meth:`start_room`)."""
        return self.lane_room_of(self.lane_of(queue))

    def lane_room_of(self, lane: int) -> tuple[int, int]:
        slots = self.lane_slots[lane]
        started = sum(self.started[i] for i in slots)
        waiting = self.lane_claimed[lane] + self.lane_taken[lane] - started
        running = started - sum(self.finished[i] for i in slots) - self.lane_timed_out[lane]
        size = self.lane_sizes[lane]
        start = max(0, size - waiting - running)
        if waiting > self.lane_low_water[lane]:
            return 0, start
        room = min(
            size + self.lane_prefetch[lane] - waiting - running,
            self.slots + self.prefetch + self.ack_batch - len(self.entries),
        )
        return max(0, min(room, self.batch)), start

    def add_slot(self, lane: int = 0) -> int:
        """A new slot (a thread replacing one left running past its task's timeout) in ``lane``:
        its index."""
        self.started.append(0)
        self.finished.append(0)
        self.slot_lane.append(lane)
        self.lane_slots[lane].append(len(self.started) - 1)
        return len(self.started) - 1

    def running(self) -> list[InFlight]:
        with self.lock:
            return [e for e in self.entries.values() if e.running]

    def extend_local(self, task_id: uuid.UUID, deadline: float) -> None:
        with self.lock:
            entry = self.entries.get(task_id.int)
            if entry is not None:
                entry.local_deadline = deadline


# C-level getters for per-task passes (a generator expression costs a Python frame step per task).
_lease_token_of = attrgetter("lease_token")
_exclusive_key_of = attrgetter("exclusive_key")  # a key is never empty, so truthy when present
_workflow_of = attrgetter("workflow_id")


def _is_run(claimed: ClaimedTask) -> bool:
    return is_run(claimed.workflow_id)


def _any_keyed(tasks: Sequence[ClaimedTask]) -> bool:
    # C-level passes first: a claim of plain tasks pays no Python call per task
    return any(map(_exclusive_key_of, tasks)) or (any(map(_workflow_of, tasks)) and any(map(_is_run, tasks)))


def acked_per_key(claimed: ClaimedTask) -> bool:
    """Whether ``claimed`` is acked per key (it holds an exclusive key or is a Spark run's task),
    and so makes its claim one (see :attr:`Claim.keyed`)."""
    return claimed.exclusive_key is not None or (claimed.workflow_id is not None and is_run(claimed.workflow_id))


claim_of = attrgetter("claim")


def entries_for(tasks: Sequence[ClaimedTask], deadline: float) -> tuple[list[InFlight], list[Claim]]:
    """One entry per claimed task and one :class:`Claim` per lease token. The store hands tasks
    out sorted in key order, so each token's first and last task bound its rows' key range."""
    token = tasks[0].lease_token
    if len(set(map(id, map(_lease_token_of, tasks)))) == 1:  # one bucket (the store shares the token object)
        head, tail = tasks[0].key, tasks[-1].key
        claim = Claim(
            head.bucket,
            head.queue,
            (head.rank, head.exec_time, head.id),
            (tail.rank, tail.exec_time, tail.id),
            len(tasks),
            _any_keyed(tasks),
            token,
            len(tasks),
        )
        return [InFlight(claimed, deadline, claim) for claimed in tasks], [claim]
    claims = _group_claims(tasks)
    return [InFlight(claimed, deadline, claims[claimed.lease_token.int]) for claimed in tasks], list(claims.values())


def _group_claims(tasks: Sequence[ClaimedTask]) -> dict[int, Claim]:
    """Per lease token: the claim's bucket, key range (first and last task in the store's
    order), size and whether any task holds an exclusive key."""
    claims: dict[int, Claim] = {}
    last: dict[int, ClaimedTask] = {}
    for claimed in tasks:
        token = claimed.lease_token.int
        claim = claims.get(token)
        if claim is None:
            key = claimed.key
            at = (key.rank, key.exec_time, key.id)
            claims[token] = Claim(key.bucket, key.queue, at, at, 1, acked_per_key(claimed), claimed.lease_token)
        else:
            claim.left += 1
            if acked_per_key(claimed):
                claim.keyed = True
        last[token] = claimed
    for token, claimed in last.items():
        claim = claims[token]
        claim.last = (claimed.key.rank, claimed.key.exec_time, claimed.key.id)
        claim.size = claim.left
    return claims


def timeout_text(seconds: float) -> str:
    """The error a timed-out attempt carries: ``timeout after 1.5 s``."""
    return f"timeout after {seconds:g} s"
