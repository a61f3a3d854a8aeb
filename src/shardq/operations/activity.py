"""Queue activity gathered in memory and added to ``shardq_stats`` in one statement per flush,
and how long the per-minute counters are kept."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from shardq.errors import DatabaseError
from shardq.models.stats import Activity
from shardq.operations.stats import ACTIVITY_ROWS_PER_MINUTE, stats_add_many
from shardq.sql.plan import Plan

# Counter rows older than this are pruned (shardq.maintenance.pruning); the window can therefore
# reach back at most this far.
RETENTION_SECONDS = 3600.0


log = logging.getLogger(__name__)


class ActivityTally:
    """Counts one writer (a worker, a reaper) gathers in memory and adds to ``shardq_stats`` in
    one statement per :meth:`flush`. Not thread-safe: one owner thread.

    A flush that fails keeps the counts for the next one, so a database hiccup loses nothing; a
    writer that dies loses what it gathered since its last successful flush.
    """

    def __init__(self, *, row: int | None = None) -> None:
        self.row = random.randrange(ACTIVITY_ROWS_PER_MINUTE) if row is None else row
        self._pending: dict[str, Activity] = {}
        self._failures = 0

    def of(self, queue: str) -> Activity:
        activity = self._pending.get(queue)
        if activity is None:
            activity = self._pending[queue] = Activity()
        return activity

    @property
    def pending(self) -> dict[str, Activity]:
        return self._pending

    def flush(self, run: Callable[[Plan[Any]], Any]) -> bool:
        """Write and forget what was gathered, running the statement with ``run`` (a store's or a
        session's ``run``). Returns False (keeping the counts) when the
        database refused; logs the first failure of a run of failures."""
        if not self._pending:
            return True
        try:
            run(stats_add_many(self.row, self._pending))
        except DatabaseError as exc:
            if self._failures == 0:
                log.warning("could not record queue activity (kept for the next try): %s", exc)
            self._failures += 1
            return False
        self._failures = 0
        self._pending = {}
        return True
