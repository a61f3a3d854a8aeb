"""PostgreSQL (14 and later; the embedded server is 18).

Key layout: ``(bucket, queue, rank, exec_time, id)`` with ``bucket`` an ordinary column whose
DEFAULT spreads new rows over ``shardq_buckets.bucket_count`` buckets; ``state`` is a plain column,
so a claim is a HOT update. One statement claims over a whole round of buckets; leases are
recorded in ``shardq_leases``; LISTEN/NOTIFY wakes idle workers.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import NotMigrated, UnsupportedServer
from ..models import ResizeResult, ShardLayout
from ..plans import Call, Plan
from .base import DdlTypes, Engine, ParameterStatus, ProgressHook

if TYPE_CHECKING:
    from ..db import Session

#: Oldest PostgreSQL major version shardq supports (``MERGE``-free SQL, but binary array
#: parameters and the statements' planner behaviour were measured on 14 and later).
MIN_SERVER_VERSION = 14


class PostgreSQLEngine(Engine):
    """See the module documentation."""

    name = "postgresql"
    sqlalchemy_dialect = "postgresql"
    # postgresql:// also reaches CockroachDB: only the server can tell, so no scheme names this engine.
    url_schemes = ()
    supported_versions = f"supported: PostgreSQL ≥ {MIN_SERVER_VERSION}"

    hash_sharded_key = False
    transactional_ddl = True
    has_fillfactor = True
    ddl_types = DdlTypes(text="TEXT", blob="BYTEA")
    claims_whole_rounds = True
    uses_lease_records = True
    counts_depth_in_one_statement = True
    sends_binary_arrays = True
    accepts_null_arrays = True
    supports_wakeups = True
    historical_reads = False
    # Fewer, larger chunks merge faster (each chunk is one transaction, one index range scan).
    spark_chunks_default = 64
    spark_stage_needs_index = True
    spark_copy_writer = True

    explain_prefix = "EXPLAIN (FORMAT JSON) "
    inlines_explain_values = False

    def plan_reads_whole_table(self, plan: str) -> bool:
        # A sequential scan of a shardq table anywhere in the JSON plan.
        return bool(re.search(r'"Node Type": "Seq Scan",[^}]*?"Relation Name": "shardq_', plan))

    def plan_fans_out(self, plan: str, bucket_count: int) -> bool:
        # A scan of the tasks table whose index condition does not name the bucket reads every
        # bucket's part of the key (a Tid Scan reaches rows already found, by ctid).
        return any(node.get("Relation Name") == "shardq_tasks" and "Scan" in node["Node Type"]
                   and node["Node Type"] != "Tid Scan"
                   and "bucket" not in node.get("Index Cond", "") + node.get("Recheck Cond", "")
                   for node, _ in _plan_nodes(plan))

    def plan_skip_locked_unbounded(self, plan: str) -> bool:
        # FOR UPDATE SKIP LOCKED is a LockRows node; a LIMIT bounds it only from above it.
        return any(node["Node Type"] == "LockRows" and "Limit" not in above for node, above in _plan_nodes(plan))

    @classmethod
    def recognises(cls, parameter_status: ParameterStatus) -> bool:
        # The fallback engine: anything speaking the protocol that is no other engine.
        return True

    def startup_options(self, *, statement_timeout_ms: int | None = None, internals: bool = False) -> list[str]:
        # Every shardq session runs in UTC: the timestamps it reads come back with
        # datetime.timezone.utc, which psycopg decodes faster than a named zone such as the common
        # default 'Etc/UTC' (a claimed task carries three; figures: docs/loadtest.md). Nothing in
        # shardq's SQL depends on the session's zone (only minute truncation, the same in all).
        options = ["-c timezone=UTC"]
        if statement_timeout_ms:
            options.append(f"-c statement_timeout={int(statement_timeout_ms)}")
        return options

    def check_version(self, parameter_status: ParameterStatus) -> None:
        text = parameter_status("server_version") or ""
        major = text.split(".", 1)[0].split(" ", 1)[0]
        if major.isdigit() and int(major) < MIN_SERVER_VERSION:
            raise UnsupportedServer(
                f"PostgreSQL {text} is older than {MIN_SERVER_VERSION}, the oldest shardq supports"
            )

    def layout_plan(self) -> Plan[ShardLayout]:
        """The count lives in ``shardq_buckets``; while a shrink moves rows out of the dropped
        buckets, consumers keep visiting the old, larger range."""
        row = yield Call("layout_get", rows="one")
        if row is None:
            raise NotMigrated()
        resizing_from = row["resizing_from"]
        visit = max(row["bucket_count"], resizing_from or 0)
        return ShardLayout(row["bucket_count"], None, visit, resizing_from)

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
        from .postgresql_resize import POLL_SECONDS_DEFAULT, PostgresResize

        with open_session() as session:
            return PostgresResize(
                session, buckets, batch=batch, poll=poll if poll is not None else POLL_SECONDS_DEFAULT,
                on_progress=on_progress, stop=stop,
            ).run()


def _plan_nodes(plan: str) -> Iterator[tuple[dict[str, Any], tuple[str, ...]]]:
    """Every node of an ``EXPLAIN (FORMAT JSON)`` plan with the node types above it."""
    tree = json.loads(plan)
    stack: list[tuple[dict[str, Any], tuple[str, ...]]] = [(entry["Plan"], ()) for entry in tree]
    while stack:
        node, above = stack.pop()
        yield node, above
        stack.extend((child, (*above, node["Node Type"])) for child in node.get("Plans", []))
