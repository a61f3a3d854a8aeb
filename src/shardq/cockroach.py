"""Everything shardq knows that is specific to CockroachDB, kept in one place.

* The shard column of the hash-sharded primary key is discovered from the catalog, never built by
  hand or computed in Python: its name and hash expression depend on the CockroachDB version and
  on the table's history (``ALTER PRIMARY KEY`` leaves the old shard column behind, and a filter on
  the stale column does not fail, it silently scans the whole table). Discovery reads the first,
  implicit column of the current primary index.
* SQLSTATE 40001 is retried by :mod:`shardq.db` around every statement and transaction; 40003 is
  surfaced as :class:`shardq.errors.AmbiguousResult` (see that module for why that is safe for
  shardq's fenced statements).
* No LISTEN/NOTIFY: consumers on CockroachDB always poll.

The statements themselves are in ``sql/cockroachdb/``; ``docs/cockroachdb.md`` maps each to the
documented fact it relies on.
"""

from __future__ import annotations

from .db import Session
from .errors import NotMigrated
from .models import ShardLayout

MIN_VERSION = (23, 1)


def discover_layout(session: Session) -> ShardLayout:
    """The current shard column and bucket count of ``shardq_tasks``'s primary key."""
    column_row = session.fetch_one("shard_column_get")
    count_row = session.fetch_one("shard_bucket_count_get")
    if column_row is None or count_row is None or count_row["bucket_count"] is None:
        raise NotMigrated("shardq_tasks has no hash-sharded primary key: run `shardq migrate` first")
    return ShardLayout(bucket_count=int(count_row["bucket_count"]), shard_column=column_row["column_name"])
