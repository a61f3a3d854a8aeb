"""Browsing a queue's live tasks by state, page by page, and acting on the tasks chosen: what the
dashboard's task list (``/queues/{queue}/tasks``) runs.

States (:data:`STATES`, members of :class:`shardq.models.tasks.TaskState`): ``ready``,
``scheduled`` (waiting for their time, a retry's backoff included; the stored state, so not the
backlog), ``running`` (leased with the lease live: held by a worker, its handler started or not;
the status's ``running`` also counts an expired lease, which the browser lists apart), ``expired``
(leased, the lease run out: the worker is likely gone) and ``backlog`` (waiting for an exclusive
key). Finished tasks are not here: the tasks table holds
live tasks only (dead letters have their own page).

Guarantees:

* A page costs a bounded read whatever the table's size: at most ``scan`` index entries per bucket
  (``scan`` is the page size, or :data:`SCAN_FILTERED` per bucket when a filter other than the
  ready state's priority is given, capped at :data:`SCAN_ROWS_MAX` in all), each bucket's scan one
  span of its key after the cursor (keyset paging: as fast on page 10,000 as on page 1). Running
  and expired tasks are read from the in-flight span (at most :data:`LEASED_CAP`; a page that hit
  the cap says so, ``capped``, and lists, filters and orders only those it read).
* Pages are in key order: ``asc`` is claim order (priority, then run time, then id), ``desc`` the
  reverse. The cursor (``next``) is the key where the next page starts; following ``next`` visits
  every task that matched and stayed in its state, once.
* Filters (priority, exclusive key, dedupe key, minimum age, text in the last error) are applied to
  what the scan read, so a selective filter does not make a page scan more: a page may come back
  with fewer than ``limit`` tasks (even none) and a ``next`` to continue from; ``scanned`` says how
  many keys it read.
* Actions name tasks by id and re-check their state in the statement: a task that was claimed,
  finished or cancelled meanwhile is left alone and reported as not changed.

Does not:

* count the matches (the queue page's bounded counts do that per state), nor keep a snapshot
  between pages: tasks claimed or enqueued between two pages may be missed or seen twice.
* show finished tasks, results or attempts' history (the task lifecycle's history, when kept,
  is a separate read)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shardq import validation
from shardq.errors import InvalidInput
from shardq.models.leases import Fenced
from shardq.models.tasks import BROWSE_STATES, RANK_BACKLOG, RANK_SCHEDULED, TaskKey, TaskState
from shardq.operations import browse as browse_operations
from shardq.sessions.store import TaskStore

#: The states a queue's tasks can be browsed by, as the dashboard names them.


ORDERS = ("asc", "desc")


LIMIT_DEFAULT = 50


LIMIT_MAX = 500


#: Keys scanned per bucket for one page when a filter is not on the key.
SCAN_FILTERED = 500


#: Keys scanned for one page in all buckets at most (the per-bucket scan shrinks to fit).
SCAN_ROWS_MAX = 16_000


#: Leased tasks read for the running and expired lists at most (in-flight work: concurrency).
LEASED_CAP = 10_000


#: Ids one action takes at most.
ACTION_IDS_MAX = 1000


_INT8_MIN, _INT8_MAX = -(2**63), 2**63 - 1


_TIME_MIN = dt.datetime(1, 1, 2, tzinfo=dt.UTC)


_TIME_MAX = dt.datetime(9999, 12, 30, tzinfo=dt.UTC)


_ID_MIN, _ID_MAX = uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)


@dataclass(frozen=True)
class Filters:
    """What a page keeps of what it scans (None: no condition). ``min_age_s``: created at least
    that many seconds ago; ``error_text``: appears in the last error, case-insensitively."""

    priority: int | None = None
    exclusive_key: str | None = None
    dedupe_key: str | None = None
    min_age_s: float | None = None
    error_text: str | None = None

    def validate(self) -> Filters:
        if self.priority is not None:
            validation.priority(self.priority)
        if self.min_age_s is not None:
            validation.non_negative_seconds(self.min_age_s, "minimum age")
        for name in ("exclusive_key", "dedupe_key", "error_text"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value or len(value) > 1000):
                raise InvalidInput(f"{name} must be between 1 and 1000 characters")
        return self

    def key_only(self, state: str) -> bool:
        """True when every condition is on the scanned key (then a page fills as it scans)."""
        rest = (self.exclusive_key, self.dedupe_key, self.min_age_s, self.error_text)
        return all(v is None for v in rest) and (self.priority is None or state == TaskState.READY)

    def params(self, now: dt.datetime) -> dict[str, Any]:
        like = None
        if self.error_text is not None:
            escaped = self.error_text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            like = f"%{escaped}%"
        return {
            "priority": self.priority,
            "exclusive_key": self.exclusive_key,
            "dedupe_key": self.dedupe_key,
            "created_before": None if self.min_age_s is None else now - dt.timedelta(seconds=self.min_age_s),
            "error_like": like,
        }


@dataclass(frozen=True)
class BrowsedTask:
    """One listed task (no payload: ``payload_bytes`` is its size; the task's page shows it)."""

    id: str
    queue: str
    state: str
    priority: int
    attempts: int
    max_attempts: int
    run_at: dt.datetime
    created_at: dt.datetime
    lease_expires_at: dt.datetime | None
    exclusive_key: str | None
    dedupe_key: str | None
    last_error: str | None
    payload_bytes: int


@dataclass(frozen=True)
class Page:
    """One page: the tasks, the cursor of the next page (None: the scan reached the end), how many
    keys the page read, and what it was asked. ``capped``: the running or expired list read
    :data:`LEASED_CAP` leased tasks and stopped there, so more may be leased than it lists."""

    tasks: list[BrowsedTask]
    next: str | None
    scanned: int
    state: str
    order: str
    limit: int
    filters: Filters = field(default_factory=Filters)
    capped: bool = False


@dataclass(frozen=True)
class ActionResult:
    """Ids changed, and ids not changed (gone, or no longer in a state the action applies to)."""

    changed: tuple[str, ...]
    unchanged: tuple[str, ...]


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _cursor_text(key: tuple[int, dt.datetime, uuid.UUID]) -> str:
    """``rank_microseconds_id``: the run time as whole microseconds since 1970 (UTC), so a cursor
    has only URL-safe characters (an ISO time's ``+`` would arrive as a space in a query string)."""
    micros = (key[1] - _EPOCH) // dt.timedelta(microseconds=1)
    return f"{key[0]}_{micros}_{key[2]}"


def parse_cursor(cursor: str) -> tuple[int, dt.datetime, uuid.UUID]:
    """The key a ``next`` cursor names; InvalidInput for anything else."""
    try:
        rank, micros, task_id = cursor.split("_")
        return int(rank), _EPOCH + dt.timedelta(microseconds=int(micros)), uuid.UUID(task_id)
    except (ValueError, OverflowError):
        raise InvalidInput(f"not a page cursor: {cursor!r}") from None


def _span(state: str, filters: Filters) -> tuple[str, int, int]:
    """The table state and the rank range of a browsable state's span."""
    if state == TaskState.READY:
        if filters.priority is not None:
            return TaskState.READY, filters.priority, filters.priority
        return TaskState.READY, _INT8_MIN, RANK_BACKLOG - 1
    if state == TaskState.SCHEDULED:
        return TaskState.SCHEDULED, RANK_SCHEDULED, RANK_SCHEDULED
    return TaskState.BACKLOG, RANK_BACKLOG, RANK_BACKLOG


def span_params(
    bucket_count: int,
    state: str,
    filters: Filters,
    position: tuple[int, dt.datetime, uuid.UUID] | None,
    descending: bool,
    limit: int,
) -> dict[str, Any]:
    """The span statement's parameters: the buckets, the state and rank range, the cursor and the
    keys to scan per bucket. The cursor is clamped into the rank range: PostgreSQL starts a B-tree
    scan from one bound per column and cannot tell which of ``rank >= rank_lo`` and the row
    comparison ``(rank, exec_time, id) > cursor`` is tighter, so a first page's cursor below the
    range (the lowest key) made it walk the ready span to reach the scheduled one (42,838 index
    pages for 16 buckets at 10M tasks instead of about 50)."""
    per_bucket = limit if filters.key_only(state) else max(limit, min(SCAN_FILTERED, SCAN_ROWS_MAX // bucket_count))
    table_state, rank_lo, rank_hi = _span(state, filters)
    if descending:
        start = position or (_INT8_MAX, _TIME_MAX, _ID_MAX)
        if start[0] > rank_hi:
            start = (rank_hi, _TIME_MAX, _ID_MAX)
    else:
        start = position or (_INT8_MIN, _TIME_MIN, _ID_MIN)
        if start[0] < rank_lo:
            start = (rank_lo, _TIME_MIN, _ID_MIN)
    return {
        "buckets": list(range(bucket_count)),
        "state": table_state,
        "rank_lo": rank_lo,
        "rank_hi": rank_hi,
        "after_rank": start[0],
        "after_time": start[1],
        "after_id": start[2],
        "scan": per_bucket,
    }


def _key(row: dict[str, Any]) -> tuple[int, dt.datetime, uuid.UUID]:
    return (row["rank"], row["exec_time"], row["id"])


def browse(
    store: TaskStore,
    queue: str,
    state: str,
    *,
    filters: Filters | None = None,
    order: str = "asc",
    after: str | None = None,
    limit: int = LIMIT_DEFAULT,
) -> Page:
    """One page of ``queue``'s tasks in ``state`` (see the module doc). InvalidInput for an unknown
    state or order, a bad filter or limit, or a malformed cursor, before anything is read."""
    filters = (filters or Filters()).validate()
    if state not in BROWSE_STATES:
        raise InvalidInput(f"state must be one of {', '.join(BROWSE_STATES)}")
    if order not in ORDERS:
        raise InvalidInput("order must be asc or desc")
    validation.positive_int(limit, "limit", maximum=LIMIT_MAX)
    position = parse_cursor(after) if after else None
    descending = order == "desc"
    params: dict[str, Any] = {"queue": queue, **filters.params(dt.datetime.now(dt.UTC))}
    capped = False
    if state in (TaskState.RUNNING, TaskState.EXPIRED):
        rows = store.run(
            browse_operations.task_browse_leased(
                {**params, "expired_only": state == TaskState.EXPIRED, "cap": LEASED_CAP}
            )
        )
        scanned = len(rows)
        capped = scanned >= LEASED_CAP
        hits = sorted((r for r in rows if r["hit"]), key=_key, reverse=descending)
        if position is not None:
            hits = [r for r in hits if (_key(r) < position if descending else _key(r) > position)]
        page_rows = hits[:limit]
        more = len(hits) > limit
        next_key = _key(page_rows[-1]) if more else None
    else:
        page_rows, next_key, scanned = _scan_page(store, params, state, filters, position, descending, limit)
    return Page(
        _details(store, page_rows),
        _cursor_text(next_key) if next_key else None,
        scanned,
        state,
        order,
        limit,
        filters,
        capped,
    )


def _scan_page(
    store: TaskStore,
    params: dict[str, Any],
    state: str,
    filters: Filters,
    position: tuple[int, dt.datetime, uuid.UUID] | None,
    descending: bool,
    limit: int,
) -> tuple[list[dict[str, Any]], tuple[int, dt.datetime, uuid.UUID] | None, int]:
    """Scan every bucket's span after ``position``; keep the hits no bucket's unread rest can come
    before (up to the *frontier*: the earliest last key among buckets whose scan was cut off), so
    no task is skipped; the next page starts after the last kept hit, or at the frontier."""
    span = span_params(store.layout().visit_count, state, filters, position, descending, limit)
    per_bucket = span["scan"]
    rows = store.run(browse_operations.task_browse_span({**params, **span}, descending=descending))
    by_bucket: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_bucket.setdefault(row["bucket"], []).append(row)
    cut_off = [
        max(found, key=_key) if not descending else min(found, key=_key)
        for found in by_bucket.values()
        if len(found) >= per_bucket
    ]
    frontier = None
    if cut_off:
        frontier = (max if descending else min)(_key(r) for r in cut_off)
    hits = sorted((r for r in rows if r["hit"]), key=_key, reverse=descending)
    if frontier is not None:
        hits = [r for r in hits if (_key(r) >= frontier if descending else _key(r) <= frontier)]
    page_rows = hits[:limit]
    if len(hits) > limit:
        next_key: tuple[int, dt.datetime, uuid.UUID] | None = _key(page_rows[-1])
    else:
        next_key = frontier
    return page_rows, next_key, len(rows)


def _details(store: TaskStore, keys: list[dict[str, Any]]) -> list[BrowsedTask]:
    if not keys:
        return []
    found = store.run(browse_operations.task_browse_rows([r["id"] for r in keys]))
    out = []
    for key in keys:
        row = found.get(key["id"])
        if row is None:  # finished or cancelled between the two reads
            continue
        out.append(
            BrowsedTask(
                id=str(row["id"]),
                queue=row["queue"],
                state=_shown_state(row),
                priority=row["priority"],
                attempts=row["attempts"],
                max_attempts=row["max_attempts"],
                run_at=row["exec_time"],
                created_at=row["created_at"],
                lease_expires_at=row["lease_expires_at"] if row["state"] == TaskState.LEASED else None,
                exclusive_key=row["exclusive_key"],
                dedupe_key=row["dedupe_key"],
                last_error=row["last_error"],
                payload_bytes=row["payload_bytes"],
            )
        )
    return out


def _shown_state(row: dict[str, Any]) -> str:
    if row["state"] != TaskState.LEASED:
        return str(row["state"])
    expires = row["lease_expires_at"]
    return TaskState.EXPIRED if expires is not None and expires <= dt.datetime.now(dt.UTC) else TaskState.RUNNING


def parse_ids(ids: Iterable[object]) -> list[uuid.UUID]:
    """The ids an action takes: 1 to :data:`ACTION_IDS_MAX` UUIDs; InvalidInput otherwise."""
    wanted = []
    for raw in ids:
        if not isinstance(raw, str):
            raise InvalidInput("task ids must be strings")
        try:
            wanted.append(uuid.UUID(raw))
        except ValueError:
            raise InvalidInput(f"not a task id: {raw!r}") from None
    if not wanted:
        raise InvalidInput("choose at least one task")
    if len(wanted) > ACTION_IDS_MAX:
        raise InvalidInput(f"at most {ACTION_IDS_MAX} tasks at a time")
    return list(dict.fromkeys(wanted))


def _result(wanted: Sequence[uuid.UUID], changed: set[uuid.UUID]) -> ActionResult:
    return ActionResult(
        tuple(str(i) for i in wanted if i in changed), tuple(str(i) for i in wanted if i not in changed)
    )


def run_now(store: TaskStore, queue: str, ids: Iterable[object]) -> ActionResult:
    """Make scheduled tasks ready now (run now; retry now for one waiting for its backoff). Tasks
    in another state are left alone."""
    wanted = parse_ids(ids)
    return _result(wanted, store.run(browse_operations.task_run_now_many(queue, wanted)))


def set_priority(store: TaskStore, queue: str, ids: Iterable[object], priority: object) -> ActionResult:
    """Give ready, scheduled and backlogged tasks a new priority (a ready one moves to its new
    place in claim order). Running tasks are left alone."""
    wanted = parse_ids(ids)
    value = validation.priority(priority)
    return _result(wanted, store.run(browse_operations.task_priority_set_many(queue, wanted, value)))


def requeue_expired(store: TaskStore, queue: str, ids: Iterable[object]) -> ActionResult:
    """Put tasks whose lease expired back in the queue now, ready at their old place, without
    waiting for a lease sweep, and without charging the attempt (as a worker's hand-back does;
    fenced by the lease token: a task whose lease was renewed, or taken again, is left alone)."""
    wanted = parse_ids(ids)
    rows = store.run(browse_operations.task_browse_rows(wanted))
    now = dt.datetime.now(dt.UTC)
    expired = [
        Fenced(TaskKey(r["bucket"], r["queue"], r["rank"], r["exec_time"], r["id"]), r["lease_token"])
        for r in rows.values()
        if r["queue"] == queue
        and r["state"] == TaskState.LEASED
        and r["lease_token"] is not None
        and r["lease_expires_at"] is not None
        and r["lease_expires_at"] <= now
    ]
    released = store.task_release_many(expired) if expired else set()
    return _result(wanted, released)
