"""What an engine is: everything PostgreSQL and CockroachDB do differently, behind one interface.

The rest of shardq never compares an engine's name. It asks the :class:`Engine` of its session
(``session.engine``): which statements to send, which startup options a connection carries, how
transactions are pinned, how 40001/40003 are retried, where the bucket layout comes from, whether
wake-ups exist, how a resize runs, which server versions are supported. Adding a third engine
means adding one subclass and registering it in :mod:`shardq.engine`.

An engine object holds no connection and no state: one instance per engine, shared by every
session. Methods that need the database take the :class:`~shardq.db.Session` to run on.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from .. import queries

if TYPE_CHECKING:
    from ..db import Session
    from ..models import ResizeProgress, ResizeResult, SchemaJob, ShardLayout
    from ..plans import Plan

#: Reads a parameter the server reported at connect (``server_version``, ``crdb_version`` …).
ParameterStatus = Callable[[str], "str | None"]
ProgressHook = Callable[["ResizeProgress"], None]


@dataclass(frozen=True)
class RetryPolicy:
    """How :class:`~shardq.db.Session` retries what the server says may succeed if re-run.

    ``serialization_retries``: attempts after a 40001 (the statement, or a transaction's whole
    body, is re-run with full-jitter backoff between ``base_seconds`` and ``cap_seconds``); the
    same bound and backoff apply to re-sending a statement its caller marked safe to repeat after
    a 40003 ("result is ambiguous", which only CockroachDB reports).
    """

    serialization_retries: int = 10
    base_seconds: float = 0.005
    cap_seconds: float = 1.0


@dataclass(frozen=True)
class DdlTypes:
    """Column type names the migrations write for this engine."""

    text: str
    blob: str


class Engine(ABC):
    """One database engine shardq runs on. See the module documentation."""

    #: The engine's name: the folder of its statements under ``sql/`` and what reports show.
    name: ClassVar[str]
    #: The SQLAlchemy dialect name Alembic runs the migrations with.
    sqlalchemy_dialect: ClassVar[str]
    #: The server versions shardq supports, for reports ("CockroachDB ≥ 23.1").
    supported_versions: ClassVar[str]
    #: URL schemes that name this engine up front (``cockroachdb://``); the server is asked otherwise.
    url_schemes: ClassVar[tuple[str, ...]] = ()

    # -- key layout ----------------------------------------------------------------------------
    #: The tasks table's key is hashed by the database (CockroachDB ``USING HASH``): the bucket
    #: is a hidden shard column found at run time, not an ordinary ``bucket`` column.
    hash_sharded_key: ClassVar[bool]
    #: Schema changes may share a transaction (otherwise every DDL statement commits alone).
    transactional_ddl: ClassVar[bool]
    ddl_types: ClassVar[DdlTypes]
    #: Tables take the ``fillfactor`` storage parameter (CockroachDB has no heap pages to fill).
    has_fillfactor: ClassVar[bool]
    #: One statement can claim over a whole round of buckets (otherwise one bucket per statement).
    claims_whole_rounds: ClassVar[bool]
    #: Expired leases are found through ``shardq_leases`` records (otherwise through the key's
    #: ``state = 'leased'`` span).
    uses_lease_records: ClassVar[bool]
    #: Queue depth per (queue, bucket) is read with one statement for all of them (otherwise one
    #: statement per pair plus one per priority in use).
    counts_depth_in_one_statement: ClassVar[bool]

    # -- statements ----------------------------------------------------------------------------
    #: Array parameters go in the server's binary format (otherwise text arrays).
    sends_binary_arrays: ClassVar[bool]
    #: An optional enqueue column no task of a batch sets may be sent as one NULL array.
    accepts_null_arrays: ClassVar[bool]

    # -- sessions ------------------------------------------------------------------------------
    retry: ClassVar[RetryPolicy] = RetryPolicy()
    #: Isolation level every explicit transaction is pinned to, or None for the server's default.
    transaction_isolation: ClassVar[str | None] = None
    #: Statements that read engine-internal catalogs: they run only on sessions opened with
    #: ``internals=True`` (see :meth:`startup_options`).
    statements_needing_internals: ClassVar[frozenset[str]] = frozenset()

    # -- services ------------------------------------------------------------------------------
    #: LISTEN/NOTIFY wake-ups exist (otherwise workers only poll).
    supports_wakeups: ClassVar[bool]
    #: Stats and ``buckets show`` may read a slightly stale snapshot that never waits on writers.
    historical_reads: ClassVar[bool]
    #: Chunks of a Spark run when the caller does not choose.
    spark_chunks_default: ClassVar[int]
    #: The Spark staging table needs an index on its chunk column after the write.
    spark_stage_needs_index: ClassVar[bool]
    #: Spark's write tasks COPY each chunk into the tasks table themselves (shardq.spark.writer)
    #: instead of staging rows for a merge.
    spark_copy_writer: ClassVar[bool]

    # -- plan checks -----------------------------------------------------------------------------
    #: What precedes a statement to get its plan as text.
    explain_prefix: ClassVar[str]
    #: Plans are asked for with the values inlined as literals (the plan is then the one for those
    #: constants), not as bound parameters.
    inlines_explain_values: ClassVar[bool]

    @abstractmethod
    def plan_reads_whole_table(self, plan: str) -> bool:
        """Whether a plan from :meth:`shardq.db.Session.explain` reads all of a shardq table
        (what no hot statement may do)."""

    @abstractmethod
    def plan_fans_out(self, plan: str, bucket_count: int) -> bool:
        """Whether a plan of a statement that names one bucket reads the tasks table beyond that
        bucket (a span or lookup per bucket: the point-lookup rule broken)."""

    @abstractmethod
    def plan_skip_locked_unbounded(self, plan: str) -> bool:
        """Whether a plan locks rows with SKIP LOCKED in a scan no hard limit bounds (it would
        lock whole batches, not the rows it returns)."""

    def statements(self) -> dict[str, queries.Statement]:
        """Every named statement this engine sends: ``sql/common`` overridden by its own folder."""
        return queries.statements_for(self.name, binary=self.sends_binary_arrays)

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

    def discover_layout(self, session: Session) -> ShardLayout:
        """The tasks table's current bucket layout (bucket count, buckets to visit, the shard
        column statements must filter on), read on ``session``."""
        from ..plans import run

        return run(session, self.layout_plan())

    @abstractmethod
    def layout_plan(self) -> Plan[ShardLayout]:
        """:meth:`discover_layout` as a plan (:mod:`shardq.plans`), for either gateway."""

    def schema_jobs(self, session: Session) -> list[SchemaJob]:
        """Unfinished schema-change jobs of the tasks table (a resize in progress); none where
        schema changes are transactional."""
        return []

    @abstractmethod
    def resize(
        self,
        open_session: Callable[[], Session],
        buckets: int,
        *,
        batch: int,
        poll: float | None,
        on_progress: ProgressHook | None,
        stop: threading.Event | None,
    ) -> ResizeResult:
        """Change the bucket count online (see :func:`shardq.resize.resize_buckets`)."""

    def __repr__(self) -> str:
        return f"<shardq engine {self.name}>"
