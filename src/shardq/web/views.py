"""What the web dashboard shows and does, as plain data: one function per page or action, each
taking a :class:`~shardq.sessions.store.TaskStore` and returning JSON-ready dicts.

Guarantees:

* Reads go through the same functions as ``shardq stats`` and the CLI (:func:`shardq.admin.stats.collect_plan`,
  :func:`shardq.admin.actions.dead_list`, :func:`shardq.admin.actions.task_show`, …), so every count is bounded
  the same way (per (queue, bucket) caps, sampled buckets above ``max_buckets``) and marked the
  same way when it is not exact (``accuracy``). Nothing here counts a table without a limit.
* An unknown queue or task raises :class:`NotFound` before anything is written; bad input
  raises :class:`shardq.errors.InvalidInput` before anything is written (the admin functions
  validate first). So an action the dashboard refuses leaves the database as it was.
* A task's payload is returned in full up to :data:`PAYLOAD_SHOWN_MAX` bytes: as text when it is
  UTF-8 without NUL bytes, else (``binary``) as a hex dump; lists show a preview of
  :data:`PAYLOAD_PREVIEW` characters (or bytes in hex). The full size is always given, and
  whether something was cut. Escaping is the templates' job (autoescape) and JSON's.
* Dead letters are listed in keyset pages (``after``: an opaque cursor from the previous page's
  ``next``), each one index seek however deep.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

from shardq import operations, validation
from shardq.admin import actions as admin
from shardq.admin.stats import StatsOptions, collect_plan
from shardq.errors import InvalidInput
from shardq.lifecycle import history
from shardq.models.queues import QueueSettings
from shardq.models.stats import Accuracy, QueueStats, Stats
from shardq.models.tasks import TaskInfo
from shardq.operations import browse as browse_operations
from shardq.operations import workflow_lookup
from shardq.sessions.store import TaskStore
from shardq.web import registry_views
from shardq.workflows import steps as workflows

#: Characters of a payload shown in a list (the rest is cut, and said to be).
PAYLOAD_PREVIEW = 200
#: Bytes of a payload shown on a task's page and in its API answer (the rest is cut, and said to be).
PAYLOAD_SHOWN_MAX = 64 * 1024
#: Bytes per line of a hex dump.
HEX_WIDTH = 16
#: Dead tasks listed at most per page / API call.
DEAD_LIMIT_MAX = 1000
DEAD_LIMIT_DEFAULT = 100


class NotFound(LookupError):
    """No such queue or task (the message says which)."""


# -- helpers ------------------------------------------------------------------------------------
def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _as_text(payload: bytes) -> str | None:
    """The payload as text if it is UTF-8 without NUL bytes (a cut multi-byte character at the
    end is dropped), else None."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason != "unexpected end of data" or len(payload) - exc.start > 3:
            return None
        text = payload[: exc.start].decode("utf-8")
    return None if "\x00" in text else text


def hex_dump(payload: bytes) -> str:
    """Offset, bytes in hex and the printable ASCII of each :data:`HEX_WIDTH` bytes, one line each."""
    lines = []
    for start in range(0, len(payload), HEX_WIDTH):
        chunk = payload[start : start + HEX_WIDTH]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{start:08x}  {hexes:<{HEX_WIDTH * 3 - 1}}  {ascii_}")
    return "\n".join(lines)


def payload_view(payload: bytes, limit: int = PAYLOAD_SHOWN_MAX) -> dict[str, Any]:
    """The payload for a task's page: ``text`` (None when binary) or ``hex`` (None when text) of
    its first ``limit`` bytes; ``truncated`` says whether something was cut, ``bytes`` is the
    full size. A whole payload that is JSON also comes as ``json`` (indented); an app task's
    (``{"task": NAME, "args": {...}}``, :mod:`shardq.arguments`) as ``app_task``: its name and each
    argument as indented JSON (tagged values such as datetimes shown as stored)."""
    shown = payload[:limit]
    text = _as_text(shown)
    parsed, app_task = _json_of(text) if text is not None and len(payload) <= limit else (None, None)
    return {
        "binary": text is None,
        "text": text,
        "hex": hex_dump(shown) if text is None else None,
        "bytes": len(payload),
        "truncated": len(payload) > limit,
        "json": parsed,
        "app_task": app_task,
    }


def _json_of(text: str) -> tuple[str | None, dict[str, Any] | None]:
    try:
        value = json.loads(text)
    except ValueError:
        return None, None
    if not isinstance(value, (dict, list)):
        return None, None
    app_task = None
    if (
        isinstance(value, dict)
        and set(value) == {"task", "args"}
        and isinstance(value["task"], str)
        and isinstance(value["args"], dict)
    ):
        app_task = {
            "name": value["task"],
            "arguments": [
                {"name": str(k), "json": json.dumps(v, indent=2, ensure_ascii=False)} for k, v in value["args"].items()
            ],
        }
    return json.dumps(value, indent=2, ensure_ascii=False), app_task


def payload_preview(payload: bytes, limit: int = PAYLOAD_PREVIEW) -> dict[str, Any]:
    """The payload for a list: text cut to ``limit`` characters, or for a binary payload the
    hex of its first ``limit // 4`` bytes. ``truncated`` says whether something was cut;
    ``bytes`` is the full size."""
    text = _as_text(payload[: limit * 4])
    if text is None:
        head = payload[: limit // 4]
        return {"text": head.hex(" "), "binary": True, "truncated": len(payload) > len(head), "bytes": len(payload)}
    truncated = len(text) > limit or len(payload) > limit * 4
    return {"text": text[:limit], "binary": False, "truncated": truncated, "bytes": len(payload)}


def dead_cursor(died_at: dt.datetime, task_id: Any) -> str:
    """The cursor of the page after a dead task (its death time and id)."""
    return f"{died_at.isoformat()}_{task_id}"


def _parse_cursor(cursor: str) -> tuple[dt.datetime, uuid.UUID]:
    at, _, task_id = cursor.rpartition("_")
    try:
        died_at = dt.datetime.fromisoformat(at)
        parsed = uuid.UUID(task_id)
    except ValueError:
        raise InvalidInput(f"not a page cursor: {cursor!r}") from None
    if died_at.tzinfo is None:
        raise InvalidInput(f"not a page cursor: {cursor!r}")
    return died_at, parsed


def known_queue(store: TaskStore, queue: str) -> QueueSettings:
    """The queue's settings; :class:`NotFound` for a name that is not a queue (malformed names
    included: no queue can have one)."""
    try:
        settings = store.run(admin.queue_show_plan(queue))
    except InvalidInput:
        settings = None
    if settings is None:
        raise NotFound(f"no queue named {queue!r}")
    return settings


def skew(queue: QueueStats, cap: int) -> dict[str, Any]:
    """Due depth (ready + leased + expired) per counted bucket and max/mean of it (1.0: even;
    None: empty or unknown).

    A bucket whose count reached ``cap`` holds at least what was counted, so its true depth is
    unknown. Then the figure is not exact (``exact`` False) and ``max_over_mean`` is the lowest
    skew the counts allow: the capped buckets as deep as the deepest bucket seen and no deeper,
    the others as counted (any deeper capped bucket only raises the true skew). When that bound
    says nothing (1.0 or less, e.g. every bucket capped) it is None: the page says the skew is
    unknown rather than claim the buckets are even. ``capped_buckets`` counts the capped ones."""
    depth: dict[int, int] = {}
    capped: set[int] = set()
    for b, d in sorted(queue.per_bucket.items()):
        depth[b] = d.ready + d.leased + d.expired
        if max(d.ready, d.leased, d.expired) >= cap:
            capped.add(b)
    peak = max(depth.values(), default=0)
    worst = max(depth, key=lambda b: depth[b]) if peak else None
    figure: float | None = None
    if peak and not capped:
        figure = round(peak * len(depth) / sum(depth.values()), 2)
    elif peak:
        exact_sum = sum(d for b, d in depth.items() if b not in capped)
        bound = peak * len(depth) / (exact_sum + len(capped) * peak)
        figure = round(bound, 2) if bound > 1.005 else None
    return {
        "max_over_mean": figure,
        "exact": not capped,
        "capped_buckets": len(capped),
        "bucket_cap": cap,
        "worst_bucket": worst,
        "peak": peak,
    }


def _queue_json(name: str, q: QueueStats, settings: QueueSettings | None) -> dict[str, Any]:
    window = q.window_s
    out: dict[str, Any] = {
        "name": name,
        "ready": q.ready,
        "scheduled": q.scheduled,
        "leased": q.leased,
        "expired": q.expired,
        "backlog": q.backlog,
        "dead": q.dead,
        "accuracy": {c: q.accuracy_of(c).value for c in ("ready", "scheduled", "leased", "expired", "backlog", "dead")},
        "oldest_ready_age_s": q.oldest_ready_age_s,
        "enqueue_rate": round(q.enqueue_rate, 3),
        "ack_rate": round(q.activity.acked / window, 3) if window > 0 else 0.0,
        "completion_rate": round(q.completion_rate, 3),
        "failure_rate": round(q.failure_rate, 3),
        "lead_time_s": None if q.lead_time_s is None else round(q.lead_time_s, 1),
        "lead_time_by_duration_s": None if q.lead_time_by_duration_s is None else round(q.lead_time_by_duration_s, 1),
        "paused_enqueue": bool(settings and settings.paused_enqueue),
        "paused_dequeue": bool(settings and settings.paused_dequeue),
        "concurrency_limit": q.concurrency_limit,
        "slots_in_use": q.slots_in_use,
        "rate_limit": q.rate_limit,
        "throttled": q.activity.throttled,
    }
    return out


def _stats_header(stats: Stats) -> dict[str, Any]:
    return {
        "as_of": _iso(stats.as_of),
        "dialect": stats.dialect,
        "buckets": stats.buckets,
        "buckets_counted": len(stats.buckets_counted),
        "bucket_cap": stats.bucket_cap,
        "follower_read": stats.follower_read,
        "window_s": round(stats.window_s, 1),
    }


# -- reads --------------------------------------------------------------------------------------
def overview(store: TaskStore, options: StatsOptions | None = None) -> dict[str, Any]:
    """Every queue: depth (ready, scheduled, leased (running), expired, backlog, dead, each with its accuracy), the
    oldest due task's age, enqueue / ack / completion / failure rates, lead time and whether it
    is paused. One bounded stats snapshot (:func:`shardq.admin.stats.collect_plan`) plus the settings list."""
    stats = store.run(collect_plan((options or StatsOptions()).validate()))
    settings = {s.name: s for s in store.run(operations.queue_list())}
    return {
        **_stats_header(stats),
        "queues": [_queue_json(name, q, settings.get(name)) for name, q in sorted(stats.queues.items())],
    }


def queue_detail(store: TaskStore, queue: str, options: StatsOptions | None = None) -> dict[str, Any]:
    """One queue: its settings, its numbers as in :func:`overview`, its depth per counted bucket
    and the skew (max/mean due depth over buckets). :class:`NotFound` for an unknown queue."""
    settings = known_queue(store, queue)
    stats = store.run(collect_plan((options or StatsOptions()).validate()))
    q = stats.queues.get(queue, QueueStats())
    cap = stats.bucket_cap if stats.bucket_cap is not None else (options or StatsOptions()).bucket_cap
    per_bucket = {b: q.per_bucket.get(b) for b in stats.buckets_counted}
    return {
        **_stats_header(stats),
        "queue": _queue_json(queue, q, settings),
        "settings": settings.as_json(),
        "per_bucket": [
            {
                "bucket": b,
                "ready": d.ready,
                "scheduled": d.scheduled,
                "leased": d.leased,
                "expired": d.expired,
                "backlog": d.backlog,
                "capped": max(d.ready, d.leased, d.expired) >= cap,
            }
            if d is not None
            else {"bucket": b, "ready": 0, "scheduled": 0, "leased": 0, "expired": 0, "backlog": 0, "capped": False}
            for b, d in sorted(per_bucket.items())
        ],
        "skew": skew(q, cap),
    }


def dead_detail(
    store: TaskStore, queue: str, *, limit: int = DEAD_LIMIT_DEFAULT, after: str | None = None, cap: int = 10_000
) -> dict[str, Any]:
    """One page of a queue's dead tasks, oldest death first (id, attempts, error, times, payload
    preview): the first ``limit``, or those after the cursor ``after`` (a previous page's
    ``next``; None on the last page). ``dead`` is how many there are, counted up to ``cap``
    (``accuracy`` ``at_least`` when it reached it). :class:`NotFound` for an unknown queue;
    InvalidInput for a malformed cursor."""
    known_queue(store, queue)
    validation.positive_int(limit, "limit", maximum=DEAD_LIMIT_MAX)
    position = _parse_cursor(after) if after else None
    tasks = admin.dead_list(store, queue, limit=limit + 1, after=position)  # one more: is there a next page?
    more = len(tasks) > limit
    tasks = tasks[:limit]
    count = store.stats_dead_count(queue, cap)
    last = tasks[-1] if tasks else None
    return {
        "queue": queue,
        "dead": count,
        "accuracy": (Accuracy.AT_LEAST if count >= cap else Accuracy.EXACT).value,
        "limit": limit,
        "after": after,
        "next": dead_cursor(last.died_at, last.id) if more and last is not None and last.died_at else None,
        "tasks": [
            {
                "id": t.id,
                "attempts": t.attempts,
                "last_error": t.last_error,
                "died_at": _iso(t.died_at),
                "created_at": _iso(t.created_at),
                "payload": payload_preview(t.payload),
            }
            for t in tasks
        ],
    }


def _task_json(task: TaskInfo) -> dict[str, Any]:
    return {
        "id": task.id,
        "queue": task.queue,
        "state": task.state,
        "attempts": task.attempts,
        "max_attempts": task.max_attempts,
        "priority": task.priority,
        "exclusive_key": task.exclusive_key,
        "dedupe_key": task.dedupe_key,
        "created_at": _iso(task.created_at),
        "run_at": _iso(task.exec_time),
        "lease_expires_at": _iso(task.lease_expires_at),
        "died_at": _iso(task.died_at),
        "last_error": task.last_error,
        "payload": payload_view(task.payload),
    }


def task_detail(store: TaskStore, task_id: str) -> dict[str, Any]:
    """One task by id (state, attempts, lease expiry, run/creation/death times, last error,
    payload, see :func:`payload_view`), from the tasks table or the dead letters, with its
    ``lifecycle`` (:func:`task_status`); a finished task its queue keeps comes from the history,
    without payload; ``workflow`` (``{"id", "step"}``) when the task is a workflow's step.
    :class:`NotFound` when none holds it, and for a malformed id."""
    try:
        task = admin.task_show(store, task_id)
        status = store.run(operations.task_status(history.parse_task_id(task_id)))
    except InvalidInput:
        task, status = None, None
    if task is None:
        if status is None or status.state == "unknown":
            raise NotFound(f"no task {task_id!r} (finished in a queue that keeps nothing, or never there)")
        # Finished and kept in the history (shardq.lifecycle.history): no payload is kept there.
        return {
            "id": status.id,
            "queue": status.queue,
            "state": status.state,
            "attempts": status.attempts,
            "max_attempts": None,
            "priority": None,
            "exclusive_key": None,
            "dedupe_key": None,
            "created_at": _iso(status.created_at),
            "run_at": None,
            "lease_expires_at": None,
            "died_at": None,
            "last_error": status.last_error,
            "payload": None,
            "worker": None,
            "lifecycle": status.as_json(),
            "workflow": store.run(workflow_lookup.task_workflow(status.id)),
        }
    shown = _task_json(task)
    shown["worker"] = _worker_holding(store, task)
    shown["workflow"] = store.run(workflow_lookup.task_workflow(task.id))
    if status is not None:
        shown["lifecycle"] = status.as_json()
    return shown


def task_status(store: TaskStore, task_id: str) -> dict[str, Any]:
    """A task's state now and its attempts (:func:`shardq.operations.task_status`): ``unknown`` for an id
    shardq knows nothing of; a malformed id is :class:`shardq.errors.InvalidInput`."""
    return store.run(operations.task_status(history.parse_task_id(task_id))).as_json()


def _worker_holding(store: TaskStore, task: TaskInfo) -> dict[str, Any] | None:
    """The registered worker that holds a leased task (by its claim's lease token), else None."""
    if task.state != "leased":
        return None
    row = store.run(browse_operations.task_browse_rows([uuid.UUID(task.id)])).get(uuid.UUID(task.id))
    return registry_views.worker_of(store, row["lease_token"]) if row else None


def workflow_status(store: TaskStore, workflow_id: str) -> dict[str, Any]:
    """A workflow's state and each step's (:mod:`shardq.workflows.steps`): ``unknown`` for an id shardq
    knows nothing of; a malformed id is :class:`shardq.errors.InvalidInput`."""
    return store.session.run(workflows.status_plan(workflow_id)).to_json()


# -- actions ------------------------------------------------------------------------------------
def set_paused(
    store: TaskStore, queue: str, paused: bool, *, enqueue: bool = True, dequeue: bool = True
) -> dict[str, Any]:
    """Pause (or resume) enqueue and/or dequeue of a known queue; returns its settings.
    :class:`NotFound` for an unknown queue (which is not created)."""
    known_queue(store, queue)
    if not enqueue and not dequeue:
        raise InvalidInput("nothing to pause or resume: enqueue and dequeue are both false")
    changed = store.run(admin.queue_set_plan(queue, admin.pause_changes(paused, enqueue=enqueue, dequeue=dequeue)))
    assert changed is not None
    return changed.as_json()


def dead_requeue(store: TaskStore, queue: str, ids: list[str] | None, *, all_tasks: bool) -> dict[str, Any]:
    """Requeue the given dead tasks of a known queue, or all of them (see
    :func:`shardq.admin.actions.dead_requeue`). Malformed ids raise InvalidInput before any is moved."""
    known_queue(store, queue)
    result = admin.dead_requeue(store, queue, ids, all_tasks=all_tasks)
    return {"requeued": result.requeued, "not_found_or_kept": result.not_found_or_kept}


def dead_purge(store: TaskStore, queue: str) -> dict[str, Any]:
    """Delete every dead task of a known queue (bounded batches); returns how many."""
    known_queue(store, queue)
    return {"purged": admin.dead_purge(store, queue)}


def cancel(store: TaskStore, task_id: str) -> dict[str, Any]:
    """Cancel one live task by id (see :func:`shardq.admin.actions.cancel_plan`). :class:`NotFound` when
    there is no such live task (a dead one is requeued or purged from its queue's page)."""
    try:
        result = store.run(admin.cancel_plan(admin.parse_cancel_ids([task_id])))
    except InvalidInput:
        raise NotFound(f"no task {task_id!r}") from None
    if not result.cancelled:
        raise NotFound(f"no live task {task_id!r} (finished, dead, cancelled or never there)")
    return {"cancelled": result.cancelled[0], "promoted": result.promoted}
