"""What a held lease is, as the statements that settle it name it: a fenced key, a whole claim,
an expired lease. Plain values, shared by the engines' operations, the store, the settler and the
reaper."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from shardq.models.tasks import ClaimedTask, TaskKey


@dataclass(frozen=True, slots=True)
class Fenced:
    """A task key plus the lease token that must still hold for a statement to touch the row."""

    key: TaskKey
    token: uuid.UUID


@dataclass(frozen=True, slots=True)
class WholeClaim:
    """Every task still held under one claim's lease token, all finished successfully. A claim
    takes tasks of one bucket and queue in key order, so they lie between ``first`` and ``last``,
    the smallest and largest (rank, exec_time, id) among them."""

    bucket: int
    queue: str
    first: tuple
    last: tuple
    token: uuid.UUID
    keys: Sequence[TaskKey]


@dataclass(frozen=True, slots=True)
class ExpiredLease:
    key: TaskKey
    attempts: int
    max_attempts: int
    token: uuid.UUID
    exclusive_key: str | None = None
    workflow_id: uuid.UUID | None = None


@dataclass(slots=True)
class HandoffOffer:
    """What a worker acking workflow steps offers to run itself of the sole children its ack
    releases (the next steps of chains), so that no claim has to find them
    (:meth:`shardq.engine.Engine.steps_acked`): tasks of ``queues`` (each leased for its
    ``lease_seconds``: queues it serves without a flow limit), at most ``room`` of them (its free
    handler and prefetch room). ``tasks``: those the ack's transaction took, set by each attempt of
    it; the worker reads them once it committed, and runs them under their leases."""

    queues: tuple[str, ...]
    lease_seconds: tuple[float, ...]
    room: int
    tasks: list[ClaimedTask] = field(default_factory=list)
