"""Settling failed attempts: retry with backoff or dead-letter, in one place.

A worker's settler (a handler raised) and the reaper (a lease expired) both hand their failures
to :func:`settle_failures`, which decides each one with the queue's backoff settings
(:class:`~shardq.models.QueueSettings`' defaults for a queue without a row) and applies the
decisions in at most three statements: retries, plain dead letters, and dead letters holding an
exclusive key (which also release the key's backlog, see :mod:`shardq.exclusive`). Every statement
is fenced by the lease token, so a failure whose lease passed to someone else changes nothing and
comes back as refused.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from . import backoff, exclusive
from .models import QueueSettings
from .store import Fenced, TaskStore


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
    if retry:
        done = store.task_retry_many(
            [f.item for f, _ in retry], [delay for _, delay in retry], [f.error for f, _ in retry],
            require_expired=require_expired,
        )
        result.retried, result.refused_retry = _split([f for f, _ in retry], done)
    plain = [f for f in bury if f.exclusive_key is None]
    keyed = [f for f in bury if f.exclusive_key is not None]
    for group in (plain, keyed):
        if not group:
            continue
        items = [f.item for f in group]
        errors = [f.dead_error if f.dead_error is not None else f.error for f in group]

        def remove(items: list[Fenced] = items, errors: list[str | None] = errors) -> set[uuid.UUID]:
            return store.task_bury_many(items, errors, require_expired=require_expired)

        if group is plain:
            done = remove()
        else:
            key_of = {f.item.key.id: (f.queue, f.exclusive_key or "") for f in group}
            done, _promoted = exclusive.remove_and_release(store, list(key_of.values()), remove, key_of)
        applied, refused = _split(group, done)
        result.dead += applied
        result.refused_dead += refused
    return result
