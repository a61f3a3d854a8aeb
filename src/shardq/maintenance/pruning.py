"""Pruning: old rows of the activity counters, of the periodic slots and of the task history,
in bounded batches.

``shardq_stats`` (per-minute activity counters, migration 0003) keeps an hour: rates read at most
that far back. Before pruning them, their hourly sums are brought up to date
(``shardq_stats_hourly``, migration 0009, kept :data:`KEEP_HOURLY_SECONDS`: the dashboard's 24 h
and 7 d charts). ``shardq_periodic`` (taken slots, migration 0005) keeps a day, and never a
schedule's latest slot, which the scheduler reads to find missed slots. Both prunes go through
:func:`shardq.maintenance.batches.until_short_batch`.

``shardq_history`` and ``shardq_attempts`` (migration 0008) keep each queue's rows for its
``keep_finished_seconds`` (:mod:`shardq.history`).

``shardq_audit`` (the dashboard's log of operators' actions, migration 0009) keeps
:data:`KEEP_AUDIT_SECONDS` (90 days: a quarter's actions can be looked back on; the log is written
only by people, so that many days stay small). The reaper prunes it once per pass
(:func:`prune_audit`), at most :data:`AUDIT_MAX_BATCHES` batches.

Who runs them: the reaper prunes counters and history once per pass and every worker's settler about once a
minute (both) (:mod:`shardq.worker.settler`); every worker running an app with schedules prunes slots
once a minute (:class:`shardq.periodic.Scheduler`).

Guarantees
    * Safe from many processes at once; each statement deletes at most its batch.
"""

from __future__ import annotations

from functools import partial

from ..operations import charts, registry
from ..stats import RETENTION_SECONDS
from ..store import TaskStore
from .batches import until_short_batch

PRUNE_BATCH = 1000
#: at most this many counter batches per call: a backlog of counter rows is worked off over calls
COUNTERS_MAX_BATCHES = 20
#: periodic slot rows are kept this long (a day), a schedule's latest always
KEEP_SLOTS_SECONDS = 86_400.0
#: hourly activity sums are kept this long (8 days: a week's chart and its first hour)
KEEP_HOURLY_SECONDS = 8 * 86_400.0


def prune_counters(store: TaskStore, *, keep_seconds: float = RETENTION_SECONDS) -> int:
    """Delete activity counter rows older than ``keep_seconds`` (an hour), at most
    ``COUNTERS_MAX_BATCHES`` batches of ``PRUNE_BATCH``, after summing the current and the previous
    hour into their hourly rows (and pruning hourly rows past :data:`KEEP_HOURLY_SECONDS`).
    Returns how many counter rows went."""
    store.run(charts.stats_hourly_rollup())
    until_short_batch(lambda n: store.run(charts.stats_hourly_prune(KEEP_HOURLY_SECONDS, n)), PRUNE_BATCH,
                      max_batches=COUNTERS_MAX_BATCHES)
    return until_short_batch(lambda n: store.stats_prune(keep_seconds, n), PRUNE_BATCH,
                             max_batches=COUNTERS_MAX_BATCHES)


def prune_slots(store: TaskStore, *, keep_seconds: float = KEEP_SLOTS_SECONDS) -> int:
    """Delete periodic slot rows older than ``keep_seconds`` (a day), never a schedule's latest,
    until none is left. Returns how many rows went."""
    return until_short_batch(lambda n: store.periodic_slots_prune(keep_seconds, n), PRUNE_BATCH)


#: at most this many history batches per table and queue in one call (the rest waits for the next)
HISTORY_MAX_BATCHES = 20


def prune_history(store: TaskStore) -> int:
    """Delete history and failed-attempt rows past their queue's retention, for every queue (a
    queue set back to 0 loses what it kept), at most ``HISTORY_MAX_BATCHES`` batches of
    ``PRUNE_BATCH`` per table and queue. Returns how many rows went."""
    total = 0
    for settings in store.queue_list():
        queue, keep = settings.name, settings.keep_finished_seconds
        for prune in (store.history_prune, store.attempts_prune):
            total += until_short_batch(partial(prune, queue, keep), PRUNE_BATCH, max_batches=HISTORY_MAX_BATCHES)
    return total


#: audit log entries are kept this long by default (90 days)
KEEP_AUDIT_SECONDS = 90 * 86_400.0
#: at most this many audit batches per call (a backlog is worked off over passes)
AUDIT_MAX_BATCHES = 20


def prune_audit(store: TaskStore, *, keep_seconds: float = KEEP_AUDIT_SECONDS) -> int:
    """Delete audit log entries older than ``keep_seconds`` (90 days), oldest first, at most
    ``AUDIT_MAX_BATCHES`` batches of ``PRUNE_BATCH``. Returns how many went."""
    return until_short_batch(lambda n: store.run(registry.audit_prune(keep_seconds, n)), PRUNE_BATCH,
                             max_batches=AUDIT_MAX_BATCHES)
