"""The dashboard's finished tab (a queue's history: succeeded, dead, cancelled), in-process against
a real database: newest first, keyset pages, the outcome / since / error filters, bounded reads,
and the tab shown only for a queue that keeps finished tasks."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from shardq.lifecycle import history
from shardq.web.app import create_app
from tests.support.factories import TestDatabase
from tests.support.web import BEARER, CURRENT, TOKEN, DashboardClient, make_finished

DAY = 86_400.0


@pytest.fixture
def web(db: TestDatabase) -> Iterator[DashboardClient]:
    app = create_app(db.client, TOKEN, stats_options=CURRENT)
    with DashboardClient(app, db, follow_redirects=False) as client:
        yield client


def _kept(web, queue="q"):
    web.db.client.set_queue(queue, keep_finished_seconds=7 * DAY)


def test_finished_api_pages_newest_first_and_visits_every_row_once(web):
    _kept(web)
    old = make_finished(web.db, minutes_ago=30, count=3)
    new = make_finished(web.db, minutes_ago=1, count=4)
    first = web.get("/api/queues/q/tasks/finished?limit=5", headers=BEARER).json()
    assert [t["id"] for t in first["tasks"]][:4] == new and first["next"]
    rest = web.get("/api/queues/q/tasks/finished", params={"limit": 5, "after": first["next"]}, headers=BEARER).json()
    seen = [t["id"] for t in first["tasks"] + rest["tasks"]]
    assert seen == new + old and rest["next"] is None
    assert first["scanned"] == 5 and first["keeps_finished"] is True


def test_finished_api_filters_by_outcome_time_and_error_text(web):
    _kept(web)
    make_finished(web.db, minutes_ago=1, count=2)
    dead = make_finished(web.db, state="dead", error="ValueError: 100% broken\nline 2", minutes_ago=5)
    cancelled = make_finished(web.db, state="cancelled", minutes_ago=200)

    def ids(**query):
        data = web.get("/api/queues/q/tasks/finished", params=query, headers=BEARER).json()
        return [t["id"] for t in data["tasks"]]

    assert ids(outcome="dead") == dead
    assert ids(outcome="cancelled") == cancelled
    assert len(ids(since="1h")) == 3
    assert ids(error="100% BROKEN") == dead  # case-insensitive, % taken literally
    assert ids(error="200%") == []
    for bad in ("outcome=running", "since=soon", "since=2026-11-26T10:00:00", "after=nope", "limit=0"):
        assert web.get(f"/api/queues/q/tasks/finished?{bad}", headers=BEARER).status_code == 400, bad
    assert web.get("/api/queues/nope/tasks/finished", headers=BEARER).status_code == 404


def test_a_selective_filter_reads_a_bounded_scan_and_goes_on_from_its_end(web):
    _kept(web)
    dead = make_finished(web.db, state="dead", error="boom", minutes_ago=60)
    make_finished(web.db, minutes_ago=1, count=history.SCAN_FILTERED + 20)
    first = web.get("/api/queues/q/tasks/finished?outcome=dead", headers=BEARER).json()
    assert first["tasks"] == [] and first["scanned"] == history.SCAN_FILTERED and first["next"]
    second = web.get(
        "/api/queues/q/tasks/finished", params={"outcome": "dead", "after": first["next"]}, headers=BEARER
    ).json()
    assert [t["id"] for t in second["tasks"]] == dead and second["next"] is None
    assert second["scanned"] == 21


def test_the_finished_tab_shows_only_for_a_queue_that_keeps_finished_tasks_and_links_each_task(web):
    web.db.make_task("plain")
    assert "tab-finished" not in web.get("/queues/plain/tasks", headers=BEARER).text
    _kept(web)
    web.db.make_task("q")
    (done,) = make_finished(web.db, state="dead", error="<script>x</script>")
    assert 'id="tab-finished"' in web.get("/queues/q/tasks", headers=BEARER).text
    page = web.get("/queues/q/tasks?state=finished", headers=BEARER)
    assert page.status_code == 200
    assert f'href="/tasks/{done}"' in page.text and "<script>x" not in page.text
    assert re.search(r'id="tab-finished" class="current"', page.text)
    plain = web.get("/queues/plain/tasks?state=finished", headers=BEARER).text
    assert 'id="keeps-nothing"' in plain
    assert web.get("/queues/q/tasks?state=finished&since=never", headers=BEARER).status_code == 400
