"""Typed wrappers around shardq's named statements: one method per statement, dataclasses in
and out. The producer, consumer, reaper and admin code talk to the database only through here
(and so never see psycopg)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Iterable, Sequence

from . import cockroach
from .db import Session
from .errors import NotMigrated, ShardLayoutChanged
from .models import (
    RANK_BACKLOG,
    RANK_SCHEDULED,
    ClaimedTask,
    DeadTask,
    NewTask,
    QueueSettings,
    QueueStats,
    SchemaJob,
    ShardLayout,
    TaskKey,
)
from .shards import discover_layout

_RANKS = {"scheduled_rank": RANK_SCHEDULED, "backlog_rank": RANK_BACKLOG}


@dataclass(frozen=True, slots=True)
class Fenced:
    """A task key plus the lease token that must still hold for a statement to touch the row."""

    key: TaskKey
    token: uuid.UUID


@dataclass(frozen=True, slots=True)
class ExpiredLease:
    key: TaskKey
    attempts: int
    max_attempts: int
    token: uuid.UUID
    exclusive_key: str | None = None


@dataclass(frozen=True, slots=True)
class CancelledTask:
    id: uuid.UUID
    queue: str
    state: str
    exclusive_key: str | None
    backlogged: bool


def _key_arrays(items: Sequence[Fenced]) -> dict[str, list]:
    return {
        "buckets": [f.key.bucket for f in items],
        "queues": [f.key.queue for f in items],
        "ranks": [f.key.rank for f in items],
        "exec_times": [f.key.exec_time for f in items],
        "ids": [f.key.id for f in items],
        "tokens": [f.token for f in items],
        **_RANKS,
    }


def _task_arrays(tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]) -> dict[str, list]:
    return {
        "ids": list(ids),
        "payloads": [t.payload for t in tasks],
        "delays": [t.delay or 0.0 for t in tasks],
        "run_ats": [t.run_at for t in tasks],
        "max_attempts": [t.max_attempts for t in tasks],
        "dedupe_keys": [t.dedupe_key for t in tasks],
        "priorities": [t.priority for t in tasks],
        "exclusive_keys": [t.exclusive_key for t in tasks],
        **_RANKS,
    }


class TaskStore:
    """Statement wrappers bound to one :class:`~shardq.db.Session`."""

    def __init__(self, session: Session) -> None:
        self.session = session

    @property
    def dialect(self) -> str:
        return self.session.dialect

    @property
    def uses_lease_records(self) -> bool:
        """PostgreSQL finds expired leases through ``shardq_leases``; CockroachDB through the
        ``state = 'leased'`` span of the key."""
        return self.dialect == "postgresql"

    def layout(self) -> ShardLayout:
        return discover_layout(self.session)

    # -- producer ---------------------------------------------------------------------------
    def task_insert_many(
        self, queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]
    ) -> tuple[set[uuid.UUID], bool]:
        """Insert; returns (ids inserted, queue paused for enqueue)."""
        rows = self.session.fetch_all("task_insert_many", {"queue": queue, **_task_arrays(tasks, ids)})
        paused = any(row["paused"] for row in rows)
        return {row["id"] for row in rows if row["id"] is not None}, paused

    def task_insert_backlog_many(self, queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        rows = self.session.fetch_all("task_insert_backlog_many", {"queue": queue, **_task_arrays(tasks, ids)})
        return {row["id"] for row in rows}

    def task_exclusive_active(self, queue: str, keys: Sequence[str]) -> set[str]:
        rows = self.session.fetch_all("task_exclusive_active", {"queue": queue, "keys": list(keys)})
        return {row["exclusive_key"] for row in rows}

    def task_backlog_supersede(self, queue: str, keys: Sequence[str], keep: Sequence[uuid.UUID]) -> int:
        rows = self.session.fetch_all("task_backlog_supersede", {"queue": queue, "keys": list(keys), "keep": list(keep)})
        return len(rows)

    def exclusive_keys_lock(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Take the per-key locks (PostgreSQL; a no-op statement on CockroachDB) for this transaction."""
        self.session.fetch_all(
            "exclusive_keys_lock", {"queues": [q for q, _ in pairs], "keys": [k for _, k in pairs]}
        )

    def task_backlog_release(self, pairs: Sequence[tuple[str, str]]) -> set[uuid.UUID]:
        rows = self.session.fetch_all(
            "task_backlog_release", {"queues": [q for q, _ in pairs], "keys": [k for _, k in pairs], **_RANKS}
        )
        return {row["id"] for row in rows}

    def task_exclusive_keys_by_id(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, tuple[str, str]]:
        rows = self.session.fetch_all("task_exclusive_keys_by_id", {"ids": list(ids)})
        return {row["id"]: (row["queue"], row["exclusive_key"]) for row in rows}

    def task_cancel_many(self, ids: Sequence[uuid.UUID]) -> list[CancelledTask]:
        rows = self.session.fetch_all("task_cancel_many", {"ids": list(ids)})
        return [
            CancelledTask(row["id"], row["queue"], row["state"], row["exclusive_key"], row["backlogged"]) for row in rows
        ]

    # -- consumer ---------------------------------------------------------------------------
    def task_claim_batch(self, bucket: int, queue: str, limit: int, lease_seconds: float) -> list[ClaimedTask]:
        token = uuid.uuid4()
        rows = self.session.fetch_all(
            "task_claim_batch",
            {"bucket": bucket, "queue": queue, "limit": limit, "lease_seconds": lease_seconds, "token": token, **_RANKS},
        )
        # RETURNING follows no order; hand tasks out in claim order (priority, then exec_time).
        rows.sort(key=lambda row: (row["rank"], row["exec_time"]))
        return [ClaimedTask.from_row(row, token) for row in rows]

    def task_promote_due(self, bucket: int, queue: str, limit: int) -> int:
        """Make due scheduled tasks ready; returns how many."""
        params = {"bucket": bucket, "queue": queue, "limit": limit, **_RANKS}
        return len(self.session.fetch_all("task_promote_due", params))

    def task_ack_many(self, items: Sequence[Fenced], closed_tokens: Iterable[uuid.UUID] = ()) -> set[uuid.UUID]:
        params = _key_arrays(items)
        params["closed_tokens"] = list(closed_tokens)
        # Fenced by whole key + lease token: safe to re-send after 40003 (see shardq.db).
        return {row["id"] for row in self.session.fetch_all("task_ack_many", params, resend_ambiguous=True)}

    def task_retry_many(
        self, items: Sequence[Fenced], delays: Sequence[float], errors: Sequence[str | None], *, require_expired: bool
    ) -> set[uuid.UUID]:
        params = _key_arrays(items)
        params.update(delays=list(delays), errors=list(errors), require_expired=require_expired)
        return {row["id"] for row in self.session.fetch_all("task_retry_many", params, resend_ambiguous=True)}

    def task_bury_many(
        self, items: Sequence[Fenced], errors: Sequence[str | None], *, require_expired: bool
    ) -> set[uuid.UUID]:
        params = _key_arrays(items)
        params.update(errors=list(errors), require_expired=require_expired)
        return {row["id"] for row in self.session.fetch_all("task_bury_many", params, resend_ambiguous=True)}

    def task_release_many(self, items: Sequence[Fenced]) -> set[uuid.UUID]:
        rows = self.session.fetch_all("task_release_many", _key_arrays(items), resend_ambiguous=True)
        return {row["id"] for row in rows}

    def task_extend_many(self, items: Sequence[Fenced], lease_seconds: float) -> dict[uuid.UUID, object]:
        params = _key_arrays(items)
        params["lease_seconds"] = lease_seconds
        rows = self.session.fetch_all("task_extend_many", params, resend_ambiguous=True)
        return {row["id"]: row["lease_expires_at"] for row in rows}

    # -- reaper -----------------------------------------------------------------------------
    def task_reap_candidates(self, bucket: int, limit: int) -> list[ExpiredLease]:
        rows = self.session.fetch_all("task_reap_candidates", {"bucket": bucket, "limit": limit})
        return [
            ExpiredLease(
                TaskKey(row["bucket"], row["queue"], row["rank"], row["exec_time"], row["id"]),
                row["attempts"],
                row["max_attempts"],
                row["lease_token"],
                row["exclusive_key"],
            )
            for row in rows
        ]

    def lease_sweep(self, bucket: int, limit: int) -> tuple[int, int]:
        row = self.session.fetch_one("lease_sweep", {"bucket": bucket, "limit": limit})
        return (row["dropped"], row["pushed"]) if row else (0, 0)

    # -- queues -----------------------------------------------------------------------------
    def queue_ensure(self, queue: str) -> None:
        self.session.execute("queue_ensure", {"queue": queue})

    def queue_get(self, queue: str) -> QueueSettings | None:
        row = self.session.fetch_one("queue_get", {"queue": queue})
        return QueueSettings.from_row(row) if row else None

    def queue_list(self) -> list[QueueSettings]:
        return [QueueSettings.from_row(row) for row in self.session.fetch_all("queue_list")]

    def queue_update(self, queue: str, **changes: object) -> QueueSettings | None:
        fields = ("lease_seconds", "max_attempts", "backoff_base", "backoff_cap", "retry_jitter",
                  "exclusive_latest_only", "paused_enqueue", "paused_dequeue")
        params = {name: changes.get(name) for name in fields}
        row = self.session.fetch_one("queue_update", {"queue": queue, **params})
        return QueueSettings.from_row(row) if row else None

    # -- introspection and dead letters -----------------------------------------------------
    def stats_tasks_by_queue(self) -> dict[str, QueueStats]:
        return {
            row["queue"]: QueueStats(
                ready=row["ready"],
                scheduled=row["scheduled"],
                leased=row["leased"],
                oldest_ready_age_s=row["oldest_ready_age_s"],
                backlog=row["backlog"],
            )
            for row in self.session.fetch_all("stats_tasks_by_queue")
        }

    def stats_dead_by_queue(self) -> dict[str, int]:
        return {row["queue"]: row["dead"] for row in self.session.fetch_all("stats_dead_by_queue")}

    def task_count_by_bucket(self) -> dict[int, int]:
        """Rows per bucket. On CockroachDB a historical read (no waiting on claimers); when the
        current layout is younger than that read's timestamp (a resize or the table itself less
        than ~5 s old) it falls back to a current read."""
        try:
            rows = self.session.fetch_all("task_count_by_bucket")
        except (ShardLayoutChanged, NotMigrated):
            if self.dialect != "cockroachdb":
                raise
            rows = self.session.fetch_all("task_count_by_bucket_current")
        return {int(row["bucket"]): row["tasks"] for row in rows}

    def schema_jobs(self, table_id: int | None = None) -> list[SchemaJob]:
        """CockroachDB: unfinished schema-change jobs of shardq_tasks (a resize in progress)."""
        return cockroach.schema_jobs(self.session, table_id) if self.dialect == "cockroachdb" else []

    def dead_list(self, queue: str, limit: int) -> list[DeadTask]:
        return [DeadTask.from_row(r) for r in self.session.fetch_all("dead_list", {"queue": queue, "limit": limit})]

    def dead_ids_page(self, queue: str, after: uuid.UUID, limit: int) -> list[uuid.UUID]:
        rows = self.session.fetch_all("dead_ids_page", {"queue": queue, "after": after, "limit": limit})
        return [row["id"] for row in rows]

    def dead_requeue_ids(self, queue: str, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        rows = self.session.fetch_all("dead_requeue_ids", {"queue": queue, "ids": list(ids)})
        return {row["id"] for row in rows}

    def dead_purge_batch(self, queue: str, limit: int) -> int:
        return len(self.session.fetch_all("dead_purge_batch", {"queue": queue, "limit": limit}))
