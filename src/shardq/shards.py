"""The bucket layout of the tasks table, for whichever database is behind a session."""

from __future__ import annotations

from . import cockroach
from .db import Session
from .errors import NotMigrated
from .models import ShardLayout


def discover_layout(session: Session) -> ShardLayout:
    """Read the current layout from the database and point the session's statements at it.

    PostgreSQL keeps the count in ``shardq_buckets`` (the ``bucket`` column's default spreads new
    rows over it); while a shrink is moving rows out of the dropped buckets, consumers keep
    visiting the old, larger range. CockroachDB's layout comes from the catalog
    (:mod:`shardq.cockroach`).
    """
    if session.dialect == "cockroachdb":
        layout = cockroach.discover_layout(session)
    else:
        row = session.fetch_one("layout_get")
        if row is None:
            raise NotMigrated()
        resizing_from = row["resizing_from"]
        visit = max(row["bucket_count"], resizing_from or 0)
        layout = ShardLayout(row["bucket_count"], None, visit, resizing_from)
    session.set_shard_column(layout.shard_column)
    return layout
