"""Helpers shared by the web dashboard's tests: dead tasks in exact states, and the app under test."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from playwright.sync_api import expect
from starlette.testclient import TestClient
from starlette.types import ASGIApp

from shardq.admin.stats import StatsOptions
from shardq.web.server import BackgroundServer
from tests.support.factories import TestDatabase, fenced

TOKEN = "test-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
#: Current reads (not CockroachDB's follower reads) so a test sees what it just wrote.
CURRENT = StatsOptions(follower_read=False)
SCRIPT = b"<script>alert('pwned')</script>"


class DashboardClient(TestClient):
    """A TestClient of the dashboard (or an app mounting it), with the test database it shows."""

    def __init__(self, app: ASGIApp, db: TestDatabase, **options: Any) -> None:
        super().__init__(app, **options)
        self.db = db


def make_dead(db, queue: str = "q", *, payload: bytes = b"payload", error: str = "boom", attempts: int = 3):
    """A task of ``queue`` that failed for good: leased, then dead-lettered with ``error``."""
    task = db.make_task(queue, state="leased", payload=payload, attempts=attempts)
    assert db.store.task_bury_many([fenced(task)], [error], require_expired=False) == {task.key.id}
    return task


def snapshot(db) -> dict:
    """Everything an action could change, to check that a refused one changed nothing."""
    return {
        "tasks": sorted(str(r["id"]) + r["state"] for r in db.sql("SELECT id, state FROM shardq_tasks")),
        "dead": sorted(str(r["id"]) for r in db.sql("SELECT id FROM shardq_dead")),
        "queues": db.sql("SELECT * FROM shardq_queues ORDER BY name"),
    }


def make_finished(
    db,
    queue: str = "q",
    *,
    state: str = "succeeded",
    error: str | None = None,
    minutes_ago: float = 0.0,
    count: int = 1,
    task: str = "job",
) -> list[str]:
    """``count`` rows of ``queue``'s history in ``state``, finished ``minutes_ago`` (the ack path
    that writes them is tests/lifecycle/test_history.py's; this puts them in exact states)."""
    rows = db.sql(
        "INSERT INTO shardq_history (id, queue, state, task, created_at, finished_at, attempts, run_seconds,"
        " last_error) SELECT gen_random_uuid(), %(queue)s, %(state)s, %(task)s,"
        " now() - (%(ago)s::FLOAT8 + 1) * INTERVAL '1 minute' - n * INTERVAL '1 millisecond',"
        " now() - %(ago)s::FLOAT8 * INTERVAL '1 minute' - n * INTERVAL '1 millisecond', 1, 0.25, %(error)s"
        " FROM generate_series(1, %(count)s::INT8) AS n RETURNING id",
        {"queue": queue, "state": state, "task": task, "ago": minutes_ago, "error": error, "count": count},
    )
    return [str(r["id"]) for r in rows]


CHROMIUM = os.environ.get("SHARDQ_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


DOCS = Path(__file__).resolve().parents[2] / "docs"


def _shot(page, name: str, tmp_path) -> None:
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes().startswith(b"\x89PNG")
    if os.environ.get("SHARDQ_WEB_SCREENSHOT") == "1":
        (DOCS / name).write_bytes(path.read_bytes())


READ_TOKEN = "read-only-token-0123456789"


def _open(browser, server, token, **context_options):
    context = browser.new_context(**{"viewport": {"width": 1280, "height": 860}, **context_options})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.goto(server.url + "login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Queues")
    errors.clear()
    page.errors = errors
    page.server = server
    return context, page


class _ServedDashboard(BackgroundServer):
    """The dashboard served from a thread, with the test database it shows."""

    def __init__(self, db: TestDatabase, **options: Any) -> None:
        super().__init__(db.client, TOKEN, **options)
        self.db = db
