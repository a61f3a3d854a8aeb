"""Operator functions behind :class:`shardq.Client`: cancel, queue settings, dead letters, bucket layout.

An operation both clients run is one plan (:mod:`shardq.sql.plan`) that validates its input
before anything is sent: :func:`cancel_plan` (with :func:`parse_cancel_ids`),
:func:`queue_show_plan`, :func:`queue_set_plan`. The sync-only operator calls (dead letters,
bucket layout, one task by id) take a :class:`TaskStore`, validate their input, and return a
dataclass; none of them prints."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shardq import operations, validation
from shardq.arguments import task_name_of
from shardq.errors import InvalidInput
from shardq.lifecycle import flow
from shardq.maintenance.batches import until_short_batch
from shardq.models.history import Finished
from shardq.models.layout import SchemaJob, ShardLayout
from shardq.models.queues import QueueSettings
from shardq.models.tasks import DeadTask, TaskInfo, TaskState
from shardq.sessions.store import TaskStore
from shardq.sql.plan import Atomically, Plan
from shardq.workflows import spark_callbacks as run_callbacks
from shardq.workflows import steps as workflows

PAGE = 1000


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)  # a created_at the tasks table never lacks


@dataclass(frozen=True)
class BucketReport:
    """``shardq buckets show``: the layout, rows per bucket, and whether a resize is running
    (PostgreSQL: a shrink still moving rows, ``resizing_from`` set; CockroachDB: an unfinished
    schema-change job of ``shardq_tasks``, listed in ``schema_jobs``)."""

    layout: ShardLayout
    rows_per_bucket: dict[int, int]
    #: the engine's name ("postgresql" or "cockroachdb"): a public field (and JSON key) named before
    #: "engine name" was the word (docs/glossary.md, "engine")
    dialect: str
    schema_jobs: tuple[SchemaJob, ...] = ()

    @property
    def resizing(self) -> bool:
        return self.layout.resizing_from is not None or bool(self.schema_jobs)

    def as_json(self) -> dict:
        return {
            "dialect": self.dialect,
            "bucket_count": self.layout.bucket_count,
            "shard_column": self.layout.shard_column,
            "resizing": self.resizing,
            "resizing_from": self.layout.resizing_from,
            "schema_jobs": [job.as_json() for job in self.schema_jobs],
            "rows_per_bucket": {str(b): n for b, n in sorted(self.rows_per_bucket.items())},
        }


def buckets_show(store: TaskStore, *, historical: bool = True) -> BucketReport:
    """The layout and rows per bucket. With ``historical`` (the default) an engine that has
    historical reads counts from one a few seconds old, which never waits on claimers (so rows
    written in the last ~5 s may be missing); ``historical=False`` reads the present."""
    layout = store.layout()
    jobs = tuple(store.schema_jobs())
    return BucketReport(layout, store.task_count_by_bucket(historical=historical), store.engine_name, jobs)


def dead_list(
    store: TaskStore, queue: str, *, limit: int = 100, after: tuple[dt.datetime, uuid.UUID] | None = None
) -> list[DeadTask]:
    """A queue's dead tasks, oldest death first: the first ``limit``, or with ``after`` (the
    ``(died_at, id)`` of the last one seen) the next ``limit`` (keyset paging: each page is one
    index seek, however deep)."""
    validation.queue_name(queue)
    validation.positive_int(limit, "limit", maximum=100_000)
    if after is not None:
        return store.dead_list_after(queue, after[0], after[1], limit)
    return store.dead_list(queue, limit)


def _parse_ids(ids: list[str]) -> list[uuid.UUID]:
    parsed = []
    for text in ids:
        try:
            parsed.append(uuid.UUID(str(text)))
        except ValueError:
            raise InvalidInput(f"not a task id: {text!r}") from None
    return parsed


@dataclass(frozen=True)
class RequeueResult:
    requeued: int
    not_found_or_kept: int


def dead_requeue(
    store: TaskStore, queue: str, ids: list[str] | None = None, *, all_tasks: bool = False
) -> RequeueResult:
    """Move dead tasks back to the queue (fresh attempts, due now): the given ids, or all of
    them with ``all_tasks``. A dead task whose dedupe key is live again stays dead."""
    validation.queue_name(queue)
    if all_tasks == bool(ids):
        raise InvalidInput("give either task ids or --all")
    if not all_tasks:
        wanted = _parse_ids(ids or [])
        done = store.run(workflows.dead_requeue_plan(queue, wanted))
        return RequeueResult(len(done), len(set(wanted)) - len(done))
    requeued = kept = 0
    after = uuid.UUID(int=0)
    while True:
        page = store.dead_ids_page(queue, after, PAGE)
        if not page:
            return RequeueResult(requeued, kept)
        done = store.run(workflows.dead_requeue_plan(queue, page))
        requeued += len(done)
        kept += len(page) - len(done)
        after = page[-1]


def dead_purge(store: TaskStore, queue: str) -> int:
    """Delete every dead task of ``queue``, in bounded batches. Returns how many."""
    validation.queue_name(queue)
    return until_short_batch(lambda n: store.dead_purge_batch(queue, n), PAGE)


def task_show(store: TaskStore, task_id: str) -> TaskInfo | None:
    """One task by id, wherever it is: the tasks table (ready, scheduled, leased, backlog) or the
    dead letters; None when neither holds it (finished tasks are deleted). Two index lookups at
    most. A malformed id raises :class:`InvalidInput`."""
    (wanted,) = _parse_ids([task_id])
    return store.task_get(wanted) or store.dead_get(wanted)


@dataclass(frozen=True)
class CancelResult:
    cancelled: tuple[str, ...]
    not_found: tuple[str, ...]
    #: backlog entries promoted because the task cancelled held their exclusive key
    promoted: int = 0


def parse_cancel_ids(ids: Sequence[object]) -> list[uuid.UUID]:
    """The ids :func:`cancel_plan` takes, checked before anything is sent: at least one, each a
    UUID (:class:`InvalidInput` otherwise)."""
    wanted = _parse_ids([str(i) for i in ids])
    if not wanted:
        raise InvalidInput("give at least one task id")
    return wanted


def cancel_plan(wanted: list[uuid.UUID]) -> Plan[CancelResult]:
    """Cancel tasks by id (checked by :func:`parse_cancel_ids`), whatever their state, in one
    transaction, on either session. A leased task is deleted under its worker, whose later ack,
    retry or extension then changes nothing (the token is gone with the row). Cancelling the
    active task of an exclusive key releases the key's backlog."""
    from shardq.lifecycle import exclusive

    # Lock the keys of every task named (a key never changes; whether the task is active may),
    # then delete, then release the keys whose active task was deleted.
    keyed = yield from operations.task_exclusive_keys_by_id(wanted)
    removed: set[uuid.UUID] = set()

    def remove() -> Plan[set[uuid.UUID]]:
        gone = yield from operations.task_cancel_many(wanted)
        # The history keeps them where their queue keeps finished tasks (the statement checks).
        yield from operations.history_record_cancelled(
            [
                Finished(
                    t.id,
                    t.queue,
                    TaskState.CANCELLED,
                    task_name_of(t.payload),
                    t.created_at or _EPOCH,
                    t.attempts,
                    error=t.last_error,
                    dedupe_key=t.dedupe_key,
                )
                for t in gone
            ]
        )
        steps = [t for t in gone if t.workflow_id is not None and not run_callbacks.is_run(t.workflow_id)]
        if steps:
            yield from workflows.cancelled_by_id_plan(
                [t.id for t in steps], [t.id for t in steps if t.state != TaskState.WAITING]
            )
        removed.clear()  # may run again on a 40001 retry
        removed.update(t.id for t in gone)
        return {t.id for t in gone if t.exclusive_key and not t.backlogged}

    _, promoted = yield from exclusive.remove_and_release_plan(list(keyed.values()), remove, keyed)
    return CancelResult(
        tuple(str(i) for i in wanted if i in removed),
        tuple(str(i) for i in wanted if i not in removed),
        len(promoted),
    )


def queue_show_plan(queue: str) -> Plan[QueueSettings | None]:
    """Settings of one queue (None if unknown); the name is checked here, before anything is sent."""
    validation.queue_name(queue)
    return operations.queue_get(queue)


def pause_changes(paused: bool, *, enqueue: bool = True, dequeue: bool = True) -> dict[str, object]:
    """The :func:`queue_set_plan` changes that pause (or resume) enqueue and/or dequeue."""
    return {"paused_enqueue": paused if enqueue else None, "paused_dequeue": paused if dequeue else None}


def queue_changes(changes: Mapping[str, object]) -> dict[str, object]:
    """``changes`` checked and normalised for :func:`queue_set_plan` (None values dropped);
    :class:`InvalidInput` for an unknown setting or a bad value."""
    checks: dict[str, Callable[[Any], object]] = {
        "lease_seconds": validation.lease_seconds,
        "max_attempts": lambda v: validation.positive_int(v, "max attempts", maximum=10_000),
        "backoff_base": lambda v: validation.positive_seconds(v, "backoff base"),
        "backoff_cap": lambda v: validation.positive_seconds(v, "backoff cap"),
        "retry_jitter": lambda v: validation.fraction(v, "retry jitter"),
        "exclusive_latest_only": lambda v: validation.flag(v, "exclusive_latest_only"),
        "paused_enqueue": lambda v: validation.flag(v, "paused_enqueue"),
        "paused_dequeue": lambda v: validation.flag(v, "paused_dequeue"),
        "timeout_seconds": lambda v: validation.positive_seconds(v, "timeout"),
        "timeout_clear": lambda v: validation.flag(v, "timeout_clear"),
        "concurrency": lambda v: validation.flow_limit(v, "concurrency limit"),
        "rate": lambda v: validation.flow_limit(v, "rate"),
        "burst": lambda v: validation.positive_int(v, "burst", maximum=validation.FLOW_LIMIT_MAX),
        "keep_finished_seconds": lambda v: validation.non_negative_seconds(v, "keep finished"),
        "keep_results": lambda v: validation.flag(v, "keep_results"),
    }
    unknown = set(changes) - set(checks)
    if unknown:
        raise InvalidInput(f"unknown queue setting(s): {', '.join(sorted(unknown))}")
    clean = {name: checks[name](value) for name, value in changes.items() if value is not None}
    if "burst" in clean and not clean.get("rate"):
        raise InvalidInput("a burst needs a rate (set both: rate R, burst B)")
    return clean


def queue_set_plan(queue: str, changes: Mapping[str, object]) -> Plan[QueueSettings | None]:
    """Change a queue's settings (creating the queue with defaults first if needed), on either
    session; the name and every change are checked here (:func:`queue_changes`), before anything
    is sent. Options: ``lease_seconds`` (at least 1), ``max_attempts``, ``backoff_base``,
    ``backoff_cap`` (seconds), ``retry_jitter`` (0..1), ``exclusive_latest_only`` (bool),
    ``paused_enqueue``, ``paused_dequeue`` (bool), ``timeout_seconds`` (> 0; ``timeout_clear=True``
    removes it), ``concurrency`` (tasks running at once across all workers), ``rate`` (task starts
    per second across all workers) and ``burst`` (starts at once, default the rate; only with
    ``rate``), whole numbers, 0 removing a limit (see :mod:`shardq.lifecycle.flow`);
    ``keep_finished_seconds`` (how long finished tasks stay in the history, 0 = not kept; see
    :mod:`shardq.lifecycle.history`); ``keep_results`` (bool: while finished tasks are kept, every
    task of the queue that succeeds keeps its JSON-encoded return value, as
    ``@app.task(result=True)`` does). None leaves a setting unchanged."""
    validation.queue_name(queue)
    return _queue_set(queue, queue_changes(changes))


def _queue_set(queue: str, clean: dict[str, object]) -> Plan[QueueSettings | None]:
    if not {"concurrency", "rate"} & set(clean):
        yield from operations.queue_ensure(queue)
        return (yield from operations.queue_update(queue, clean))

    def body() -> Plan[QueueSettings | None]:
        # One transaction: the limits and the rows that enforce them (slots, token bucket) change
        # together, so no claim sees one without the other.
        yield from operations.queue_ensure(queue)
        settings = yield from operations.queue_update(queue, clean)
        if settings is not None:
            yield from flow.fit_plan(settings)
        return settings

    result: QueueSettings | None = yield Atomically(body)
    return result
