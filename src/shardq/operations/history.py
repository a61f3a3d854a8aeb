"""Plans of the task-history statements (``sql/common/history.sql``): recording finished tasks and
failed attempts, reading a task's status by id, listing and pruning a queue's history.

Recording is only ever called for queues that keep finished tasks; the callers (the settler, the
reaper's failures, cancel) run it in the transaction of the statement that finished the task, for
the ids that statement removed. See :mod:`shardq.lifecycle.history`.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from shardq.arguments import task_name_of
from shardq.engine.base import Engine
from shardq.engine.common import notify_chunks
from shardq.error_text import storable
from shardq.models.history import AttemptRecord, FailedAttempt, Finished, FinishedTask, SucceededColumns, TaskStatus
from shardq.models.leases import Fenced, WholeClaim
from shardq.models.tasks import TaskState
from shardq.sql.plan import ENGINE, Atomically, Call, Plan


def outcome_notify(ids: Sequence[uuid.UUID]) -> Plan[None]:
    """Wake processes waiting for these tasks (:mod:`shardq.lifecycle.waiting`), at commit: PostgreSQL
    only, where waiters listen; elsewhere they poll and nothing is sent."""
    engine: Engine = yield ENGINE
    if not ids or not engine.supports_wakeups:
        return
    yield Call("outcome_notify", {"chunks": notify_chunks(ids)}, rows="none")


def history_record_dead(records: Sequence[Finished]) -> Plan[None]:
    """Write history rows for tasks just dead-lettered, from their dead-letter rows; wake their
    waiters at commit."""
    if not records:
        return
    yield from outcome_notify([r.id for r in records])
    yield Call(
        "history_record_dead",
        {
            "ids": [r.id for r in records],
            "tasks": [r.task for r in records],
            "run_seconds": [r.run_seconds for r in records],
        },
        rows="none",
    )


def history_record_cancelled(records: Sequence[Finished]) -> Plan[None]:
    """Write history rows for cancelled tasks of the queues that keep finished tasks (the
    statement reads the queues' settings itself); wake their waiters at commit."""
    if not records:
        return
    yield from outcome_notify([r.id for r in records])
    yield Call(
        "history_record_cancelled",
        {
            "ids": [r.id for r in records],
            "queues": [r.queue for r in records],
            "tasks": [r.task for r in records],
            "created_ats": [r.created_at for r in records],
            "attempts": [r.attempts for r in records],
            "errors": [storable(r.error) if r.error is not None else None for r in records],
            "dedupe_keys": [r.dedupe_key for r in records],
        },
        rows="none",
    )


def attempt_record_many(records: Sequence[FailedAttempt]) -> Plan[None]:
    """Write one row per failed attempt put back to retry."""
    if not records:
        return
    yield Call(
        "attempt_record_many",
        {
            "ids": [r.id for r in records],
            "attempts": [r.attempt for r in records],
            "queues": [r.queue for r in records],
            "run_seconds": [r.run_seconds for r in records],
            "errors": [storable(r.error) if r.error is not None else None for r in records],
        },
        rows="none",
    )


# -- finishing with a record --------------------------------------------------------------------


def ack_claims_recorded(
    claims: Sequence[WholeClaim], columns: SucceededColumns, *, notify: bool = False
) -> Plan[set[uuid.UUID]]:
    """Ack whole claims and record the tasks deleted, each claim one statement
    (:meth:`shardq.engine.Engine.ack_claims_kept`); ``columns`` in the order of the claims' keys.
    Returns the ids not deleted (their lease had passed on)."""
    engine: Engine = yield ENGINE
    lost: set[uuid.UUID] = yield from engine.ack_claims_kept(claims, columns, notify)
    return lost


def ack_keys_recorded(
    items: Sequence[Fenced],
    records: Sequence[Finished],
    closed_tokens: Sequence[uuid.UUID] = (),
    *,
    notify: bool = False,
) -> Plan[set[uuid.UUID]]:
    """Ack tasks by whole key and token and record those deleted, one statement
    (:meth:`shardq.engine.Engine.ack_keys_kept`). Returns the ids deleted."""
    engine: Engine = yield ENGINE
    done: set[uuid.UUID] = yield from engine.ack_keys_kept(items, {r.id: r for r in records}, closed_tokens, notify)
    return done


def removed_recorded(
    remove: Callable[[], Plan[set[uuid.UUID]]], record: Callable[[set[uuid.UUID]], Plan[None]]
) -> Plan[set[uuid.UUID]]:
    """Run ``remove()`` (a fenced retry or dead-letter; returns the ids it changed), then
    ``record(ids)``, in one transaction. Returns the ids changed."""

    def body() -> Plan[set[uuid.UUID]]:
        done = yield from remove()
        yield from record(done)
        return done

    done: set[uuid.UUID] = yield Atomically(body)
    return done


# -- who listens for outcomes (shardq.lifecycle.waiting) ----------------------------------------------------


def outcome_listener_seen(listener_id: uuid.UUID) -> Plan[None]:
    yield Call("outcome_listener_seen", {"id": listener_id}, rows="none")


def outcome_listener_gone(listener_id: uuid.UUID, stale_seconds: float) -> Plan[None]:
    yield Call("outcome_listener_gone", {"id": listener_id, "stale_seconds": stale_seconds}, rows="none")


def outcome_listeners_present(fresh_seconds: float) -> Plan[bool]:
    """Whether a process listened for outcome notifications within ``fresh_seconds``."""
    row = yield Call("outcome_listeners_present", {"fresh_seconds": fresh_seconds}, rows="one")
    return bool(row and row["present"])


def history_dedupe_recent(queue: str, windows: Sequence[tuple[str, float]]) -> Plan[set[str]]:
    """The keys of ``windows`` ((dedupe key, seconds) each) whose task of ``queue`` finished within
    its seconds, as the history keeps them (``dedupe_for``)."""
    rows = yield Call(
        "history_dedupe_recent", {"queue": queue, "keys": [k for k, _ in windows], "seconds": [s for _, s in windows]}
    )
    return {row["dedupe_key"] for row in rows}


def task_status(task_id: uuid.UUID) -> Plan[TaskStatus]:
    """The state of ``task_id`` now: from the tasks table when it is live, else from the history,
    else from the dead letters, else ``unknown``. One statement (``task_status_read``): one
    round trip of at most four primary-key reads, so a loaded machine has one chance to delay it,
    not four (figures: docs/lifecycle.md)."""
    rows = yield Call("task_status_read", {"id": task_id})
    found: dict[str, dict] = {}
    failed: list[AttemptRecord] = []
    durable: list[dict] = []
    for r in rows:
        if r["source"] == "durable":
            durable.append(r)
        elif r["source"] == "attempt":
            failed.append(
                AttemptRecord(r["attempts"], r["finished_at"], r["run_seconds"], TaskState.FAILED, r["last_error"])
            )
        else:
            found[r["source"]] = r
    failed.sort(key=lambda a: a.attempt)
    live = found.get("task")
    if live is not None:
        return _durable_status(_live_status(live, failed), durable) if durable else _live_status(live, failed)
    row = found.get("history")
    if row is not None:
        done = FinishedTask.from_row(row)
        final = AttemptRecord(done.attempts, done.finished_at, done.run_seconds, done.state, done.last_error)
        attempts = [a for a in failed if a.attempt != done.attempts] + ([final] if done.attempts > 0 else [])
        return TaskStatus(
            done.id,
            done.state,
            done.queue,
            done.task,
            done.created_at,
            done.attempts,
            finished_at=done.finished_at,
            last_error=done.last_error,
            result=done.result,
            history=tuple(attempts),
        )
    dead = found.get("dead")
    if dead is not None:
        final = AttemptRecord(dead["attempts"], dead["finished_at"], None, TaskState.DEAD, dead["last_error"])
        attempts = [a for a in failed if a.attempt != dead["attempts"]] + [final]
        return TaskStatus(
            str(task_id),
            TaskState.DEAD,
            dead["queue"],
            task_name_of(dead["payload"]),
            dead["created_at"],
            dead["attempts"],
            finished_at=dead["finished_at"],
            last_error=dead["last_error"],
            history=tuple(attempts),
        )
    return TaskStatus(str(task_id), TaskState.UNKNOWN)


def _live_status(row: dict, failed: list[AttemptRecord]) -> TaskStatus:
    state = row["state"]
    attempt = None
    if state == TaskState.LEASED:
        shown, attempt = TaskState.RUNNING, row["attempts"]
    elif row["backlogged"] or state == TaskState.SCHEDULED:
        # A task put back by a failed attempt waits with its error text; one that never ran
        # waits for its delay or its key.
        failed_before = row["attempts"] > 0 and row["last_error"] is not None
        shown = TaskState.RETRYING if failed_before else TaskState.SCHEDULED
    else:
        shown = TaskState.READY
    return TaskStatus(
        str(row["id"]),
        shown,
        row["queue"],
        task_name_of(row["payload"]),
        row["created_at"],
        row["attempts"],
        attempt=attempt,
        run_at=row["exec_time"] if shown != TaskState.RUNNING else None,
        last_error=row["last_error"],
        history=tuple(failed),
    )


def _durable_status(status: TaskStatus, rows: list[dict]) -> TaskStatus:
    """A live durable task's status with its progress, and ``waiting`` (with the signal's name)
    while it is parked on a wait (docs/durable.md)."""
    progress = next((r["result"] for r in rows if r["attempts"] == -1), None)
    waits = [
        r["task"] for r in rows if r["attempts"] >= 0 and r["result"] is None and r["task"].startswith(WAIT_STEP_PREFIX)
    ]
    if waits and status.state in ("scheduled", "retrying"):
        return replace(status, state="waiting", progress=progress, waiting_for=waits[-1][len(WAIT_STEP_PREFIX) :])
    return replace(status, progress=progress)


#: how a wait's step is named (the wait steps of shardq.operations.durable)
WAIT_STEP_PREFIX = "shardq:wait:"


def history_list(
    queue: str, *, state: str | None, since: dt.datetime | None, after: tuple[dt.datetime, uuid.UUID] | None, limit: int
) -> Plan[list[FinishedTask]]:
    """A page of ``queue``'s finished tasks, newest first, after the keyset ``after``
    ((finished_at, id) of the last row of the previous page)."""
    rows = yield Call(
        "history_list",
        {
            "queue": queue,
            "state": state,
            "since": since,
            "after_at": after[0] if after else None,
            "after_id": after[1] if after else None,
            "limit": limit,
        },
    )
    return [FinishedTask.from_row(row) for row in rows]


def history_prune(queue: str, keep_seconds: float, limit: int) -> Plan[int]:
    """Delete up to ``limit`` of ``queue``'s history rows older than ``keep_seconds``."""
    rows = yield Call("history_prune", {"queue": queue, "keep_seconds": keep_seconds, "limit": limit})
    return len(rows)


def attempts_prune(queue: str, keep_seconds: float, limit: int) -> Plan[int]:
    """Delete up to ``limit`` of ``queue``'s failed-attempt rows older than ``keep_seconds``."""
    rows = yield Call("attempts_prune", {"queue": queue, "keep_seconds": keep_seconds, "limit": limit})
    return len(rows)


def history_browse(params: dict[str, Any]) -> Plan[list[dict[str, Any]]]:
    """One bounded scan of a queue's history for the dashboard's finished tab: at most
    ``params["scan"]`` rows, newest first, each with ``hit`` (it matches the filters)."""
    rows = yield Call("history_browse", params)
    return list(rows)
