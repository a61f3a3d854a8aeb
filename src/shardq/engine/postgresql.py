"""PostgreSQL (14 and later; the embedded server is 18).

Key layout: ``(bucket, queue, rank, exec_time, id)`` with ``bucket`` an ordinary column whose
DEFAULT spreads new rows over ``shardq_buckets.bucket_count`` buckets; ``state`` is a plain column,
so a claim is a HOT update. One statement claims over a whole round of buckets; leases are
recorded in ``shardq_leases`` (so expired ones are found, and whole claims acked, through those
records); LISTEN/NOTIFY wakes idle workers. The operations live in :mod:`.postgresql_ops`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

from shardq.engine.base import Ddl, Engine, ParameterStatus
from shardq.engine.postgresql_ops import PostgreSQLOperations
from shardq.errors import UnsupportedServer

#: Oldest PostgreSQL major version shardq supports (``MERGE``-free SQL, but binary array
#: parameters and the statements' planner behaviour were measured on 14 and later).
MIN_SERVER_VERSION = 14


class PostgreSQLEngine(PostgreSQLOperations, Engine):
    """See the module documentation."""

    name = "postgresql"
    sqlalchemy_dialect = "postgresql"
    # postgresql:// also reaches CockroachDB: only the server can tell, so no scheme names this engine.
    url_schemes = ()
    supported_versions = f"supported: PostgreSQL ≥ {MIN_SERVER_VERSION}"
    ddl = Ddl(
        text="TEXT", blob="BYTEA", transactional=True, fillfactor=True, hash_sharded=False, expression_predicates=True
    )

    supports_wakeups = True
    spark_copy_writer = True
    # Fewer, larger chunks merge faster (each chunk is one transaction, one index range scan).
    spark_chunks_default = 64
    # A wide fan-in keeps its one counter row here: its acks queue on the row lock only for the rest
    # of each transaction, and the shard rows cost more CPU than they save (a batch ack lowers up
    # to 32 rows instead of one: docs/workflows.md, "Fan-in in shards", measured). The shard
    # statements are common SQL, tested here by setting this (tests/workflows/test_fan_in_shards.py).
    fan_in_shard_from: ClassVar[int | None] = None
    # Binary arrays cost far less client CPU per element than text (see shardq.sql).
    _binary_arrays = True
    _null_arrays = True

    explain_prefix = "EXPLAIN (FORMAT JSON) "

    def explain_query(
        self, text: str, params: Mapping[str, Any] | None, inline: Callable[[str, Mapping[str, Any] | None], str]
    ) -> tuple[str, Mapping[str, Any] | None]:
        return self.explain_prefix + text, params

    def explain_tables_read_whole(self, explain: str) -> set[str]:
        # Each sequential scan of a shardq table anywhere in the JSON output.
        return {
            node["Relation Name"]
            for node, _ in _explain_nodes(explain)
            if node["Node Type"] == "Seq Scan" and node.get("Relation Name", "").startswith("shardq_")
        }

    def explain_fans_out(self, explain: str, bucket_count: int) -> bool:
        # A scan of the tasks table whose index condition does not name the bucket reads every
        # bucket's part of the key (a Tid Scan reaches rows already found, by ctid).
        return any(
            node.get("Relation Name") == "shardq_tasks"
            and "Scan" in node["Node Type"]
            and node["Node Type"] != "Tid Scan"
            and "bucket" not in node.get("Index Cond", "") + node.get("Recheck Cond", "")
            for node, _ in _explain_nodes(explain)
        )

    def explain_skip_locked_unbounded(self, explain: str) -> bool:
        # FOR UPDATE SKIP LOCKED is a LockRows node; a LIMIT bounds it only from above it.
        return any(node["Node Type"] == "LockRows" and "Limit" not in above for node, above in _explain_nodes(explain))

    @classmethod
    def recognises(cls, parameter_status: ParameterStatus) -> bool:
        # The fallback engine: anything speaking the protocol that is no other engine.
        return True

    def startup_options(self, *, statement_timeout_ms: int | None = None, internals: bool = False) -> list[str]:
        # Every shardq session runs in UTC: the timestamps it reads come back with
        # datetime.timezone.utc, which psycopg decodes faster than a named zone such as the
        # common default 'Etc/UTC' (a claimed task carries three). Nothing in shardq's SQL
        # depends on the session's zone (only minute truncation, the same in all).
        options = ["-c timezone=UTC"]
        if statement_timeout_ms:
            options.append(f"-c statement_timeout={int(statement_timeout_ms)}")
        return options

    def check_version(self, parameter_status: ParameterStatus) -> None:
        text = parameter_status("server_version") or ""
        major = text.split(".", 1)[0].split(" ", 1)[0]
        if major.isdigit() and int(major) < MIN_SERVER_VERSION:
            raise UnsupportedServer(f"PostgreSQL {text} is older than {MIN_SERVER_VERSION}, the oldest shardq supports")


def _explain_nodes(explain: str) -> Iterator[tuple[dict[str, Any], tuple[str, ...]]]:
    """Every node of ``EXPLAIN (FORMAT JSON)`` output with the node types above it."""
    tree = json.loads(explain)
    stack: list[tuple[dict[str, Any], tuple[str, ...]]] = [(entry["Plan"], ()) for entry in tree]
    while stack:
        node, above = stack.pop()
        yield node, above
        stack.extend((child, (*above, node["Node Type"])) for child in node.get("Plans", []))
