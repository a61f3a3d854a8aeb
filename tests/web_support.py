"""Helpers shared by the web dashboard's tests: dead tasks in exact states, and the app under test."""

from __future__ import annotations

from shardq.stats import StatsOptions

from .factories import fenced

TOKEN = "test-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
#: Current reads (not CockroachDB's follower reads) so a test sees what it just wrote.
CURRENT = StatsOptions(follower_read=False)
SCRIPT = b"<script>alert('pwned')</script>"


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
