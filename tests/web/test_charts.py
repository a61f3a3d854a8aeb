"""A queue's activity charts from the stored counters (shardq.web.charts_view): per minute over
an hour, per hour over 24 h and 7 d from the hourly sums the pruners keep, every slot present."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from shardq.maintenance.pruning import prune_counters
from shardq.models import Activity
from shardq.operations import charts
from shardq.web.app import create_app
from tests.support.factories import TestDatabase
from tests.support.web import BEARER, CURRENT, TOKEN, DashboardClient


@pytest.fixture
def web(db: TestDatabase) -> Iterator[DashboardClient]:
    with DashboardClient(create_app(db.client, TOKEN, stats_options=CURRENT), db, follow_redirects=False) as client:
        yield client


def _minute_row(db, minutes_ago: int, *, queue="q", slot=0, enqueued=0, acked=0, dead=0):
    db.add_stats_minute(minutes_ago, queue=queue, slot=slot, enqueued=enqueued, acked=acked, dead=dead)


def test_the_hour_chart_has_every_minute_and_sums_writer_slots(web):
    db = web.db
    db.client.store.queue_ensure("q")
    db.store.stats_add_many(0, {"q": Activity(enqueued=7, acked=5)})
    db.store.stats_add_many(1, {"q": Activity(enqueued=3, acked=1, dead=2)})
    _minute_row(db, 10, acked=4)
    data = web.get("/api/queues/q/charts?range=1h", headers=BEARER).json()
    series = {s["name"]: s["values"] for s in data["series"]}
    assert len(series["acked"]) == 60
    assert (series["enqueued"][-1], series["acked"][-1], series["failed"][-1]) == (10, 6, 2)
    assert series["acked"][-11] == 4 and sum(series["acked"]) == 10
    assert data["peak"] == 10


def test_hourly_sums_keep_a_whole_hour_after_its_minutes_are_pruned(db):
    db.client.store.queue_ensure("q")
    for minutes_ago in range(61, 66):  # the previous hour or the one before, depending on the clock
        _minute_row(db, minutes_ago, acked=10)
    db.store.run(charts.stats_hourly_rollup())
    before = db.hourly_acked()
    db.forget_stats_minutes_older_than(63)
    db.store.run(charts.stats_hourly_rollup())
    after = db.hourly_acked()
    assert after == before  # the partial recount did not shrink what was summed


def test_pruning_the_counters_sums_them_into_hours_first(web):
    db = web.db
    db.client.store.queue_ensure("q")
    db.store.stats_add_many(0, {"q": Activity(enqueued=9, acked=8)})
    prune_counters(db.store)
    data = web.get("/api/queues/q/charts?range=24h", headers=BEARER).json()
    series = {s["name"]: s["values"] for s in data["series"]}
    assert len(series["acked"]) == 24 and series["acked"][-1] == 8 and series["enqueued"][-1] == 9
    assert len(web.get("/api/queues/q/charts?range=7d", headers=BEARER).json()["series"][0]["values"]) == 168


def test_chart_input_is_checked(web):
    web.db.client.store.queue_ensure("q")
    assert web.get("/api/queues/q/charts?range=1y", headers=BEARER).status_code == 400
    assert web.get("/api/queues/nope/charts", headers=BEARER).status_code == 404


def test_the_queue_page_draws_the_chart_with_its_ranges(web):
    db = web.db
    db.client.store.queue_ensure("q")
    db.store.stats_add_many(0, {"q": Activity(enqueued=2, acked=2)})
    page = web.get("/queues/q?range=24h", headers=BEARER).text
    assert 'id="series-acked"' in page and 'id="range-7d"' in page
    assert 'id="range-24h" class="current"' in page


# -- the Periodic page ----------------------------------------------------------------------------
def test_the_periodic_page_lists_the_apps_schedules_with_last_and_next_slot(db):
    import shardq
    from shardq.maintenance.periodic import Scheduler

    app = shardq.App(db.dsn)
    try:

        @app.periodic(every=60, name="every-minute")
        @app.task(name="tick", queue="ticks")
        def tick() -> None: ...

        schedules = list(app.schedules.values())
        Scheduler(lambda: db.client.store, schedules).run_once()  # takes the latest slot
        with TestClient(create_app(db.client, TOKEN, schedules=schedules)) as client:
            data = client.get("/api/periodic", headers=BEARER).json()
            (row,) = data["schedules"]
            assert (row["name"], row["task"], row["queue"], row["when"]) == (
                "every-minute",
                "tick",
                "ticks",
                "every 60 s",
            )
            assert row["last_slot"] is not None and row["next_slot"] > row["last_slot"]
            assert "every-minute" in client.get("/periodic", headers=BEARER).text
    finally:
        app.close()


def test_without_an_app_the_periodic_page_says_how_to_give_one(web):
    assert web.get("/api/periodic", headers=BEARER).json() == {"app_given": False, "schedules": []}
    assert 'id="no-app"' in web.get("/periodic", headers=BEARER).text


def test_the_day_chart_shows_the_current_hour_before_any_prune(web):
    db = web.db
    db.client.store.queue_ensure("q")
    db.store.stats_add_many(0, {"q": Activity(enqueued=4, acked=3)})
    series = {
        s["name"]: s["values"] for s in web.get("/api/queues/q/charts?range=24h", headers=BEARER).json()["series"]
    }
    assert series["acked"][-1] == 3 and series["enqueued"][-1] == 4
