"""Typed wrappers around shardq's named statements: one method per statement, dataclasses in
and out. The producer, consumer, reaper and admin code talk to the database only through here
(and so never see psycopg)."""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, TypeVar

from . import statements
from .db import Session
from .engine import Engine
from .error_text import storable
from .errors import NotMigrated, ShardLayoutChanged
from .models import (
    MAX_ATTEMPTS_DEFAULT,
    Activity,
    ClaimedTask,
    DeadTask,
    NewTask,
    QueueSettings,
    SchemaJob,
    ShardLayout,
    TaskInfo,
    TaskKey,
    TokenBucket,
)
from .plans import Plan, run
from .statements import (  # noqa: F401 - names other modules and tests import from here
    _RANKS,
    ENQUEUE_COUNT_SECONDS,
    STATS_PRIORITIES_MAX,
    STATS_SLOTS,
    CancelledTask,
    EnqueueCounts,
    _task_arrays,
)

log = logging.getLogger("shardq.store")

T = TypeVar("T")

_claim_order = itemgetter("rank", "exec_time")
_claim_row_order = itemgetter(1, 2)  # (rank, exec_time) of task_claim_round's tuples


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


class TaskStore:
    """Statement wrappers bound to one :class:`~shardq.db.Session`. The statements the asyncio
    client sends too are plans of :mod:`shardq.statements`, run here on the sync session.

    It remembers how many tasks were enqueued through it that the activity counters do not know
    of yet (see :meth:`count_enqueued`); :meth:`flush_enqueue_counts` writes them out.
    """

    def __init__(self, session: Session, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.session = session
        #: enqueues not yet in shardq_stats; None on a caller's connection (see count_enqueued)
        self.enqueue_counts: EnqueueCounts | None = None if session.borrowed else EnqueueCounts(clock=clock)

    def run(self, plan: Plan[T]) -> T:
        """Run a plan (:mod:`shardq.plans`) on this store's session."""
        return run(self.session, plan)

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
        return run(self.session, statements.layout())

    # -- producer ---------------------------------------------------------------------------
    def task_insert_many(
        self, queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]
    ) -> tuple[set[uuid.UUID], bool]:
        """See :func:`shardq.statements.task_insert_many`."""
        return run(self.session, statements.task_insert_many(queue, tasks, ids))

    def task_insert_backlog_many(self, queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        return run(self.session, statements.task_insert_backlog_many(queue, tasks, ids))

    def task_exclusive_active(self, queue: str, keys: Sequence[str]) -> set[str]:
        rows = self.session.fetch_all("task_exclusive_active", {"queue": queue, "keys": list(keys)})
        return {row["exclusive_key"] for row in rows}

    def task_backlog_supersede(self, queue: str, keys: Sequence[str], keep: Sequence[uuid.UUID]) -> int:
        return run(self.session, statements.task_backlog_supersede(queue, keys, keep))

    def exclusive_keys_lock(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Take the per-key locks (PostgreSQL; a no-op statement on CockroachDB) for this transaction."""
        run(self.session, statements.exclusive_keys_lock(pairs))

    def task_backlog_release(self, pairs: Sequence[tuple[str, str]]) -> set[uuid.UUID]:
        return run(self.session, statements.task_backlog_release(pairs))

    def task_exclusive_keys_by_id(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, tuple[str, str]]:
        return run(self.session, statements.task_exclusive_keys_by_id(ids))

    def task_cancel_many(self, ids: Sequence[uuid.UUID]) -> list[CancelledTask]:
        return run(self.session, statements.task_cancel_many(ids))

    def count_enqueued(self, queue: str, count: int) -> None:
        """Note ``count`` tasks enqueued into ``queue`` for the activity counters (see
        :class:`shardq.statements.EnqueueCounts`). Call it outside a transaction. On a caller's
        connection nothing is counted: the tasks exist only if the caller commits, and a counter
        row written there would be locked until then."""
        if self.enqueue_counts is not None:
            run(self.session, self.enqueue_counts.note(queue, count))

    def flush_enqueue_counts(self) -> bool:
        """Write the enqueue counts held here to ``shardq_stats`` (one statement). Returns False,
        keeping them, when the database refused."""
        if self.enqueue_counts is None:
            return True
        return run(self.session, self.enqueue_counts.flush())

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
        """Put leased tasks back at now() + delay with their error text (made storable: see
        :mod:`shardq.error_text`). With ``refund`` the attempt each claim charged is given back
        (the handler asked for the retry)."""
        params = _key_arrays(items)
        params.update(delays=list(delays), errors=[storable(e) for e in errors], require_expired=require_expired,
                      refunds=[1 if refund else 0] * len(items))
        return {row["id"] for row in self.session.fetch_all("task_retry_many", params, resend_ambiguous=True)}

    def task_bury_many(
        self, items: Sequence[Fenced], errors: Sequence[str | None], *, require_expired: bool
    ) -> set[uuid.UUID]:
        params = _key_arrays(items)
        params.update(errors=[storable(e) for e in errors], require_expired=require_expired)
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

    def sweep_turns_take(self, buckets: Sequence[int], every_seconds: float) -> list[int]:
        """Take the sweeping turn of each of ``buckets`` not swept in the last ``every_seconds``;
        returns the buckets taken (each taken by one caller at a time: see sql/common/sweeps.sql)."""
        rows = self.session.fetch_all("sweep_turns_take", {"buckets": list(buckets), "every_seconds": every_seconds})
        return sorted(row["bucket"] for row in rows)

    def lease_sweep(self, bucket: int, limit: int) -> tuple[int, int]:
        row = self.session.fetch_one("lease_sweep", {"bucket": bucket, "limit": limit})
        return (row["dropped"], row["pushed"]) if row else (0, 0)

    # -- wake-ups (PostgreSQL) --------------------------------------------------------------
    def queue_notify(self, queue: str) -> None:
        """Wake workers listening for ``queue`` (PostgreSQL only; see :mod:`shardq.notify`)."""
        run(self.session, statements.queue_notify(queue))

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
        return run(self.session, statements.queue_get(queue))

    def queue_list(self) -> list[QueueSettings]:
        return run(self.session, statements.queue_list())

    def queue_update(self, queue: str, **changes: object) -> QueueSettings | None:
        fields = ("lease_seconds", "max_attempts", "backoff_base", "backoff_cap", "retry_jitter",
                  "exclusive_latest_only", "paused_enqueue", "paused_dequeue", "timeout_seconds",
                  "concurrency", "rate", "burst")
        params: dict[str, object] = {name: changes.get(name) for name in fields}
        params["timeout_clear"] = bool(changes.get("timeout_clear"))
        row = self.session.fetch_one("queue_update", {"queue": queue, **params})
        return QueueSettings.from_row(row) if row else None

    # -- flow control (shardq.flow; statements in sql/common/flow.sql) ---------------------------
    def flow_slots_take(self, queue: str, limit: int) -> list[tuple[int, dt.datetime]]:
        """Lock up to ``limit`` free slots of ``queue``: (slot, free_at) each."""
        rows = self.session.fetch_all("flow_slots_take", {"queue": queue, "limit": limit}, tuples=True)
        return [(row[0], row[1]) for row in rows]

    def flow_slots_hold(self, queue: str, slots: Sequence[tuple[int, dt.datetime]], token: uuid.UUID,
                        lease_seconds: float) -> list[tuple[int, dt.datetime]]:
        """Hold slots just taken ((slot, free_at) each) for ``token`` until now + ``lease_seconds``."""
        params = {"queue": queue, "slots": [s[0] for s in slots], "olds": [s[1] for s in slots], "token": token,
                  "lease_seconds": lease_seconds}
        return [(row[0], row[1]) for row in self.session.fetch_all("flow_slots_hold", params, tuples=True)]

    def flow_slots_extend(self, queue: str, slots: Sequence[int], token: uuid.UUID,
                          lease_seconds: float) -> list[tuple[int, dt.datetime]]:
        """Keep ``token``'s slots until now + ``lease_seconds``; returns those still its own."""
        params = {"queue": queue, "slots": list(slots), "token": token, "lease_seconds": lease_seconds}
        # Fenced by the holder's token: safe to re-send after 40003 (see shardq.db).
        rows = self.session.fetch_all("flow_slots_extend", params, resend_ambiguous=True, tuples=True)
        return [(row[0], row[1]) for row in rows]

    def flow_slots_release(self, queue: str, slots: Sequence[int], token: uuid.UUID) -> int:
        """Free ``token``'s slots at once; returns how many were still its own."""
        params = {"queue": queue, "slots": list(slots), "token": token}
        return len(self.session.fetch_all("flow_slots_release", params, resend_ambiguous=True))

    def flow_slots_add(self, queue: str, slots: int) -> None:
        self.session.execute("flow_slots_add", {"queue": queue, "slots": slots})

    def flow_slots_trim(self, queue: str, slots: int) -> None:
        self.session.execute("flow_slots_trim", {"queue": queue, "slots": slots})

    def flow_tokens_take(self, queue: str) -> TokenBucket | None:
        """Lock and read ``queue``'s token bucket, or None when it has none."""
        rows = self.session.fetch_all("flow_tokens_take", {"queue": queue})
        return TokenBucket(rows[0]["tokens"], rows[0]["refilled_at"], rows[0]["now"]) if rows else None

    def flow_tokens_spend(self, queue: str, tokens: float, refilled_at: dt.datetime) -> None:
        self.session.execute("flow_tokens_spend", {"queue": queue, "tokens": tokens, "refilled_at": refilled_at})

    def flow_tokens_reset(self, queue: str, tokens: float) -> None:
        self.session.execute("flow_tokens_reset", {"queue": queue, "tokens": tokens})

    def flow_tokens_drop(self, queue: str) -> None:
        self.session.execute("flow_tokens_drop", {"queue": queue})

    def flow_usage(self) -> dict[str, tuple[int, int]]:
        """(slots held now, slots in all) per queue with a concurrency limit."""
        return run(self.session, statements.flow_usage())

    # -- introspection and dead letters -----------------------------------------------------
    def stats_snapshot(self, *, historical: bool) -> None:
        """See :func:`shardq.statements.stats_snapshot`."""
        run(self.session, statements.stats_snapshot(historical=historical))

    def stats_now(self) -> dict[str, Any]:
        return run(self.session, statements.stats_now())

    def stats_depth(self, queues: Sequence[str], buckets: Sequence[int], cap: int) -> list[dict[str, Any]]:
        """See :func:`shardq.statements.stats_depth`."""
        return run(self.session, statements.stats_depth(queues, buckets, cap))

    def stats_dead_count(self, queue: str, cap: int) -> int:
        return run(self.session, statements.stats_dead_count(queue, cap))

    def stats_window(self, minutes: int) -> dict[str, Activity]:
        """Activity per queue in the current minute and the ``minutes`` full minutes before it."""
        return run(self.session, statements.stats_window(minutes))

    def stats_add_many(self, slot: int, activity: Mapping[str, Activity]) -> None:
        """Add each queue's activity to the current minute's counters in ``slot``."""
        run(self.session, statements.stats_add_many(slot, activity))

    # -- periodic slots (shardq.periodic) --------------------------------------------------------
    def periodic_slot_take(self, name: str, slot: dt.datetime, queue: str, payload: bytes, *, priority: int,
                           max_attempts: int | None) -> bool:
        """Take ``slot`` of schedule ``name`` and enqueue its task into ``queue``, one statement;
        False when the slot was taken already (by another worker, or before)."""
        row = self.session.fetch_row("periodic_slot_take", {
            "name": name, "slot": slot, "id": uuid.uuid4(), "queue": queue, "priority": priority,
            "max_attempts": max_attempts, "payload": payload, "max_attempts_default": MAX_ATTEMPTS_DEFAULT,
        })
        return bool(row["taken"])

    def periodic_last_slots(self, names: Sequence[str]) -> dict[str, dt.datetime]:
        """The latest slot taken of each schedule named (schedules never taken are absent)."""
        rows = self.session.fetch_all("periodic_last_slots", {"names": list(names)})
        return {row["name"]: row["slot"] for row in rows}

    def periodic_slots_prune(self, keep_seconds: float, limit: int) -> int:
        """Delete up to ``limit`` slot rows older than ``keep_seconds``, never a schedule's latest."""
        return len(self.session.fetch_all("periodic_slots_prune", {"keep_seconds": keep_seconds, "limit": limit}))

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

    def dead_list_after(self, queue: str, after_at: dt.datetime, after_id: uuid.UUID, limit: int) -> list[DeadTask]:
        rows = self.session.fetch_all("dead_list_after",
                                      {"queue": queue, "after_at": after_at, "after_id": after_id, "limit": limit})
        return [DeadTask.from_row(r) for r in rows]

    def dead_ids_page(self, queue: str, after: uuid.UUID, limit: int) -> list[uuid.UUID]:
        rows = self.session.fetch_all("dead_ids_page", {"queue": queue, "after": after, "limit": limit})
        return [row["id"] for row in rows]

    def dead_requeue_ids(self, queue: str, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        rows = self.session.fetch_all("dead_requeue_ids", {"queue": queue, "ids": list(ids)})
        return {row["id"] for row in rows}

    def dead_purge_batch(self, queue: str, limit: int) -> int:
        return len(self.session.fetch_all("dead_purge_batch", {"queue": queue, "limit": limit}))
