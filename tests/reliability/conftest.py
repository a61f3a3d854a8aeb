"""Shared pieces of the reliability suites: the figures collector and the report hook."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.reliability.report import FIGURES, write_if_requested


@pytest.fixture
def figures():
    return FIGURES


def pytest_runtest_logreport(report):
    if "tests/reliability/" not in report.nodeid.replace("\\", "/"):
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        FIGURES.outcomes[report.outcome] += 1
        if report.outcome == "failed":
            message = str(
                report.longrepr.reprcrash.message if hasattr(report.longrepr, "reprcrash") else report.longrepr
            )
            FIGURES.failures.append(
                (report.nodeid, message.strip().splitlines()[0][:300] if message.strip() else "failed")
            )


def pytest_sessionfinish(session, exitstatus):
    path = write_if_requested()
    if path is not None:
        session.config.get_terminal_writer().line(f"reliability report written to {path}")


@pytest.fixture
def own_server():
    """An embedded PostgreSQL owned by one test (which may stop and start it), migrated with four
    buckets. Yields (server, dsn text)."""
    from shardq.migrations import apply as migrate
    from shardq.sessions.dsn import Dsn
    from shardq.sessions.embedded import EmbeddedServer

    # Outside pytest's basetemp, like the session server (see tests/conftest.py): pytest rotates
    # and re-permissions that tree when another run starts.
    root = Path(tempfile.mkdtemp(prefix="shardq-reliability-home-"))
    server = EmbeddedServer(root)
    url = server.start()
    migrate.upgrade(Dsn.parse(url), buckets=4)
    yield server, url
    server.stop()
    shutil.rmtree(root, ignore_errors=True)
