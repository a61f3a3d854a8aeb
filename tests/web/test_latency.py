"""Lead time and enqueue-to-start latency per queue: the counters a worker adds with its other
counts (migration 0014, shardq.worker.latency) and the queue page's latency chart drawn from them
over 1 h, 24 h and 7 d."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from shardq.maintenance.pruning import prune_counters
from shardq.models import Activity
from shardq.web.app import create_app
from tests.support.factories import TestDatabase, utcnow
from tests.support.web import BEARER, CURRENT, TOKEN, DashboardClient


@pytest.fixture
def web(db: TestDatabase) -> Iterator[DashboardClient]:
    with DashboardClient(create_app(db.client, TOKEN, stats_options=CURRENT), db, follow_redirects=False) as client:
        yield client


def _counters(db) -> dict:
    return db.latency_counters("q")


def test_a_worker_counts_each_tasks_wait_from_due_to_start_and_its_lead_time_from_enqueue(db):
    for _ in range(3):
        db.make_task("q", exec_time=utcnow() - dt.timedelta(seconds=40))
    db.age_tasks(100)
    db.client.work(["q"], lambda task: None, concurrency=2, batch=10, until_empty=True, install_signal_handlers=False)
    got = _counters(db)
    assert (got["first_starts"], got["lead_acks"], got["acked"]) == (3, 3, 3)
    assert 3 * 40 <= got["wait"] < 3 * 70
    assert 3 * 100 <= got["lead"] < 3 * 130


def test_a_retried_attempt_adds_no_start_and_a_failure_no_lead_time(db):
    db.make_task("q", attempts=1)  # its second attempt
    calls = []

    def handler(task):
        calls.append(task.attempt)
        raise RuntimeError("again")

    db.client.set_queue("q", max_attempts=2)
    db.client.work(["q"], handler, concurrency=1, batch=10, until_empty=True, install_signal_handlers=False)
    got = _counters(db)
    assert calls and (got["first_starts"], got["lead_acks"]) == (0, 0)


def test_the_latency_chart_draws_the_mean_per_slot_and_breaks_where_nothing_was_measured(web):
    db = web.db
    db.client.store.queue_ensure("q")
    db.store.stats_add_many(
        0, {"q": Activity(acked=2, lead_acks=2, lead_seconds=6.0, first_starts=4, start_wait_seconds=2.0)}
    )
    db.store.stats_add_many(1, {"q": Activity(acked=1, lead_acks=1, lead_seconds=3.0)})
    data = web.get("/api/queues/q/charts?range=1h", headers=BEARER).json()
    latency = {s["name"]: s for s in data["latency"]["series"]}
    assert latency["lead time"]["values"][-1] == pytest.approx(3.0)  # 9 s over 3 acks
    assert latency["start latency"]["values"][-1] == pytest.approx(0.5)
    assert latency["lead time"]["values"][:-1] == [None] * 59
    assert len(latency["lead time"]["segments"]) == 1 and data["latency"]["peak_s"] == pytest.approx(3.0)
    page = web.get("/queues/q", headers=BEARER).text
    assert 'id="latency"' in page and "lead time: mean 3.0s" in page


def test_the_day_and_week_latency_come_from_the_hourly_sums(web):
    db = web.db
    db.client.store.queue_ensure("q")
    db.store.stats_add_many(
        0, {"q": Activity(acked=4, lead_acks=4, lead_seconds=8.0, first_starts=4, start_wait_seconds=4.0)}
    )
    prune_counters(db.store)
    stored = db.hourly_lead("q")
    assert [(r["lead_acks"], r["lead_seconds"]) for r in stored] == [(4, 8.0)]
    for range_name, slots in (("24h", 24), ("7d", 168)):
        data = web.get(f"/api/queues/q/charts?range={range_name}", headers=BEARER).json()
        latency = {s["name"]: s for s in data["latency"]["series"]}
        assert len(latency["lead time"]["values"]) == slots
        assert latency["lead time"]["values"][-1] == pytest.approx(2.0)
        assert latency["start latency"]["mean"] == pytest.approx(1.0)
