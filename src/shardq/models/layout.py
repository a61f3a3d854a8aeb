"""The shard layout of the tasks table, and the schema-change jobs that alter it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The stats snapshot's values and the records operators read live in their own modules; they are
# part of this vocabulary too.


@dataclass(frozen=True)
class ShardLayout:
    """How the tasks table is split into buckets right now.

    ``visit_count`` is how many buckets consumers must walk: during a shrink on
    PostgreSQL it stays at the old, larger count until the rows of the dropped buckets
    have moved. ``shard_column`` is CockroachDB's hidden shard column (None on PostgreSQL,
    where the bucket is the ordinary ``bucket`` column), ``table_id`` CockroachDB's descriptor id
    of ``shardq_tasks`` (to find its schema-change jobs).
    """

    bucket_count: int
    shard_column: str | None = None
    visit_count: int = 0
    resizing_from: int | None = None
    table_id: int | None = None

    def __post_init__(self) -> None:
        if self.visit_count == 0:
            object.__setattr__(self, "visit_count", self.bucket_count)


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
