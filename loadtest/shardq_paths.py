"""The shardq internals the benchmarks drive, found under today's paths or, for ``python -m
loadtest.versus`` against a ref from before the package was laid out by responsibility, under the
old top-level ones (the loadtest package is always this checkout's; the shardq it measures may be
older)."""

from __future__ import annotations

try:
    from shardq.lifecycle.claim import Consumer
    from shardq.lifecycle.enqueue import Producer
    from shardq.maintenance.reaper import Reaper
    from shardq.migrations import apply as migrate
    from shardq.sessions.dsn import Dsn
    from shardq.sessions.embedded import EmbeddedServer
    from shardq.sessions.store import TaskStore
    from shardq.sql import statements_for
except ImportError:  # a ref from before the reorganisation
    from shardq import migrate  # type: ignore[no-redef, attr-defined]
    from shardq.consumer import Consumer  # type: ignore[no-redef, import-not-found]
    from shardq.dsn import Dsn  # type: ignore[no-redef, import-not-found]
    from shardq.embedded import EmbeddedServer  # type: ignore[no-redef, import-not-found]
    from shardq.maintenance.reaper import Reaper
    from shardq.producer import Producer  # type: ignore[no-redef, import-not-found]
    from shardq.queries import statements_for  # type: ignore[no-redef, import-not-found]
    from shardq.store import TaskStore  # type: ignore[no-redef, import-not-found]

__all__ = ["Consumer", "Dsn", "EmbeddedServer", "Producer", "Reaper", "TaskStore", "migrate", "statements_for"]
