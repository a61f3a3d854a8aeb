"""Typed wrappers around shardq's named statements: one method per statement, dataclasses in
and out. The producer, consumer, reaper and admin code talk to the database only through here
(and so never see psycopg)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Iterable, Sequence

from .db import Session
from .models import ClaimedTask, DeadTask, NewTask, QueueSettings, QueueStats, ShardLayout, TaskKey
from .shards import discover_layout


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


def _key_arrays(items: Sequence[Fenced]) -> dict[str, list]:
    return {
        "buckets": [f.key.bucket for f in items],
        "queues": [f.key.queue for f in items],
        "exec_times": [f.key.exec_time for f in items],
        "ids": [f.key.id for f in items],
        "tokens": [f.token for f in items],
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
    def task_insert_many(self, queue: str, tasks: Sequence[NewTask]) -> list[uuid.UUID]:
        ids = [uuid.uuid4() for _ in tasks]
        rows = self.session.fetch_all(
            "task_insert_many",
            {
                "queue": queue,
                "ids": ids,
                "payloads": [t.payload for t in tasks],
                "delays": [t.delay or 0.0 for t in tasks],
                "run_ats": [t.run_at for t in tasks],
                "max_attempts": [t.max_attempts for t in tasks],
                "dedupe_keys": [t.dedupe_key for t in tasks],
            },
        )
        inserted = {row["id"] for row in rows}
        return [i if i in inserted else None for i in ids]  # type: ignore[misc]

    # -- consumer ---------------------------------------------------------------------------
    def task_claim_batch(self, bucket: int, queue: str, limit: int, lease_seconds: float) -> list[ClaimedTask]:
        token = uuid.uuid4()
        rows = self.session.fetch_all(
            "task_claim_batch",
            {"bucket": bucket, "queue": queue, "limit": limit, "lease_seconds": lease_seconds, "token": token},
        )
        # RETURNING follows no order; hand tasks out earliest exec_time first, as claimed.
        rows.sort(key=lambda row: row["exec_time"])
        return [ClaimedTask.from_row(row, token) for row in rows]

    def task_ack_many(self, items: Sequence[Fenced], closed_tokens: Iterable[uuid.UUID] = ()) -> set[uuid.UUID]:
        params = _key_arrays(items)
        params["closed_tokens"] = list(closed_tokens)
        return {row["id"] for row in self.session.fetch_all("task_ack_many", params)}

    def task_retry_many(
        self, items: Sequence[Fenced], delays: Sequence[float], errors: Sequence[str | None], *, require_expired: bool
    ) -> set[uuid.UUID]:
        params = _key_arrays(items)
        params.update(delays=list(delays), errors=list(errors), require_expired=require_expired)
        return {row["id"] for row in self.session.fetch_all("task_retry_many", params)}

    def task_bury_many(
        self, items: Sequence[Fenced], errors: Sequence[str | None], *, require_expired: bool
    ) -> set[uuid.UUID]:
        params = _key_arrays(items)
        params.update(errors=list(errors), require_expired=require_expired)
        return {row["id"] for row in self.session.fetch_all("task_bury_many", params)}

    def task_release_many(self, items: Sequence[Fenced]) -> set[uuid.UUID]:
        return {row["id"] for row in self.session.fetch_all("task_release_many", _key_arrays(items))}

    def task_extend_many(self, items: Sequence[Fenced], lease_seconds: float) -> dict[uuid.UUID, object]:
        params = _key_arrays(items)
        params["lease_seconds"] = lease_seconds
        return {row["id"]: row["lease_expires_at"] for row in self.session.fetch_all("task_extend_many", params)}

    # -- reaper -----------------------------------------------------------------------------
    def task_reap_candidates(self, bucket: int, limit: int) -> list[ExpiredLease]:
        rows = self.session.fetch_all("task_reap_candidates", {"bucket": bucket, "limit": limit})
        return [
            ExpiredLease(
                TaskKey(row["bucket"], row["queue"], row["exec_time"], row["id"]),
                row["attempts"],
                row["max_attempts"],
                row["lease_token"],
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

    # -- introspection and dead letters -----------------------------------------------------
    def stats_tasks_by_queue(self) -> dict[str, QueueStats]:
        return {
            row["queue"]: QueueStats(
                ready=row["ready"],
                scheduled=row["scheduled"],
                leased=row["leased"],
                oldest_ready_age_s=row["oldest_ready_age_s"],
            )
            for row in self.session.fetch_all("stats_tasks_by_queue")
        }

    def stats_dead_by_queue(self) -> dict[str, int]:
        return {row["queue"]: row["dead"] for row in self.session.fetch_all("stats_dead_by_queue")}

    def task_count_by_bucket(self) -> dict[int, int]:
        return {int(row["bucket"]): row["tasks"] for row in self.session.fetch_all("task_count_by_bucket")}

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
