"""Pieces the engines' operations share: the rank parameters, the parallel arrays of the
statements that name tasks by fenced key, a depth row's shape, and the plans of the statements
both engines send the same way (the claim of one bucket, its promotion, the ack by key)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from shardq.models.history import Finished, SucceededColumns
from shardq.models.leases import Fenced
from shardq.models.tasks import MAX_ATTEMPTS_DEFAULT, RANK_BACKLOG, RANK_SCHEDULED, ClaimedTask, NewTask
from shardq.sql.plan import Call, Plan

#: The ranks of scheduled and backlogged tasks, as every statement that tells them apart takes them.
RANKS: dict[str, Any] = {"scheduled_rank": RANK_SCHEDULED, "backlog_rank": RANK_BACKLOG}

#: The oldest ready task of a (queue, bucket) is looked for among this many priorities (one index
#: descent each); with more priorities in use in one bucket its age is a lower bound.
STATS_PRIORITIES_MAX = 32

# Optional task columns and the value that means "not set" (what the statements' coalesce supplies).
_OPTIONAL_DEFAULTS: dict[str, Any] = {
    "delays": None,
    "run_ats": None,
    "max_attempts": None,
    "dedupe_keys": None,
    "priorities": 0,
    "exclusive_keys": None,
}


def task_arrays(tasks: Sequence[NewTask], ids: Sequence[uuid.UUID], *, compact: bool = False) -> dict[str, Any]:
    """The parallel arrays of the task_insert_* statements. With ``compact``, an optional column
    no task sets is sent as NULL instead of an array of defaults: multi-argument unnest pads it
    with NULLs, and most batches then carry just ids and payloads."""
    arrays: dict[str, list | None] = {
        "ids": list(ids),
        "payloads": [t.payload for t in tasks],
        "delays": [t.delay for t in tasks],
        "run_ats": [t.run_at for t in tasks],
        "max_attempts": [t.max_attempts for t in tasks],
        "dedupe_keys": [t.dedupe_key for t in tasks],
        "priorities": [t.priority for t in tasks],
        "exclusive_keys": [t.exclusive_key for t in tasks],
    }
    if compact:
        for name, default in _OPTIONAL_DEFAULTS.items():
            if not any(value != default for value in arrays[name] or ()):
                arrays[name] = None
    return {**arrays, **RANKS, "max_attempts_default": MAX_ATTEMPTS_DEFAULT}


def key_arrays(items: Sequence[Fenced]) -> dict[str, Any]:
    """The parallel arrays of the statements that name leased tasks by whole key and token."""
    # "states": a fenced row is always leased. Both engines' statements join the state as an input
    # column: CockroachDB's so the optimizer can compute the shard (sql/cockroachdb/tasks.sql),
    # PostgreSQL's so that the planner does not size the leased rows from the column's statistics
    # (sql/postgresql/tasks.sql, task_ack_many).
    return {
        "states": ["leased"] * len(items),
        "buckets": [f.key.bucket for f in items],
        "queues": [f.key.queue for f in items],
        "ranks": [f.key.rank for f in items],
        "exec_times": [f.key.exec_time for f in items],
        "ids": [f.key.id for f in items],
        "tokens": [f.token for f in items],
        **RANKS,
    }


def depth_row(
    queue: str,
    bucket: int,
    cap: int,
    *,
    ready: int,
    due_scheduled: int,
    scheduled: int,
    leased: int,
    expired: int,
    leased_capped: bool,
    backlog: int,
    oldest: list,
    waiting: int = 0,
    backlog_capped: bool | None = None,
) -> dict[str, Any]:
    """One row of :meth:`shardq.engine.Engine.depth`. ``leased`` counts every leased task; the
    row's ``leased`` is those whose lease still runs, ``expired`` the others. ``waiting``: workflow
    steps waiting for their parents (apart from ``backlog``, an exclusive key's)."""
    known = [t for t in oldest if t is not None]
    return {
        "queue": queue,
        "bucket": bucket,
        "ready": ready + due_scheduled,
        "scheduled": scheduled,
        "leased": max(0, leased - expired),
        "expired": expired,
        "backlog": backlog,
        "waiting": waiting,
        "oldest_ready": min(known) if known else None,
        "ready_capped": ready >= cap or due_scheduled >= cap,
        "scheduled_capped": scheduled >= cap,
        "leased_capped": leased_capped,
        "expired_capped": leased_capped,
        "backlog_capped": backlog >= cap if backlog_capped is None else backlog_capped,
        "waiting_capped": waiting >= cap if backlog_capped is None else backlog_capped,
    }


# -- statement plans both engines' operations use ------------------------------------------------


def _claim_order(row: dict[str, Any]) -> tuple:
    return row["rank"], row["exec_time"], row["id"].int  # UUIDs compared as integers, in C


def claim_batch(bucket: int, queue: str, limit: int, lease_seconds: float) -> Plan[list[ClaimedTask]]:
    """Lease up to ``limit`` ready tasks of ``queue`` in ``bucket`` under one fresh token
    (``task_claim_batch``); returned in key order: rank (priority), exec_time, id."""
    token = uuid.uuid4()
    rows = yield Call(
        "task_claim_batch",
        {"bucket": bucket, "queue": queue, "limit": limit, "lease_seconds": lease_seconds, "token": token, **RANKS},
        binary=True,
    )
    # RETURNING follows no order; hand tasks out in key order (a claim's first and last bound its rows).
    rows.sort(key=_claim_order)
    return [ClaimedTask.from_row(row, token) for row in rows]


def promote_due_one(bucket: int, queue: str, limit: int) -> Plan[int]:
    """Make due scheduled tasks of (``bucket``, ``queue``) ready; returns how many."""
    rows = yield Call("task_promote_due", {"bucket": bucket, "queue": queue, "limit": limit, **RANKS})
    return len(rows)


def read_steps_acked(task_ids: Sequence[uuid.UUID]) -> Plan[list[tuple]]:
    """The workflow steps still running of tasks an ack just deleted (``workflow_steps_acked``),
    each as a binary tuple: (workflow id, step, child kinds, only child, task id, sole child's
    task id, only child's shard)."""
    rows = yield Call("workflow_steps_acked", {"task_ids": list(task_ids)}, binary=True, tuples=True)
    return rows


def ack_many(items: Sequence[Fenced], closed_tokens: Iterable[uuid.UUID] = ()) -> Plan[set[uuid.UUID]]:
    """Delete finished leased tasks by whole key and token (``task_ack_many``, CockroachDB's: one
    row per task deleted; PostgreSQL's names only those it did not delete,
    :meth:`~shardq.engine.postgresql_ops.PostgreSQLOperations.ack_keys`); drop the lease records
    of ``closed_tokens`` where the engine keeps them. Returns the ids deleted."""
    params = key_arrays(items)
    params["closed_tokens"] = list(closed_tokens)
    # Fenced by whole key + lease token: safe to re-send after 40003 (see shardq.sessions.rules).
    # One id per deleted row: a binary tuple costs the client a fraction of a text dict per row.
    rows = yield Call("task_ack_many", params, resend_ambiguous=True, binary=True, tuples=True)
    return {row[0] for row in rows}


#: task ids per outcome notification: 36 characters and a comma each, under NOTIFY's 8000 bytes
NOTIFY_IDS_PER_CHUNK = 200


def notify_chunks(ids: Iterable[uuid.UUID]) -> list[str]:
    """Task ids joined by commas in chunks that fit one NOTIFY payload (shardq.lifecycle.waiting)."""
    text = [str(i) for i in ids]
    return [",".join(text[i : i + NOTIFY_IDS_PER_CHUNK]) for i in range(0, len(text), NOTIFY_IDS_PER_CHUNK)]


def record_arrays(ids: Sequence[uuid.UUID], records: Mapping[uuid.UUID, Finished]) -> dict[str, list]:
    """The history arrays of the kept acks (``task_ack_*_kept``), in the order of ``ids``."""
    rows = [records[i] for i in ids]
    return {
        "tasks": [r.task for r in rows],
        "run_seconds": [r.run_seconds for r in rows],
        "results": [r.result for r in rows],
    }


def column_arrays(columns: SucceededColumns, start: int, stop: int, *, pad_nulls: bool) -> dict[str, list]:
    """The history arrays of the kept acks for keys ``start:stop`` of ``columns``. With
    ``pad_nulls`` (PostgreSQL: ``unnest`` of several arrays pads the shorter ones with NULLs), a
    column that is NULL for every task is sent empty: most tasks keep no result, and a plain
    handler's payload names no task."""
    tasks, results = columns.tasks[start:stop], columns.results[start:stop]
    if pad_nulls:
        if results.count(None) == len(results):
            results = []
        if tasks.count(None) == len(tasks):
            tasks = []
    return {"tasks": tasks, "run_seconds": columns.run_seconds[start:stop], "results": results}


def ack_many_kept(
    items: Sequence[Fenced],
    records: Mapping[uuid.UUID, Finished],
    closed_tokens: Iterable[uuid.UUID] = (),
    notify: bool = False,
) -> Plan[set[uuid.UUID]]:
    """:func:`ack_many` recording each task deleted in the history, one statement
    (``task_ack_many_kept``); ``notify``: wake outcome waiters (engines that have them)."""
    params = key_arrays(items)
    return (yield from _ack_many_kept(params, record_arrays(params["ids"], records), closed_tokens, notify))


def ack_many_kept_columns(
    items: Sequence[Fenced], columns: SucceededColumns, closed_tokens: Iterable[uuid.UUID] = (), notify: bool = False
) -> Plan[set[uuid.UUID]]:
    """:func:`ack_many_kept` with the history columns in the order of ``items``."""
    params = key_arrays(items)
    return (
        yield from _ack_many_kept(params, column_arrays(columns, 0, len(items), pad_nulls=False), closed_tokens, notify)
    )


def _ack_many_kept(
    params: dict[str, Any], arrays: dict[str, list], closed_tokens: Iterable[uuid.UUID], notify: bool
) -> Plan[set[uuid.UUID]]:
    params["closed_tokens"] = list(closed_tokens)
    params.update(arrays)
    params["notify"] = notify_chunks(params["ids"]) if notify else []
    # Fenced by whole key + lease token: safe to re-send after 40003 (a re-sent insert replaces
    # the same history rows; see shardq.sessions.rules).
    rows = yield Call("task_ack_many_kept", params, resend_ambiguous=True)
    return {row["id"] for row in rows}
