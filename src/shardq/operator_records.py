"""Records operators read: a dead task, a task inspected by id, and what a resize reports (the
CockroachDB schema-change jobs it waits on, its progress, its result). Part of shardq's vocabulary
(:mod:`shardq.models` re-exports them); no I/O."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DeadTask:
    """A task in ``shardq_dead``."""

    id: str
    queue: str
    payload: bytes
    attempts: int
    last_error: str | None
    died_at: dt.datetime
    created_at: dt.datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DeadTask:
        return cls(
            id=str(row["id"]),
            queue=row["queue"],
            payload=bytes(row["payload"]),
            attempts=row["attempts"],
            last_error=row["last_error"],
            died_at=row["died_at"],
            created_at=row["created_at"],
        )


@dataclass(frozen=True)
class TaskInfo:
    """One task as an operator inspects it: from ``shardq_tasks`` (``state`` ready, scheduled,
    leased or backlog) or from ``shardq_dead`` (``state`` dead, with ``died_at``). Fields a state
    does not have are None (a dead task has no lease nor run time; only a leased task has a lease
    expiry). ``attempts`` counts attempts started so far."""

    id: str
    queue: str
    state: str
    payload: bytes
    attempts: int
    max_attempts: int
    created_at: dt.datetime
    priority: int = 0
    exclusive_key: str | None = None
    dedupe_key: str | None = None
    exec_time: dt.datetime | None = None
    lease_expires_at: dt.datetime | None = None
    last_error: str | None = None
    died_at: dt.datetime | None = None

    @classmethod
    def from_task_row(cls, row: Mapping[str, Any]) -> TaskInfo:
        return cls(
            id=str(row["id"]), queue=row["queue"], state=row["state"], payload=bytes(row["payload"]),
            attempts=row["attempts"], max_attempts=row["max_attempts"], created_at=row["created_at"],
            priority=row["priority"], exclusive_key=row["exclusive_key"], dedupe_key=row["dedupe_key"],
            exec_time=row["exec_time"], lease_expires_at=row["lease_expires_at"] if row["state"] == "leased" else None,
            last_error=row["last_error"],
        )

    @classmethod
    def from_dead_row(cls, row: Mapping[str, Any]) -> TaskInfo:
        return cls(
            id=str(row["id"]), queue=row["queue"], state="dead", payload=bytes(row["payload"]),
            attempts=row["attempts"], max_attempts=row["max_attempts"], created_at=row["created_at"],
            priority=row["priority"], exclusive_key=row["exclusive_key"], dedupe_key=row["dedupe_key"],
            last_error=row["last_error"], died_at=row["died_at"],
        )


@dataclass(frozen=True)
class SchemaJob:
    """An unfinished CockroachDB schema-change job of ``shardq_tasks`` (a resize in progress)."""

    job_id: int
    job_type: str
    status: str
    fraction_completed: float | None
    running_status: str | None
    description: str

    def as_json(self) -> dict[str, Any]:
        return {
            "job_id": str(self.job_id),
            "job_type": self.job_type,
            "status": self.status,
            "fraction_completed": self.fraction_completed,
            "running_status": self.running_status,
            "description": self.description,
        }


@dataclass(frozen=True)
class ResizeProgress:
    """One progress report of a running resize.

    ``phase``: ``"switching"`` (new count being recorded), ``"moving"`` (PostgreSQL: rows moving
    out of dropped buckets), ``"waiting"`` (PostgreSQL: only leased or locked rows left there;
    waiting for workers to settle them), ``"schema-change"`` (CockroachDB: the ALTER PRIMARY KEY
    job), ``"dropping-column"`` (CockroachDB) and ``"done"``. ``moved`` counts rows moved so far,
    ``movable_left`` (ready, scheduled or backlogged) and ``leased_left`` what is still in dropped
    buckets; ``fraction`` is the CockroachDB job's own estimate (0..1) when it gives one.
    """

    phase: str
    detail: str = ""
    moved: int = 0
    movable_left: int = 0
    leased_left: int = 0
    fraction: float | None = None


@dataclass(frozen=True)
class ResizeResult:
    """What ``shardq buckets resize`` did. ``changed`` is False for a no-op (same count);
    ``complete`` is False when a PostgreSQL shrink was stopped before the dropped buckets were
    empty (run the resize again to finish). ``stale_column_kept`` says why CockroachDB's old shard
    column could not be dropped (None when it was dropped or there was none)."""

    dialect: str
    before: int
    after: int
    changed: bool
    message: str
    complete: bool = True
    moved: int = 0
    shard_column_before: str | None = None
    shard_column_after: str | None = None
    stale_column_dropped: bool = False
    stale_column_kept: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "dialect": self.dialect,
            "before": self.before,
            "after": self.after,
            "changed": self.changed,
            "complete": self.complete,
            "moved": self.moved,
            "message": self.message,
            "shard_column_before": self.shard_column_before,
            "shard_column_after": self.shard_column_after,
            "stale_column_dropped": self.stale_column_dropped,
            "stale_column_kept": self.stale_column_kept,
        }
