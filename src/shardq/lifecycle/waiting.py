"""Waiting for a task's outcome: the result of a task that succeeded, or its failure raised.

A caller waits on the handle ``defer()`` returns (``handle.wait(timeout)``, or ``await
handle`` / ``await handle.wait_async(timeout)``), or on ``Client.wait(id)`` /
``AsyncClient.wait(id)``. The waiter reads the task's status (:mod:`shardq.lifecycle.history`) and, until it
is finished, sleeps until it is woken or its next poll:

* on PostgreSQL each process has one :class:`OutcomeListener`: one connection LISTENing on
  ``shardq_done`` and one thread, shared by every waiter of the process (thousands of waiters cost
  the database one listener per process). The statements that record finished tasks send the
  tasks' ids in the same transaction, so a woken waiter reads a committed outcome. A NOTIFY
  serialises the commits that send one (PostgreSQL takes a database-wide lock for it at commit),
  so the workers' acks send them only while some process listens: a listener keeps a row in
  ``shardq_listeners`` fresh (every ``SEEN_SECONDS``), and each worker reads whether one is
  (:class:`ListenerPresence`, at most once per ``PRESENCE_SECONDS``). Dead letters and cancels
  always notify (they are not the hot path);
* on CockroachDB (no LISTEN/NOTIFY) waiters poll, from ``POLL_MIN_SECONDS`` doubling to
  ``POLL_MAX_SECONDS``.

Guarantees
    * The outcome a waiter returns or raises is the committed one: the result of a task that
      succeeded (None when it kept none), :class:`shardq.errors.TaskDead` with its last error,
      :class:`shardq.errors.TaskCancelled`.
    * Nothing depends on a notification arriving: a waiter on PostgreSQL also reads the status at
      least every ``POLL_MAX_SECONDS``, so a lost notification (a dropped listening connection,
      or an ack in the first ``PRESENCE_SECONDS`` after the first listener started) costs at most
      that long.
    * A timeout raises :class:`shardq.errors.WaitTimeout` and changes nothing: the task runs on.

Does not
    * know the outcome of a task whose queue keeps no finished tasks: once such a task is gone the
      waiter raises :class:`shardq.errors.OutcomeNotKept` (``shardq queue set Q --keep-finished``).
      A task that was never there (or whose history was pruned) looks the same."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from shardq import operations
from shardq.errors import DatabaseError, OutcomeNotKept, TaskCancelled, TaskDead, WaitTimeout
from shardq.models.history import TaskStatus
from shardq.models.tasks import TaskState
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from shardq.sessions.store import TaskStore

log = logging.getLogger("shardq.lifecycle.waiting")


#: a polling waiter's first pause, doubled after each read up to POLL_MAX_SECONDS
POLL_MIN_SECONDS = 0.05


#: the longest a waiter goes without reading the status (also on PostgreSQL, against a lost wake-up)
POLL_MAX_SECONDS = 1.0


#: a listener whose connection failed listens again after this long (its waiters poll meanwhile)
RELISTEN_SECONDS = 1.0


#: a listener nobody watched for this long closes its connection and ends its thread
IDLE_SECONDS = 30.0


#: a listener renews its row in shardq_listeners this often; a row is fresh for three times as long
SEEN_SECONDS = 10.0


#: a worker reads whether anyone listens at most this often
PRESENCE_SECONDS = 1.0


def outcome(status: TaskStatus, *, seen_live: bool) -> tuple[bool, Any]:
    """(finished, result) of ``status``; raises the failure of a task that did not succeed.
    ``seen_live``: the waiter saw the task before (an ``unknown`` then means it finished in a
    queue that keeps nothing)."""
    if status.state == TaskState.SUCCEEDED:
        return True, status.value()
    if status.state == TaskState.DEAD:
        error = (status.last_error or "").strip().splitlines()
        raise TaskDead(f"task {status.id} is dead" + (f": {error[0]}" if error else ""), status)
    if status.state == TaskState.CANCELLED:
        raise TaskCancelled(f"task {status.id} was cancelled", status)
    if status.state == TaskState.UNKNOWN:
        raise OutcomeNotKept(
            f"task {status.id} is not in the queue, and no outcome of it is kept"
            + (" (its queue keeps no finished tasks)" if seen_live else ""),
            status,
        )
    return False, None


class OutcomeListener:
    """One process's listener for outcome notifications (PostgreSQL): a session of its own
    LISTENing on ``shardq_done`` and a daemon thread that wakes the waiters of the ids it hears.
    Waiters register a callback with :meth:`watch` before reading the status, so an outcome
    committed after their read always wakes them."""

    def __init__(self, session_factory: Callable[[], Session]) -> None:
        self._session_factory = session_factory
        self._lock = threading.Lock()
        self._watchers: dict[uuid.UUID, list[Callable[[], None]]] = {}
        self._ready = threading.Event()
        self._failed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: this listener's row in shardq_listeners
        self.id = uuid.uuid4()

    def start(self, timeout: float = 5.0) -> bool:
        """Start the thread unless it runs, and wait up to ``timeout`` for its LISTEN; False when
        it is not listening (waiters then poll). Call it after :meth:`watch`: a listener with
        no watcher left for ``IDLE_SECONDS`` closes its connection and ends its thread."""
        with self._lock:
            if self._thread is None:
                self._ready.clear()
                self._thread = threading.Thread(target=self._run, name="shardq-outcomes", daemon=True)
                self._thread.start()
        return self._ready.wait(timeout) and not self._failed

    def watch(self, task_id: uuid.UUID, wake: Callable[[], None]) -> Callable[[], None]:
        """Call ``wake()`` (from the listener's thread) when ``task_id``'s outcome is announced;
        returns the function that stops watching."""
        with self._lock:
            self._watchers.setdefault(task_id, []).append(wake)

        def forget() -> None:
            with self._lock:
                waiting = self._watchers.get(task_id)
                if waiting is not None:
                    if wake in waiting:
                        waiting.remove(wake)
                    if not waiting:
                        del self._watchers[task_id]

        return forget

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=2.0)

    def _run(self) -> None:
        session: Session | None = None
        idle_since: float | None = None
        registered = False
        try:
            while not self._stop.is_set():
                try:
                    if session is None:
                        session = self._session_factory()
                    if not session.engine.supports_wakeups:  # CockroachDB: every waiter polls
                        self._failed = True
                        self._ready.set()
                        self._stop.wait(IDLE_SECONDS)
                    else:
                        session.listen("outcome_listen")
                        # Seen after LISTEN: a worker that finds the row notifies a listener.
                        session.run(operations.outcome_listener_seen(self.id))
                        registered, seen = True, time.monotonic()
                        self._failed = False
                        self._ready.set()
                        while not self._stop.is_set():
                            for payload in session.notifications(0.2):
                                self._wake(payload.split(","))
                            if time.monotonic() - seen >= SEEN_SECONDS:
                                session.run(operations.outcome_listener_seen(self.id))
                                seen = time.monotonic()
                            idle_since = self._idle(idle_since)
                            if idle_since is None or time.monotonic() - idle_since < IDLE_SECONDS:
                                continue
                            break
                except DatabaseError as exc:
                    log.warning("outcome notifications interrupted (%s); waiters poll until they resume", exc)
                    self._failed = True
                    self._ready.set()
                    self._wake_all()  # they read the status themselves meanwhile
                    if session is not None:
                        session.close()
                        session = None
                    if self._end_if_idle(float("-inf")):  # nobody waits: no reason to reconnect
                        return
                    self._stop.wait(RELISTEN_SECONDS)
                idle_since = self._idle(idle_since)
                if idle_since is not None and self._end_if_idle(idle_since):
                    return
        finally:
            if session is not None:
                if registered:
                    with contextlib.suppress(DatabaseError):  # its row goes stale anyway
                        session.run(operations.outcome_listener_gone(self.id, 3 * SEEN_SECONDS))
                session.close()

    def _idle(self, since: float | None) -> float | None:
        """When the listener last had no watcher since (None: it has some now)."""
        with self._lock:
            if self._watchers:
                return None
        return since if since is not None else time.monotonic()

    def _end_if_idle(self, since: float) -> bool:
        """End this thread when nobody watched for ``IDLE_SECONDS`` (decided under the lock, so a
        waiter that watches from now on starts a new thread)."""
        with self._lock:
            if self._watchers or time.monotonic() - since < IDLE_SECONDS:
                return False
            self._thread = None
            return True

    def _wake(self, ids: list[str]) -> None:
        with self._lock:
            woken = [
                wake for task_id in map(_uuid, ids) if task_id is not None for wake in self._watchers.get(task_id, ())
            ]
        for wake in woken:
            wake()

    def _wake_all(self) -> None:
        with self._lock:
            woken = [wake for waiting in self._watchers.values() for wake in waiting]
        for wake in woken:
            wake()


class ListenerPresence:
    """Whether any process listens for outcome notifications now, as one worker's settler sees
    it: read through its store at most once per ``PRESENCE_SECONDS`` (one tiny statement), and
    only where the engine has notifications. Not thread-safe: one per settler."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._read_at = -PRESENCE_SECONDS
        self._present = False

    def present(self, store: TaskStore) -> bool:
        if not store.engine.supports_wakeups:
            return False
        now = self._clock()
        if now - self._read_at >= PRESENCE_SECONDS:
            self._present = store.run(operations.outcome_listeners_present(3 * SEEN_SECONDS))
            self._read_at = now
        return self._present


_listeners: dict[str, OutcomeListener] = {}


_listeners_lock = threading.Lock()


def listener_for(dsn: Dsn) -> OutcomeListener:
    """The process's listener for the database ``dsn`` names (made on first use, shared by every
    client and waiter of the process)."""
    with _listeners_lock:
        found = _listeners.get(dsn.conninfo)
        if found is None:
            found = _listeners[dsn.conninfo] = OutcomeListener(lambda: Session(dsn, application_name="shardq-outcomes"))
        return found


def _uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def _nap(
    status: TaskStatus, task_id: uuid.UUID, timeout: float | None, left: float | None, pause: float, *, listening: bool
) -> float:
    """How long a waiter whose task is not finished sleeps before reading again (``left``: seconds
    to its deadline, None without one): the longest poll while a listener can wake it, else
    ``pause``, never past the deadline; WaitTimeout once the deadline has passed."""
    if left is not None and left <= 0:
        raise WaitTimeout(f"task {task_id} still {status.state} after {timeout:g} s; it was left alone")
    nap = POLL_MAX_SECONDS if listening else pause
    return nap if left is None else min(nap, left)


def wait(
    read: Callable[[], TaskStatus], task_id: uuid.UUID, timeout: float | None, listener: OutcomeListener | None
) -> Any:
    """Wait for ``task_id``'s outcome reading its status with ``read()``: its result, or its
    failure raised (see the module documentation). ``timeout`` None waits for ever."""
    deadline = None if timeout is None else time.monotonic() + timeout
    woken = threading.Event()
    forget = listener.watch(task_id, woken.set) if listener is not None else None
    if listener is not None and forget is not None and not listener.start():
        forget()  # not listening: poll
        forget = None
    pause, seen_live = POLL_MIN_SECONDS, False
    try:
        while True:
            woken.clear()
            status = read()
            done, result = outcome(status, seen_live=seen_live)
            if done:
                return result
            seen_live = True
            left = None if deadline is None else deadline - time.monotonic()
            woken.wait(_nap(status, task_id, timeout, left, pause, listening=forget is not None))
            pause = min(POLL_MAX_SECONDS, pause * 2)
    finally:
        if forget is not None:
            forget()


async def wait_async(
    read: Callable[[], Awaitable[TaskStatus]],
    task_id: uuid.UUID,
    timeout: float | None,
    listener: OutcomeListener | None,
) -> Any:
    """:func:`wait` for asyncio: the same reads and pauses, awaiting instead of blocking; the
    listener's thread wakes the waiter through its event loop."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    woken = asyncio.Event()
    forget = None
    if listener is not None:

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed with the waiter on it: nobody to wake
                loop.call_soon_threadsafe(woken.set)

        forget = listener.watch(task_id, wake)
        if not await loop.run_in_executor(None, listener.start):
            forget()
            forget = None
    pause, seen_live = POLL_MIN_SECONDS, False
    try:
        while True:
            woken.clear()
            status = await read()
            done, result = outcome(status, seen_live=seen_live)
            if done:
                return result
            seen_live = True
            left = None if deadline is None else deadline - loop.time()
            nap = _nap(status, task_id, timeout, left, pause, listening=forget is not None)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), nap)
            pause = min(POLL_MAX_SECONDS, pause * 2)
    finally:
        if forget is not None:
            forget()
