"""The running and expired lists read at most browse.LEASED_CAP leased tasks: a list that hit the
cap says so on the page and in the API (``capped``) instead of silently showing fewer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shardq.admin import browse
from shardq.web.app import create_app
from tests.support.factories import TestDatabase, utcnow
from tests.support.web import BEARER, CURRENT, TOKEN, DashboardClient


@pytest.fixture
def web(db: TestDatabase) -> Iterator[DashboardClient]:
    with DashboardClient(create_app(db.client, TOKEN, stats_options=CURRENT), db, follow_redirects=False) as client:
        yield client


def test_a_running_list_that_reached_the_cap_says_it_shows_only_the_first_ones(web, monkeypatch):
    monkeypatch.setattr(browse, "LEASED_CAP", 3)
    for _ in range(4):
        web.db.make_task("q", state="leased")
    data = web.get("/api/queues/q/tasks/running", headers=BEARER).json()
    assert data["capped"] is True and data["cap"] == 3 and len(data["tasks"]) == 3
    page = web.get("/queues/q/tasks?state=running", headers=BEARER).text
    assert 'id="capped"' in page and "Showing the first 3 running tasks found" in page


def test_an_expired_list_under_the_cap_says_nothing(web, monkeypatch):
    monkeypatch.setattr(browse, "LEASED_CAP", 3)
    for _ in range(2):
        web.db.make_task("q", state="leased", lease_expires_at=utcnow())
    data = web.get("/api/queues/q/tasks/expired", headers=BEARER).json()
    assert data["capped"] is False and len(data["tasks"]) == 2
    assert 'id="capped"' not in web.get("/queues/q/tasks?state=expired", headers=BEARER).text
