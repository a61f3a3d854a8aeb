"""Typed wrappers around shardq's named statements: one method per statement, dataclasses in
and out. The producer, consumer, reaper and admin code talk to the database only through here
(and so never see psycopg)."""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from .db import Session
from .engine import Engine
from .errors import DatabaseError, NotMigrated, ShardLayoutChanged
from .models import (
    MAX_ATTEMPTS_DEFAULT,
    RANK_BACKLOG,
    RANK_SCHEDULED,
    Activity,
    ClaimedTask,
    DeadTask,
    NewTask,
    QueueSettings,
    SchemaJob,
    ShardLayout,
    TaskInfo,
    TaskKey,
)

log = logging.getLogger("shardq.store")

_RANKS: dict[str, Any] = {"scheduled_rank": RANK_SCHEDULED, "backlog_rank": RANK_BACKLOG}
_claim_order = itemgetter("rank", "exec_time")
_claim_row_order = itemgetter(1, 2)  # (rank, exec_time) of task_claim_round's tuples


#: Rows of shardq_stats per (queue, minute): concurrent writers pick one at random, so they seldom
#: wait on each other's row lock; readers sum them.
STATS_SLOTS = 8
#: A producer adds its enqueues to the counters at once for a queue it has not counted yet, then at
#: most this often (one small statement; an upsert inside every enqueue statement measured 2-12 %
#: slower single-row enqueues).
ENQUEUE_COUNT_SECONDS = 1.0
#: The oldest ready task of a (queue, bucket) is looked for among this many priorities (one index
#: descent each); with more priorities in use in one bucket its age is a lower bound.
STATS_PRIORITIES_MAX = 32


@dataclass(frozen=True, slots=True)
class Fenced:
    """A task key plus the lease token that must still hold for a statement to touch the row."""

    key: TaskKey
    token: uuid.UUID


@dataclass(frozen=True, slots=True)
class WholeClaim:
    """Every task still held under one claim's lease token, all finished successfully. A claim
    takes tasks of one bucket and queue in key order, so they lie between ``first`` and ``last``,
    the smallest and largest (rank, exec_time) among them."""

    bucket: int
    queue: str
    first: tuple
    last: tuple
    token: uuid.UUID
    keys: Sequence[TaskKey]


@dataclass(frozen=True, slots=True)
class ExpiredLease:
    key: TaskKey
    attempts: int
    max_attempts: int
    token: uuid.UUID
    exclusive_key: str | None = None


@dataclass(frozen=True, slots=True)
class CancelledTask:
    id: uuid.UUID
    queue: str
    state: str
    exclusive_key: str | None
    backlogged: bool


def _key_arrays(items: Sequence[Fenced]) -> dict[str, Any]:
    # "states": a fenced row is always leased. CockroachDB's statements join the state as an input
    # column so the optimizer can compute the shard (sql/cockroachdb/tasks.sql); PostgreSQL's
    # statements do not name it, and psycopg sends only the parameters a statement names.
    return {
        "states": ["leased"] * len(items),
        "buckets": [f.key.bucket for f in items],
        "queues": [f.key.queue for f in items],
        "ranks": [f.key.rank for f in items],
        "exec_times": [f.key.exec_time for f in items],
        "ids": [f.key.id for f in items],
        "tokens": [f.token for f in items],
        **_RANKS,
    }


def _task_arrays(tasks: Sequence[NewTask], ids: Sequence[uuid.UUID], *, compact: bool = False) -> dict[str, Any]:
    """The parallel arrays of the task_insert_* statements. With ``compact`` (PostgreSQL), an
    optional column no task sets is sent as NULL instead of an array of defaults: multi-argument
    unnest pads it with NULLs, and most batches then carry just ids and payloads."""
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
    return {**arrays, **_RANKS, "max_attempts_default": MAX_ATTEMPTS_DEFAULT}


# Optional task columns and the value that means "not set" (what the statements' coalesce supplies).
_OPTIONAL_DEFAULTS: dict[str, Any] = {"delays": None, "run_ats": None, "max_attempts": None, "dedupe_keys": None,
                      "priorities": 0, "exclusive_keys": None}


def _depth_row(queue: str, bucket: int, cap: int, *, ready: int, due_scheduled: int, scheduled: int,
               leased: int, leased_capped: bool, backlog: int, oldest: list) -> dict[str, Any]:
    known = [t for t in oldest if t is not None]
    return {
        "queue": queue, "bucket": bucket,
        "ready": ready + due_scheduled, "scheduled": scheduled, "leased": leased, "backlog": backlog,
        "oldest_ready": min(known) if known else None,
        "ready_capped": ready >= cap or due_scheduled >= cap, "scheduled_capped": scheduled >= cap,
        "leased_capped": leased_capped, "backlog_capped": backlog >= cap,
    }


class TaskStore:
    """Statement wrappers bound to one :class:`~shardq.db.Session`.

    It remembers how many tasks were enqueued through it that the activity counters do not know
    of yet (see :meth:`count_enqueued`); :meth:`flush_enqueue_counts` writes them out.
    """

    def __init__(self, session: Session, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.session = session
        self._clock = clock
        # queue -> tasks enqueued but not yet in shardq_stats; and when they were last written
        self._uncounted: dict[str, int] = {}
        self._counted_queues: set[str] = set()
        self._counted_at = clock()

    @property
    def engine(self) -> Engine:
        """The database engine behind this store's session."""
        return self.session.engine

    @property
    def dialect(self) -> str:
        """The engine's name, for reports."""
        return self.session.engine.name

    @property
    def uses_lease_records(self) -> bool:
        """Expired leases are found through ``shardq_leases`` (PostgreSQL), not through the
        ``state = 'leased'`` span of the key (CockroachDB)."""
        return self.engine.uses_lease_records

    def layout(self) -> ShardLayout:
        """Read the current bucket layout from the database and point this session's statements
        at it (CockroachDB's ``{shard_col}``)."""
        layout = self.engine.discover_layout(self.session)
        self.session.set_shard_column(layout.shard_column)
        return layout

    # -- producer ---------------------------------------------------------------------------
    def task_insert_many(
        self, queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]
    ) -> tuple[set[uuid.UUID], bool]:
        """Insert; returns (ids skipped: a live dedupe key or a busy exclusive key, queue paused for
        enqueue). When the queue is paused nothing was inserted and every id counts as skipped."""
        arrays = _task_arrays(tasks, ids, compact=self.engine.accepts_null_arrays)
        if not any(t.dedupe_key is not None or t.exclusive_key is not None for t in tasks):
            del arrays["dedupe_keys"], arrays["exclusive_keys"]
            row = self.session.fetch_one("task_insert_many_fresh", {"queue": queue, **arrays})
            return (set(ids), True) if row and row["paused"] else (set(), False)
        rows = self.session.fetch_all("task_insert_many", {"queue": queue, **arrays})
        if any(row["paused"] for row in rows):
            return set(ids), True
        return {row["id"] for row in rows}, False

    def task_insert_backlog_many(self, queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        rows = self.session.fetch_all("task_insert_backlog_many", {"queue": queue, **_task_arrays(tasks, ids)})
        return {row["id"] for row in rows}

    def task_exclusive_active(self, queue: str, keys: Sequence[str]) -> set[str]:
        rows = self.session.fetch_all("task_exclusive_active", {"queue": queue, "keys": list(keys)})
        return {row["exclusive_key"] for row in rows}

    def task_backlog_supersede(self, queue: str, keys: Sequence[str], keep: Sequence[uuid.UUID]) -> int:
        rows = self.session.fetch_all("task_backlog_supersede", {"queue": queue, "keys": list(keys), "keep": list(keep)})
        return len(rows)

    def exclusive_keys_lock(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Take the per-key locks (PostgreSQL; a no-op statement on CockroachDB) for this transaction."""
        self.session.fetch_all(
            "exclusive_keys_lock", {"queues": [q for q, _ in pairs], "keys": [k for _, k in pairs]}
        )

    def task_backlog_release(self, pairs: Sequence[tuple[str, str]]) -> set[uuid.UUID]:
        rows = self.session.fetch_all(
            "task_backlog_release", {"queues": [q for q, _ in pairs], "keys": [k for _, k in pairs], **_RANKS}
        )
        return {row["id"] for row in rows}

    def task_exclusive_keys_by_id(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, tuple[str, str]]:
        rows = self.session.fetch_all("task_exclusive_keys_by_id", {"ids": list(ids)})
        return {row["id"]: (row["queue"], row["exclusive_key"]) for row in rows}

    def task_cancel_many(self, ids: Sequence[uuid.UUID]) -> list[CancelledTask]:
        rows = self.session.fetch_all("task_cancel_many", {"ids": list(ids)})
        return [
            CancelledTask(row["id"], row["queue"], row["state"], row["exclusive_key"], row["backlogged"]) for row in rows
        ]

    def count_enqueued(self, queue: str, count: int) -> None:
        """Note ``count`` tasks enqueued into ``queue`` for the activity counters. They are written
        at once for a queue this store has not counted before, else at most every
        :data:`ENQUEUE_COUNT_SECONDS` (one statement for all queues). Call it outside a
        transaction. Never raises for the counters' sake: a failed write keeps the counts."""
        if self.session.borrowed:
            # On a caller's connection the tasks exist only if the caller commits, and a counter
            # row written there would be locked until then: these enqueues are not counted.
            return
        if count:
            self._uncounted[queue] = self._uncounted.get(queue, 0) + count
        if not self._uncounted:
            return
        if queue in self._counted_queues and self._clock() - self._counted_at < ENQUEUE_COUNT_SECONDS:
            return
        self.flush_enqueue_counts()

    def flush_enqueue_counts(self) -> bool:
        """Write the enqueue counts held here to ``shardq_stats`` (one statement). Returns False,
        keeping them, when the database refused."""
        pending = {q: Activity(enqueued=n) for q, n in self._uncounted.items() if n}
        self._counted_at = self._clock()
        if not pending:
            return True
        try:
            self.stats_add_many(random.randrange(STATS_SLOTS), pending)
        except DatabaseError as exc:
            log.debug("could not record enqueue counts (kept for the next try): %s", exc)
            return False
        self._counted_queues |= set(pending)
        self._uncounted = {}
        return True

    # -- consumer ---------------------------------------------------------------------------
    def task_claim_batch(self, bucket: int, queue: str, limit: int, lease_seconds: float) -> list[ClaimedTask]:
        token = uuid.uuid4()
        rows = self.session.fetch_all(
            "task_claim_batch",
            {"bucket": bucket, "queue": queue, "limit": limit, "lease_seconds": lease_seconds, "token": token, **_RANKS},
            binary=True,
        )
        # RETURNING follows no order; hand tasks out in claim order (priority, then exec_time).
        rows.sort(key=_claim_order)
        return [ClaimedTask.from_row(row, token) for row in rows]

    @property
    def claims_whole_rounds(self) -> bool:
        """True on PostgreSQL: one statement claims over a whole round of buckets
        (:meth:`task_claim_round`). CockroachDB claims one bucket per statement: its SKIP LOCKED
        scan must stay within one span of the key (see sql/cockroachdb/tasks.sql)."""
        return self.engine.claims_whole_rounds

    def task_claim_round(self, buckets: Sequence[int], queue: str, limit: int, lease_seconds: float) -> list[ClaimedTask]:
        """Lease up to ``limit`` ready tasks of ``queue``, bucket by bucket in the order of
        ``buckets`` (PostgreSQL). Each bucket's tasks share a lease token of their own. Returned
        in claim order: rank (priority), then exec_time."""
        tokens = [uuid.uuid4() for _ in buckets]
        rows = self.session.fetch_all(
            "task_claim_round",
            {"buckets": list(buckets), "tokens": tokens, "queue": queue, "limit": limit,
             "lease_seconds": lease_seconds, **_RANKS},
            binary=True,
            tuples=True,
        )
        rows.sort(key=_claim_row_order)
        token_of = dict(zip(buckets, tokens))
        from_claim_row = ClaimedTask.from_claim_row
        return [from_claim_row(row, queue, token_of[row[0]]) for row in rows]

    def task_promote_due_round(self, buckets: Sequence[int], queue: str, limit: int) -> int:
        """Make due scheduled tasks of ``queue`` in ``buckets`` ready (PostgreSQL); returns how many."""
        params = {"buckets": list(buckets), "queue": queue, "limit": limit, **_RANKS}
        return len(self.session.fetch_all("task_promote_due_round", params))

    def task_promote_due(self, bucket: int, queue: str, limit: int) -> int:
        """Make due scheduled tasks ready; returns how many."""
        params = {"bucket": bucket, "queue": queue, "limit": limit, **_RANKS}
        return len(self.session.fetch_all("task_promote_due", params))

    def task_ack_many(self, items: Sequence[Fenced], closed_tokens: Iterable[uuid.UUID] = ()) -> set[uuid.UUID]:
        params = _key_arrays(items)
        params["closed_tokens"] = list(closed_tokens)
        # Fenced by whole key + lease token: safe to re-send after 40003 (see shardq.db).
        return {row["id"] for row in self.session.fetch_all("task_ack_many", params, resend_ambiguous=True)}

    def task_ack_claims(self, claims: Sequence[WholeClaim]) -> set[uuid.UUID]:
        """Ack whole claims (every task still held under each token finished); returns the ids
        that were *not* deleted because their lease had passed to someone else. On PostgreSQL
        one statement per claim deletes its rows by key range and token (no per-task arrays) and
        drops its lease record (a worker settles about one claim at a time); CockroachDB takes the
        per-key path of :meth:`task_ack_many`."""
        if not claims:
            return set()
        if not self.uses_lease_records:
            items = [Fenced(key, c.token) for c in claims for key in c.keys]
            done = self.task_ack_many(items, [c.token for c in claims])
            return {f.key.id for f in items if f.key.id not in done}
        lost: set[uuid.UUID] = set()
        for c in claims:
            params = {"bucket": c.bucket, "queue": c.queue, "first_rank": c.first[0], "first_exec": c.first[1],
                      "last_rank": c.last[0], "last_exec": c.last[1], "token": c.token, "expected": len(c.keys)}
            # Fenced by key range + lease token: safe to re-send after 40003 (see shardq.db).
            row = self.session.fetch_all("task_ack_claim", params, resend_ambiguous=True)[0]
            if row["ids"] is not None:  # fewer deleted than held: name the ones left behind
                deleted = set(row["ids"])
                lost.update(k.id for k in c.keys if k.id not in deleted)
        return lost

    def task_retry_many(
        self,
        items: Sequence[Fenced],
        delays: Sequence[float],
        errors: Sequence[str | None],
        *,
        require_expired: bool,
        refund: bool = False,
    ) -> set[uuid.UUID]:
        """Put leased tasks back at now() + delay with their error text. With ``refund`` the
        attempt each claim charged is given back (the handler asked for the retry)."""
        params = _key_arrays(items)
        params.update(delays=list(delays), errors=list(errors), require_expired=require_expired,
                      refunds=[1 if refund else 0] * len(items))
        return {row["id"] for row in self.session.fetch_all("task_retry_many", params, resend_ambiguous=True)}

    def task_bury_many(
        self, items: Sequence[Fenced], errors: Sequence[str | None], *, require_expired: bool
    ) -> set[uuid.UUID]:
        params = _key_arrays(items)
        params.update(errors=list(errors), require_expired=require_expired)
        return {row["id"] for row in self.session.fetch_all("task_bury_many", params, resend_ambiguous=True)}

    def task_release_many(self, items: Sequence[Fenced]) -> set[uuid.UUID]:
        rows = self.session.fetch_all("task_release_many", _key_arrays(items), resend_ambiguous=True)
        return {row["id"] for row in rows}

    def task_extend_many(self, items: Sequence[Fenced], lease_seconds: float) -> dict[uuid.UUID, dt.datetime]:
        params = _key_arrays(items)
        params["lease_seconds"] = lease_seconds
        rows = self.session.fetch_all("task_extend_many", params, resend_ambiguous=True)
        return {row["id"]: row["lease_expires_at"] for row in rows}

    # -- reaper -----------------------------------------------------------------------------
    def task_reap_candidates(self, bucket: int, limit: int) -> list[ExpiredLease]:
        rows = self.session.fetch_all("task_reap_candidates", {"bucket": bucket, "limit": limit})
        return [
            ExpiredLease(
                TaskKey(row["bucket"], row["queue"], row["rank"], row["exec_time"], row["id"]),
                row["attempts"],
                row["max_attempts"],
                row["lease_token"],
                row["exclusive_key"],
            )
            for row in rows
        ]

    def lease_sweep(self, bucket: int, limit: int) -> tuple[int, int]:
        row = self.session.fetch_one("lease_sweep", {"bucket": bucket, "limit": limit})
        return (row["dropped"], row["pushed"]) if row else (0, 0)

    # -- wake-ups (PostgreSQL) --------------------------------------------------------------
    def queue_notify(self, queue: str) -> None:
        """Wake workers listening for ``queue`` (PostgreSQL only; see :mod:`shardq.notify`)."""
        self.session.execute("queue_notify", {"queue": queue})

    def notify_listen(self) -> None:
        """Subscribe this store's session to queue wake-ups, for as long as it lives."""
        self.session.listen("notify_listen")

    def notifications(self, timeout: float) -> list[str]:
        """Queue names of wake-ups received (waiting up to ``timeout`` for the first)."""
        return self.session.notifications(timeout)

    # -- queues -----------------------------------------------------------------------------
    def queue_ensure(self, queue: str) -> None:
        self.session.execute("queue_ensure", {"queue": queue})

    def queue_get(self, queue: str) -> QueueSettings | None:
        row = self.session.fetch_one("queue_get", {"queue": queue})
        return QueueSettings.from_row(row) if row else None

    def queue_list(self) -> list[QueueSettings]:
        return [QueueSettings.from_row(row) for row in self.session.fetch_all("queue_list")]

    def queue_update(self, queue: str, **changes: object) -> QueueSettings | None:
        fields = ("lease_seconds", "max_attempts", "backoff_base", "backoff_cap", "retry_jitter",
                  "exclusive_latest_only", "paused_enqueue", "paused_dequeue", "timeout_seconds")
        params: dict[str, object] = {name: changes.get(name) for name in fields}
        params["timeout_clear"] = bool(changes.get("timeout_clear"))
        row = self.session.fetch_one("queue_update", {"queue": queue, **params})
        return QueueSettings.from_row(row) if row else None

    # -- introspection and dead letters -----------------------------------------------------
    def stats_snapshot(self, *, historical: bool) -> None:
        """Start the stats transaction's snapshot: one consistent, read-only view (PostgreSQL), or
        on CockroachDB with ``historical`` a follower read. Must be the transaction's first
        statement."""
        if historical and self.engine.historical_reads:
            self.session.execute("stats_snapshot_historical")
        else:
            self.session.execute("stats_snapshot_begin")

    def stats_now(self) -> dict[str, Any]:
        row = self.session.fetch_one("stats_now")
        assert row is not None
        return row

    def stats_depth(self, queues: Sequence[str], buckets: Sequence[int], cap: int) -> list[dict[str, Any]]:
        """One row per (queue, bucket): ``ready`` (scheduled tasks already due included: they are
        claimable as soon as a consumer passes), ``scheduled``, ``leased``, ``backlog``,
        ``oldest_ready`` (exec_time of the oldest due ready or scheduled task), and
        ``<count>_capped`` flags telling which counts stopped at a limit (the true number is
        higher). Each count reads at most ``cap`` rows (``ready``: twice that); the oldest ready
        task is looked for among the first :data:`STATS_PRIORITIES_MAX` priorities in use."""
        if not queues or not buckets:
            return []
        if self.engine.counts_depth_in_one_statement:
            return self._stats_depth_postgresql(queues, buckets, cap)
        # CockroachDB: one statement per (queue, bucket), each a handful of capped single-shard
        # spans with bound values (no correlated subquery for the optimizer to get wrong), and one
        # short scan per priority in use for the oldest ready task.
        rows = []
        for queue in queues:
            for bucket in buckets:
                row = self.session.fetch_one(
                    "stats_depth_one", {"queue": queue, "bucket": bucket, "cap": cap, **_RANKS}
                )
                assert row is not None
                heads = []
                after = -(2**63)
                for _ in range(STATS_PRIORITIES_MAX):
                    head = self.session.fetch_one(
                        "stats_ready_head_after", {"queue": queue, "bucket": bucket, "after": after}
                    )
                    if head is None:
                        break
                    heads.append(head["exec_time"])
                    after = head["rank"]
                rows.append(_depth_row(
                    queue, bucket, cap, ready=row["ready"], due_scheduled=row["due_scheduled"],
                    scheduled=row["scheduled"], leased=row["leased"], leased_capped=row["leased"] >= cap,
                    backlog=row["backlog"], oldest=[*heads, row["oldest_due_scheduled"]],
                ))
        return rows

    def _stats_depth_postgresql(self, queues: Sequence[str], buckets: Sequence[int], cap: int) -> list[dict[str, Any]]:
        # Leased tasks through the lease records; the active span minus those is the ready ones.
        limit = cap * len(buckets)
        leased_rows = self.session.fetch_all("stats_leased_by_bucket", {"buckets": list(buckets), "limit": limit})
        leased = {(row["queue"], int(row["bucket"])): row["leased"] for row in leased_rows}
        leased_capped = sum(leased.values()) >= limit
        rows = self.session.fetch_all(
            "stats_depth_many",
            {"queues": list(queues), "buckets": list(buckets), "cap": cap, "rank_cap": STATS_PRIORITIES_MAX,
             **_RANKS},
        )
        out = []
        for row in rows:
            n_leased = leased.get((row["queue"], int(row["bucket"])), 0)
            depth = _depth_row(
                row["queue"], int(row["bucket"]), cap, ready=max(0, row["active"] - n_leased),
                due_scheduled=row["due_scheduled"], scheduled=row["scheduled"], leased=n_leased,
                leased_capped=leased_capped, backlog=row["backlog"],
                oldest=[row["oldest_ready"], row["oldest_due_scheduled"]],
            )
            depth["ready_capped"] = row["active"] >= cap or row["due_scheduled"] >= cap
            out.append(depth)
        return out

    def stats_dead_count(self, queue: str, cap: int) -> int:
        row = self.session.fetch_one("stats_dead_count", {"queue": queue, "cap": cap})
        return row["dead"] if row else 0

    def stats_window(self, minutes: int) -> dict[str, Activity]:
        """Activity per queue in the current minute and the ``minutes`` full minutes before it."""
        return {
            row["queue"]: Activity.from_row(row)
            for row in self.session.fetch_all("stats_window", {"minutes": minutes})
        }

    def stats_add_many(self, slot: int, activity: Mapping[str, Activity]) -> None:
        """Add each queue's activity to the current minute's counters in ``slot``."""
        queues = [q for q, a in activity.items() if not a.is_empty()]
        if not queues:
            return
        params: dict[str, Any] = {"slot": slot, "queues": queues}
        for name in Activity.FIELDS:
            params[name] = [getattr(activity[q], name) for q in queues]
        self.session.execute("stats_add_many", params)

    def stats_prune(self, keep_seconds: float, limit: int) -> int:
        rows = self.session.fetch_all("stats_prune", {"keep_seconds": keep_seconds, "limit": limit})
        return len(rows)

    def task_count_by_bucket(self, *, historical: bool = True) -> dict[int, int]:
        """Rows per bucket. Where the engine has historical reads (CockroachDB) and ``historical``
        is set, a read ~5 s in the past (no waiting on claimers); when the current layout is
        younger than that read's timestamp (a resize or the table itself less than ~5 s old) it
        falls back to a current read, as it does with ``historical=False``."""
        if self.engine.historical_reads and not historical:
            rows = self.session.fetch_all("task_count_by_bucket_current")
            return {int(row["bucket"]): row["tasks"] for row in rows}
        try:
            rows = self.session.fetch_all("task_count_by_bucket")
        except (ShardLayoutChanged, NotMigrated):
            if not self.engine.historical_reads:
                raise
            rows = self.session.fetch_all("task_count_by_bucket_current")
        return {int(row["bucket"]): row["tasks"] for row in rows}

    def schema_jobs(self) -> list[SchemaJob]:
        """Unfinished schema-change jobs of shardq_tasks (a resize in progress on CockroachDB;
        none where schema changes are transactional)."""
        return self.engine.schema_jobs(self.session)

    def task_get(self, task_id: uuid.UUID) -> TaskInfo | None:
        """A task of the tasks table by id (one index descent), or None."""
        row = self.session.fetch_one("task_get", {"id": task_id})
        return TaskInfo.from_task_row(row) if row else None

    def dead_get(self, task_id: uuid.UUID) -> TaskInfo | None:
        """A dead-lettered task by id (its primary key), or None."""
        row = self.session.fetch_one("dead_get", {"id": task_id})
        return TaskInfo.from_dead_row(row) if row else None

    def dead_list(self, queue: str, limit: int) -> list[DeadTask]:
        return [DeadTask.from_row(r) for r in self.session.fetch_all("dead_list", {"queue": queue, "limit": limit})]

    def dead_ids_page(self, queue: str, after: uuid.UUID, limit: int) -> list[uuid.UUID]:
        rows = self.session.fetch_all("dead_ids_page", {"queue": queue, "after": after, "limit": limit})
        return [row["id"] for row in rows]

    def dead_requeue_ids(self, queue: str, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        rows = self.session.fetch_all("dead_requeue_ids", {"queue": queue, "ids": list(ids)})
        return {row["id"] for row in rows}

    def dead_purge_batch(self, queue: str, limit: int) -> int:
        return len(self.session.fetch_all("dead_purge_batch", {"queue": queue, "limit": limit}))
