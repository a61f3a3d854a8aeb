"""Wake-ups for idle workers over PostgreSQL LISTEN/NOTIFY, with polling as the fallback.

A worker that finds nothing to claim sleeps with a growing interval (50 ms doubling to 1 s by
default), so a task enqueued on an idle queue waits up to about a second. With wake-ups:

* the **producer** sends ``pg_notify('shardq_wake', <queue>)`` with an enqueue statement that
  inserts tasks due now, delivered when it commits — at most once per queue per ``interval``
  (2 ms) per :class:`Notifier`, whatever the enqueue rate: never one per row, never from a
  trigger. A batch without dedupe or exclusive keys carries it in its own insert statement (no
  extra round trip); other batches send it as a statement of its own after the insert;
* the **ack that releases workflow steps** (:mod:`shardq.workflows.steps`) sends the same wake-up for
  each queue it released steps into, in its own statement and transaction (delivered at its
  commit; not throttled: one per queue per releasing ack);
* the **worker** LISTENs on its fetcher's own connection (no extra connection) and, once a round
  found nothing, waits on it instead of sleeping: a wake-up for one of its queues starts the next
  claim round at once; otherwise it polls at its usual interval. Every wake-up wakes every
  waiting worker of the queue, and all but the first may find nothing: the throttle bounds that
  to ``1 / interval`` rounds per second per waiting worker, and a worker that found nothing sits
  the next wake-up out (see :mod:`shardq.worker.fetcher`). A worker whose LISTEN failed (the database was
  unreachable as it started) polls, and LISTENs again after its next successful claim (at most
  once per ``LISTEN_RETRY_SECONDS``, 10 s), logging once when wake-ups resume.

Guarantees
    * Nothing depends on a notification arriving: a lost one (a dropped listening connection, a
      producer that died between commit and notify, a notify the throttle skipped, tasks that
      become due later, CockroachDB) costs at most one poll interval, never a task.
    * A notification can only wake a worker early; it never makes a worker claim anything it
      would not have claimed by polling.

Does not
    * work through a transaction-pooling proxy (pgbouncer ``pool_mode=transaction``): LISTEN does
      not survive there, and workers silently fall back to polling;
    * exist on CockroachDB (no LISTEN/NOTIFY): :class:`Notifier` sends nothing and
      :class:`Listener` never starts; workers poll.

Both sides are on by default on PostgreSQL (``Client(notify=False)``, ``Producer(notifier=None)``,
``WorkerConfig(listen=False)`` or ``shardq work --no-listen`` turn them off): a producer adds at
most ``1 / interval`` notifications per second per queue (and as many small statements for keyed
batches), and a woken worker does what a polling one does at its next poll, only sooner."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable

from shardq import operations
from shardq.engine.base import Engine
from shardq.errors import DatabaseError, DatabaseUnavailable
from shardq.sessions.store import TaskStore
from shardq.sql.plan import ENGINE, Plan

log = logging.getLogger("shardq.lifecycle.notify")


# Short enough that a producer sending every few milliseconds wakes workers for every batch (the
# steady cell sends every 5 ms; at 50 ms, nine batches in ten waited for a poll: docs/latency.md),
# long enough to bound what a storm of single enqueues costs the listening workers.
NOTIFY_INTERVAL_DEFAULT = 0.002


# A waiting worker re-checks its stop flag at least this often.
STOP_CHECK_SECONDS = 0.1


# A worker whose LISTEN failed tries again at most this often, and only after a claim succeeded:
# rare enough not to add load to a struggling database, soon enough that wake-ups come back well
# before anyone misses them (polling covers the gap).
LISTEN_RETRY_SECONDS = 10.0


def supported(store: TaskStore) -> bool:
    """Whether the database behind ``store`` has LISTEN/NOTIFY (PostgreSQL)."""
    return store.engine.supports_wakeups


class Notifier:
    """The producer's side: throttled wake-ups, at most one per queue per ``interval`` seconds.
    Thread-safe; share one among the producers of a process (a :class:`shardq.Client` does)."""

    def __init__(
        self, interval: float = NOTIFY_INTERVAL_DEFAULT, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not interval >= 0:
            raise ValueError("notify interval must be >= 0 seconds")
        self.interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()
        self.sent = 0

    def due(self, queue: str) -> bool:
        """True (and the queue's clock restarted) when ``queue`` may be notified now."""
        now = self._clock()
        with self._lock:
            last = self._last.get(queue)
            if last is not None and now - last < self.interval:
                return False
            self._last[queue] = now
            return True

    def after_enqueue(self, store: TaskStore, queue: str) -> bool:
        """Call after an enqueue that inserted tasks due now has committed. Sends the wake-up
        unless the throttle says one went out recently; returns whether it did. A failure to send
        is logged and swallowed: polling covers it."""
        return store.session.run(self.wake(queue))

    def wake_in_insert(self, queue: str) -> Plan[bool]:
        """Whether the next insert into ``queue`` should carry the wake-up itself (the engine has
        wake-ups and the throttle lets one through; counted as sent), as a plan."""
        engine: Engine = yield ENGINE
        if not engine.supports_wakeups or not self.due(queue):
            return False
        self.sent += 1
        return True

    def wake(self, queue: str) -> Plan[bool]:
        """:meth:`after_enqueue` as a plan (:mod:`shardq.sql.plan`), for either session."""
        engine: Engine = yield ENGINE
        if not engine.supports_wakeups or not self.due(queue):
            return False
        try:
            yield from operations.queue_notify(queue)
        except DatabaseError as exc:
            log.debug("wake-up for queue %s not sent (%s); workers will find the tasks by polling", queue, exc)
            return False
        self.sent += 1
        return True


class Listener:
    """The worker's side: wake-ups for ``queues``, received on ``store``'s session (the fetcher's
    own, which must not be used from another thread).

    A LISTEN that failed (the database was unreachable when the worker started) is tried again
    by :meth:`retry`, at most once per ``retry_seconds`` (``LISTEN_RETRY_SECONDS``, 10 s); the
    first failure is logged as a warning, the return of wake-ups once at INFO."""

    def __init__(
        self,
        store: TaskStore,
        queues: Iterable[str],
        *,
        retry_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.queues = frozenset(queues)
        self.active = False
        self.retry_seconds = LISTEN_RETRY_SECONDS if retry_seconds is None else retry_seconds
        self._clock = clock
        self._failed = False
        self._next_try = 0.0

    def start(self) -> bool:
        """LISTEN (PostgreSQL only). Returns whether wake-ups will arrive; on False the worker
        just polls (and may call :meth:`retry` later)."""
        try:
            if not supported(self.store):  # asks the server: may find it unreachable
                self._next_try = math.inf  # CockroachDB: there is nothing to retry
                return False
            self.store.notify_listen()
        except DatabaseError as exc:
            if self._failed:
                log.debug("still cannot LISTEN for wake-ups (%s)", exc)
            else:
                log.warning("cannot LISTEN for wake-ups (%s); polling until it works", exc)
            self._failed = True
            self._next_try = self._clock() + self.retry_seconds
            return False
        if self._failed:
            log.info("listening for wake-ups again on queues %s", ", ".join(sorted(self.queues)))
            self._failed = False
        self.active = True
        return True

    def retry(self) -> bool:
        """Call once the database answers again (after a claim succeeded): LISTEN unless already
        listening or the last attempt failed less than ``retry_seconds`` ago. Returns
        :attr:`active`."""
        if self.active:
            return True
        if self._clock() < self._next_try:
            return False
        return self.start()

    def discard(self) -> None:
        """Drop the wake-ups received so far (call right before a claim round: NOTIFY is delivered
        after the enqueue committed, so the round sees those tasks anyway)."""
        self.pending()

    def pending(self) -> bool:
        """Whether a wake-up for one of the queues has already arrived, without waiting (and
        without keeping it). False when the connection is lost: the claim that follows
        reconnects, and LISTENs again."""
        try:
            return any(p in self.queues for p in self.store.notifications(0))
        except DatabaseUnavailable:
            return False

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        """Wait up to ``timeout`` seconds for a wake-up for one of the queues. Returns True when
        one arrived (or had arrived while the worker was busy), False on timeout or once ``stop``
        is set. A lost connection ends the wait early (False); the next claim reconnects and the
        session LISTENs again."""
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                payloads = self.store.notifications(min(left, STOP_CHECK_SECONDS))
            except DatabaseUnavailable as exc:
                log.debug("listening connection lost (%s); polling until the next claim reconnects", exc)
                stop.wait(max(0.0, deadline - time.monotonic()))
                return False
            if any(p in self.queues for p in payloads):
                return True
        return False
