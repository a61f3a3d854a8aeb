"""Pruning: old rows of the activity counters, of the periodic slots and of the task history,
in bounded batches.

``shardq_stats`` (per-minute activity counters, migration 0003) keeps an hour: rates read at most
that far back. Before pruning them, their hourly sums are brought up to date
(``shardq_stats_hourly``, migration 0009, kept :data:`KEEP_HOURLY_SECONDS`: the dashboard's 24 h
and 7 d charts). ``shardq_periodic`` (taken slots, migration 0005) keeps a day, and never a
schedule's latest slot, which the scheduler reads to find missed slots. Both prunes go through
:func:`shardq.maintenance.batches.until_short_batch`.

``shardq_history`` and ``shardq_attempts`` (migration 0008) keep each queue's rows for its
``keep_finished_seconds`` (:mod:`shardq.lifecycle.history`).

``shardq_task_steps`` and ``shardq_task_signals`` (durable execution, migration 0021) lose the
rows of tasks that are neither live nor dead (:func:`prune_durable`, once per reaper pass).

``shardq_audit`` (the dashboard's log of operators' actions, migration 0009) keeps
:data:`KEEP_AUDIT_SECONDS` (90 days: a quarter's actions can be looked back on; the log is written
only by people, so that many days stay small). The reaper prunes it once per pass
(:func:`prune_audit`), at most :data:`AUDIT_MAX_BATCHES` batches.

Finished workflows (every step succeeded, dead or cancelled; migration 0010) are deleted with
their steps and edges by :func:`prune_workflows`, once their last step finished longer ago than
their retention: the longest ``keep_finished_seconds`` among the queues of their steps, and at
least :data:`KEEP_WORKFLOWS_SECONDS` (a day). Queues keep nothing by default, yet a workflow's
status (``shardq workflow ID``, the API, the dashboard) is what its user reads *after* it
finished, so it outlives its tasks' history by default; a queue that keeps its finished tasks
longer keeps its workflows as long, so a step's ``results`` and its workflow go together.

Who runs them: the reaper prunes counters, history, the audit log and workflows once per pass;
every worker's settler prunes counters and history about once a minute (:mod:`shardq.worker.settler`);
every worker running an app with schedules prunes slots once a minute (:class:`shardq.maintenance.periodic.Scheduler`).

Guarantees
    * Safe from many processes at once; each statement deletes at most its batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from shardq.maintenance.batches import until_short_batch
from shardq.operations import charts, durable, registry
from shardq.operations import workflows as workflow_rows
from shardq.operations.activity import RETENTION_SECONDS
from shardq.sessions.store import TaskStore

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
    until_short_batch(
        lambda n: store.run(charts.stats_hourly_prune(KEEP_HOURLY_SECONDS, n)),
        PRUNE_BATCH,
        max_batches=COUNTERS_MAX_BATCHES,
    )
    return until_short_batch(
        lambda n: store.stats_prune(keep_seconds, n), PRUNE_BATCH, max_batches=COUNTERS_MAX_BATCHES
    )


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
    return until_short_batch(
        lambda n: store.run(registry.audit_prune(keep_seconds, n)), PRUNE_BATCH, max_batches=AUDIT_MAX_BATCHES
    )


#: at most this many batches of durable steps and of signals per call
DURABLE_MAX_BATCHES = 20


def prune_durable(store: TaskStore) -> int:
    """Delete the recorded steps and the signals of durable tasks that finished (acked, cancelled,
    purged from the dead letters; a dead task keeps its steps, so that a requeue resumes it), at
    most ``DURABLE_MAX_BATCHES`` batches of ``PRUNE_BATCH`` each (docs/durable.md). Returns how
    many rows went."""
    total = until_short_batch(lambda n: store.run(durable.steps_prune(n)), PRUNE_BATCH, max_batches=DURABLE_MAX_BATCHES)
    return total + until_short_batch(
        lambda n: store.run(durable.signals_prune(n)), PRUNE_BATCH, max_batches=DURABLE_MAX_BATCHES
    )


#: a finished workflow is kept at least this long (a day) after its last step finished
KEEP_WORKFLOWS_SECONDS = 86_400.0
#: at most this many pages of old workflows are walked in one call (the rest waits for the next)
WORKFLOWS_MAX_PAGES = 20


@dataclass(frozen=True)
class WorkflowPrune:
    """What :func:`prune_workflows` did: ``pruned`` workflows deleted, and ``resume_after``, the
    cursor to pass as ``after`` next time (None: the walk reached the end)."""

    pruned: int
    resume_after: tuple[Any, Any] | None


def prune_workflows(
    store: TaskStore,
    *,
    keep_seconds: float = KEEP_WORKFLOWS_SECONDS,
    after: tuple[Any, Any] | None = None,
    max_pages: int = WORKFLOWS_MAX_PAGES,
) -> WorkflowPrune:
    """Delete finished workflows past their retention, with their steps and edges.

    Walks the workflows enqueued more than ``keep_seconds`` ago, oldest first, a page of
    ``PRUNE_BATCH`` at a time from the cursor ``after`` (at most ``max_pages`` pages), and deletes
    each that is due: no step waiting or ready, and its last step finished more than the longest
    of ``keep_seconds`` (:data:`KEEP_WORKFLOWS_SECONDS`, a day) and its steps' queues'
    ``keep_finished_seconds`` ago. Steps, then edges, then the workflow's row go, each statement
    at most ``PRUNE_BATCH`` rows (a workflow of 100,000 steps takes many statements, never one).

    Guarantees
        * Never deletes a workflow with a step waiting or ready; an interrupted prune (a lost
          connection) leaves a workflow that is still due, and the next call finishes it.
        * Safe from many processes at once; bounded statements, none holding locks for long.

    Does not
        * delete the tasks of dead steps (they stay in the dead letters, with their own purge);
        * resume a workflow whose dead step is requeued from the dead letters *while* it is being
          pruned: that step's task runs as a plain task (its row and edges are gone).

    Returns how many workflows went and where to resume (:class:`WorkflowPrune`)."""
    pruned = 0
    for _ in range(max_pages):
        page = store.run(workflow_rows.workflow_prune_page(keep_seconds, after, PRUNE_BATCH))
        due = [workflow_id for workflow_id, _created, is_due in page if is_due]
        if due:
            pruned += _delete_workflows(store, due)
        if len(page) < PRUNE_BATCH:
            return WorkflowPrune(pruned, None)
        after = (page[-1][1], page[-1][0])
    return WorkflowPrune(pruned, after)


def _delete_workflows(store: TaskStore, due: list[Any]) -> int:
    """Steps, edges, shard rows, then the rows of ``due`` workflows (a row goes only once its steps
    are gone)."""
    until_short_batch(lambda n: store.run(workflow_rows.workflow_steps_prune(due, n)), PRUNE_BATCH)
    until_short_batch(lambda n: store.run(workflow_rows.workflow_edges_prune(due, n)), PRUNE_BATCH)
    until_short_batch(lambda n: store.run(workflow_rows.workflow_counts_prune(due, n)), PRUNE_BATCH)
    deleted: int = store.run(workflow_rows.workflow_prune(due))
    return deleted
