"""A queue's settings and its rate-limit tokens: values the lower floors read."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The stats snapshot's values and the records operators read live in their own modules; they are
# part of this vocabulary too.
from shardq.models.tasks import MAX_ATTEMPTS_DEFAULT


@dataclass(frozen=True)
class QueueSettings:
    """Per-queue settings from ``shardq_queues``; a queue created by enqueue gets the defaults."""

    name: str
    lease_seconds: float = 30.0
    max_attempts: int = MAX_ATTEMPTS_DEFAULT
    backoff_base: float = 1.0
    backoff_cap: float = 3600.0
    #: share of the backoff drawn at random: 1.0 = full jitter, 0.0 = none
    retry_jitter: float = 1.0
    #: an exclusive key's backlog keeps only the newest entry
    exclusive_latest_only: bool = False
    paused_enqueue: bool = False
    paused_dequeue: bool = False
    #: a task running longer is settled as a failed attempt (None: no limit)
    timeout_seconds: float | None = None
    #: at most this many tasks run at once across all workers (None: no limit; shardq.lifecycle.flow)
    concurrency_limit: int | None = None
    #: at most this many task starts per second across all workers (None: no limit) ...
    rate_limit: int | None = None
    #: ... in bursts of up to this many (None: the rate)
    rate_burst: int | None = None
    #: finished tasks (succeeded, dead, cancelled) are kept this long in the history (0: not kept,
    #: and nothing is written for them; see shardq.lifecycle.history)
    keep_finished_seconds: float = 0.0
    #: while finished tasks are kept, every succeeded task keeps its JSON-encoded return value, as
    #: a task declared with ``result=True`` does (see shardq.lifecycle.history)
    keep_results: bool = False

    @property
    def burst(self) -> int:
        """The rate limit's burst: ``rate_burst``, by default the rate itself."""
        return self.rate_burst if self.rate_burst is not None else (self.rate_limit or 0)

    @property
    def results_kept(self) -> bool:
        """Every succeeded task of this queue keeps its return value: ``keep_results`` while the
        queue keeps finished tasks (the result lives in the history row)."""
        return self.keep_results and self.keep_finished_seconds > 0

    @property
    def limited(self) -> bool:
        """Claims of this queue go through flow control (a concurrency or rate limit is set)."""
        return self.concurrency_limit is not None or self.rate_limit is not None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> QueueSettings:
        return cls(
            name=row["name"],
            lease_seconds=row["lease_seconds"],
            max_attempts=row["max_attempts"],
            backoff_base=row["backoff_base"],
            backoff_cap=row["backoff_cap"],
            retry_jitter=row["retry_jitter"],
            exclusive_latest_only=row["exclusive_latest_only"],
            paused_enqueue=row["paused_enqueue"],
            paused_dequeue=row["paused_dequeue"],
            timeout_seconds=row.get("timeout_seconds"),
            concurrency_limit=row.get("concurrency_limit"),
            rate_limit=row.get("rate_limit"),
            rate_burst=row.get("rate_burst"),
            keep_finished_seconds=row.get("keep_finished_seconds") or 0.0,
            keep_results=bool(row.get("keep_results")),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "lease_seconds": self.lease_seconds,
            "max_attempts": self.max_attempts,
            "backoff_base": self.backoff_base,
            "backoff_cap": self.backoff_cap,
            "retry_jitter": self.retry_jitter,
            "exclusive_latest_only": self.exclusive_latest_only,
            "paused_enqueue": self.paused_enqueue,
            "paused_dequeue": self.paused_dequeue,
            "timeout_seconds": self.timeout_seconds,
            "concurrency_limit": self.concurrency_limit,
            "rate_limit": self.rate_limit,
            "rate_burst": self.rate_burst if self.rate_limit is not None else None,
            "keep_finished_seconds": self.keep_finished_seconds,
            "keep_results": self.keep_results,
        }


@dataclass(frozen=True)
class RateTokens:
    """A rate-limited queue's tokens as read under its lock, with the transaction's clock."""

    tokens: float
    refilled_at: dt.datetime
    now: dt.datetime

    def available(self, rate: int, burst: int) -> float:
        """Tokens available now: what was left, plus ``rate`` per second since, at most ``burst``."""
        elapsed = max(0.0, (self.now - self.refilled_at).total_seconds())
        return min(float(burst), self.tokens + rate * elapsed)
