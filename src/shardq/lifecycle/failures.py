"""Settling failed attempts: retry with backoff or dead-letter, in one place.

A worker's settler (a handler raised) and the reaper (a lease expired) both hand their failures
to :func:`settle_failures`, which decides each one with the queue's backoff settings
(:class:`~shardq.models.queues.QueueSettings`' defaults for a queue without a row) and applies the
decisions in at most three statements: retries, plain dead letters, and dead letters holding an
exclusive key (which also release the key's backlog, see :mod:`shardq.lifecycle.exclusive`). Every statement
is fenced by the lease token, so a failure whose lease passed to someone else changes nothing and
comes back as refused.

Failures of a queue that keeps finished tasks (``keep_finished_seconds`` > 0) are settled by
statements of their own that also record them (a row per retried attempt, a history row per dead
letter) in the same transaction (:mod:`shardq.lifecycle.history`); other queues' failures send exactly what
they did before."""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from shardq import backoff
from shardq.lifecycle import exclusive
from shardq.models.history import FailedAttempt, Finished
from shardq.models.leases import Fenced
from shardq.models.queues import QueueSettings
from shardq.models.tasks import TaskState
from shardq.sessions.store import TaskStore
from shardq.workflows import spark_callbacks as run_callbacks
from shardq.workflows import steps as workflows


@dataclass(slots=True)
class Failure:
    """One failed attempt to settle. ``attempts`` counts the attempt that failed; ``error`` is
    written as the task's ``last_error`` on a retry, ``dead_error`` (default: ``error``) on a dead
    letter; ``ref`` is the caller's own object, handed back in the result."""

    item: Fenced
    attempts: int
    max_attempts: int
    error: str | None
    exclusive_key: str | None = None
    permanent: bool = False
    dead_error: str | None = None
    ref: object = None
    #: seconds until the retry is due, once :func:`settle_failures` decided to retry it
    delay: float | None = None
    #: for the history (queues that keep finished tasks): the task's name and how long the
    #: attempt ran (None: unknown, e.g. a lease that ran out)
    task: str | None = None
    run_seconds: float | None = None
    #: the workflow the task is a step of: its dead letter stops the step's children (shardq.workflows.steps)
    workflow_id: uuid.UUID | None = None

    @property
    def queue(self) -> str:
        return self.item.key.queue


@dataclass
class FailureResult:
    """The failures each statement applied (``retried``, ``dead``) and those it refused because
    the lease had passed on (``refused_retry``, ``refused_dead``)."""

    retried: list[Failure] = field(default_factory=list)
    dead: list[Failure] = field(default_factory=list)
    refused_retry: list[Failure] = field(default_factory=list)
    refused_dead: list[Failure] = field(default_factory=list)


# Finished.created_at of a dead letter: the statement takes it from the dead-letter row instead.
_NO_TIME = dt.datetime.min.replace(tzinfo=dt.UTC)


def _split(group: Sequence[Failure], done: set[uuid.UUID]) -> tuple[list[Failure], list[Failure]]:
    applied: list[Failure] = []
    refused: list[Failure] = []
    for failure in group:
        (applied if failure.item.key.id in done else refused).append(failure)
    return applied, refused


def settle_failures(
    store: TaskStore,
    failures: Sequence[Failure],
    settings_of: Callable[[str], QueueSettings],
    *,
    require_expired: bool,
    rng: random.Random | None = None,
) -> FailureResult:
    """Retry or dead-letter ``failures`` through ``store``. ``settings_of(queue)`` gives each
    queue's backoff settings; ``require_expired`` (the reaper) touches only leases that have run
    out. A failure is dead-lettered when it is permanent or its attempt was the last one."""
    retry: list[tuple[Failure, float]] = []
    bury: list[Failure] = []
    for failure in failures:
        settings = settings_of(failure.queue)
        decision = backoff.decide_failure(
            failure.attempts,
            failure.max_attempts,
            permanent=failure.permanent,
            base=settings.backoff_base,
            cap=settings.backoff_cap,
            jitter=settings.retry_jitter,
            rng=rng,
        )
        if decision.outcome is backoff.Outcome.DEAD:
            bury.append(failure)
        else:
            failure.delay = decision.delay_seconds
            retry.append((failure, decision.delay_seconds))
    result = FailureResult()

    def kept(failure: Failure) -> bool:
        return settings_of(failure.queue).keep_finished_seconds > 0

    for recorded in (False, True):
        group_retry = [(f, delay) for f, delay in retry if kept(f) is recorded]
        if not group_retry:
            continue
        items = [f.item for f, _ in group_retry]
        delays = [delay for _, delay in group_retry]
        errors = [f.error for f, _ in group_retry]
        if recorded:
            attempts = [
                FailedAttempt(f.item.key.id, f.queue, f.attempts, f.run_seconds, f.error) for f, _ in group_retry
            ]
            done = store.task_retry_many_recorded(items, delays, errors, attempts, require_expired=require_expired)
        else:
            done = store.task_retry_many(items, delays, errors, require_expired=require_expired)
        applied, refused = _split([f for f, _ in group_retry], done)
        result.retried += applied
        result.refused_retry += refused
    # Steps never hold exclusive keys (shardq.workflows.steps refuses them), so the groups are apart.
    groups = [
        [
            f
            for f in bury
            if (f.exclusive_key is not None) is keyed and (f.workflow_id is not None) is step and kept(f) is recorded
        ]
        for keyed, step in ((False, False), (True, False), (False, True))
        for recorded in (False, True)
    ]
    for group in groups:
        if not group:
            continue
        items = [f.item for f in group]
        errors = [f.dead_error if f.dead_error is not None else f.error for f in group]
        records = (
            [
                Finished(f.item.key.id, f.queue, TaskState.DEAD, f.task, _NO_TIME, f.attempts, f.run_seconds)
                for f in group
            ]
            if kept(group[0])
            else None
        )
        in_keys = group[0].exclusive_key is not None or group[0].workflow_id is not None

        def remove(
            items: list[Fenced] = items,
            errors: list[str | None] = errors,
            records: list[Finished] | None = records,
            in_keys: bool = in_keys,
        ) -> set[uuid.UUID]:
            if records is None:
                return store.task_bury_many(items, errors, require_expired=require_expired)
            # Inside an exclusive key's release the caller's transaction holds both statements.
            return store.task_bury_many_recorded(
                items, errors, records, require_expired=require_expired, atomically=not in_keys
            )

        if not in_keys:
            done = remove()
        elif group[0].workflow_id is not None:
            # A dead task of a Spark run cancels the run's callback, in the same transaction.
            workflow_of = {f.item.key.id: f.workflow_id for f in group}
            settling = run_callbacks.settling(store, remove, workflow_of, TaskState.DEAD)
            done = workflows.remove_and_release(store, settling, TaskState.DEAD)
        else:
            key_of = {f.item.key.id: (f.queue, f.exclusive_key or "") for f in group}
            done, _promoted = exclusive.remove_and_release(store, list(key_of.values()), remove, key_of)
        applied, refused = _split(group, done)
        result.dead += applied
        result.refused_dead += refused
    return result
