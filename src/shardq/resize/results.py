"""What a resize reports: its progress while it runs and its result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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

    #: the engine's name ("postgresql" or "cockroachdb"): a public field (and JSON key) named before
    #: "engine name" was the word (docs/glossary.md, "engine")
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
