"""Task history: what happened to a task after its handler returned, kept per queue for a while.

A queue keeps its finished tasks for ``keep_finished_seconds`` (``shardq queue set Q
--keep-finished 7d``; 0, the default, keeps none). While it does, every task of it that
finishes — succeeded, dead-lettered, cancelled — leaves one row in ``shardq_history``, and every
failed attempt that is retried leaves one row in ``shardq_attempts`` (migration 0008).
:func:`status` reads a task's state now by id, wherever it is; :func:`page` lists a queue's
finished tasks; :func:`shardq.maintenance.pruning.prune_history` removes rows past their queue's
retention (each reaper pass, and every worker's settler about once a minute).

Results: a task declared with ``@app.task(result=True)`` keeps its JSON-encoded return value in
its history row; a queue set to keep results (``shardq queue set Q --keep-results``,
``keep_results=True``) does so for every task of it, also a plain handler's (the worker encodes
what the handler returned; a value that cannot be kept fails the attempt, as for a declared task).

Why the default is 0 (keep nothing): the default must not change what an upgrade costs. A
queue that keeps nothing sends exactly the statements it sent before (the settler decides per
queue from the cached settings; no statement, parameter or payload decoding is added), and the
tables do not grow with traffic nobody asked to keep. Keeping costs one insert per finished task
in the ack's transaction (figures: docs/loadtest.md, "Keeping finished tasks").

Guarantees
    * A history row is written in the same transaction as the fenced statement that finished the
      task, and only for the rows that statement removed: a crash leaves both or neither, and an
      outcome whose lease had passed to another worker (a task that ran twice) records nothing:
      the fenced ack's outcome (and result) is the one kept.
    * A task's status by id costs one statement of at most four primary-key reads (tasks,
      attempts, history, dead letters), whatever the tables' sizes (under 0.5 ms p99 at 10M
      kept tasks: docs/lifecycle.md).
    * Pruning deletes at most 1,000 rows per statement (:mod:`shardq.maintenance.batches`).

Does not
    * keep anything of a queue with ``keep_finished_seconds`` 0, nor of a task that finished
      before its queue started keeping (its status is then ``unknown``, or ``dead`` from the dead
      letters). Attempt rows are pruned by their own age, so a task retried for longer than the
      retention loses its oldest attempts first.
    * measure an attempt's start with the server's clock: ``run_seconds`` is the handler's time on
      the worker, and a start is shown as the end minus it.
"""

from __future__ import annotations

import datetime as dt
import uuid

from .errors import InvalidInput
from .history_records import FINISHED_STATES, FinishedTask, TaskStatus
from .store import TaskStore

#: rows per :func:`page` by default, and at most
PAGE_DEFAULT = 50
PAGE_MAX = 1000


def parse_task_id(text: object) -> uuid.UUID:
    """A task id as a caller gives it; :class:`InvalidInput` (one line) when it is not one."""
    if isinstance(text, uuid.UUID):
        return text
    try:
        return uuid.UUID(str(text).strip())
    except ValueError:
        raise InvalidInput(f"not a task id: {str(text)[:80]!r}") from None


def status(store: TaskStore, task_id: object) -> TaskStatus:
    """The state of one task now (see :class:`shardq.history_records.TaskStatus`); an id that is
    nowhere is ``unknown``, not an error. A malformed id raises :class:`InvalidInput`."""
    return store.task_status(parse_task_id(task_id))


def page(store: TaskStore, queue: str, *, state: str | None = None, since: dt.datetime | None = None,
         after: tuple[dt.datetime, uuid.UUID] | None = None, limit: int = PAGE_DEFAULT) -> list[FinishedTask]:
    """A page of ``queue``'s finished tasks, newest first; the next page starts ``after`` the
    (finished_at, id) of the last row. ``state``: one of succeeded, dead, cancelled."""
    from . import validation

    validation.queue_name(queue)
    if state is not None and state not in FINISHED_STATES:
        raise InvalidInput(f"state must be one of {', '.join(FINISHED_STATES)}, got {state!r}")
    if since is not None and since.tzinfo is None:
        raise InvalidInput("since must be an aware datetime")
    limit = validation.positive_int(limit, "limit", maximum=PAGE_MAX)
    return store.history_list(queue, state=state, since=since, after=after, limit=limit)
