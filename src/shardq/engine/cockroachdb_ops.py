"""CockroachDB's operations (plans over ``sql/cockroachdb`` and ``sql/common``): one bucket per
claim statement, acks by key (no lease records), depth read per (queue, bucket), historical reads
for operators, schema-change jobs from ``crdb_internal``. Mixed into
:class:`~shardq.engine.cockroachdb.CockroachDBEngine`."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from shardq.engine.common import (
    RANKS,
    STATS_PRIORITIES_MAX,
    ack_many,
    ack_many_kept,
    ack_many_kept_columns,
    claim_batch,
    depth_row,
    promote_due_one,
)
from shardq.errors import NotMigrated, ShardLayoutChanged
from shardq.models.history import Finished, SucceededColumns
from shardq.models.layout import SchemaJob, ShardLayout
from shardq.models.leases import Fenced, WholeClaim
from shardq.models.tasks import ClaimedTask
from shardq.sql.plan import Call, Plan, WithInternals

# pg_indexes renders a hash-sharded index as "... USING HASH WITH (bucket_count=N)"
# (pkg/sql/logictest/testdata/logic_test/hash_sharded_index).
_BUCKET_COUNT = re.compile(r"USING HASH WITH \(bucket_count\s*=\s*(\d+)\)", re.IGNORECASE)


def bucket_count_of(index_definition: str) -> int | None:
    """The bucket count in a hash-sharded index's ``pg_indexes.indexdef``, or None."""
    match = _BUCKET_COUNT.search(index_definition or "")
    return int(match.group(1)) if match else None


@cache
def _one_bucket_groups(visit_count: int) -> list[list[int]]:
    # Asked once per claim call: built once per bucket count (up to 2048 of them), shared, never
    # changed by the caller.
    return [[bucket] for bucket in range(visit_count)]


class CockroachDBOperations:
    """See the module documentation."""

    def read_layout(self) -> Plan[ShardLayout]:
        """The shard column and bucket count of ``shardq_tasks``'s primary key, read in one
        statement (``shard_layout_get``) from ``information_schema.statistics`` and ``pg_indexes``,
        which every supported version serves outside the unsafe-internals gate (``crdb_internal``
        and a nested ``[SHOW INDEX]`` reading it are gated from 26.1: audits F4, N4)."""
        rows = yield Call("shard_layout_get")
        # The primary index keeps its default name <table>_pkey; prefer it should an operator have
        # added a hash-sharded secondary index of their own.
        rows.sort(key=lambda row: row["index_name"] != "shardq_tasks_pkey")
        for row in rows:
            count = bucket_count_of(row["index_definition"])
            if count is not None:
                return ShardLayout(bucket_count=count, shard_column=row["shard_column"])
        raise NotMigrated("shardq_tasks has no hash-sharded primary key: run `shardq migrate` first")

    def schema_jobs(self) -> Plan[list[SchemaJob]]:
        """Unfinished schema-change jobs of ``shardq_tasks``. Only ``crdb_internal.jobs`` carries a
        job's descriptor ids, so this reads on a session that opts in to internals
        (:class:`~shardq.sql.plan.WithInternals`); it is an operator's read (``buckets show``, a
        resize), never on a worker's path."""

        def read() -> Plan[list[SchemaJob]]:
            rows = yield Call("table_schema_jobs_running")
            return [
                SchemaJob(
                    job_id=int(row["job_id"]),
                    job_type=row["job_type"],
                    status=row["status"],
                    fraction_completed=row["fraction_completed"],
                    running_status=row["running_status"],
                    description=row["description"],
                )
                for row in rows
            ]

        jobs: list[SchemaJob] = yield WithInternals(read)
        return jobs

    def claim_groups(self, visit_count: int, turn: int) -> list[list[int]]:
        # A SKIP LOCKED scan must stay inside one span of the key, or it locks far more rows than
        # it returns (cockroachdb#121917): one bucket per claim statement.
        return _one_bucket_groups(visit_count)

    def claim(
        self, buckets: Sequence[int], queue: str, limit: int, lease_seconds: float, *, durable: bool = True
    ) -> Plan[list[ClaimedTask]]:
        """``task_claim_batch`` in the one bucket of ``buckets``. Always durable: a CockroachDB
        commit is replicated before it returns, and there is nothing to relax."""
        (bucket,) = buckets
        return (yield from claim_batch(bucket, queue, limit, lease_seconds))

    def promote_due(self, buckets: Sequence[int], queue: str, limit: int) -> Plan[int]:
        (bucket,) = buckets
        return (yield from promote_due_one(bucket, queue, limit))

    def ack_keys(self, items: Sequence[Fenced], closed_tokens: Any = ()) -> Plan[set[uuid.UUID]]:
        # No lease records to drop: without items there is nothing to send.
        if not items:
            return set()
        return (yield from ack_many(items, closed_tokens))

    def ack_claims(self, claims: Sequence[WholeClaim], *, in_transaction: bool = False) -> Plan[set[uuid.UUID]]:
        """The per-key path: one statement for all the claims' tasks (a transaction of its own, or
        the caller's)."""
        if not claims:
            return set()
        items = [Fenced(key, c.token) for c in claims for key in c.keys]
        done = yield from ack_many(items, [c.token for c in claims])
        return {f.key.id for f in items if f.key.id not in done}

    def ack_keys_kept(
        self,
        items: Sequence[Fenced],
        records: Mapping[uuid.UUID, Finished],
        closed_tokens: Any = (),
        notify: bool = False,
    ) -> Plan[set[uuid.UUID]]:
        # No lease records, no notifications (waiters poll): only the tasks and their history.
        if not items:
            return set()
        return (yield from ack_many_kept(items, records))

    def ack_claims_kept(
        self, claims: Sequence[WholeClaim], columns: SucceededColumns, notify: bool = False
    ) -> Plan[set[uuid.UUID]]:
        """The per-key path, as :meth:`ack_claims` (the items in the claims' key order, as
        ``columns``)."""
        if not claims:
            return set()
        items = [Fenced(key, c.token) for c in claims for key in c.keys]
        done = yield from ack_many_kept_columns(items, columns)
        return {f.key.id for f in items if f.key.id not in done}

    def stats_snapshot(self, historical: bool) -> Plan[bool]:
        # A follower read never waits on claimers; the current one is read-only.
        yield Call("stats_snapshot_historical" if historical else "stats_snapshot_begin", rows="none")
        return historical

    def depth(self, queues: Sequence[str], buckets: Sequence[int], cap: int) -> Plan[list[dict[str, Any]]]:
        """One statement per (queue, bucket), each a handful of capped single-shard spans with
        bound values (no correlated subquery for the optimizer to get wrong), and one short scan
        per priority in use for the oldest ready task."""
        out = []
        for queue in queues:
            for bucket in buckets:
                row = yield Call("stats_depth_one", {"queue": queue, "bucket": bucket, "cap": cap, **RANKS}, rows="one")
                assert row is not None
                heads = []
                after = -(2**63)
                for _ in range(STATS_PRIORITIES_MAX):
                    head = yield Call(
                        "stats_ready_head_after", {"queue": queue, "bucket": bucket, "after": after}, rows="one"
                    )
                    if head is None:
                        break
                    heads.append(head["exec_time"])
                    after = head["rank"]
                out.append(
                    depth_row(
                        queue,
                        bucket,
                        cap,
                        ready=row["ready"],
                        due_scheduled=row["due_scheduled"],
                        scheduled=row["scheduled"],
                        leased=row["leased"],
                        expired=row["expired"],
                        leased_capped=row["leased"] >= cap,
                        backlog=row["backlog"],
                        waiting=row["waiting"],
                        oldest=[*heads, row["oldest_due_scheduled"]],
                    )
                )
        return out

    def count_by_bucket(self, historical: bool) -> Plan[dict[int, int]]:
        """With ``historical`` a read ~5 s in the past (no waiting on claimers); when the current
        layout is younger than that read's timestamp (a resize, or the table itself less than
        ~5 s old) it falls back to a current read."""
        rows = None
        if historical:
            try:
                rows = yield Call("task_count_by_bucket")
            except (ShardLayoutChanged, NotMigrated):
                rows = None
        if rows is None:
            rows = yield Call("task_count_by_bucket_current")
        return {int(row["bucket"]): row["tasks"] for row in rows}
