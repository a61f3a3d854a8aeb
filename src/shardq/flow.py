"""Flow control: at most N tasks of a queue running at once across every worker, and at most R task
starts per second, in bursts of up to B. The design, its costs and its limits are in
docs/flow-control.md; the statements in sql/common/flow.sql.

A queue without a limit never reaches this module: its claims are the ordinary claim statements,
unchanged. A limited queue's claim is one transaction (:func:`claim_gated`):

1. take: lock up to ``want`` free slots (``SKIP LOCKED``: concurrent claimers take different ones,
   nobody waits) and/or lock the queue's token bucket (claims of one rate-limited queue queue up
   on that row for the length of a claim);
2. claim at most as many tasks as were granted, with the queue's ordinary claim statement;
3. hold one slot per claimed task until that task's lease expires, and spend one token per
   claimed task; slots and tokens granted but not used are simply not written.

So a worker never claims a task it may not start. A held slot follows its task's lease: the lease
keeper moves both (:func:`extend_slots`), the settler frees it once the task is settled
(:func:`release_slots`), and if the worker dies the slot is free again when its lease would have
expired: nobody has to clean up.

What it does not guarantee: a task whose lease ran out while its handler still runs (a stalled
worker, a sync handler abandoned after its timeout) no longer holds its slot, so for that while one
more task may run than the limit, exactly as such a task may also run twice. Limits a running
worker has not read yet (it re-reads queue settings every ``SETTINGS_REFRESH_SECONDS``, and at
once when a claim is refused) do not apply to it until then.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .db import Session
from .errors import SerializationConflict
from .models import ClaimedTask, QueueSettings, TokenBucket
from .store import TaskStore

#: How long a worker waits before asking again when every slot of a queue is held: the first wait,
#: doubled on each refusal in a row up to the maximum. Slots come back when other workers settle,
#: which the database does not announce, so a throttled worker polls, gently.
SLOT_WAIT_MIN_SECONDS = 0.02
SLOT_WAIT_MAX_SECONDS = 0.5

#: What :func:`claim_gated` says when every slot was held (rather than a token wait in seconds).
NO_SLOT = object()


@dataclass
class Grant:
    """What a take allowed: ``count`` tasks may be claimed; the slots locked (number, free_at) and
    the bucket read, to be written back by :func:`hold`."""

    count: int
    slots: list[tuple[int, dt.datetime]] = field(default_factory=list)
    bucket: TokenBucket | None = None
    tokens: float = 0.0
    #: when nothing was granted: seconds until a token comes (None: waiting for a slot)
    wait: float | None = None


def take(store: TaskStore, settings: QueueSettings, want: int) -> Grant:
    """Lock what a claim of up to ``want`` tasks of ``settings.name`` may use (inside a transaction)."""
    count = want
    grant = Grant(0)
    if settings.rate_limit is not None:
        grant.bucket = store.flow_tokens_take(settings.name)
        if grant.bucket is None:  # the bucket row is written with the limit; gone means the limit was removed
            grant.tokens = float(want)
        else:
            grant.tokens = grant.bucket.available(settings.rate_limit, settings.burst)
            count = min(count, math.floor(grant.tokens))
            if count <= 0:
                grant.wait = (1.0 - grant.tokens) / settings.rate_limit
                return grant
    if settings.concurrency_limit is not None:
        grant.slots = store.flow_slots_take(settings.name, count)
        count = min(count, len(grant.slots))
    grant.count = count
    return grant


def hold(store: TaskStore, queue: str, grant: Grant, tasks: Sequence[ClaimedTask]) -> list[ClaimedTask]:
    """Give a slot to each claimed task and spend its token (same transaction as the take and
    the claim). Returns the tasks, each with the slot it holds (``flow_slot``, ``flow_until``)."""
    if grant.bucket is not None:
        store.flow_tokens_spend(queue, grant.tokens - len(tasks), max(grant.bucket.refilled_at, grant.bucket.now))
    if not grant.slots or not tasks:
        return list(tasks)
    pairs = list(zip(tasks, grant.slots))
    held = store.flow_slots_hold(queue, [(slot, old, t.lease_expires_at, t.lease_token, t.key.id)
                                         for t, (slot, old) in pairs])
    if held != len(pairs):
        # A slot changed between take and hold: its lock was lost (CockroachDB's locks are
        # best-effort). Roll the whole claim back and run it again rather than run unslotted.
        raise SerializationConflict(f"queue {queue}: {len(pairs) - held} flow slot(s) changed under a claim")
    return [t._replace(flow_slot=slot, flow_until=t.lease_expires_at) for t, (slot, _old) in pairs]


def claim_gated(
    store: TaskStore, settings: QueueSettings, want: int, claim: Callable[[int], list[ClaimedTask]]
) -> tuple[list[ClaimedTask], float | object | None]:
    """Take, claim up to what was granted with ``claim(limit)``, hold: one transaction on
    ``store``'s session (re-run whole on 40001). Returns the tasks and whether the limit refused:
    None (it did not), :data:`NO_SLOT` (every slot is held) or the seconds until the next token."""

    def body(_session: Session) -> tuple[list[ClaimedTask], float | object | None]:
        grant = take(store, settings, want)
        if grant.count <= 0:
            return [], NO_SLOT if grant.wait is None else grant.wait
        return hold(store, settings.name, grant, claim(grant.count)), None

    return store.session.transaction(body)


@dataclass(frozen=True)
class HeldSlot:
    """A slot a running task holds: where its row is and whose it is."""

    queue: str
    slot: int
    until: dt.datetime
    token: uuid.UUID
    task_id: uuid.UUID


def held_slot(task: ClaimedTask, until: dt.datetime | None = None) -> HeldSlot | None:
    """The slot ``task`` holds (its row's free_at is ``until``, default the claim's), or None."""
    if task.flow_slot is None:
        return None
    return HeldSlot(task.key.queue, task.flow_slot, until or task.flow_until or task.lease_expires_at,
                    task.lease_token, task.key.id)


def release_slots(store: TaskStore, slots: Sequence[HeldSlot]) -> int:
    """Free the slots of settled tasks at once (a slot that expired and went to another claim is
    left alone). Returns how many were freed."""
    return store.flow_slots_release(slots) if slots else 0


def extend_slots(store: TaskStore, slots: Sequence[HeldSlot], lease_seconds: float) -> dict[uuid.UUID, dt.datetime]:
    """Keep the slots of running tasks until now + ``lease_seconds``; returns the new free_at per
    task id. A task missing from the result lost its slot (it expired and another claim took it)."""
    return store.flow_slots_extend(slots, lease_seconds) if slots else {}


def fit(store: TaskStore, settings: QueueSettings) -> None:
    """Make the slot rows and the token bucket match ``settings`` (after ``shardq queue set``):
    slots 0 .. limit - 1 exist and no others; a bucket, full, exactly when a rate is set."""
    limit = settings.concurrency_limit or 0
    store.flow_slots_trim(settings.name, limit)
    if limit:
        store.flow_slots_add(settings.name, limit)
    if settings.rate_limit is None:
        store.flow_tokens_drop(settings.name)
    else:
        store.flow_tokens_reset(settings.name, float(settings.burst))
