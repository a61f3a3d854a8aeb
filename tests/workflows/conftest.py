"""Fixtures of the workflow tests."""

from __future__ import annotations

import pytest

from shardq.engine import base as engine_base
from shardq.engine.cockroachdb import CockroachDBEngine
from shardq.engine.postgresql import PostgreSQLEngine


@pytest.fixture
def shards(monkeypatch):
    """Fan-ins from 2 parents on are counted in 2 shards, on either engine (PostgreSQL keeps one
    row by default, CockroachDB shards from hundreds of parents)."""
    for engine in (PostgreSQLEngine, CockroachDBEngine):
        monkeypatch.setattr(engine, "fan_in_shard_from", 2)
    monkeypatch.setattr(engine_base, "FAN_IN_SHARDS", 2)
