"""Flow control: at most N tasks of a queue running at once across every worker, and at most R task
starts per second, in bursts of up to B. The design, its costs and its limits are in
docs/flow-control.md; the statements in sql/common/flow.sql.

A queue without a limit never reaches this module: its claims are the ordinary claim statements,
unchanged.

**Concurrency.** A queue with a limit of N has N slot rows. A worker takes slots and keeps them
while it has work (:class:`SlotPool`): a slot row records which worker holds it (a token) and until
when (``free_at``). While a worker holds fewer slots than it has handlers, a claim asks for at most
as many tasks as it has idle slots: every task it claims starts at once, none waits in its buffer
holding back a task another worker's slot could run. Once it holds one slot per handler, the limit
no longer binds it (its own handler count does), and it claims ahead like a worker on a queue
without a limit: such a prefetched task is *unseated* and takes one of the worker's own idle slots
when a handler picks it up (:meth:`FlowSlots.seat`). A handler is free only when a task of this
worker ended, and a claim seats new tasks only in idle slots no unseated task is owed, so an
unseated task finds its slot; should none be idle (a renewal lost slots, or a thread abandoned after
its timeout still holds one), its thread waits a moment for one (:data:`SEAT_WAIT_SECONDS`), then
hands the task back unstarted rather than run it over the limit. Each task runs in one of the
worker's slots, and the slot is idle again, in memory, as soon as its handler returns. While the
worker is busy its slots cost nothing per task; it renews them every third of a lease, gives back
the idle ones when a claim round finds nothing, and all of them when it stops. A worker that dies
stops renewing: its slots are free again once ``free_at`` passes, at most one lease later, with
nobody cleaning up. Taking slots is a ``SKIP LOCKED`` scan, so workers taking slots at once take
different ones and never wait.

**Rate.** A rate-limited queue's claim is one transaction: lock the queue's token bucket, claim at
most as many tasks as there are whole tokens, and write back what is left. Claims of one
rate-limited queue queue up on that row for the length of a claim.

What it does not guarantee: a task whose worker lost its slot while the handler still ran (the
worker stalled for a whole lease without renewing) may run beside N others, exactly as such a task
may also run twice; the worker does not renew that task's lease, so it is not extended either.
A sync handler abandoned after its timeout (see :mod:`shardq.worker.timeouts`) still holds its slot
until its thread ends. Limits a running worker has not read yet (it re-reads queue settings every
``SETTINGS_REFRESH_SECONDS``, and within a second while a limit refuses its claims) do not apply to
it until then."""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from shardq import operations
from shardq.models.queues import QueueSettings
from shardq.models.tasks import ClaimedTask
from shardq.sessions.session import Session
from shardq.sessions.store import TaskStore
from shardq.sql.plan import Plan

log = logging.getLogger("shardq.lifecycle.flow")


#: How long a worker waits before asking again when every slot of a queue is held: the first wait,
#: doubled on each refusal in a row up to the maximum. Slots come back when other workers go idle
#: or die, which the database does not announce, so a throttled worker polls, gently.
SLOT_WAIT_MIN_SECONDS = 0.02


SLOT_WAIT_MAX_SECONDS = 0.5


#: What a refused claim reports when every slot was held (rather than a token wait in seconds).
NO_SLOT = object()


#: What a claim reports when the worker's own slots are all busy (not a refusal by the limit).
NO_ROOM = object()


#: How long a handler thread about to start a task claimed ahead waits for one of its worker's
#: slots to come free (only when there are more threads than slots: a thread abandoned after its
#: timeout still holds one, or a renewal lost one) before handing the task back unstarted.
SEAT_WAIT_SECONDS = 2.0


@dataclass
class SlotPool:
    """The slots of one queue that one worker holds: idle ones, and the task running in each busy
    one. Thread-safe: the fetcher takes and fills slots, handler threads free them, the renewal
    runs on whichever part is due."""

    queue: str
    #: written into every slot row this pool holds: whose the slot is
    token: uuid.UUID = field(default_factory=uuid.uuid4)
    idle: list[int] = field(default_factory=list)
    busy: dict[uuid.UUID, int] = field(default_factory=dict)
    #: tasks whose slot was lost while they ran (their leases are not renewed)
    lost: set[uuid.UUID] = field(default_factory=set)
    #: tasks claimed ahead that have not started yet: each is owed one of the idle slots
    unseated: set[uuid.UUID] = field(default_factory=set)
    lease_seconds: float = 30.0
    renew_at: float = math.inf
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: handler threads waiting in :meth:`FlowSlots.seat` for an idle slot (signalled on ``lock``)
    seat_waiters: int = 0
    freed: threading.Condition = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.freed = threading.Condition(self.lock)

    @property
    def held(self) -> int:
        return len(self.idle) + len(self.busy)

    @property
    def free(self) -> int:
        """Idle slots no unseated task is owed."""
        return len(self.idle) - len(self.unseated)

    def slots(self) -> list[int]:
        with self.lock:
            return self.idle + list(self.busy.values())


class FlowSlots:
    """A worker's slot pools, one per concurrency-limited queue it has claimed from, and the claim
    that goes through them (:meth:`claim`). ``capacity``: at most this many slots per queue (the
    worker's concurrency); ``on_free`` is called whenever a slot becomes idle (the fetcher's wake-up)."""

    def __init__(
        self,
        capacity: int = 1_000_000,
        *,
        on_free: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        capacities: dict[str, int] | None = None,
    ) -> None:
        self.capacity = capacity
        #: a smaller capacity for some queues (a worker's per-queue shares, shardq.worker.shares)
        self.capacities = capacities or {}
        self._on_free = on_free
        self.pools: dict[str, SlotPool] = {}
        self._clock = clock
        self._renewing = threading.Lock()

    def pool(self, queue: str) -> SlotPool:
        found = self.pools.get(queue)
        if found is None:
            found = self.pools.setdefault(queue, SlotPool(queue))
        return found

    def saturated(self, queue: str) -> bool:
        """Whether this worker holds one slot of ``queue`` per handler (``capacity``): the limit
        does not bind it, and it may claim ahead (see the module's docstring)."""
        pool = self.pools.get(queue)
        return pool is not None and self._full(pool)

    def _full(self, pool: SlotPool) -> bool:
        return pool.held >= self._capacity(pool.queue)

    def _capacity(self, queue: str) -> int:
        return self.capacities.get(queue, self.capacity)

    # -- claiming ------------------------------------------------------------------------------
    def claim(
        self,
        store: TaskStore,
        settings: QueueSettings,
        want: int,
        lease_seconds: float,
        claim: Callable[[int], list[ClaimedTask]],
    ) -> tuple[list[ClaimedTask], float | object | None]:
        """Claim up to ``want`` tasks of ``settings.name`` within its limits with ``claim(limit)``.
        Returns the tasks (each with the slot it runs in; None when claimed ahead: it takes one
        when it starts, see :meth:`seat`) and whether a limit refused: None (it did not),
        :data:`NO_SLOT`, the seconds until the next token, or :data:`NO_ROOM` (not a refusal:
        this worker's own slots are all busy)."""
        pool = self.pool(settings.name) if settings.concurrency_limit is not None else None
        if pool is not None:
            pool.lease_seconds = lease_seconds
            self.renew_due(store)
            if pool.free < want and not self._full(pool):
                self._take(store, pool, min(want - pool.free, self._capacity(pool.queue) - pool.held), lease_seconds)
            if not self._full(pool):
                want = min(want, pool.free)  # the limit binds: only what starts at once
            if want <= 0:
                # Every slot this worker may hold is busy: a handler has just returned and its
                # slot is on its way back (the worker's own count runs a moment ahead of it).
                return [], NO_ROOM if self._full(pool) else NO_SLOT
        if settings.rate_limit is not None:
            tasks, wait = claim_with_tokens(store, settings, want, claim)
        else:
            tasks, wait = claim(want), None
        return (self._seat(pool, tasks) if pool is not None else tasks), wait

    def _take(self, store: TaskStore, pool: SlotPool, count: int, lease_seconds: float) -> None:
        """Take up to ``count`` free slots of the pool's queue into it (one transaction)."""

        def body(_session: Session) -> list[tuple[int, dt.datetime]]:
            free = store.flow_slots_take(pool.queue, count)
            return store.flow_slots_hold(pool.queue, free, pool.token, lease_seconds) if free else []

        taken = store.session.transaction(body)
        if taken:
            with pool.lock:
                pool.idle.extend(slot for slot, _until in taken)
                pool.renew_at = min(pool.renew_at, self._clock() + lease_seconds / 3.0)

    def _seat(self, pool: SlotPool, tasks: list[ClaimedTask]) -> list[ClaimedTask]:
        """Give each new task an idle slot no unseated task is owed; the rest (claimed ahead by a
        saturated worker) are unseated and owed one."""
        with pool.lock:
            seated = []
            for task in tasks:
                if pool.free > 0:
                    slot = pool.idle.pop()
                    pool.busy[task.key.id] = slot
                    seated.append(task._replace(flow_slot=slot))
                elif self._full(pool):
                    pool.unseated.add(task.key.id)
                    seated.append(task)
                else:
                    # A renewal found slots gone between the count and now: run the task, but as
                    # one that lost its slot (its lease is not renewed).
                    pool.lost.add(task.key.id)
                    seated.append(task)
            return seated

    def seat(self, task: ClaimedTask, wait: float = 0.0) -> bool:
        """``task`` is about to start. A task claimed ahead (unseated) takes one of the worker's
        idle slots, waiting up to ``wait`` seconds for one (a thread pool may briefly have more
        threads than slots: a thread abandoned after its timeout still holds one, or a renewal
        lost one). If none comes free, it must not start: False, and the caller hands it back
        unstarted. Any other task already has its slot: True."""
        pool = self.pools.get(task.key.queue)
        if pool is None or not pool.unseated:
            return True
        with pool.lock:
            if task.key.id not in pool.unseated:
                return True
            if not pool.idle and wait > 0:
                pool.seat_waiters += 1
                try:
                    pool.freed.wait_for(lambda: pool.idle, timeout=wait)
                finally:
                    pool.seat_waiters -= 1
            pool.unseated.discard(task.key.id)
            if not pool.idle:
                return False
            pool.busy[task.key.id] = pool.idle.pop()
            return True

    # -- running -------------------------------------------------------------------------------
    def finished(self, task: ClaimedTask) -> None:
        """``task``'s handler returned (or it was handed back unstarted): its slot is idle again."""
        pool = self.pools.get(task.key.queue)
        if pool is None:
            return
        with pool.lock:
            slot = pool.busy.pop(task.key.id, None)
            if slot is not None:
                pool.idle.append(slot)
                if pool.seat_waiters:
                    pool.freed.notify()
            pool.lost.discard(task.key.id)
            pool.unseated.discard(task.key.id)  # handed back before it started
            waited_for = not self._full(pool)
        if waited_for and self._on_free is not None:
            # Only a worker the limit binds waits for its slots; a saturated one claims ahead,
            # paced by its buffer like any worker, and a wake-up per task would only spin it.
            self._on_free()

    def lost(self, task: ClaimedTask) -> bool:
        """Whether ``task``'s slot was taken by another worker while it ran (do not renew it)."""
        pool = self.pools.get(task.key.queue)
        return pool is not None and task.key.id in pool.lost

    def renew_due_in(self) -> float:
        """Seconds until some pool's slots must be renewed (infinite: none held)."""
        due = min((p.renew_at for p in self.pools.values() if p.held), default=math.inf)
        return max(0.0, due - self._clock())

    def renew_due(self, store: TaskStore) -> None:
        """Renew every pool's slots whose renewal is due (a third of a lease after the last), on
        ``store``'s session. Slots another worker took meanwhile leave the pool; a task running
        in one is marked lost."""
        if self.renew_due_in() > 0:
            return
        with self._renewing:
            now = self._clock()
            for pool in self.pools.values():
                if not pool.held or pool.renew_at > now:
                    continue
                asked = set(pool.slots())
                kept = {
                    slot
                    for slot, _until in store.flow_slots_extend(
                        pool.queue, sorted(asked), pool.token, pool.lease_seconds
                    )
                }
                # Only slots this renewal asked about can be gone: the fetcher may have taken more
                # meanwhile (they are a whole lease fresh).
                gone = asked - kept
                with pool.lock:
                    pool.renew_at = now + pool.lease_seconds / 3.0
                    if gone:
                        log.warning(
                            "queue %s: %d concurrency slot(s) expired before they were renewed and "
                            "went to another worker",
                            pool.queue,
                            len(gone),
                        )
                        pool.idle = [slot for slot in pool.idle if slot not in gone]
                        for task_id, slot in list(pool.busy.items()):
                            if slot in gone:
                                pool.lost.add(task_id)
                                del pool.busy[task_id]

    # -- giving back ---------------------------------------------------------------------------
    def release_idle(self, store: TaskStore) -> int:
        """Give back every idle slot no unseated task is owed (nothing more to run: let other
        workers have them). Returns how many."""
        released = 0
        for pool in self.pools.values():
            with pool.lock:
                keep = len(pool.unseated)
                idle, pool.idle = pool.idle[keep:], pool.idle[:keep]
            if idle:
                released += store.flow_slots_release(pool.queue, idle, pool.token)
        return released

    def release_all(self, store: TaskStore) -> int:
        """Give back every slot held (the worker stops; whatever still runs is being handed back)."""
        released = 0
        for pool in self.pools.values():
            with pool.lock:
                slots, pool.idle, pool.busy = pool.idle + list(pool.busy.values()), [], {}
                pool.unseated.clear()
            if slots:
                released += store.flow_slots_release(pool.queue, slots, pool.token)
        return released


def claim_with_tokens(
    store: TaskStore, settings: QueueSettings, want: int, claim: Callable[[int], list[ClaimedTask]]
) -> tuple[list[ClaimedTask], float | None]:
    """One transaction: lock the queue's token bucket, claim at most as many tasks as there are
    whole tokens, write back what is left. Returns the tasks and, when no token was there, the
    seconds until the next one."""
    rate = settings.rate_limit
    assert rate is not None

    def body(_session: Session) -> tuple[list[ClaimedTask], float | None]:
        bucket = store.flow_tokens_take(settings.name)
        if bucket is None:  # written with the limit: gone means the limit was removed meanwhile
            return claim(want), None
        tokens = bucket.available(rate, settings.burst)
        allowed = min(want, math.floor(tokens))
        if allowed <= 0:
            return [], (1.0 - tokens) / rate
        tasks = claim(allowed)
        store.flow_tokens_spend(settings.name, tokens - len(tasks), max(bucket.refilled_at, bucket.now))
        return tasks, None

    return store.session.transaction(body)


def fit_plan(settings: QueueSettings) -> Plan[None]:
    """Make the slot rows and the token bucket match ``settings`` (after ``shardq queue set``):
    slots 0 .. limit - 1 exist and no others; a bucket, full, exactly when a rate is set."""
    limit = settings.concurrency_limit or 0
    yield from operations.flow_slots_trim(settings.name, limit)
    if limit:
        yield from operations.flow_slots_add(settings.name, limit)
    if settings.rate_limit is None:
        yield from operations.flow_tokens_drop(settings.name)
    else:
        yield from operations.flow_tokens_reset(settings.name, float(settings.burst))
