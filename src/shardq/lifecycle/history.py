"""Task history: what happened to a task after its handler returned, kept per queue for a while.

A queue keeps its finished tasks for ``keep_finished_seconds`` (``shardq queue set Q
--keep-finished 7d``; 0, the default, keeps none). While it does, every task of it that
finishes — succeeded, dead-lettered, cancelled — leaves one row in ``shardq_history``, and every
failed attempt that is retried leaves one row in ``shardq_attempts`` (migration 0008).
:func:`shardq.operations.task_status` reads a task's state now by id, wherever it is (with
:func:`parse_task_id`); :func:`page_plan` lists a queue's finished tasks; :func:`shardq.maintenance.pruning.prune_history` removes rows past their queue's
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
      the worker, and a start is shown as the end minus it."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from shardq.errors import InvalidInput
from shardq.models.history import FINISHED_STATES, FinishedTask
from shardq.operations import history as history_operations
from shardq.sessions.store import TaskStore
from shardq.sql.plan import Plan

#: rows per :func:`page_plan` by default, and at most
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


def page_plan(
    queue: str,
    *,
    state: str | None = None,
    since: dt.datetime | None = None,
    after: tuple[dt.datetime, uuid.UUID] | None = None,
    limit: int = PAGE_DEFAULT,
) -> Plan[list[FinishedTask]]:
    """A page of ``queue``'s finished tasks, newest first, as a plan for either session; the next
    page starts ``after`` the (finished_at, id) of the last row. ``state``: one of succeeded, dead,
    cancelled. Every argument is checked here (:class:`InvalidInput`), before anything is sent."""
    from shardq import validation

    validation.queue_name(queue)
    if state is not None and state not in FINISHED_STATES:
        raise InvalidInput(f"state must be one of {', '.join(FINISHED_STATES)}, got {state!r}")
    if since is not None and since.tzinfo is None:
        raise InvalidInput("since must be an aware datetime")
    limit = validation.positive_int(limit, "limit", maximum=PAGE_MAX)
    return history_operations.history_list(queue, state=state, since=since, after=after, limit=limit)


# -- the dashboard's finished tab -------------------------------------------------------------------
#: rows of history one finished page reads at most when a filter other than ``since`` is given
SCAN_FILTERED = 500


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class FinishedPage:
    """One page of a queue's finished tasks (newest first): the tasks (``result`` is not read),
    the cursor of the next page (None: the scan reached the end), and how many rows it read."""

    tasks: list[FinishedTask]
    next: str | None
    scanned: int


def finished_cursor(finished_at: dt.datetime, task_id: uuid.UUID) -> str:
    """``micros_id``: the finish time as whole microseconds since 1970 (URL-safe), and the id."""
    return f"{(finished_at - _EPOCH) // dt.timedelta(microseconds=1)}_{task_id}"


def parse_finished_cursor(cursor: str) -> tuple[dt.datetime, uuid.UUID]:
    """The key a finished page's ``next`` names; InvalidInput for anything else."""
    try:
        micros, task_id = cursor.split("_")
        return _EPOCH + dt.timedelta(microseconds=int(micros)), uuid.UUID(task_id)
    except (ValueError, OverflowError):
        raise InvalidInput(f"not a page cursor: {cursor!r}") from None


def finished_page(
    store: TaskStore,
    queue: str,
    *,
    state: str | None = None,
    since: dt.datetime | None = None,
    error_text: str | None = None,
    after: str | None = None,
    limit: int = PAGE_DEFAULT,
) -> FinishedPage:
    """A page of ``queue``'s finished tasks for the dashboard, bounded like
    :func:`shardq.admin.browse.browse`.

    Guarantees: one scan of the queue's history index after the cursor, newest first, of at most
    ``limit`` rows, or :data:`SCAN_FILTERED` when ``state`` or ``error_text`` (case-insensitive,
    in the last error) is given: those are applied to what the scan read, so a page may hold fewer
    than ``limit`` tasks (even none) and a ``next`` to go on from. ``since`` bounds the scan's key
    (finished at or after it). Following ``next`` visits every matching row kept, once.

    Does not: count the matches, or read results (the task's page shows those). InvalidInput for
    a bad state, limit, filter or cursor, before anything is read."""
    from shardq import validation

    validation.queue_name(queue)
    if state is not None and state not in FINISHED_STATES:
        raise InvalidInput(f"state must be one of {', '.join(FINISHED_STATES)}, got {state!r}")
    if since is not None and since.tzinfo is None:
        raise InvalidInput("since must be an aware datetime")
    if error_text is not None and (not error_text or len(error_text) > 1000):
        raise InvalidInput("error_text must be between 1 and 1000 characters")
    limit = validation.positive_int(limit, "limit", maximum=PAGE_MAX)
    position = parse_finished_cursor(after) if after else None
    like = None
    if error_text is not None:
        like = "%" + error_text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    scan = limit if state is None and like is None else max(limit, SCAN_FILTERED)
    rows = store.run(
        history_operations.history_browse(
            {
                "queue": queue,
                "state": state,
                "error_like": like,
                "since": since,
                "after_at": position[0] if position else None,
                "after_id": position[1] if position else None,
                "scan": scan,
            }
        )
    )
    hits = [row for row in rows if row["hit"]]
    shown = hits[:limit]
    last = shown[-1] if len(hits) > limit else (rows[-1] if len(rows) >= scan else None)
    tasks = [FinishedTask.from_row({**row, "queue": queue, "result": None}) for row in shown]
    return FinishedPage(tasks, finished_cursor(last["finished_at"], last["id"]) if last else None, len(rows))
