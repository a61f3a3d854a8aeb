"""A worker process's runtime: claim in batches, run handlers on threads, settle in batches.

Threads
    * the **fetcher** (the thread that calls :meth:`Worker.run`) claims the next batch once at
      most ``concurrency - 1`` claimed tasks (or ``prefetch - batch``, if larger) still wait for
      a handler, keeping at most ``concurrency + prefetch`` tasks waiting or running; while whole
      rounds come back empty it sleeps with a growing, capped, jittered interval (with
      ``listen``, once two rounds in a row found nothing, it waits for a producer's wake-up for
      at most that long instead);
    * ``concurrency`` **handler** threads run the handler, one task at a time each;
    * the **settler** collects outcomes until the claims they belong to are complete (at most
      ``ACK_LINGER_SECONDS``), then settles them: acks of a whole claim in one statement by key
      range and token (PostgreSQL), other acks in one statement by key, retries or dead-letters
      failed tasks, hands back released ones and, with ``heartbeat``, renews the leases of
      running tasks. Finished tasks awaiting their ack do not hold up the next claim, but all
      leases held stay under ``concurrency + prefetch + ack_batch``.

Outcomes
    The handler gets a :class:`shardq.consumer.Task`. Returning acks it (the row is deleted).
    Raising :class:`shardq.Permanent` dead-letters it at once; any other exception retries it
    after exponential backoff with full jitter, or dead-letters it when that was its last attempt.

Guarantees
    * At-least-once: a task is deleted only after its handler returned. A task whose lease expired
      and was handed to another worker cannot be acked, retried or extended by this one (every
      statement is fenced by the lease token); such a stale ack changes nothing and is counted and
      logged as ``lease_lost``.
    * Graceful stop (SIGTERM, SIGINT, :meth:`Worker.stop`, or ``until_empty``): no new claims;
      claimed tasks that have not started are handed back at once (ready again, attempt refunded,
      no wait for lease expiry); running handlers get ``grace_seconds`` to finish; any still running
      then are handed back too before the process leaves.
    * A task whose lease ran out while it waited in this worker's prefetch buffer is handed back
      instead of being started (it may already be running elsewhere).

Does not
    * kill a handler thread: Python cannot. A handler that outlives its lease keeps running, but
      its outcome is discarded if the task was reaped; use ``task.extend()`` or ``heartbeat``.

Introspection
    * ``on_event(event, task, details)`` is called for every ``claimed``, ``handled`` (details:
      ``seconds``, ``outcome``), ``acked``, ``retried``, ``dead``, ``released`` and
      ``lease_lost`` task, and once per claim call with ``claim`` (task None; details ``polls``:
      one (bucket, queue, seconds, tasks found) per claim statement), and once per settled batch
      with ``settled`` (task None; details ``counts``: {(event, queue): n} of the acked, retried,
      dead, released and lease_lost tasks in it). :mod:`shardq.metrics` hangs Prometheus metrics
      on it. It runs on the worker's own threads: keep it cheap. ``events`` (optional) names the
      events the hook wants; per-task events nobody wants are then not even built.
    * Every such task event is also logged on ``shardq.worker`` with ``extra`` fields ``event``,
      ``task_id``, ``queue``, ``bucket``, ``attempt``: ``claimed``/``handled``/``acked``/
      ``released`` at DEBUG, ``retried``/``dead`` at INFO, ``lease_lost`` at WARNING. When no hook
      wants them and DEBUG is off, the per-task DEBUG events are skipped before any call (the
      settler re-reads the level every loop), so they cost an attribute check per task.
    * Acks, retries, dead letters, handler time and offered handler capacity are gathered in
      memory and added to ``shardq_stats`` every ``stats_interval`` seconds (one statement per
      flush, not per task) for ``shardq stats``' rates and lead time.

Options (defaults): ``concurrency`` 4, ``batch`` 100, ``prefetch`` = batch, ``lease_seconds``
per queue (30; at least 1 s like every lease, see ``shardq.validation.LEASE_MIN_SECONDS``),
``grace_seconds`` 30, ``idle_min``/``idle_max`` 0.05 s / 1.0 s, ``ack_batch`` 1000,
``heartbeat`` False, ``until_empty`` False, ``stats_interval`` 2.0 s, ``statement_timeout`` 10 s
(the server cancels any statement of the sessions :meth:`shardq.Client.worker` makes after this
long; a cancelled claim or settle is retried with backoff like a lost connection, so a locked table
or a sick database stalls the worker instead of hanging it; ``None``: no limit. A Worker built on
your own ``session_factory`` uses that factory's sessions as they are), ``listen`` True (on
PostgreSQL an idle fetcher waits for a producer's wake-up instead of sleeping, still polling at the
idle interval; see :mod:`shardq.notify`).
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import queue as queue_module
import signal
import threading
import time
import traceback
import uuid
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from . import backoff, exclusive, notify, validation
from . import stats as stats_module
from .consumer import Consumer, Task, fenced
from .db import Session
from .errors import DatabaseError, Permanent, Retry
from .models import ClaimedTask
from .store import Fenced, TaskStore, WholeClaim

log = logging.getLogger("shardq.worker")

Handler = Callable[[Task], object]

ERROR_TEXT_MAX = 4000  # last_error is for people; keep the row small
# Old counter rows are pruned by whoever runs; a worker does it this often (bounded deletes).
STATS_PRUNE_SECONDS = 60.0

_EVENT_LEVELS = {
    "claimed": logging.DEBUG,
    "handled": logging.DEBUG,
    "acked": logging.DEBUG,
    "released": logging.DEBUG,
    "retried": logging.INFO,
    "dead": logging.INFO,
    "lease_lost": logging.WARNING,
}
# Far above any healthy claim or ack (milliseconds), far below a lease: long enough not to fire in
# normal operation, short enough that a blocked statement fails while its tasks are still leased.
STATEMENT_TIMEOUT_DEFAULT = 10.0
# How long the settler keeps collecting outcomes of tasks still in progress before it settles
# what it has: one ack statement per claimed batch instead of one per handful of tasks. A finished
# task's row stays leased (and its lease record open) at most this much longer; no task's start
# is delayed by it.
ACK_LINGER_SECONDS = 0.02
# How long an idle settler waits for outcomes before it looks at its other chores (heartbeat,
# stats flush).
SETTLER_IDLE_WAIT_SECONDS = 0.05
# With ``listen``, an idle fetcher waits for wake-ups only once this many rounds in a row found
# nothing (its pause has grown past idle_min); before that it just sleeps its short pause.
LISTEN_AFTER_EMPTY_ROUNDS = 2


@dataclass(frozen=True)
class WorkerConfig:
    queues: tuple[str, ...]
    concurrency: int = 4
    batch: int = 100
    prefetch: int | None = None
    lease_seconds: float | None = None
    grace_seconds: float = 30.0
    idle_min: float = 0.05
    idle_max: float = 1.0
    ack_batch: int = 1000
    heartbeat: bool = False
    until_empty: bool = False
    stats_interval: float = 2.0
    statement_timeout: float | None = STATEMENT_TIMEOUT_DEFAULT
    listen: bool = True

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
        return self


@dataclass
class WorkerStats:
    """Counters of one worker run. ``lease_lost`` counts outcomes the database refused because
    the lease had already passed to someone else."""

    claimed: int = 0
    acked: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0
    lease_lost: int = 0
    handler_errors: int = 0
    claim_statements: int = 0
    empty_rounds: int = 0
    per_bucket_claims: Counter = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)


@dataclass(slots=True, eq=False)  # eq=False: hashed by identity, counted per claim
class _Claim:
    """The tasks one claim statement leased under one token: where their rows are (one bucket and
    queue, between the first and last (rank, exec_time) in key order) and how many are unsettled."""

    bucket: int
    queue: str
    first: tuple
    last: tuple
    left: int  # unsettled; lowered by the settler only, when it plans a batch (0: closed)
    keyed: bool  # some task holds an exclusive key: its ack must release the key's backlog
    token: uuid.UUID
    size: int = 0  # tasks claimed
    #: handlers take the next number as they queue an outcome; the one that takes ``size`` wakes
    #: the settler (next() on a count is one C call: atomic under the GIL, no lock needed)
    finished: Iterator[int] = field(default_factory=lambda: itertools.count(1))


@dataclass(slots=True)
class _InFlight:
    """A claimed task while this worker holds it and, once its handler is done or it is handed
    back, its outcome on the way to the settler (one object per task, not two)."""

    claimed: ClaimedTask
    local_deadline: float
    claim: _Claim
    running: bool = False
    kind: str = "ack"  # the outcome: "ack" | "fail" | "release" | "reschedule" (shardq.Retry)
    error: str | None = None
    #: seconds until a rescheduled task runs again (kind "reschedule")
    delay: float = 0.0
    permanent: bool = False
    #: how long the handler ran (None: it did not run)
    seconds: float | None = None


@dataclass(slots=True)
class _Batch:
    """Outcomes taken together, and the statements still to run to settle them."""

    outcomes: list
    steps: list


class Worker:
    """Runs ``handler`` over tasks of ``config.queues`` until stopped.

    ``session_factory`` makes a new :class:`~shardq.db.Session` for each thread that needs one
    (the fetcher, the settler, and handler threads that call ``task.extend``).
    ``on_event`` (optional) is called with (event name, task or None, details dict) for each
    claim, handler run, ack, retry, dead letter, release and lost lease: the hook metrics hang on
    (see the module documentation for the events).
    """

    def __init__(
        self,
        session_factory: Callable[[], Session],
        handler: Handler,
        config: WorkerConfig,
        *,
        on_event: Callable[[str, ClaimedTask | None, dict], None] | None = None,
        events: Collection[str] | None = None,
    ) -> None:
        self.config = config.validate()
        self.handler = handler
        self.session_factory = session_factory
        self.stats = WorkerStats()
        self.on_event = on_event
        self._hook_events = frozenset(events) if events is not None else None
        self._stop = threading.Event()
        self._force = threading.Event()
        # SimpleQueue (C, no task accounting) rather than Queue: one put and one get per task
        # are the whole hand-off cost between the fetcher and the handlers.
        self._work: queue_module.SimpleQueue[_InFlight | None] = queue_module.SimpleQueue()
        # Outcomes go to the settler through a deque, and the settler is woken only when a
        # claim's last outcome is in (or at shutdown), not per outcome: a blocking queue would
        # wake it, and make it take the GIL from the handlers, once per task.
        self._outcomes: deque[_InFlight | None] = deque()
        self._settle_wake = threading.Event()
        # Both keyed by a UUID's .int, not the UUID: uuid.UUID.__hash__ is a Python-level call,
        # and these dicts (and the settler's counters) are touched several times per task.
        # task id -> the task while it is claimed and unsettled
        self._inflight: dict[int, _InFlight] = {}
        self._lock = threading.Lock()  # guards _inflight and local deadlines
        # Wakes the fetcher: the buffer ran low, a settle freed room, or a stop was asked.
        self._wake = threading.Event()
        # Progress counters without a lock: each is written by one thread only (the fetcher owns
        # _claimed_total, handler thread i owns slot i of the two lists).
        self._claimed_total = 0
        self._started = [0] * config.concurrency
        self._finished = [0] * config.concurrency
        self._prefetch = config.batch if config.prefetch is None else config.prefetch
        # Claim again once this few claimed tasks wait for a handler, so claims are (nearly) full
        # batches instead of topping the buffer up a few tasks at a time.
        self._low_water = max(config.concurrency - 1, self._prefetch - config.batch)
        self._local = threading.local()
        self._sessions: list[Session] = []
        self._consumer: Consumer | None = None
        self._tally = stats_module.ActivityTally()  # the settler's; flushed to shardq_stats
        self._settled_counts: dict[tuple[str, str], int] = {}  # the settler's; one "settled" event per batch
        # Whether the per-task DEBUG events have a listener (a hook that wants them, or DEBUG
        # logging); refreshed by the settler every loop so the hot paths test one attribute
        # instead of calling into logging per task.
        self._trace_claimed = self._trace_handled = self._trace_outcomes = False
        self._refresh_tracing()
        self.stopped = threading.Event()

    # -- control ----------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask for a graceful stop; :meth:`run` returns once it is done."""
        self._stop.set()
        self._wake.set()

    def handle_signal(self, signum: int, _frame: object) -> None:
        if self._stop.is_set():
            log.warning("second signal %s: handing back running tasks without waiting", signum)
            self._force.set()
        else:
            log.info("signal %s: stopping gracefully", signum)
        self.stop()

    # -- sessions ---------------------------------------------------------------------------
    def _store(self) -> TaskStore:
        store = getattr(self._local, "store", None)
        if store is None:
            session = self.session_factory()
            self._sessions.append(session)
            store = TaskStore(session)
            if self._consumer is not None:
                store.layout()  # point CockroachDB statements at the shard column
            self._local.store = store
        return store

    def _wants(self, event: str) -> bool:
        return self.on_event is not None and (self._hook_events is None or event in self._hook_events)

    def _refresh_tracing(self) -> None:
        debug = log.isEnabledFor(logging.DEBUG)
        self._trace_claimed = debug or self._wants("claimed")
        self._trace_handled = debug or self._wants("handled")
        self._trace_outcomes = debug or any(self._wants(e) for e in ("acked", "released"))

    def _emit(self, event: str, task: ClaimedTask | None = None, **details: object) -> None:
        if task is not None:
            level = _EVENT_LEVELS.get(event, logging.DEBUG)
            if log.isEnabledFor(level):
                _log_task_event(level, event, task, details)
        hook = self.on_event
        if hook is not None and (self._hook_events is None or event in self._hook_events):
            try:
                hook(event, task, details)
            except Exception:  # a broken metrics hook must not break the worker
                log.exception("on_event hook failed for %s", event)

    # -- main -------------------------------------------------------------------------------
    def run(self, *, install_signal_handlers: bool = True) -> WorkerStats:
        """Work until stopped; return the counters. Installs SIGTERM/SIGINT handlers when called
        from the main thread and ``install_signal_handlers`` is true."""
        previous = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self.handle_signal)
        store = self._store()
        self._consumer = Consumer(
            store, self.config.queues, batch=self.config.batch, lease_seconds=self.config.lease_seconds
        )
        handlers = [
            threading.Thread(target=self._handler_loop, args=(i,), name=f"shardq-handler-{i}", daemon=True)
            for i in range(self.config.concurrency)
        ]
        settler = threading.Thread(target=self._settle_loop, name="shardq-settler", daemon=True)
        for thread in handlers:
            thread.start()
        settler.start()
        try:
            self._fetch_loop(self._consumer)
        finally:
            self._shutdown(handlers, settler)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for session in self._sessions:
                session.close()
            self.stopped.set()
        return self.stats

    def _in_progress(self) -> int:
        """Claimed tasks whose handler has not finished yet (waiting or running)."""
        return self._claimed_total - sum(self._finished)

    def _want(self) -> int:
        """How many tasks to claim now (0: not yet). Room is counted in handler slots plus the
        prefetch buffer; tasks that finished and only await their ack take none (acks overlap
        the next claim), but all leases held stay under ``concurrency + prefetch + ack_batch``."""
        config = self.config
        started = sum(self._started)
        waiting = self._claimed_total - started
        if waiting > self._low_water:
            return 0
        running = started - sum(self._finished)
        room = min(
            config.concurrency + self._prefetch - waiting - running,
            config.concurrency + self._prefetch + config.ack_batch - len(self._inflight),
        )
        return max(0, min(room, config.batch))

    def _fetch_loop(self, consumer: Consumer) -> None:
        empty_rounds = 0
        failures = 0
        listener = None
        if self.config.listen and not self.config.until_empty:
            listener = notify.Listener(consumer.store, self.config.queues)
            listener.start()  # on failure the worker polls, and retries after a claim succeeds
        while not self._stop.is_set():
            want = self._want()
            if want <= 0:
                self._wake.clear()
                if self._want() <= 0:  # re-check: a wake-up may have come just before the clear
                    self._wake.wait(0.5)
                continue
            try:
                if listener is not None and listener.active:
                    listener.discard()  # whatever a wake-up announced so far, this round will see
                found = consumer.claim(limit=want)
                failures = 0
                if listener is not None and not listener.active:
                    listener.retry()  # the database answers again (throttled: see notify.Listener)
            except DatabaseError as exc:
                if not exc.transient:
                    raise
                failures += 1
                pause = backoff.idle_sleep(failures, minimum=0.1, maximum=5.0)
                log.warning("claim failed (%s); retrying in %.1fs", exc, pause)
                self._stop.wait(pause)
                continue
            self.stats.add(claim_statements=found.statements)
            if self._wants("claim"):
                self._emit("claim", None, polls=found.polls, tasks=len(found.tasks))
            if found.tasks:
                empty_rounds = 0
                self._accept(found.tasks, consumer)
                continue
            if not found.round_empty:
                continue
            self.stats.add(empty_rounds=1)
            idle = not self._inflight
            if self.config.until_empty and idle:
                log.info("a full round found nothing due and nothing is in flight: done")
                return
            empty_rounds += 1
            pause = backoff.idle_sleep(empty_rounds, minimum=self.config.idle_min, maximum=self.config.idle_max)
            if self.config.until_empty and not idle:
                self._wake.clear()
                self._wake.wait(pause)  # a settle wakes us: maybe nothing is in flight any more
            elif listener is not None and listener.active and empty_rounds >= LISTEN_AFTER_EMPTY_ROUNDS:
                # Idle for a while: a producer's wake-up ends the pause early, and the back-off
                # restarts from idle_min. While tasks keep coming, plain short polls serve them
                # better: every wake-up wakes every listening worker, and all but one find nothing.
                if listener.wait(pause, self._stop):
                    empty_rounds = 0
            else:
                self._stop.wait(pause)

    def _accept(self, tasks: Sequence[ClaimedTask], consumer: Consumer) -> None:
        lease = consumer.lease_for(tasks[0].queue)
        deadline = time.monotonic() + lease
        # One lease token per claimed bucket. The store hands tasks out sorted in key order, so
        # each token's first and last task bound its rows' key range.
        token = tasks[0].lease_token
        if len(set(map(id, map(_lease_token_of, tasks)))) == 1:  # one bucket (the store shares the token object)
            head, tail = tasks[0].key, tasks[-1].key
            claim = _Claim(head.bucket, head.queue, (head.rank, head.exec_time), (tail.rank, tail.exec_time),
                           len(tasks), any(map(_exclusive_key_of, tasks)), token, len(tasks))
            claims = {token.int: claim}
            entries = [_InFlight(claimed, deadline, claim) for claimed in tasks]
        else:
            claims = _group_claims(tasks)
            entries = [_InFlight(claimed, deadline, claims[claimed.lease_token.int]) for claimed in tasks]
        with self._lock:
            inflight = self._inflight
            for entry in entries:
                inflight[entry.claimed.key.id.int] = entry
        self._claimed_total += len(tasks)  # before the puts, so "waiting" never looks negative
        self.stats.add(claimed=len(tasks))
        for claim in claims.values():
            self.stats.per_bucket_claims[claim.bucket] += claim.left
        if self._trace_claimed:
            for entry in entries:
                self._emit("claimed", entry.claimed)
        put = self._work.put
        for entry in entries:
            put(entry)

    # -- handlers ---------------------------------------------------------------------------
    def _extend(self, claimed: ClaimedTask, seconds: float) -> dt.datetime | None:
        expiry = self._store().task_extend_many([fenced(claimed)], seconds)
        expires = expiry.get(claimed.key.id)
        if expires is not None:
            with self._lock:
                entry = self._inflight.get(claimed.key.id.int)
                if entry is not None:
                    entry.local_deadline = time.monotonic() + seconds
        return expires

    def _handler_loop(self, slot: int) -> None:
        work, put, wake, stop = self._work, self._outcomes.append, self._wake, self._stop
        settle_wake = self._settle_wake
        started, finished, low_water = self._started, self._finished, self._low_water
        handler, extend, monotonic, perf_counter = self.handler, self._extend, time.monotonic, time.perf_counter
        while True:
            entry = work.get()
            if entry is None:
                return
            started[slot] += 1
            if work.qsize() <= low_water and not wake.is_set():
                wake.set()  # the buffer ran low: time for the fetcher's next claim
            if stop.is_set() or monotonic() >= entry.local_deadline:
                # Not started: hand it back now rather than run a task that may be elsewhere.
                entry.kind = "release"
            else:
                entry.running = True  # one attribute store (atomic); heartbeat reads it under the lock
                t0 = perf_counter()
                try:
                    handler(Task(entry.claimed, extend))
                except Permanent as exc:
                    entry.kind, entry.error, entry.permanent = "fail", _describe(exc), True
                except Retry as exc:
                    entry.kind, entry.error, entry.delay = "reschedule", _describe(exc), exc.in_seconds
                except BaseException as exc:  # noqa: BLE001 - any handler failure is a task failure
                    self.stats.add(handler_errors=1)
                    entry.kind, entry.error = "fail", _describe(exc)
                entry.seconds = perf_counter() - t0
                entry.running = False  # awaiting its settle: nothing for the heartbeat to renew
                if self._trace_handled:
                    self._emit("handled", entry.claimed, seconds=entry.seconds, outcome=entry.kind)
            put(entry)
            finished[slot] += 1  # after the put: once nothing is in progress, every outcome is queued
            claim = entry.claim
            if next(claim.finished) >= claim.size:
                settle_wake.set()  # the claim's last outcome: settle it now

    # -- settling ---------------------------------------------------------------------------
    def _settle_loop(self) -> None:
        store = None
        batch: _Batch | None = None
        finished = False
        next_beat = time.monotonic()
        last_flush = next_prune = time.monotonic()
        failures = 0
        while not finished or batch is not None:
            self._refresh_tracing()
            if batch is None and not finished:
                pending: list[_InFlight] = []
                finished = self._collect(pending)
                if pending:
                    batch = self._plan(pending)
            try:
                store = store or self._store()
                if batch is not None:
                    self._apply(store, batch)
                    batch = None
                if self.config.heartbeat and time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + self._heartbeat(store)
                if time.monotonic() - last_flush >= self.config.stats_interval:
                    last_flush = self._flush_stats(store, last_flush)
                    if last_flush >= next_prune:
                        next_prune = last_flush + STATS_PRUNE_SECONDS
                        self._prune_stats(store)
                failures = 0
            except DatabaseError as exc:
                if exc.transient:  # lost connection, statement timeout: the same settle may work later
                    failures += 1
                    pause = backoff.idle_sleep(failures, minimum=0.1, maximum=5.0)
                    count = len(batch.outcomes) if batch else 0
                    log.warning("settling %d outcomes failed (%s); retrying in %.1fs", count, exc, pause)
                    time.sleep(pause)
                    continue
                # The leases will expire and the reaper returns these tasks: at-least-once holds.
                if batch is not None:
                    log.error("could not settle %d outcomes, leaving them to the reaper: %s", len(batch.outcomes), exc)
                    self._forget(batch.outcomes)
                    batch = None
                else:
                    log.error("lease renewal failed: %s", exc)
        if store is not None:
            self._flush_stats(store, last_flush)

    @staticmethod
    def _prune_stats(store: TaskStore) -> None:
        try:
            stats_module.prune(store)
        except DatabaseError as exc:  # housekeeping: the next prune tries again
            log.debug("pruning old queue activity rows failed: %s", exc)

    def _flush_stats(self, store: TaskStore, since: float) -> float:
        """Add what was settled since the last flush, and the handler capacity offered meanwhile,
        to ``shardq_stats``. Returns the time of this flush."""
        now = time.monotonic()
        offered = self.config.concurrency * (now - since)
        for queue_name in self.config.queues:
            self._tally.of(queue_name).capacity_seconds += offered
        self._tally.flush(store)
        return now

    def _collect(self, pending: list[_InFlight]) -> bool:
        """Gather outcomes into ``pending`` so that one statement settles many: wait up to
        ``ACK_LINGER_SECONDS`` for a claim to complete, then keep taking outcomes until
        ``ack_batch`` are pending, every claim they belong to is complete, nothing is in progress
        any more, a stop was asked, or ``ACK_LINGER_SECONDS`` passed since the first was seen.
        Returns True once the end-of-work marker was taken.

        Handlers set ``_settle_wake`` only when they queue a claim's last outcome (and the
        shutdown when it queues the marker): this thread wakes about once per claim, not once
        per task. The wake is cleared before the queue is drained, and a handler appends before
        it sets, so no outcome can be left unseen while this thread waits."""
        outcomes, wake = self._outcomes, self._settle_wake
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
                if self._stop.is_set() or self._in_progress() == 0:
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

    def _plan(self, outcomes: list[_InFlight]) -> _Batch:
        """Decide, once, the statements that settle ``outcomes``: hand-backs, failures, acks of
        whole claims by key range, the remaining acks by key (which also drop the lease records
        of claims this batch closes). Claim counts and handler times are counted here, so a
        batch re-run after a lost connection never counts an outcome twice."""
        acks: list[_InFlight] = []
        keyed_acks: list[_InFlight] = []
        fails: list[_InFlight] = []
        releases: list[_InFlight] = []
        reschedules: list[_InFlight] = []
        handled: dict[str, list[float]] = {}
        for o in outcomes:
            if o.kind == "ack":
                (acks if o.claimed.exclusive_key is None else keyed_acks).append(o)
            elif o.kind == "fail":
                fails.append(o)
            elif o.kind == "reschedule":
                reschedules.append(o)
            else:
                releases.append(o)
            if o.seconds is not None:
                handled.setdefault(o.claimed.key.queue, []).append(o.seconds)
        self._settled_counts = {}
        for queue_name, seconds in handled.items():
            activity = self._tally.of(queue_name)
            activity.handled += len(seconds)
            activity.handler_seconds += sum(seconds)
        whole, whole_acks, partial, closed = self._close_claims(outcomes, acks)
        steps: list[Callable[[TaskStore], None]] = []
        if releases:
            def release(store: TaskStore) -> None:
                done = store.task_release_many([fenced(o.claimed) for o in releases])
                self._count(releases, done, "released")
            steps.append(release)
        if fails:
            steps.append(lambda store: self._settle_failures(store, fails))
        if reschedules:
            def reschedule(store: TaskStore) -> None:
                done = store.task_retry_many(
                    [fenced(o.claimed) for o in reschedules], [o.delay for o in reschedules],
                    [o.error for o in reschedules], require_expired=False, refund=True,
                )
                self._count(reschedules, done, "retried")
            steps.append(reschedule)
        if keyed_acks:
            def ack_keyed(store: TaskStore) -> None:
                done = self._remove_keyed(store, keyed_acks, lambda items: store.task_ack_many(items))
                self._count(keyed_acks, done, "acked")
            steps.append(ack_keyed)
        if whole:
            steps.append(lambda store: self._count(whole_acks, None, "acked", lost=store.task_ack_claims(whole)))
        if partial or closed:
            def ack_by_key(store: TaskStore) -> None:
                if partial or store.uses_lease_records:
                    done = store.task_ack_many([fenced(o.claimed) for o in partial], closed)
                    self._count(partial, done, "acked")
            steps.append(ack_by_key)
        return _Batch(outcomes, steps)

    def _apply(self, store: TaskStore, batch: _Batch) -> None:
        while batch.steps:
            batch.steps[0](store)
            batch.steps.pop(0)
        self._forget(batch.outcomes)
        if self._settled_counts and self._wants("settled"):
            self._emit("settled", None, counts=self._settled_counts)
        self._settled_counts = {}

    def _close_claims(
        self, outcomes: list[_InFlight], acks: list[_InFlight]
    ) -> tuple[list[WholeClaim], list[_InFlight], list[_InFlight], set[uuid.UUID]]:
        """Count ``outcomes`` against their claims. Returns the claims they close whose every
        remaining task was acked here and holds no exclusive key (as :class:`WholeClaim`, with
        those acks), the other plain acks, and the tokens of the other claims they close (lease
        records to drop)."""
        per_claim = Counter(map(_claim_of, outcomes))
        acked = per_claim if len(acks) == len(outcomes) else Counter(map(_claim_of, acks))
        keys: dict[_Claim, list] = {}  # claims closed here whose remaining tasks were all acked
        closed: set[uuid.UUID] = set()
        # No lock: a claim's count is read and lowered by this (the settler's) thread only.
        # Outcomes are counted here, once, so a batch re-run after a lost connection cannot close
        # a claim early.
        for claim, n in per_claim.items():
            if claim.left <= 0:
                continue  # closed already: a task handed back at shutdown whose handler finished after all
            if claim.left > n:
                claim.left -= n
                continue
            if not claim.keyed and acked.get(claim, 0) >= claim.left:
                keys[claim] = []
            else:
                closed.add(claim.token)
            claim.left = 0
        if not keys:
            return [], [], acks, closed
        whole_acks: list[_InFlight] = []
        partial: list[_InFlight] = []
        for o in acks:
            group = keys.get(o.claim)
            if group is None:
                partial.append(o)
            else:
                group.append(o.claimed.key)
                whole_acks.append(o)
        whole = [WholeClaim(c.bucket, c.queue, c.first, c.last, c.token, group) for c, group in keys.items()]
        return whole, whole_acks, partial, closed

    @staticmethod
    def _remove_keyed(
        store: TaskStore, outcomes: list[_InFlight], remove: Callable[[list[Fenced]], set[uuid.UUID]]
    ) -> set[uuid.UUID]:
        """Ack or bury tasks that hold exclusive keys, releasing each key's backlog in the same
        transaction (see shardq.exclusive)."""
        items = [fenced(o.claimed) for o in outcomes]
        key_of = {o.claimed.key.id: (o.claimed.queue, o.claimed.exclusive_key or "") for o in outcomes}
        removed, _promoted = exclusive.remove_and_release(store, list(key_of.values()), lambda: remove(items), key_of)
        return removed

    def _settle_failures(self, store: TaskStore, fails: list[_InFlight]) -> None:
        retry: list[tuple[_InFlight, float]] = []
        bury: list[_InFlight] = []
        for outcome in fails:
            settings = self._consumer.settings(outcome.claimed.queue) if self._consumer else None
            decision = backoff.decide_failure(
                outcome.claimed.attempt,
                outcome.claimed.max_attempts,
                permanent=outcome.permanent,
                base=settings.backoff_base if settings else 1.0,
                cap=settings.backoff_cap if settings else 3600.0,
                jitter=settings.retry_jitter if settings else 1.0,
            )
            if decision.outcome is backoff.Outcome.DEAD:
                bury.append(outcome)
            else:
                retry.append((outcome, decision.delay_seconds))
        if retry:
            done = store.task_retry_many(
                [fenced(o.claimed) for o, _ in retry],
                [delay for _, delay in retry],
                [o.error for o, _ in retry],
                require_expired=False,
            )
            retried = [o for o, _ in retry]
            self._count(retried, done, "retried")
        plain = [o for o in bury if o.claimed.exclusive_key is None]
        keyed = [o for o in bury if o.claimed.exclusive_key is not None]
        if plain:
            done = store.task_bury_many([fenced(o.claimed) for o in plain], [o.error for o in plain], require_expired=False)
            self._count(plain, done, "dead")
        if keyed:
            errors = [o.error for o in keyed]
            done = self._remove_keyed(
                store, keyed, lambda items: store.task_bury_many(items, errors, require_expired=False)
            )
            self._count(keyed, done, "dead")

    def _count(
        self, outcomes: list[_InFlight], done: set[uuid.UUID] | None, event: str, *, lost: set[uuid.UUID] | None = None
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
        self.stats.add(**{event: len(applied), "lease_lost": len(refused)})
        counts = self._settled_counts
        for queue_name, n in Counter([o.claimed.key.queue for o in applied]).items():
            counts[(event, queue_name)] = counts.get((event, queue_name), 0) + n
            if event in ("acked", "retried", "dead"):
                activity = self._tally.of(queue_name)
                setattr(activity, event, getattr(activity, event) + n)
        if self._trace_outcomes or event in ("retried", "dead"):  # the others log at DEBUG only
            for o in applied:
                if o.error is None:
                    self._emit(event, o.claimed)
                else:
                    self._emit(event, o.claimed, last_error=o.error)
        for o in refused:
            counts[("lease_lost", o.claimed.queue)] = counts.get(("lease_lost", o.claimed.queue), 0) + 1
            self._emit("lease_lost", o.claimed, outcome=event)

    def _forget(self, outcomes: list[_InFlight]) -> None:
        with self._lock:
            for o in outcomes:
                self._inflight.pop(o.claimed.key.id.int, None)
        self._wake.set()  # room for more leases, or nothing in flight any more (until_empty)

    def _heartbeat(self, store: TaskStore) -> float:
        """Renew leases of running tasks; returns seconds until the next beat (a third of the
        shortest lease, so two beats can be missed before a lease runs out)."""
        with self._lock:
            running = [e.claimed for e in self._inflight.values() if e.running]
        leases = {c.queue: self._consumer.lease_for(c.queue) for c in running} if self._consumer else {}
        for queue_name, lease in leases.items():
            items = [fenced(c) for c in running if c.queue == queue_name]
            renewed = store.task_extend_many(items, lease)
            with self._lock:
                for c in running:
                    entry = self._inflight.get(c.key.id.int)
                    if entry is not None and c.key.id in renewed:
                        entry.local_deadline = time.monotonic() + lease
        shortest = min(leases.values(), default=30.0)
        return max(0.5, shortest / 3.0)

    # -- shutdown ---------------------------------------------------------------------------
    def _shutdown(self, handlers: list[threading.Thread], settler: threading.Thread) -> None:
        self._stop.set()
        # Unstarted tasks go back now, even while every handler thread is busy (a handler thread
        # that pulls one first sees the stop and hands it back itself).
        while True:
            try:
                entry = self._work.get_nowait()
            except queue_module.Empty:
                break
            if entry is not None:
                entry.kind = "release"
                self._outcomes.append(entry)
        for _ in handlers:
            self._work.put(None)
        deadline = time.monotonic() + self.config.grace_seconds
        for thread in handlers:
            while thread.is_alive() and not self._force.is_set() and time.monotonic() < deadline:
                thread.join(timeout=0.1)
        with self._lock:
            stuck = [e for e in self._inflight.values() if e.running]
        still_running = [t for t in handlers if t.is_alive()]
        if still_running:
            log.warning("%d handlers still running after the grace period; handing their tasks back", len(still_running))
            for e in stuck:
                # A copy: the handler thread still owns the entry and queues it if it ever returns.
                self._outcomes.append(_InFlight(e.claimed, e.local_deadline, e.claim, kind="release"))
        self._outcomes.append(None)
        self._settle_wake.set()
        settler.join(timeout=max(5.0, self.config.grace_seconds))


def _log_task_event(level: int, event: str, task: ClaimedTask, details: dict) -> None:
    """One log line per task event, with its context as ``extra`` fields (JSON logs show them)."""
    extra = {"event": event, "task_id": task.id, "queue": task.queue, "bucket": task.key.bucket,
             "attempt": task.attempt, **details}
    if event == "lease_lost":
        message = "task %s (queue %s, bucket %s, attempt %d): lease lost before %s; the outcome changed nothing"
        args: tuple[object, ...] = (task.id, task.queue, task.key.bucket, task.attempt, details.get("outcome"))
    else:
        message = "task %s %s (queue %s, bucket %s, attempt %d)"
        args = (task.id, event, task.queue, task.key.bucket, task.attempt)
        if "last_error" in details:
            message += ": %s"
            args += (str(details["last_error"]).splitlines()[-1] if details["last_error"] else "",)
    log.log(level, message, *args, extra=extra)


# C-level getters for per-task passes (a generator expression costs a Python frame step per task).
_lease_token_of = attrgetter("lease_token")
_exclusive_key_of = attrgetter("exclusive_key")  # a key is never empty, so truthy when present
_claim_of = attrgetter("claim")


def _group_claims(tasks: Sequence[ClaimedTask]) -> dict[int, _Claim]:
    """Per lease token: the claim's bucket, key range (first and last task in the store's
    order), size and whether any task holds an exclusive key."""
    claims: dict[int, _Claim] = {}
    last: dict[int, ClaimedTask] = {}
    for claimed in tasks:
        token = claimed.lease_token.int
        claim = claims.get(token)
        if claim is None:
            key = claimed.key
            at = (key.rank, key.exec_time)
            claims[token] = _Claim(key.bucket, key.queue, at, at, 1, claimed.exclusive_key is not None,
                                   claimed.lease_token)
        else:
            claim.left += 1
            if claimed.exclusive_key is not None:
                claim.keyed = True
        last[token] = claimed
    for token, claimed in last.items():
        claim = claims[token]
        claim.last = (claimed.key.rank, claimed.key.exec_time)
        claim.size = claim.left
    return claims


def _describe(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text[:ERROR_TEXT_MAX]
