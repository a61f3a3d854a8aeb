"""Enqueueing: one task or many, one statement per batch.

Guarantees
    * A batch is one ``INSERT … SELECT FROM unnest(…)`` statement: all of it commits or none.
    * With a dedupe key, a second enqueue while a task with the same (queue, key) is still live
      (ready or leased) inserts nothing and says so in :class:`EnqueueResult.duplicate_keys`.
      Once that task is acked or dead-lettered the key is free again.
    * A queue comes into being on its first enqueue, with default settings.
    * A queue paused for enqueue refuses with :class:`shardq.errors.QueuePaused` and writes nothing
      (of a multi-batch call, earlier batches stay enqueued; the error says how many).
    * Tasks with an exclusive key whose key is busy go to the key's backlog
      (:class:`EnqueueResult.backlogged_ids`); see :mod:`shardq.lifecycle.exclusive`.

Counts
    Enqueues are added to the activity counters behind ``shardq stats``' enqueue rate in memory
    and written at once for a queue the store has not counted yet, then at most once a second
    (one small statement, see :meth:`TaskStore.count_enqueued`). Counts still held when the
    process ends without :meth:`shardq.Client.close` (at most a second's worth) are lost; the
    tasks are not.

Does not
    * deduplicate tasks without a key: re-sending an enqueue whose result was lost (a dropped
      connection, CockroachDB's 40003) can insert it twice. Give a dedupe key where that matters."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Unpack

from shardq import operations, validation
from shardq.errors import InvalidInput, QueuePaused
from shardq.lifecycle import debounce, exclusive, key_limits
from shardq.lifecycle.notify import Notifier
from shardq.models.tasks import EnqueueResult, NewTask, TaskOptions
from shardq.operations.stats import EnqueueCounts
from shardq.sessions.store import TaskStore
from shardq.sql.plan import Plan

BATCH_SIZE_DEFAULT = 1000  # rows per statement: large enough to amortise the round trip,


def normalise(task: NewTask | bytes | str, *, payload_limit: int = validation.PAYLOAD_MAX_BYTES) -> NewTask:
    """Validate one task; bare bytes/str become a task with that payload."""
    if isinstance(task, (bytes, bytearray, memoryview, str)):
        # Every other field keeps its default, which is valid: one check, one object.
        return NewTask(payload=validation.payload(task, limit=payload_limit))
    if not isinstance(task, NewTask):
        raise InvalidInput("a task must be a NewTask, bytes or str")
    if (
        task.delay is None
        and task.run_at is None
        and task.dedupe_key is None
        and task.max_attempts is None
        and task.exclusive_key is None
        and task.priority == 0
        and task.dedupe_for is None
        and task.concurrency_key is None
        and task.debounce is None
        and task.throttle is None
    ):
        # Only the payload to check (the task API's usual call): the defaults are valid.
        payload = validation.payload(task.payload, limit=payload_limit)
        return task if payload is task.payload else NewTask(payload=payload)
    if task.delay is not None and task.run_at is not None:
        raise InvalidInput("give either delay or run_at, not both")
    if task.dedupe_for is not None and task.dedupe_key is None:
        raise InvalidInput("dedupe_for needs a dedupe_key")
    _check_debounce(task)
    return NewTask(
        payload=validation.payload(task.payload, limit=payload_limit),
        delay=validation.delay(task.delay) if task.delay is not None else None,
        run_at=validation.run_at(task.run_at) if task.run_at is not None else None,
        dedupe_key=validation.dedupe_key(task.dedupe_key),
        max_attempts=(
            validation.positive_int(task.max_attempts, "max_attempts", maximum=10_000)
            if task.max_attempts is not None
            else None
        ),
        priority=validation.priority(task.priority),
        exclusive_key=validation.exclusive_key(task.exclusive_key),
        dedupe_for=(
            validation.positive_seconds(task.dedupe_for, "dedupe_for") if task.dedupe_for is not None else None
        ),
        concurrency_key=_concurrency_key(task),
        debounce=validation.positive_seconds(task.debounce, "debounce") if task.debounce is not None else None,
        throttle=validation.positive_seconds(task.throttle, "throttle") if task.throttle is not None else None,
    )


def _check_debounce(task: NewTask) -> None:
    """Debounce and throttle (shardq.lifecycle.debounce) name their key with dedupe_key, one at a time."""
    if task.debounce is None and task.throttle is None:
        return
    what = "debounce" if task.debounce is not None else "throttle"
    if task.debounce is not None and task.throttle is not None:
        raise InvalidInput("give either debounce or throttle, not both")
    if task.dedupe_key is None:
        raise InvalidInput(f"{what} needs a dedupe_key (its key)")
    if task.exclusive_key is not None or task.concurrency_key is not None:
        raise InvalidInput(f"{what} does not go with an exclusive or concurrency key")
    if task.debounce is not None and (task.delay is not None or task.run_at is not None):
        raise InvalidInput("debounce sets when the task runs: give no delay or run_at")


def _concurrency_key(task: NewTask) -> str | None:
    if task.concurrency_key is None:
        return None
    if task.exclusive_key is not None:
        raise InvalidInput("give either an exclusive key or a concurrency key, not both")
    return key_limits.concurrency_key(task.concurrency_key)


_debounce_of = attrgetter("debounce")
_throttle_of = attrgetter("throttle")
_exclusive_key_of = attrgetter("exclusive_key")
_concurrency_key_of = attrgetter("concurrency_key")


def _due_now(task: NewTask) -> bool:
    return not task.delay and task.run_at is None


class Producer:
    """Enqueue tasks through one :class:`TaskStore`. Not thread-safe (one session): a
    :class:`shardq.Client` keeps one per thread (:meth:`shardq.Client.producer`)."""

    def __init__(
        self,
        store: TaskStore,
        *,
        payload_limit: int = validation.PAYLOAD_MAX_BYTES,
        notifier: Notifier | None = None,
    ) -> None:
        """``notifier`` (optional): after each statement that inserted tasks due now, wake idle
        workers of the queue over LISTEN/NOTIFY, throttled (see :mod:`shardq.lifecycle.notify`)."""
        self.store = store
        self.payload_limit = payload_limit
        self.notifier = notifier
        # Taken once here, so that an enqueue goes from send() straight to the plan driver.
        self._session = store.session
        self._counts = store.enqueue_counts

    def enqueue(self, queue: str, payload: bytes | str, **options: Unpack[TaskOptions]) -> EnqueueResult:
        """Enqueue one task with the :class:`~shardq.models.TaskOptions` (keyword only; defaults
        :class:`NewTask`'s): ``delay`` (seconds) or ``run_at`` (aware datetime) schedule it for
        later; ``priority`` orders it (lower first); ``exclusive_key`` serialises it with the
        queue's other tasks of that key (see :mod:`shardq.lifecycle.exclusive`). An unknown option is a
        ``TypeError``."""
        return self.enqueue_many(queue, [NewTask(payload, **options)])

    def enqueue_many(
        self, queue: str, tasks: Iterable[NewTask | bytes | str], *, batch_size: int = BATCH_SIZE_DEFAULT
    ) -> EnqueueResult:
        """Enqueue many tasks, ``batch_size`` per statement. Every task is validated before the
        first statement runs, so bad input writes nothing."""
        prepared = prepare(queue, tasks, batch_size=batch_size, payload_limit=self.payload_limit)
        return self.send(queue, prepared, batch_size=batch_size)

    def send(self, queue: str, prepared: Sequence[NewTask], *, batch_size: int = BATCH_SIZE_DEFAULT) -> EnqueueResult:
        """Enqueue tasks validated already, their queue name included (by :func:`prepare`, or by a
        :class:`shardq.app.deferral.Deferral` when it was made): nothing is checked again here."""
        return self._session.run(
            enqueue_plan(queue, prepared, batch_size=batch_size, counts=self._counts, notifier=self.notifier)
        )


def prepare(
    queue: str,
    tasks: Iterable[NewTask | bytes | str],
    *,
    batch_size: int = BATCH_SIZE_DEFAULT,
    payload_limit: int = validation.PAYLOAD_MAX_BYTES,
) -> list[NewTask]:
    """Validate an enqueue's queue name, batch size and every task (:class:`InvalidInput`), before
    anything is sent; returns the tasks normalised."""
    validation.queue_name(queue)
    validation.positive_int(batch_size, "batch size", maximum=validation.BATCH_MAX)
    return [normalise(task, payload_limit=payload_limit) for task in tasks]


def enqueue_plan(
    queue: str,
    prepared: Sequence[NewTask],
    *,
    batch_size: int = BATCH_SIZE_DEFAULT,
    counts: EnqueueCounts | None = None,
    notifier: Notifier | None = None,
) -> Plan[EnqueueResult]:
    """Enqueue tasks :func:`prepare` validated, ``batch_size`` per statement, as a plan
    (:mod:`shardq.sql.plan`) that the sync :class:`Producer` and :class:`shardq.AsyncClient` both
    run. ``counts``: the activity counter to add to (None: not counted); ``notifier``: wake idle
    workers after statements that inserted tasks due now."""
    enqueued: list[str] = []
    duplicates: list[str] = []
    backlogged: list[str] = []
    superseded = 0
    debounced: list[str] = []
    throttled: list[str] = []
    for start in range(0, len(prepared), batch_size):
        chunk = prepared[start : start + batch_size]
        if any(map(_debounce_of, chunk)) or any(map(_throttle_of, chunk)):  # C-level passes: seconds are > 0
            # Debounced and throttled tasks apart, in a transaction of their own (shardq.lifecycle.debounce).
            keyed = yield from debounce.enqueue_plan(queue, [t for t in chunk if debounce.wants(t)])
            if keyed.paused:
                raise QueuePaused(f"queue {queue!r} is paused for enqueue")
            enqueued += keyed.enqueued
            duplicates += keyed.duplicates
            debounced += keyed.debounced
            throttled += keyed.throttled
            if counts is not None and keyed.enqueued:
                yield from counts.note(queue, len(keyed.enqueued))
            chunk = [t for t in chunk if not debounce.wants(t)]
            if not chunk:
                continue
        if any(t.dedupe_for for t in chunk):
            # Keys whose task finished within their window (the queue's history) are duplicates.
            recent = yield from operations.history_dedupe_recent(
                queue, [(t.dedupe_key or "", t.dedupe_for) for t in chunk if t.dedupe_for]
            )
            blocked = [t for t in chunk if t.dedupe_for and t.dedupe_key in recent]
            duplicates += [t.dedupe_key or "" for t in blocked]
            chunk = [t for t in chunk if not (t.dedupe_for and t.dedupe_key in recent)]
            if not chunk:
                continue
        ids = [uuid.uuid4() for _ in chunk]
        woke = False
        if any(map(_exclusive_key_of, chunk)) or any(map(_concurrency_key_of, chunk)):  # keys are never empty
            outcome = yield from (
                key_limits.enqueue_plan(queue, chunk, ids)
                if any(t.concurrency_key is not None for t in chunk)
                else exclusive.enqueue_plan(queue, chunk, ids)
            )
            skipped, paused = outcome.skipped, outcome.paused
            backlogged += [str(i) for i in ids if i in outcome.backlogged]
            superseded += outcome.superseded
        else:
            # A batch without dedupe keys inserts every task (or none, paused): its statement can
            # carry the wake-up, which then needs no round trip of its own.
            woke = (
                notifier is not None
                and not any(t.dedupe_key is not None for t in chunk)
                and any(map(_due_now, chunk))
                and (yield from notifier.wake_in_insert(queue))
            )
            skipped, paused = yield from operations.task_insert_many(queue, chunk, ids, wake=woke)
        if counts is not None:
            yield from counts.note(queue, len(chunk) - len(skipped))
        if paused:
            raise QueuePaused(
                f"queue {queue!r} is paused for enqueue"
                + (f" ({len(enqueued)} tasks of earlier batches were enqueued)" if enqueued else "")
            )
        if not skipped:
            enqueued += map(str, ids)
        else:
            for task, task_id in zip(chunk, ids):
                if task_id in skipped:
                    duplicates.append(task.dedupe_key or "")
                else:
                    enqueued.append(str(task_id))
        if notifier is not None and not woke and len(skipped) < len(chunk) and any(map(_due_now, chunk)):
            yield from notifier.wake(queue)  # after the commit: autocommit
    return EnqueueResult(
        tuple(enqueued), tuple(duplicates), tuple(backlogged), superseded, tuple(debounced), tuple(throttled)
    )
