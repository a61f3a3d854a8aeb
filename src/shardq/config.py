"""Where shardq's database is: an explicit DSN, ``SHARDQ_DSN``, or the embedded server."""

from __future__ import annotations

import os

from .db import Dsn
from .embedded import EmbeddedServer


def resolve_dsn(dsn: str | Dsn | None = None) -> Dsn:
    """The DSN to use: ``dsn`` if given, else ``SHARDQ_DSN``, else the embedded PostgreSQL
    (started on demand)."""
    if isinstance(dsn, Dsn):
        return dsn
    text = dsn or os.environ.get("SHARDQ_DSN")
    if text:
        return Dsn.parse(text)
    return Dsn.parse(EmbeddedServer().start())
