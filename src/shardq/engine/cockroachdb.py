"""CockroachDB (23.1 and later): shardq's home, where the hash-sharded key spreads the queue over
every node.

Key layout: ``(state, queue, rank, exec_time, id) USING HASH WITH (bucket_count = N)``. The
database derives a hidden shard column from the five key columns; shardq discovers its name and
the bucket count from the catalog (:meth:`CockroachDBEngine.read_layout`), never computes it.
``state`` is in the key so a claim's span holds only claimable rows (see ``docs/cockroachdb.md``,
"State in the key", for the cost and the decision). One statement claims one bucket; expired
leases are found through the ``state = 'leased'`` span; there is no LISTEN/NOTIFY, so workers poll.
The operations live in :mod:`.cockroachdb_ops`.

Every rule below names the CockroachDB source it comes from; ``tests/conformance`` checks every
statement this engine sends against them on every CI run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from shardq.engine.base import Ddl, Engine, ParameterStatus, RetryPolicy
from shardq.engine.cockroachdb_ops import CockroachDBOperations, bucket_count_of
from shardq.errors import UnsupportedServer

#: Oldest CockroachDB line shardq supports. ``FOR UPDATE SKIP LOCKED`` exists from 22.2 and is safe
#: from 22.2.1; the psycopg 3 SQLAlchemy dialect the migrations use needs 22.2.6 / 23.1.0; 23.1 is
#: the oldest line shardq's statements are checked against.
MIN_VERSION = (23, 1)

_VERSION = re.compile(r"v(\d+)\.(\d+)(?:\.(\d+))?")

__all__ = ["MIN_VERSION", "CockroachDBEngine", "bucket_count_of", "parse_version"]


def parse_version(crdb_version: str | None) -> tuple[int, int, int] | None:
    """The version in CockroachDB's ``crdb_version`` startup parameter
    (``"CockroachDB CCL v24.1.1 (x86_64-pc-linux-gnu, …)"``), or None when there is none."""
    match = _VERSION.search(crdb_version or "")
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


class CockroachDBEngine(CockroachDBOperations, Engine):
    """See the module documentation."""

    name = "cockroachdb"
    sqlalchemy_dialect = "cockroachdb"
    sqlalchemy_dialect_module = "sqlalchemy_cockroachdb"
    url_schemes = ("cockroachdb", "cockroachdb+psycopg")
    supported_versions = f"supported: CockroachDB ≥ {MIN_VERSION[0]}.{MIN_VERSION[1]}"
    # CockroachDB runs a schema change atomically only alone (sqlalchemy-cockroachdb's
    # CockroachDBImpl sets transactional_ddl = False for the same reason); it has no heap pages
    # to fill.
    ddl = Ddl(
        text="STRING",
        blob="BYTES",
        transactional=False,
        fillfactor=False,
        hash_sharded=True,
        expression_predicates=False,
    )

    supports_wakeups = False
    # Not tried on a server (none here): the staging path, whose statements the conformance suite
    # checks. What the COPY writer would cost here: docs/spark.md, "CockroachDB".
    spark_copy_writer = False
    # CockroachDB advises multi-row INSERTs of a few thousand rows at most: more, smaller chunks.
    spark_chunks_default = 256
    # Array parameters as text (the form CockroachDB's documentation covers); an unset optional
    # enqueue column is sent as an array of defaults, never as one NULL.
    _binary_arrays = False
    _null_arrays = False

    # 40001 comes from every CockroachDB retry error; 40003 (StatementCompletionUnknown) is possible
    # on an autocommit statement or COMMIT, so fenced statements are re-sent (see shardq.sessions.rules).
    retry = RetryPolicy(serialization_retries=10)
    # Exclusive keys are correct only under SERIALIZABLE (no advisory locks: a racing backlog insert
    # and key release must abort one another with 40001). SERIALIZABLE is only the default:
    # READ COMMITTED exists from 23.2 and default_transaction_isolation can be set per role,
    # database or cluster (audit F6), so every explicit transaction asks for it.
    transaction_isolation = "SERIALIZABLE"
    # Only crdb_internal.jobs carries a job's descriptor ids (audit F4: gated from 26.1).
    statements_needing_internals = frozenset({"table_schema_jobs_running"})

    # EXPLAIN's text rows; values inlined so the optimizer plans for the constants, as it does
    # for an autocommit statement with bound values.
    explain_prefix = "EXPLAIN "

    def explain_query(
        self, text: str, params: Mapping[str, Any] | None, inline: Callable[[str, Mapping[str, Any] | None], str]
    ) -> tuple[str, Mapping[str, Any] | None]:
        return self.explain_prefix + inline(text, params), None

    def explain_tables_read_whole(self, explain: str) -> set[str]:
        # EXPLAIN marks an unconstrained scan "spans: FULL SCAN", or "FULL SCAN (SOFT LIMIT)" when
        # a limit above it stays soft, and names its table as "table: <table>@<index>"
        # (pkg/sql/opt/exec/explain/emit.go, spansStr and emitTableAndIndex); a virtual table's
        # scan prints no spans.
        return {table for table, spans, _ in _scans(explain) if any(s.startswith("FULL SCAN") for s in spans)}

    def explain_without_statistics(self, explain: str) -> bool:
        # A scan of a table without statistics carries the field "missing stats" (emit.go,
        # emitNodeAttributes; not shown for virtual tables).
        return any(line.strip(" │└├─") == "missing stats" for line in explain.splitlines())

    def explain_fans_out(self, explain: str, bucket_count: int) -> bool:
        # EXPLAIN prints a scan's spans as up to 4 "[…]" groups then "… (N more)"
        # (pkg/sql/opt/exec/explain/emit.go, spansStr); a hash-sharded index read in order is
        # split into one scan per bucket under "union all" nodes (execbuilder testdata "limit",
        # regression test for #55156). Either way a read of every bucket shows bucket_count or
        # more spans of one index, whose key starts with the bucket; a lookup over every bucket
        # names the shard column with an IN list of the buckets.
        if bucket_count <= 1:
            return False
        starts: dict[str, set[str]] = {}
        more: dict[str, int] = {}
        for _, spans, index in _scans(explain):
            for text in spans:
                counted = re.search(r"\((\d+) more\)", text)
                more[index] = more.get(index, 0) + (int(counted.group(1)) if counted else 0)
                # A span's first key value ("[/3/'ready' - /3/'ready']": the bucket on the key).
                starts.setdefault(index, set()).update(re.findall(r"\[(/[^/\s\]]*)", text))
        if any(len(values) + more.get(index, 0) >= bucket_count for index, values in starts.items()):
            return True
        return any("_shard_" in line and " IN (" in line for line in explain.splitlines())

    def explain_skip_locked_unbounded(self, explain: str) -> bool:
        # Each "•" starts an operator; a scan's attributes follow it. A hard limit on the locking
        # scan shows as "limit: N" (emit.go); without it the scan locks whole KV batches
        # (cockroachdb#121917).
        for node in explain.split("•")[1:]:
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
        its default is already 512 KiB (audit F2). ``allow_unsafe_internals`` (from 25.x; off by
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


def _scans(explain: str) -> list[tuple[str, list[str], str]]:
    """Each scan node of EXPLAIN text output: its table, its "spans:" values and its
    "table@index" (``""`` where the output names none). Each "•" starts an operator and its
    attributes follow it (pkg/sql/opt/exec/explain/emit.go)."""
    found = []
    for node in explain.split("•")[1:] if "•" in explain else [explain]:
        lines = [line.strip(" │└├─") for line in node.splitlines()]
        if "•" in explain and not lines[0].startswith(("scan", "revscan")):
            continue
        index = next((line.split(":", 1)[1].strip().split()[0] for line in lines if line.startswith("table:")), "")
        spans = [line.split(":", 1)[1].strip() for line in lines if line.startswith("spans:")]
        if spans:
            found.append((index.split("@", 1)[0], spans, index))
    return found
