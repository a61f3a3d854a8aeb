"""The sync typed facade over shardq's database operations: each method runs one plan on one
:class:`~shardq.sessions.session.Session` — an operation of :mod:`shardq.operations` (what both engines send the
same way) or of the session's engine (:mod:`shardq.engine`: claim, ack, reaping, depth, counts,
layout) — with dataclasses in and out.

Every named statement reaches the database the same way: as a plan the session runs
(:meth:`shardq.sessions.session.Session.run`). This store is how the consumer, the worker, the reaper, flow
control and admin run them; the enqueue path and the asyncio client run the same plans on their
session directly; Spark and resize run the plans of their own statements on the sessions they
open. None of them sees psycopg."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from shardq import operations as ops
from shardq.engine.base import Engine
from shardq.engine.common import claim_batch, promote_due_one
from shardq.models.history import FailedAttempt, Finished, FinishedTask, SucceededColumns, TaskStatus
from shardq.models.layout import SchemaJob, ShardLayout
from shardq.models.leases import ExpiredLease, Fenced, WholeClaim
from shardq.models.queues import QueueSettings, RateTokens
from shardq.models.stats import Activity
from shardq.models.tasks import ClaimedTask, DeadTask, NewTask, TaskInfo
from shardq.operations.stats import EnqueueCounts
from shardq.operations.tasks import CancelledTask
from shardq.sessions.session import Session
from shardq.sql.plan import Plan

T = TypeVar("T")


class TaskStore:
    """Typed operations bound to one :class:`~shardq.sessions.session.Session` (see the module documentation).

    It remembers how many tasks were enqueued through it that the activity counters do not know
    of yet (see :meth:`count_enqueued`); :meth:`flush_enqueue_counts` writes them out.
    """

    def __init__(self, session: Session, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.session = session
        #: enqueues not yet in shardq_stats; None on a caller's connection (see count_enqueued)
        self.enqueue_counts: EnqueueCounts | None = None if session.borrowed else EnqueueCounts(clock=clock)

    def run(self, plan: Plan[T]) -> T:
        """Run a plan (:mod:`shardq.sql.plan`) on this store's session."""
        return self.session.run(plan)

    @property
    def engine(self) -> Engine:
        """The database engine behind this store's session."""
        return self.session.engine

    @property
    def engine_name(self) -> str:
        """The engine's name, for reports (``"postgresql"`` or ``"cockroachdb"``)."""
        return self.session.engine.name

    @property
    def dialect(self) -> str:
        """:attr:`engine_name` under its former name, kept for existing code (``Client.dialect``
        reads it)."""
        return self.session.engine.name

    def layout(self) -> ShardLayout:
        """Read the current bucket layout from the database and point this session's statements
        at it (CockroachDB's ``{shard_col}``)."""
        return self.session.run(ops.layout())

    # -- producer ---------------------------------------------------------------------------
    def task_insert_many(
        self, queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]
    ) -> tuple[set[uuid.UUID], bool]:
        """See :func:`shardq.operations.task_insert_many`."""
        return self.session.run(ops.task_insert_many(queue, tasks, ids))

    def task_insert_backlog_many(
        self, queue: str, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]
    ) -> set[uuid.UUID]:
        return self.session.run(ops.task_insert_backlog_many(queue, tasks, ids))

    def task_exclusive_active(self, queue: str, keys: Sequence[str]) -> set[str]:
        return self.session.run(ops.task_exclusive_active(queue, keys))

    def task_backlog_supersede(self, queue: str, keys: Sequence[str], keep: Sequence[uuid.UUID]) -> int:
        return self.session.run(ops.task_backlog_supersede(queue, keys, keep))

    def exclusive_keys_lock(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Take the per-key locks (PostgreSQL; a no-op statement on CockroachDB) for this transaction."""
        self.session.run(ops.exclusive_keys_lock(pairs))

    def task_backlog_release(self, pairs: Sequence[tuple[str, str]]) -> set[uuid.UUID]:
        return self.session.run(ops.task_backlog_release(pairs))

    def task_exclusive_keys_by_id(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, tuple[str, str]]:
        return self.session.run(ops.task_exclusive_keys_by_id(ids))

    def task_cancel_many(self, ids: Sequence[uuid.UUID]) -> list[CancelledTask]:
        return self.session.run(ops.task_cancel_many(ids))

    def count_enqueued(self, queue: str, count: int) -> None:
        """Note ``count`` tasks enqueued into ``queue`` for the activity counters (see
        :class:`shardq.operations.EnqueueCounts`). Call it outside a transaction. On a caller's
        connection nothing is counted: the tasks exist only if the caller commits, and a counter
        row written there would be locked until then."""
        if self.enqueue_counts is not None:
            self.session.run(self.enqueue_counts.note(queue, count))

    def flush_enqueue_counts(self) -> bool:
        """Write the enqueue counts held here to ``shardq_stats`` (one statement). Returns False,
        keeping them, when the database refused."""
        if self.enqueue_counts is None:
            return True
        return self.session.run(self.enqueue_counts.flush())

    # -- consumer ---------------------------------------------------------------------------
    def claim_groups(self, visit_count: int, turn: int) -> list[list[int]]:
        """See :meth:`shardq.engine.Engine.claim_groups`."""
        return self.session.engine.claim_groups(visit_count, turn)

    def claim(
        self, buckets: Sequence[int], queue: str, limit: int, lease_seconds: float, *, durable: bool = True
    ) -> list[ClaimedTask]:
        """Lease up to ``limit`` ready tasks of ``queue`` from ``buckets``, one statement (see
        :meth:`shardq.engine.Engine.claim`)."""
        return self.session.run(self.session.engine.claim(buckets, queue, limit, lease_seconds, durable=durable))

    def promote_due(self, buckets: Sequence[int], queue: str, limit: int) -> int:
        """Make due scheduled tasks of ``queue`` in ``buckets`` ready; returns how many."""
        return self.session.run(self.session.engine.promote_due(buckets, queue, limit))

    def task_claim_batch(self, bucket: int, queue: str, limit: int, lease_seconds: float) -> list[ClaimedTask]:
        """``task_claim_batch``: lease up to ``limit`` ready tasks of one bucket under one token."""
        return self.session.run(claim_batch(bucket, queue, limit, lease_seconds))

    def task_claim_round(
        self, buckets: Sequence[int], queue: str, limit: int, lease_seconds: float
    ) -> list[ClaimedTask]:
        """A claim over ``buckets`` in order, one statement where the engine claims whole rounds
        (see :meth:`claim`)."""
        return self.claim(buckets, queue, limit, lease_seconds)

    def task_promote_due(self, bucket: int, queue: str, limit: int) -> int:
        """Make due scheduled tasks of one bucket ready; returns how many."""
        return self.session.run(promote_due_one(bucket, queue, limit))

    def task_ack_many(self, items: Sequence[Fenced], closed_tokens: Iterable[uuid.UUID] = ()) -> set[uuid.UUID]:
        """Delete finished tasks by whole key and token and close the claims ``closed_tokens``;
        returns the ids deleted (see :meth:`shardq.engine.Engine.ack_keys`)."""
        return self.session.run(self.session.engine.ack_keys(items, closed_tokens))

    def task_ack_claims(self, claims: Sequence[WholeClaim], *, in_transaction: bool = False) -> set[uuid.UUID]:
        """Ack whole claims (every task still held under each token finished); returns the ids
        that were *not* deleted because their lease had passed to someone else
        (:meth:`shardq.engine.Engine.ack_claims`)."""
        if not claims:
            return set()
        return self.session.run(self.session.engine.ack_claims(claims, in_transaction=in_transaction))

    def task_retry_many(
        self,
        items: Sequence[Fenced],
        delays: Sequence[float],
        errors: Sequence[str | None],
        *,
        require_expired: bool,
        refund: bool = False,
    ) -> set[uuid.UUID]:
        """See :func:`shardq.operations.task_retry_many`."""
        return self.session.run(
            ops.task_retry_many(items, delays, errors, require_expired=require_expired, refund=refund)
        )

    def task_bury_many(
        self, items: Sequence[Fenced], errors: Sequence[str | None], *, require_expired: bool
    ) -> set[uuid.UUID]:
        return self.session.run(ops.task_bury_many(items, errors, require_expired=require_expired))

    def task_release_many(self, items: Sequence[Fenced]) -> set[uuid.UUID]:
        return self.session.run(ops.task_release_many(items))

    def task_extend_many(self, items: Sequence[Fenced], lease_seconds: float) -> dict[uuid.UUID, dt.datetime]:
        return self.session.run(ops.task_extend_many(items, lease_seconds))

    # -- history (shardq.lifecycle.history): only for queues that keep finished tasks --------------------
    def task_ack_claims_recorded(
        self, claims: Sequence[WholeClaim], columns: SucceededColumns, *, notify: bool = False
    ) -> set[uuid.UUID]:
        """:meth:`task_ack_claims` writing the history rows of the tasks it deleted, in the same
        statements (``columns``: in the order of the claims' keys; ``notify``: wake outcome
        waiters, see :mod:`shardq.lifecycle.waiting`)."""
        if not claims:
            return set()
        return self.session.run(ops.ack_claims_recorded(claims, columns, notify=notify))

    def task_ack_many_recorded(
        self,
        items: Sequence[Fenced],
        records: Sequence[Finished],
        closed_tokens: Iterable[uuid.UUID] = (),
        *,
        notify: bool = False,
    ) -> set[uuid.UUID]:
        """:meth:`task_ack_many` writing the history rows of the tasks it deleted, in the same
        statement."""
        return self.session.run(ops.ack_keys_recorded(items, records, list(closed_tokens), notify=notify))

    def task_retry_many_recorded(
        self,
        items: Sequence[Fenced],
        delays: Sequence[float],
        errors: Sequence[str | None],
        attempts: Sequence[FailedAttempt],
        *,
        require_expired: bool,
    ) -> set[uuid.UUID]:
        """:meth:`task_retry_many` and a row per failed attempt it put back, one transaction."""

        def record(done: set[uuid.UUID]) -> Plan[None]:
            return ops.attempt_record_many([a for a in attempts if a.id in done])

        return self.session.run(
            ops.removed_recorded(
                lambda: ops.task_retry_many(items, delays, errors, require_expired=require_expired), record
            )
        )

    def task_bury_many_recorded(
        self,
        items: Sequence[Fenced],
        errors: Sequence[str | None],
        records: Sequence[Finished],
        *,
        require_expired: bool,
        atomically: bool = True,
    ) -> set[uuid.UUID]:
        """:meth:`task_bury_many` and the history rows of the tasks it moved; one transaction of
        its own, or (``atomically=False``) inside the caller's."""

        def bury() -> Plan[set[uuid.UUID]]:
            return ops.task_bury_many(items, errors, require_expired=require_expired)

        def record(done: set[uuid.UUID]) -> Plan[None]:
            return ops.history_record_dead([r for r in records if r.id in done])

        if atomically:
            return self.session.run(ops.removed_recorded(bury, record))
        done = self.session.run(bury())
        self.session.run(record(done))
        return done

    def task_status(self, task_id: uuid.UUID) -> TaskStatus:
        """See :func:`shardq.operations.task_status`."""
        return self.session.run(ops.task_status(task_id))

    def history_list(
        self,
        queue: str,
        *,
        state: str | None = None,
        since: dt.datetime | None = None,
        after: tuple[dt.datetime, uuid.UUID] | None = None,
        limit: int = 50,
    ) -> list[FinishedTask]:
        return self.session.run(ops.history_list(queue, state=state, since=since, after=after, limit=limit))

    def history_prune(self, queue: str, keep_seconds: float, limit: int) -> int:
        return self.session.run(ops.history_prune(queue, keep_seconds, limit))

    def attempts_prune(self, queue: str, keep_seconds: float, limit: int) -> int:
        return self.session.run(ops.attempts_prune(queue, keep_seconds, limit))

    # -- reaper -----------------------------------------------------------------------------
    def task_reap_candidates(self, bucket: int, limit: int) -> list[ExpiredLease]:
        return self.session.run(self.session.engine.reap_candidates(bucket, limit))

    def sweep_turns_take(self, buckets: Sequence[int], every_seconds: float) -> list[int]:
        """See :func:`shardq.operations.sweep_turns_take`."""
        return self.session.run(ops.sweep_turns_take(buckets, every_seconds))

    def lease_records_settle(self, bucket: int, limit: int) -> tuple[int, int]:
        """Settle expired lease records of ``bucket`` (dropped, pushed); (0, 0) where the engine
        keeps none (see :meth:`shardq.engine.Engine.sweep_lease_records`)."""
        return self.session.run(self.session.engine.sweep_lease_records(bucket, limit))

    # -- wake-ups (an engine capability: see shardq.lifecycle.notify) ---------------------------------
    def queue_notify(self, queue: str) -> None:
        """Wake workers listening for ``queue`` (PostgreSQL only; see :mod:`shardq.lifecycle.notify`)."""
        self.session.run(ops.queue_notify(queue))

    def notify_listen(self) -> None:
        """Subscribe this store's session to queue wake-ups, for as long as it lives."""
        self.session.listen("notify_listen")

    def notifications(self, timeout: float) -> list[str]:
        """Queue names of wake-ups received (waiting up to ``timeout`` for the first)."""
        return self.session.notifications(timeout)

    # -- queues -----------------------------------------------------------------------------
    def queue_ensure(self, queue: str) -> None:
        self.session.run(ops.queue_ensure(queue))

    def queue_get(self, queue: str) -> QueueSettings | None:
        return self.session.run(ops.queue_get(queue))

    def queue_list(self) -> list[QueueSettings]:
        return self.session.run(ops.queue_list())

    def queue_update(self, queue: str, **changes: object) -> QueueSettings | None:
        return self.session.run(ops.queue_update(queue, changes))

    # -- flow control (shardq.lifecycle.flow) ---------------------------------------------------------
    def flow_slots_take(self, queue: str, limit: int) -> list[tuple[int, dt.datetime]]:
        """Lock up to ``limit`` free slots of ``queue``: (slot, free_at) each."""
        return self.session.run(ops.flow_slots_take(queue, limit))

    def flow_slots_hold(
        self, queue: str, slots: Sequence[tuple[int, dt.datetime]], token: uuid.UUID, lease_seconds: float
    ) -> list[tuple[int, dt.datetime]]:
        """Hold slots just taken ((slot, free_at) each) for ``token`` until now + ``lease_seconds``."""
        return self.session.run(ops.flow_slots_hold(queue, slots, token, lease_seconds))

    def flow_slots_extend(
        self, queue: str, slots: Sequence[int], token: uuid.UUID, lease_seconds: float
    ) -> list[tuple[int, dt.datetime]]:
        """Keep ``token``'s slots until now + ``lease_seconds``; returns those still its own."""
        return self.session.run(ops.flow_slots_extend(queue, slots, token, lease_seconds))

    def flow_slots_release(self, queue: str, slots: Sequence[int], token: uuid.UUID) -> int:
        """Free ``token``'s slots at once; returns how many were still its own."""
        return self.session.run(ops.flow_slots_release(queue, slots, token))

    def flow_slots_add(self, queue: str, slots: int) -> None:
        self.session.run(ops.flow_slots_add(queue, slots))

    def flow_slots_trim(self, queue: str, slots: int) -> None:
        self.session.run(ops.flow_slots_trim(queue, slots))

    def flow_tokens_take(self, queue: str) -> RateTokens | None:
        """Lock and read ``queue``'s token bucket, or None when it has none."""
        return self.session.run(ops.flow_tokens_take(queue))

    def flow_tokens_spend(self, queue: str, tokens: float, refilled_at: dt.datetime) -> None:
        self.session.run(ops.flow_tokens_spend(queue, tokens, refilled_at))

    def flow_tokens_reset(self, queue: str, tokens: float) -> None:
        self.session.run(ops.flow_tokens_reset(queue, tokens))

    def flow_tokens_drop(self, queue: str) -> None:
        self.session.run(ops.flow_tokens_drop(queue))

    def flow_usage(self) -> dict[str, tuple[int, int]]:
        """(slots held now, slots in all) per queue with a concurrency limit."""
        return self.session.run(ops.flow_usage())

    # -- introspection ----------------------------------------------------------------------
    def stats_snapshot(self, *, historical: bool) -> bool:
        """See :func:`shardq.operations.stats_snapshot`."""
        return self.session.run(ops.stats_snapshot(historical=historical))

    def stats_now(self) -> dict[str, Any]:
        return self.session.run(ops.stats_now())

    def stats_depth(self, queues: Sequence[str], buckets: Sequence[int], cap: int) -> list[dict[str, Any]]:
        """See :func:`shardq.operations.stats_depth`."""
        return self.session.run(ops.stats_depth(queues, buckets, cap))

    def stats_dead_count(self, queue: str, cap: int) -> int:
        return self.session.run(ops.stats_dead_count(queue, cap))

    def stats_window(self, minutes: int) -> dict[str, Activity]:
        """Activity per queue in the current minute and the ``minutes`` full minutes before it."""
        return self.session.run(ops.stats_window(minutes))

    def stats_add_many(self, row: int, activity: Mapping[str, Activity]) -> None:
        """Add each queue's activity to the current minute's counters in writer row ``row``."""
        self.session.run(ops.stats_add_many(row, activity))

    def stats_prune(self, keep_seconds: float, limit: int) -> int:
        return self.session.run(ops.stats_prune(keep_seconds, limit))

    def task_count_by_bucket(self, *, historical: bool = True) -> dict[int, int]:
        """Rows per bucket. With ``historical``, where the engine has historical reads
        (CockroachDB), a read ~5 s in the past (no waiting on claimers), falling back to a
        current read when the layout is younger than that read's timestamp."""
        return self.session.run(self.session.engine.count_by_bucket(historical))

    def schema_jobs(self) -> list[SchemaJob]:
        """Unfinished schema-change jobs of shardq_tasks (a resize in progress on CockroachDB;
        none where schema changes are transactional)."""
        return self.session.run(self.session.engine.schema_jobs())

    def task_get(self, task_id: uuid.UUID) -> TaskInfo | None:
        """A task of the tasks table by id (one index descent), or None."""
        return self.session.run(ops.task_get(task_id))

    # -- periodic slots (shardq.maintenance.periodic) and dead letters ----------------------------------
    def periodic_slot_take(
        self, name: str, slot: dt.datetime, queue: str, payload: bytes, *, priority: int, max_attempts: int | None
    ) -> bool:
        """See :func:`shardq.operations.periodic_slot_take`."""
        return self.session.run(
            ops.periodic_slot_take(name, slot, queue, payload, priority=priority, max_attempts=max_attempts)
        )

    def periodic_last_slots(self, names: Sequence[str]) -> dict[str, dt.datetime]:
        """The latest slot taken of each schedule named (schedules never taken are absent)."""
        return self.session.run(ops.periodic_last_slots(names))

    def periodic_slots_prune(self, keep_seconds: float, limit: int) -> int:
        """Delete up to ``limit`` slot rows older than ``keep_seconds``, never a schedule's latest."""
        return self.session.run(ops.periodic_slots_prune(keep_seconds, limit))

    def dead_get(self, task_id: uuid.UUID) -> TaskInfo | None:
        """A dead-lettered task by id (its primary key), or None."""
        return self.session.run(ops.dead_get(task_id))

    def dead_list(self, queue: str, limit: int) -> list[DeadTask]:
        return self.session.run(ops.dead_list(queue, limit))

    def dead_list_after(self, queue: str, after_at: dt.datetime, after_id: uuid.UUID, limit: int) -> list[DeadTask]:
        return self.session.run(ops.dead_list_after(queue, after_at, after_id, limit))

    def dead_ids_page(self, queue: str, after: uuid.UUID, limit: int) -> list[uuid.UUID]:
        return self.session.run(ops.dead_ids_page(queue, after, limit))

    def dead_requeue_ids(self, queue: str, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        return self.session.run(ops.dead_requeue_ids(queue, ids))

    def dead_purge_batch(self, queue: str, limit: int) -> int:
        return self.session.run(ops.dead_purge_batch(queue, limit))
