"""CockroachDB (23.1 and later): shardq's home, where the hash-sharded key spreads the queue over
every node.

Key layout: ``(state, queue, rank, exec_time, id) USING HASH WITH (bucket_count = N)``. The
database derives a hidden shard column from the five key columns; shardq discovers its name and
the bucket count from the catalog (:meth:`CockroachDBEngine.discover_layout`), never computes it.
``state`` is in the key so a claim's span holds only claimable rows (see ``docs/cockroachdb.md``,
"State in the key", for the cost and the decision). One statement claims one bucket; expired
leases are found through the ``state = 'leased'`` span; there is no LISTEN/NOTIFY, so workers poll.

Every rule below names the CockroachDB source it comes from; ``tests/conformance`` checks every
statement this engine sends against them on every CI run.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import NotMigrated, UnsupportedServer
from ..models import ResizeResult, SchemaJob, ShardLayout
from ..plans import Call, Plan
from .base import DdlTypes, Engine, ParameterStatus, ProgressHook, RetryPolicy

if TYPE_CHECKING:
    from ..db import Session

#: Oldest CockroachDB line shardq supports. ``FOR UPDATE SKIP LOCKED`` exists from 22.2 and is safe
#: from 22.2.1; the psycopg 3 SQLAlchemy dialect the migrations use needs 22.2.6 / 23.1.0; 23.1 is
#: the oldest line shardq's statements are checked against.
MIN_VERSION = (23, 1)

_VERSION = re.compile(r"v(\d+)\.(\d+)(?:\.(\d+))?")
# pg_indexes renders a hash-sharded index as "... USING HASH WITH (bucket_count=N)"
# (pkg/sql/logictest/testdata/logic_test/hash_sharded_index).
_BUCKET_COUNT = re.compile(r"USING HASH WITH \(bucket_count\s*=\s*(\d+)\)", re.IGNORECASE)


def parse_version(crdb_version: str | None) -> tuple[int, int, int] | None:
    """The version in CockroachDB's ``crdb_version`` startup parameter
    (``"CockroachDB CCL v24.1.1 (x86_64-pc-linux-gnu, …)"``), or None when there is none."""
    match = _VERSION.search(crdb_version or "")
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def bucket_count_of(index_definition: str) -> int | None:
    """The bucket count in a hash-sharded index's ``pg_indexes.indexdef``, or None."""
    match = _BUCKET_COUNT.search(index_definition or "")
    return int(match.group(1)) if match else None


class CockroachDBEngine(Engine):
    """See the module documentation."""

    name = "cockroachdb"
    sqlalchemy_dialect = "cockroachdb"
    url_schemes = ("cockroachdb", "cockroachdb+psycopg")
    supported_versions = f"supported: CockroachDB ≥ {MIN_VERSION[0]}.{MIN_VERSION[1]}"

    hash_sharded_key = True
    # CockroachDB runs a schema change atomically only alone (sqlalchemy-cockroachdb's
    # CockroachDBImpl sets transactional_ddl = False for the same reason).
    transactional_ddl = False
    has_fillfactor = False
    ddl_types = DdlTypes(text="STRING", blob="BYTES")
    # A SKIP LOCKED scan must stay inside one span of the key, or it locks far more rows than it
    # returns (cockroachdb#121917): one bucket per claim statement.
    claims_whole_rounds = False
    uses_lease_records = False
    counts_depth_in_one_statement = False
    # Array parameters as text: the form CockroachDB's documentation covers.
    sends_binary_arrays = False
    accepts_null_arrays = False
    supports_wakeups = False
    historical_reads = True
    # CockroachDB advises multi-row INSERTs of a few thousand rows at most: more, smaller chunks.
    spark_chunks_default = 256
    spark_stage_needs_index = False
    # Not tried on a server (none here): the staging path, whose statements the conformance suite
    # checks. What the COPY writer would cost here: docs/spark.md, "CockroachDB".
    spark_copy_writer = False

    # 40001 comes from every CockroachDB retry error; 40003 (StatementCompletionUnknown) is possible
    # on an autocommit statement or COMMIT, so fenced statements are re-sent (see shardq.db).
    retry = RetryPolicy(serialization_retries=10)
    # Exclusive keys are correct only under SERIALIZABLE (no advisory locks: a racing backlog insert
    # and key release must abort one another with 40001). SERIALIZABLE is only the default:
    # READ COMMITTED exists from 23.2 and default_transaction_isolation can be set per role,
    # database or cluster (docs/cockroachdb.md, "Connection"), so every explicit transaction asks for it.
    transaction_isolation = "SERIALIZABLE"
    # Only crdb_internal.jobs carries a job's descriptor ids (gated from 26.1: docs/cockroachdb.md, "Resizing").
    statements_needing_internals = frozenset({"table_schema_jobs_running"})

    # EXPLAIN's text rows; values inlined so the optimizer plans for the constants, as it does
    # for an autocommit statement with bound values.
    explain_prefix = "EXPLAIN "
    inlines_explain_values = True

    def plan_reads_whole_table(self, plan: str) -> bool:
        # EXPLAIN marks an unconstrained scan "FULL SCAN" (pkg/sql/opt/exec/explain/emit.go).
        return "FULL SCAN" in plan

    def plan_fans_out(self, plan: str, bucket_count: int) -> bool:
        # EXPLAIN prints a scan's spans as up to 4 "[…]" groups then "… (N more)"
        # (pkg/sql/opt/exec/explain/emit.go, spansStr): a span per bucket is bucket_count or more;
        # a lookup over every bucket names the shard column with an IN list of the buckets.
        for line in plan.splitlines():
            text = line.strip(" │└├─")
            if text.startswith("spans:") and bucket_count > 1:
                more = re.search(r"\((\d+) more\)", text)
                if text.count("[") + (int(more.group(1)) if more else 0) >= bucket_count:
                    return True
            if "_shard_" in text and " IN (" in text:
                return True
        return False

    def plan_skip_locked_unbounded(self, plan: str) -> bool:
        # Each "•" starts an operator; a scan's attributes follow it. A hard limit on the locking
        # scan shows as "limit: N" (emit.go); without it the scan locks whole KV batches
        # (cockroachdb#121917).
        for node in plan.split("•")[1:]:
            lowered = node.lower()
            if lowered.lstrip().startswith("scan") and "skip locked" in lowered and "limit:" not in lowered:
                return True
        return False

    @classmethod
    def recognises(cls, parameter_status: ParameterStatus) -> bool:
        # CockroachDB reports crdb_version at connect (pkg/sql/pgwire/conn.go, statusReportParams).
        return bool(parameter_status("crdb_version"))

    def startup_options(self, *, statement_timeout_ms: int | None = None, internals: bool = False) -> list[str]:
        """Only variables every supported version accepts in ``options``.

        ``pkg/sql/pgwire/pre_serve_options.go`` (``loadParameter``) stores a configurable variable
        as a session default, logs and ignores an unknown one, and *refuses the connection* (55P02)
        for one that exists but is read-only. ``timezone`` and ``statement_timeout`` are
        configurable in every version (``pkg/sql/vars.go``); a unitless ``statement_timeout`` is in
        milliseconds (``validateTimeoutVar``). ``results_buffer_size`` is *not* sent: it is
        read-only before 24.2 (cockroachdb#124437), which refused every connection, and from 24.1.1
        its default is already 512 KiB (docs/cockroachdb.md, "Connection"). ``allow_unsafe_internals`` (from 25.x; off by
        default from 26.1) is sent only by sessions that read ``crdb_internal`` jobs; older servers
        do not know it and ignore it with a log line.
        """
        options = ["-c timezone=UTC"]
        if statement_timeout_ms:
            options.append(f"-c statement_timeout={int(statement_timeout_ms)}")
        if internals:
            options.append("-c allow_unsafe_internals=on")
        return options

    def check_version(self, parameter_status: ParameterStatus) -> None:
        reported = parameter_status("crdb_version")
        found = parse_version(reported)
        if found is not None and found[:2] < MIN_VERSION:
            raise UnsupportedServer(
                f"CockroachDB v{found[0]}.{found[1]}.{found[2]} is older than "
                f"v{MIN_VERSION[0]}.{MIN_VERSION[1]}, the oldest shardq supports"
            )

    def layout_plan(self) -> Plan[ShardLayout]:
        """The shard column and bucket count of ``shardq_tasks``'s primary key, read in one
        statement (``shard_layout_get``) from ``information_schema.statistics`` and ``pg_indexes``,
        which every supported version serves outside the unsafe-internals gate (``crdb_internal``
        and a nested ``[SHOW INDEX]`` reading it are gated from 26.1: docs/cockroachdb.md, "Layout discovery")."""
        rows = yield Call("shard_layout_get")
        # The primary index keeps its default name <table>_pkey; prefer it should an operator have
        # added a hash-sharded secondary index of their own.
        rows.sort(key=lambda row: row["index_name"] != "shardq_tasks_pkey")
        for row in rows:
            count = bucket_count_of(row["index_definition"])
            if count is not None:
                return ShardLayout(bucket_count=count, shard_column=row["shard_column"])
        raise NotMigrated("shardq_tasks has no hash-sharded primary key: run `shardq migrate` first")

    def schema_jobs(self, session: Session) -> list[SchemaJob]:
        """Unfinished schema-change jobs of ``shardq_tasks``. Only ``crdb_internal.jobs`` carries a
        job's descriptor ids, so this runs on a session that opts in to internals
        (:meth:`startup_options`); it is an operator's read (``buckets show``, a resize), never on
        a worker's path."""
        def read(internal: Session) -> list[SchemaJob]:
            return [
                SchemaJob(
                    job_id=int(row["job_id"]),
                    job_type=row["job_type"],
                    status=row["status"],
                    fraction_completed=row["fraction_completed"],
                    running_status=row["running_status"],
                    description=row["description"],
                )
                for row in internal.fetch_all("table_schema_jobs_running")
            ]

        if session.internals:
            return read(session)
        with session.sibling(internals=True) as internal:
            return read(internal)

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
        from .cockroachdb_resize import JOB_POLL_SECONDS_DEFAULT, resize

        with open_session() as opened, opened.sibling(internals=True) as session:
            return resize(
                self, session, buckets,
                open_session=lambda: opened.sibling(internals=True),
                poll=poll if poll is not None else JOB_POLL_SECONDS_DEFAULT, on_progress=on_progress,
            )
