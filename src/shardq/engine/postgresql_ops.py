"""PostgreSQL's operations (plans over ``sql/postgresql`` and ``sql/common``): the claim over a
whole round of buckets, whole-claim acks and lease-record upkeep through ``shardq_leases``, the
depth of every (queue, bucket) in one statement. Mixed into
:class:`~shardq.engine.postgresql.PostgreSQLEngine`."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from shardq.engine.common import (
    RANKS,
    STATS_PRIORITIES_MAX,
    column_arrays,
    depth_row,
    key_arrays,
    notify_chunks,
    read_steps_acked,
)
from shardq.errors import NotMigrated
from shardq.models.history import SucceededColumns
from shardq.models.layout import ShardLayout
from shardq.models.leases import Fenced, HandoffOffer, WholeClaim
from shardq.models.tasks import ClaimedTask, TaskKey
from shardq.sql.plan import Atomically, Call, Plan, SchemaChange


def _bounds(claim: WholeClaim) -> dict[str, Any]:
    """A whole claim's key range, (rank, exec_time, id) from its first task to its last."""
    (first_rank, first_exec, first_id), (last_rank, last_exec, last_id) = claim.first, claim.last
    return {
        "first_rank": first_rank,
        "first_exec": first_exec,
        "first_id": first_id,
        "last_rank": last_rank,
        "last_exec": last_exec,
        "last_id": last_id,
    }


class PostgreSQLOperations:
    """See the module documentation."""

    def read_layout(self) -> Plan[ShardLayout]:
        """The count lives in ``shardq_buckets``; while a shrink moves rows out of the dropped
        buckets, consumers keep visiting the old, larger range."""
        row = yield Call("layout_get", rows="one")
        if row is None:
            raise NotMigrated()
        resizing_from = row["resizing_from"]
        visit = max(row["bucket_count"], resizing_from or 0)
        return ShardLayout(row["bucket_count"], None, visit, resizing_from)

    def claim_groups(self, visit_count: int, turn: int) -> list[list[int]]:
        # One statement walks every bucket, starting one bucket further each round, so a queue
        # whose tasks trickle into every bucket costs one statement per round, not one per bucket.
        return [[(turn + i) % visit_count for i in range(visit_count)]]

    def claim(
        self, buckets: Sequence[int], queue: str, limit: int, lease_seconds: float, *, durable: bool = True
    ) -> Plan[list[ClaimedTask]]:
        """``task_claim_round``: bucket by bucket in the order given, each bucket's tasks under a
        lease token of their own; not durable, committed asynchronously (see the statement)."""
        tokens = [uuid.uuid4() for _ in buckets]
        rows = yield Call(
            "task_claim_round",
            {
                "buckets": list(buckets),
                "tokens": tokens,
                "queue": queue,
                "limit": limit,
                "lease_seconds": lease_seconds,
                "durable": durable,
                **RANKS,
            },
            binary=True,
            tuples=True,
        )
        token_of = dict(zip(buckets, tokens))
        from_claim_row = ClaimedTask.from_claim_row
        return [from_claim_row(row, queue, token_of[row[0]]) for row in rows]

    def steps_acked(
        self, task_ids: Sequence[uuid.UUID], handoff: HandoffOffer | None = None, parents: bool = False
    ) -> Plan[tuple[list[tuple], list[uuid.UUID]]]:
        """With an offer, ``workflow_steps_acked_take``: the read and the take in one statement, a
        row update per task taken, leased where it waits (its key, at the backlog rank, unchanged:
        a HOT update), and one lease record per bucket and queue. A step whose child it took
        sends no row back: a chain's step costs the worker only its next task's row."""
        if handoff is not None:
            handoff.tasks = []
        if handoff is None or handoff.room <= 0:
            return (yield from read_steps_acked(task_ids)), []
        rows = yield Call(
            "workflow_steps_acked_take",
            {
                "task_ids": list(task_ids),
                "queues": list(handoff.queues),
                "lease_seconds": list(handoff.lease_seconds),
                "room": handoff.room,
                "token": uuid.uuid4(),
                "parents": parents,
            },
            binary=True,
            tuples=True,
        )
        acked: list[tuple] = []
        taken: list[ClaimedTask] = []
        taken_parents: list[uuid.UUID] = []
        for row in rows:
            task_id = row[11]
            if task_id is None:
                acked.append(row[:7])
                continue
            (
                bucket,
                queue,
                rank,
                exec_time,
                _,
                attempts,
                max_attempts,
                payload,
                expires,
                created,
                priority,
                workflow,
                token,
                parent,
            ) = row[7:]
            taken.append(
                ClaimedTask(
                    TaskKey(bucket, queue, rank, exec_time, task_id),
                    attempts,
                    max_attempts,
                    payload,
                    token,
                    expires,
                    created,
                    priority,
                    None,
                    None,
                    workflow,
                )
            )
            if parent is not None:
                taken_parents.append(parent)
        handoff.tasks = taken
        return acked, taken_parents

    def promote_due(self, buckets: Sequence[int], queue: str, limit: int) -> Plan[int]:
        rows = yield Call("task_promote_due_round", {"buckets": list(buckets), "queue": queue, "limit": limit, **RANKS})
        return len(rows)

    def ack_keys(self, items: Sequence[Fenced], closed_tokens: Iterable[uuid.UUID] = ()) -> Plan[set[uuid.UUID]]:
        """``task_ack_many``, which names the ids it deleted only when some were not (a lease
        lost): the worker builds no row per task."""
        params = key_arrays(items)
        params["closed_tokens"] = list(closed_tokens)
        params["expected"] = len(items)
        # Fenced by whole key + lease token: safe to re-send after 40003 (see shardq.sessions.rules).
        rows = yield Call("task_ack_many", params, resend_ambiguous=True, binary=True, tuples=True)
        deleted = rows[0][1]
        if deleted is None:
            return {item.key.id for item in items}
        return set(deleted)

    def ack_claims(self, claims: Sequence[WholeClaim], *, in_transaction: bool = False) -> Plan[set[uuid.UUID]]:
        """One statement per claim deletes its rows by key range and token (no per-task arrays)
        and drops its lease record; several claims in one transaction. A round claim leases a few
        tasks in each of many buckets, one claim per bucket: committed one by one, their acks cost
        a WAL flush each, close to one per task when tasks trickle in (docs/latency.md)."""
        if len(claims) > 1 and not in_transaction:
            lost: set[uuid.UUID] = yield Atomically(lambda: self._ack_each(claims))
            return lost
        return (yield from self._ack_each(claims))

    def _ack_each(self, claims: Sequence[WholeClaim]) -> Plan[set[uuid.UUID]]:
        lost: set[uuid.UUID] = set()
        for c in claims:
            params = {"bucket": c.bucket, "queue": c.queue, **_bounds(c), "token": c.token, "expected": len(c.keys)}
            # Fenced by key range + lease token: safe to re-send after 40003 (see shardq.sessions.rules).
            rows = yield Call("task_ack_claim", params, resend_ambiguous=True)
            row = rows[0]
            if row["ids"] is not None:  # fewer deleted than held: name the ones left behind
                deleted = set(row["ids"])
                lost.update(k.id for k in c.keys if k.id not in deleted)
        return lost

    def ack_claims_kept(
        self, claims: Sequence[WholeClaim], columns: SucceededColumns, notify: bool = False
    ) -> Plan[set[uuid.UUID]]:
        """:meth:`ack_claims` with each deleted task's history row written by the same statement
        (``task_ack_claim_kept``): the claim's ids travel once, with the task names, run times and
        results (a column NULL for every task of the claim travels as an empty array);
        ``notify`` adds the claim's ids for outcome waiters. Several claims commit in one
        transaction, as in :meth:`ack_claims`."""
        if len(claims) > 1:
            lost: set[uuid.UUID] = yield Atomically(lambda: self._ack_each_kept(claims, columns, notify))
            return lost
        return (yield from self._ack_each_kept(claims, columns, notify))

    def _ack_each_kept(
        self, claims: Sequence[WholeClaim], columns: SucceededColumns, notify: bool
    ) -> Plan[set[uuid.UUID]]:
        lost: set[uuid.UUID] = set()
        start = 0
        for c in claims:
            ids = [k.id for k in c.keys]
            stop = start + len(ids)
            params = {
                "bucket": c.bucket,
                "queue": c.queue,
                **_bounds(c),
                "token": c.token,
                "expected": len(c.keys),
                "ids": ids,
                "notify": notify_chunks(ids) if notify else [],
                **column_arrays(columns, start, stop, pad_nulls=True),
            }
            start = stop
            rows = yield Call("task_ack_claim_kept", params, resend_ambiguous=True)
            row = rows[0]
            if row["ids"] is not None:
                deleted = set(row["ids"])
                lost.update(i for i in ids if i not in deleted)
        return lost

    def sweep_lease_records(self, bucket: int, limit: int) -> Plan[tuple[int, int]]:
        row = yield Call("lease_records_settle", {"bucket": bucket, "limit": limit}, rows="one")
        return (row["dropped"], row["pushed"]) if row else (0, 0)

    def stats_snapshot(self, historical: bool) -> Plan[bool]:
        # One consistent, read-only view; PostgreSQL has no reads in the past.
        yield Call("stats_snapshot_begin", rows="none")
        return False

    def depth(self, queues: Sequence[str], buckets: Sequence[int], cap: int) -> Plan[list[dict[str, Any]]]:
        """Leased tasks through the lease records (one statement), everything else in one
        statement for every (queue, bucket): the active span minus the leased is the ready."""
        if not queues or not buckets:
            return []
        limit = cap * len(buckets)
        leased_rows = yield Call("stats_leased_by_bucket", {"buckets": list(buckets), "limit": limit, **RANKS})
        leased = {(row["queue"], int(row["bucket"])): row["leased"] for row in leased_rows}
        expired = {(row["queue"], int(row["bucket"])): row["expired"] for row in leased_rows}
        # leased at the backlog rank (chain steps taken at their release): in the backlog span
        taken = {(row["queue"], int(row["bucket"])): row["taken"] for row in leased_rows}
        leased_capped = sum(leased.values()) >= limit
        rows = yield Call(
            "stats_depth_many",
            {"queues": list(queues), "buckets": list(buckets), "cap": cap, "rank_cap": STATS_PRIORITIES_MAX, **RANKS},
        )
        out = []
        for row in rows:
            key = (row["queue"], int(row["bucket"]))
            n_leased, n_taken = leased.get(key, 0), taken.get(key, 0)
            depth = depth_row(
                row["queue"],
                int(row["bucket"]),
                cap,
                ready=max(0, row["active"] - (n_leased - n_taken)),
                due_scheduled=row["due_scheduled"],
                scheduled=row["scheduled"],
                leased=n_leased,
                expired=expired.get(key, 0),
                leased_capped=leased_capped,
                backlog=max(0, row["backlog"] - row["waiting"] - n_taken),
                waiting=row["waiting"],
                backlog_capped=row["backlog"] >= cap,
                oldest=[row["oldest_ready"], row["oldest_due_scheduled"]],
            )
            depth["ready_capped"] = row["active"] >= cap or row["due_scheduled"] >= cap
            out.append(depth)
        return out

    def count_by_bucket(self, historical: bool) -> Plan[dict[int, int]]:
        rows = yield Call("task_count_by_bucket")
        return {int(row["bucket"]): row["tasks"] for row in rows}

    def spark_stage_ready(self, stage: str) -> Plan[None]:
        # Each chunk's merge reads its rows by chunk: one index range scan, not a scan per chunk.
        yield SchemaChange("spark_stage_index", identifiers={"stage": stage})
