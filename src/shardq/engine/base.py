"""What an engine is: everything PostgreSQL and CockroachDB do differently, behind one interface.

The rest of shardq never asks which engine it talks to. It takes the :class:`Engine` of its
session (``session.engine``, or ``yield ENGINE`` in a plan) and calls an *operation*: claim a round,
settle, find expired leases, promote, read depth, layout and counts, stage a Spark run, judge an
EXPLAIN. Each operation is a plan (:mod:`shardq.sql.plan`) the engine writes beside its own
statements in ``sql/<engine>/``; the sync and the asyncio sessions run it. Besides operations the
engine object holds connection facts (URL schemes, startup options, isolation, retry policy,
version check), the DDL facts the migrations write with (:class:`Ddl`), and exactly the
capabilities in :data:`CAPABILITIES`, which callers must plan around. Adding a third engine means
adding one subclass and registering it in :mod:`shardq.engine` (and a module in
:mod:`shardq.resize`).

An engine object holds no connection and no state: one instance per engine, shared by every
session. It describes work and runs none: nothing here takes a session.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from shardq import sql as queries
from shardq.engine import common
from shardq.models.history import Finished, SucceededColumns
from shardq.models.layout import SchemaJob, ShardLayout
from shardq.models.leases import ExpiredLease, Fenced, HandoffOffer, WholeClaim
from shardq.models.tasks import ClaimedTask, NewTask, TaskKey
from shardq.sql.plan import Call, Plan

#: Reads a parameter the server reported at connect (``server_version``, ``crdb_version`` …).
ParameterStatus = Callable[[str], "str | None"]

#: The only yes/no facts of an engine a caller may read, because it must plan around them:
#: whether idle workers can be woken (LISTEN/NOTIFY) and whether a Spark run's write tasks COPY
#: into the tasks table themselves (the job then ships another writer to its executors).
CAPABILITIES = ("supports_wakeups", "spark_copy_writer")


#: A workflow step with at least this many parents counts them in shard rows: below it, the acks
#: that queue on its one row are few (at most this many, and fewer in batches), and the shard rows
#: would outnumber a small fan-in's edges (docs/workflows.md, "Fan-in in shards").
FAN_IN_SHARD_FROM = 256
#: Shard rows of such a step: concurrent acks of its parents spread over this many rows.
FAN_IN_SHARDS = 32


@dataclass(frozen=True)
class RetryPolicy:
    """How :class:`~shardq.sessions.session.Session` retries what the server says may succeed if re-run.

    ``serialization_retries``: attempts after a 40001 (the statement, or a transaction's whole
    body, is re-run with full-jitter backoff between ``base_seconds`` and ``cap_seconds``); the
    same bound and backoff apply to re-sending a statement its caller marked safe to repeat after
    a 40003 ("result is ambiguous", which only CockroachDB reports).
    """

    serialization_retries: int = 10
    base_seconds: float = 0.005
    cap_seconds: float = 1.0


@dataclass(frozen=True)
class Ddl:
    """How the migrations (``shardq/migrations``) write this engine's DDL: column type names,
    whether schema changes may share a transaction, whether tables take ``fillfactor``, whether
    the tasks table's key is hash-sharded by the database (CockroachDB ``USING HASH``), whether a
    partial index's predicate may be an expression over a cast column (``substr(c::text, …)``:
    checked against PostgreSQL's planner; CockroachDB's not yet on a cluster, migration 0019)."""

    text: str
    blob: str
    transactional: bool
    fillfactor: bool
    hash_sharded: bool
    expression_predicates: bool


class Engine(ABC):
    """One database engine shardq runs on. See the module documentation."""

    #: The engine's name: the folder of its statements under ``sql/`` and what reports show.
    name: ClassVar[str]
    #: The SQLAlchemy dialect name Alembic runs the migrations with.
    sqlalchemy_dialect: ClassVar[str]
    #: The module that registers that dialect with SQLAlchemy, when it is not built in.
    sqlalchemy_dialect_module: ClassVar[str | None] = None
    #: The server versions shardq supports, for reports ("supported: CockroachDB ≥ 23.1").
    supported_versions: ClassVar[str]
    #: URL schemes that name this engine up front (``cockroachdb://``); the server is asked otherwise.
    url_schemes: ClassVar[tuple[str, ...]] = ()
    ddl: ClassVar[Ddl]

    # -- sessions ------------------------------------------------------------------------------
    retry: ClassVar[RetryPolicy] = RetryPolicy()
    #: Isolation level every explicit transaction is pinned to, or None for the server's default.
    transaction_isolation: ClassVar[str | None] = None
    #: Statements that read engine-internal catalogs: they run only on sessions opened with
    #: ``internals=True`` (see :meth:`startup_options`; plans reach one with
    #: :class:`~shardq.sql.plan.WithInternals`).
    statements_needing_internals: ClassVar[frozenset[str]] = frozenset()
    #: What precedes a statement to get its EXPLAIN output as text.
    explain_prefix: ClassVar[str]

    # -- capabilities (see CAPABILITIES) --------------------------------------------------------
    #: LISTEN/NOTIFY wake-ups exist (otherwise workers only poll).
    supports_wakeups: ClassVar[bool]
    #: Spark's write tasks COPY each chunk into the tasks table themselves (shardq.spark.writer)
    #: instead of staging rows for a merge.
    spark_copy_writer: ClassVar[bool]
    #: Chunks of a Spark run when the caller does not choose.
    spark_chunks_default: ClassVar[int]

    # Array parameters go in the server's binary format (otherwise text arrays).
    _binary_arrays: ClassVar[bool] = False
    # An optional enqueue column no task of a batch sets may be sent as one NULL array.
    _null_arrays: ClassVar[bool] = False

    # -- workflows -------------------------------------------------------------------------------
    #: A workflow step with at least this many parents counts them in shard rows (None: never).
    fan_in_shard_from: ClassVar[int | None] = FAN_IN_SHARD_FROM

    def fan_in_shards(self, parents: int) -> int:
        """How many shard rows count the parents of a workflow step with ``parents`` parents (0:
        the step's own row counts them). A fan-in from :attr:`fan_in_shard_from` parents on is
        counted in :data:`FAN_IN_SHARDS` rows, so that concurrent acks of its parents lower
        different rows instead of queueing on one (docs/workflows.md, "Fan-in in shards")."""
        start = self.fan_in_shard_from
        return FAN_IN_SHARDS if start is not None and parents >= start else 0

    def statements(self) -> dict[str, queries.Statement]:
        """Every named statement this engine sends: ``sql/common`` overridden by its own folder."""
        return queries.statements_for(self.name, binary=self._binary_arrays)

    # -- connection facts ----------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def recognises(cls, parameter_status: ParameterStatus) -> bool:
        """Whether the server a connection reached is this engine, from what it reported at
        connect."""

    @abstractmethod
    def startup_options(self, *, statement_timeout_ms: int | None = None, internals: bool = False) -> list[str]:
        """The ``-c name=value`` settings sent in the ``options`` startup parameter of every
        connection. ``internals``: the session reads engine-internal catalogs (CockroachDB's
        ``crdb_internal`` jobs) and opts in to them."""

    @abstractmethod
    def check_version(self, parameter_status: ParameterStatus) -> None:
        """Raise :class:`~shardq.errors.UnsupportedServer` (one line naming the version found
        and the minimum) when the server is older than shardq supports."""

    # -- layout ----------------------------------------------------------------------------------
    @abstractmethod
    def read_layout(self) -> Plan[ShardLayout]:
        """The tasks table's current bucket layout (bucket count, buckets to visit, the shard
        column statements must filter on)."""

    def schema_jobs(self) -> Plan[list[SchemaJob]]:
        """Unfinished schema-change jobs of the tasks table (a resize in progress); none where
        schema changes are transactional."""
        return []
        yield  # a plan that sends nothing

    # -- enqueue ---------------------------------------------------------------------------------
    def task_arrays(self, tasks: Sequence[NewTask], ids: Sequence[uuid.UUID]) -> dict[str, Any]:
        """The parameters of ``task_insert_many``/``task_insert_many_fresh`` for ``tasks``."""
        return common.task_arrays(tasks, ids, compact=self._null_arrays)

    # -- claim -----------------------------------------------------------------------------------
    @abstractmethod
    def claim_groups(self, visit_count: int, turn: int) -> list[list[int]]:
        """How one round over ``visit_count`` buckets is cut into claim statements: each list is
        the buckets one :meth:`claim` walks, in order (shared: callers do not change them).
        ``turn`` counts the caller's rounds, so an engine that claims over many buckets at once
        can give each its turn to be drained first."""

    @abstractmethod
    def claim(
        self, buckets: Sequence[int], queue: str, limit: int, lease_seconds: float, *, durable: bool = True
    ) -> Plan[list[ClaimedTask]]:
        """Lease up to ``limit`` ready tasks of ``queue`` from ``buckets`` (one group of
        :meth:`claim_groups`), one statement; returned in claim order (rank, then exec_time).
        Tasks of one bucket share one lease token. ``durable=False`` lets the engine commit the
        claim without waiting for it to reach disk where it can (PostgreSQL: asynchronous commit;
        a claim lost in a server crash leaves its tasks ready again, so they run again, as
        at-least-once allows); a claim that takes a task with an exclusive key is durable anyway."""

    @abstractmethod
    def promote_due(self, buckets: Sequence[int], queue: str, limit: int) -> Plan[int]:
        """Make due scheduled tasks of ``queue`` in ``buckets`` ready (one statement); how many."""

    def steps_acked(
        self, task_ids: Sequence[uuid.UUID], handoff: HandoffOffer | None = None, parents: bool = False
    ) -> Plan[tuple[list[tuple], list[uuid.UUID]]]:
        """Inside the transaction of an ack that deleted the tasks ``task_ids``: their workflow steps
        still running, as (workflow id, step, child kinds, only child, task id, sole child's task
        id, only child's shard) (``workflow_steps_acked``).

        ``handoff`` (the acking worker's offer, :mod:`shardq.worker.handoff`): the engine may lease
        the waiting tasks of the steps' sole children to that worker in place (those of
        ``handoff.queues``, each for its lease, that hold no exclusive key and are due, at most
        ``handoff.room``, in order of their ids), instead of leaving them for the caller to make
        claimable, so that no claim has to find them; into ``handoff.tasks``, as :meth:`claim`
        returns tasks (one lease token per bucket and queue, each token's tasks in key order). A
        task so leased may keep a key outside the claims' span: whatever makes a leased task ready
        again must put it back in the span (a retry, the lease sweep, a hand-back). A step whose
        sole child was taken is left out of the steps returned: its ack has nothing more to do.
        With ``parents``, the second value names the task ids of those steps (else it is empty).
        This default takes none."""
        if handoff is not None:
            handoff.tasks = []
        return (yield from common.read_steps_acked(task_ids)), []

    # -- settle ----------------------------------------------------------------------------------
    @abstractmethod
    def ack_keys(self, items: Sequence[Fenced], closed_tokens: Iterable[uuid.UUID] = ()) -> Plan[set[uuid.UUID]]:
        """Delete finished tasks by whole key and token and close the claims ``closed_tokens``
        (dropping their lease records where the engine keeps them); returns the ids deleted."""

    @abstractmethod
    def ack_claims(self, claims: Sequence[WholeClaim], *, in_transaction: bool = False) -> Plan[set[uuid.UUID]]:
        """Ack whole claims (every task still held under each token finished); returns the ids
        that were *not* deleted because their lease had passed to someone else. Several claims
        commit together; ``in_transaction``: the caller holds a transaction open for them (no
        transaction, nor savepoint, of the ack's own)."""

    def ack_keys_kept(
        self,
        items: Sequence[Fenced],
        records: Mapping[uuid.UUID, Finished],
        closed_tokens: Iterable[uuid.UUID] = (),
        notify: bool = False,
    ) -> Plan[set[uuid.UUID]]:
        """:meth:`ack_keys` for a queue that keeps finished tasks: the same statement also writes
        the history row of each task it deleted (``records`` by id), and with ``notify`` wakes
        outcome waiters where the engine has notifications. Returns the ids deleted."""
        return common.ack_many_kept(items, records, closed_tokens, notify)

    @abstractmethod
    def ack_claims_kept(
        self, claims: Sequence[WholeClaim], columns: SucceededColumns, notify: bool = False
    ) -> Plan[set[uuid.UUID]]:
        """:meth:`ack_claims` recording each task deleted (see :meth:`ack_keys_kept`), its
        history columns in ``columns`` in the order of the claims' keys; returns the ids not
        deleted."""

    # -- expired leases ----------------------------------------------------------------------------
    def reap_candidates(self, bucket: int, limit: int) -> Plan[list[ExpiredLease]]:
        """Up to ``limit`` leased tasks of ``bucket`` whose lease has expired."""
        rows = yield Call("task_reap_candidates", {"bucket": bucket, "limit": limit})
        return [
            ExpiredLease(
                TaskKey(row["bucket"], row["queue"], row["rank"], row["exec_time"], row["id"]),
                row["attempts"],
                row["max_attempts"],
                row["lease_token"],
                row["exclusive_key"],
                row["workflow_id"],
            )
            for row in rows
        ]

    def sweep_lease_records(self, bucket: int, limit: int) -> Plan[tuple[int, int]]:
        """Settle up to ``limit`` expired lease records of ``bucket`` (records dropped, expiries
        pushed); (0, 0) where leases are found through the key, not through records."""
        return (0, 0)
        yield  # a plan that sends nothing

    # -- introspection -----------------------------------------------------------------------------
    @abstractmethod
    def stats_snapshot(self, historical: bool) -> Plan[bool]:
        """Start the stats transaction's snapshot; must be its first statement. With
        ``historical`` a read slightly in the past that never waits on writers, where the engine
        has one. Returns whether the snapshot is historical."""

    @abstractmethod
    def depth(self, queues: Sequence[str], buckets: Sequence[int], cap: int) -> Plan[list[dict[str, Any]]]:
        """One row per (queue, bucket): see :func:`shardq.operations.stats_depth`."""

    @abstractmethod
    def count_by_bucket(self, historical: bool) -> Plan[dict[int, int]]:
        """Rows per bucket; with ``historical`` a read slightly in the past where the engine has
        one (falling back to a current read when the layout is younger than that)."""

    # -- Spark -------------------------------------------------------------------------------------
    def spark_stage_ready(self, stage: str) -> Plan[None]:
        """What a Spark staging table needs after its rows are written and before chunks merge
        from it (PostgreSQL: an index on its chunk column); nothing by default."""
        return None
        yield  # a plan that sends nothing

    # -- EXPLAIN -----------------------------------------------------------------------------------
    @abstractmethod
    def explain_query(
        self, text: str, params: Mapping[str, Any] | None, inline: Callable[[str, Mapping[str, Any] | None], str]
    ) -> tuple[str, Mapping[str, Any] | None]:
        """The SQL and parameters that ask for the EXPLAIN output of statement ``text`` with
        ``params``; ``inline`` renders values into the text as literals, for an engine that plans
        bound values differently from constants."""

    @abstractmethod
    def explain_tables_read_whole(self, explain: str) -> set[str]:
        """The shardq tables EXPLAIN output from :meth:`shardq.sessions.session.Session.explain` reads whole
        (a scan no index constrains), by name; ``""`` for such a scan whose table the output
        does not name."""

    def explain_reads_whole_table(self, explain: str) -> bool:
        """Whether EXPLAIN output reads all of a shardq table (what no hot statement may do)."""
        return bool(self.explain_tables_read_whole(explain))

    def explain_without_statistics(self, explain: str) -> bool:
        """Whether the optimizer planned this on a table it has no statistics for (its plan then
        says little about a loaded table). False where the output does not say."""
        return False

    @abstractmethod
    def explain_fans_out(self, explain: str, bucket_count: int) -> bool:
        """Whether EXPLAIN output of a statement that names one bucket reads the tasks table
        beyond that bucket (a span or lookup per bucket: the point-lookup rule broken)."""

    @abstractmethod
    def explain_skip_locked_unbounded(self, explain: str) -> bool:
        """Whether EXPLAIN output shows rows locked with SKIP LOCKED in a scan no hard limit
        bounds (it would lock whole batches, not the rows it returns)."""

    def __repr__(self) -> str:
        return f"<shardq engine {self.name}>"
