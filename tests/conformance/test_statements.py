"""Every statement and startup option the CockroachDB engine can send keeps every rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shardq.engine import COCKROACHDB
from tests.conformance import collect
from tests.conformance.rules import RULES

pytestmark = pytest.mark.conformance

SENT = collect.everything() + collect.startup_options()
SRC = Path(__file__).resolve().parents[2] / "src" / "shardq"


@pytest.mark.parametrize("sent", SENT, ids=[f"{s.origin}#{i}" for i, s in enumerate(SENT)])
def test_cockroachdb_accepts_what_the_engine_sends(sent):
    problems = [problem for rule in RULES for problem in rule(sent)]
    assert not problems, f"{sent.origin}:\n{sent.text}\n" + "\n".join(problems)


def test_the_collection_covers_every_source():
    origins = {s.origin for s in SENT}
    assert {f"sql:{name}" for name in COCKROACHDB.statements()} <= origins
    assert {
        "migration:0001_initial:upgrade",
        "migration:0002_spark_ledger:upgrade",
        "migration:0003_stats:upgrade",
        "gateway:begin",
        "startup",
        "startup-internals",
    } <= origins
    ddl = next(s.text for s in SENT if s.origin == "migration:0001_initial:upgrade")
    assert "USING HASH WITH (bucket_count = 16)" in ddl  # the CockroachDB branch, not PostgreSQL's


def test_no_library_module_but_the_gateway_builds_sql():
    # Everything else runs named statements from sql/ through shardq.sessions.session (or its asyncio twin
    # shardq.sessions.session_async, which composes them with the same function), so the collection above is
    # complete. (sessions/embedded.py talks to the embedded PostgreSQL only.)
    builders = re.compile(r"\.execute_raw\(|^\s*(?:import|from) psycopg\b|sql\.SQL\(", re.MULTILINE)
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if path.parent.name != "sessions" and builders.search(path.read_text())
    ]
    assert not offenders
