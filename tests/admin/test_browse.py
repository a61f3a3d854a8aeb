"""Browsing a queue's live tasks by state (shardq.admin.browse): keyset pages that visit every task once,
filters applied to bounded scans, and the actions on chosen tasks."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from shardq.admin import browse
from shardq.admin.browse import Filters
from shardq.errors import InvalidInput
from tests.support.factories import utcnow


def _all_pages(store, queue, state, **kwargs):
    seen, after, pages = [], None, 0
    while True:
        page = browse.browse(store, queue, state, after=after, **kwargs)
        seen += [t.id for t in page.tasks]
        pages += 1
        if page.next is None:
            return seen, pages
        after = page.next


def test_pages_visit_every_ready_task_once_in_claim_order(db):
    made = [db.make_task("q", priority=p % 3) for p in range(23)]
    db.make_task("other")
    ids, pages = _all_pages(db.store, "q", "ready", limit=5)
    assert sorted(ids) == sorted(t.id for t in made) and len(ids) == len(set(ids))
    expected = [t.id for t in sorted(made, key=lambda t: (t.priority, t.key.exec_time, t.key.id))]
    assert ids == expected
    assert pages >= 5


def test_descending_order_is_the_reverse_of_claim_order(db):
    made = [db.make_task("q", priority=p % 2) for p in range(9)]
    ids, _ = _all_pages(db.store, "q", "ready", limit=4, order="desc")
    assert ids == [t.id for t in sorted(made, key=lambda t: (t.priority, t.key.exec_time, t.key.id), reverse=True)]


def test_each_state_lists_only_its_tasks(db):
    now = utcnow()
    ready = db.make_task("q")
    scheduled = db.make_task("q", state="scheduled", exec_time=now + dt.timedelta(hours=1))
    running = db.make_task("q", state="leased")
    expired = db.make_task("q", state="leased", lease_expires_at=now - dt.timedelta(seconds=5))
    backlog = db.make_task("q", state="backlog", exclusive_key="k")
    for state, task in (
        ("ready", ready),
        ("scheduled", scheduled),
        ("running", running),
        ("expired", expired),
        ("backlog", backlog),
    ):
        page = browse.browse(db.store, "q", state)
        shown = [t.id for t in page.tasks]
        if state == "running":  # every leased task; the expired one is marked so
            assert set(shown) == {running.id, expired.id}
            assert {t.id: t.state for t in page.tasks}[expired.id] == "expired"
        else:
            assert shown == [task.id], state


def test_a_filter_not_on_the_key_keeps_only_matches_and_says_how_far_it_scanned(db):
    for _ in range(12):
        db.make_task("q")
    wanted = db.make_task("q", dedupe_key="order-7")
    page = browse.browse(db.store, "q", "ready", filters=Filters(dedupe_key="order-7"))
    assert [t.id for t in page.tasks] == [wanted.id]
    assert page.scanned == 13


def test_error_text_filter_matches_case_insensitively_and_treats_wildcards_literally(db):
    a = db.make_task("q", state="scheduled", exec_time=utcnow() + dt.timedelta(hours=1))
    b = db.make_task("q", state="scheduled", exec_time=utcnow() + dt.timedelta(hours=1))
    for task, error in ((a, "Traceback:\nKeyError: 100%"), (b, "ValueError: 1000")):
        db.set_last_error(task.key.id, error)
    assert [t.id for t in browse.browse(db.store, "q", "scheduled", filters=Filters(error_text="keyerror")).tasks] == [
        a.id
    ]
    assert [t.id for t in browse.browse(db.store, "q", "scheduled", filters=Filters(error_text="100%")).tasks] == [a.id]


def test_priority_and_age_filters(db):
    old = db.make_task("q", priority=5)
    db.make_task("q", priority=1)
    db.age_task(old.key.id, 7200)
    assert [t.id for t in browse.browse(db.store, "q", "ready", filters=Filters(priority=5)).tasks] == [old.id]
    assert [t.id for t in browse.browse(db.store, "q", "ready", filters=Filters(min_age_s=3600)).tasks] == [old.id]


def test_selective_filter_pages_reach_every_match_through_the_frontier(db):
    if db.dialect != "postgresql":
        pytest.skip("buckets chosen by hand on PostgreSQL")
    matches = []
    for i in range(40):
        task = db.make_task("q", bucket=i % 2, exclusive_key=f"k{i}" if i % 10 == 0 else None)
        if i % 10 == 0:
            matches.append(task.id)
    seen, after = [], None
    original = browse.SCAN_FILTERED
    browse.SCAN_FILTERED = 3  # tiny scans: pages end at the frontier, some empty
    try:
        while True:
            page = browse.browse(db.store, "q", "ready", filters=Filters(exclusive_key="k0"), after=after, limit=2)
            seen += [t.id for t in page.tasks]
            if page.next is None:
                break
            after = page.next
    finally:
        browse.SCAN_FILTERED = original
    assert seen == [matches[0]]


def test_bad_input_is_refused_before_reading(db):
    with pytest.raises(InvalidInput):
        browse.browse(db.store, "q", "finished")
    with pytest.raises(InvalidInput):
        browse.browse(db.store, "q", "ready", after="nonsense")
    with pytest.raises(InvalidInput):
        browse.browse(db.store, "q", "ready", limit=0)
    with pytest.raises(InvalidInput):
        browse.browse(db.store, "q", "ready", filters=Filters(priority=2**63))


def test_run_now_makes_a_scheduled_task_ready_and_leaves_others(db):
    later = db.make_task("q", state="scheduled", exec_time=utcnow() + dt.timedelta(hours=1))
    ready = db.make_task("q")
    result = browse.run_now(db.store, "q", [later.id, ready.id])
    assert result.changed == (later.id,) and result.unchanged == (ready.id,)
    row = db.task_row(later.id)
    assert row["state"] == "ready" and row["exec_time"] <= utcnow()
    assert [t.id for t in browse.browse(db.store, "q", "ready").tasks][-1] == later.id
    claimed = db.store.claim(range(db.layout.visit_count), "q", 10, 30)
    assert later.id in {c.id for c in claimed}


def test_set_priority_moves_a_ready_task_in_claim_order_and_spares_running_ones(db):
    first = db.make_task("q", priority=0)
    second = db.make_task("q", priority=0)
    running = db.make_task("q", state="leased")
    result = browse.set_priority(db.store, "q", [second.id, running.id], -5)
    assert result.changed == (second.id,)
    assert [t.id for t in browse.browse(db.store, "q", "ready").tasks] == [second.id, first.id]
    assert db.task_row(running.id)["priority"] == 0
    with pytest.raises(InvalidInput):
        browse.set_priority(db.store, "q", [first.id], "high")


def test_requeue_returns_only_expired_leases_to_the_queue(db):
    now = utcnow()
    expired = db.make_task("q", state="leased", attempts=1, lease_expires_at=now - dt.timedelta(seconds=5))
    live = db.make_task("q", state="leased", attempts=1)
    result = browse.requeue_expired(db.store, "q", [expired.id, live.id])
    assert result.changed == (expired.id,) and result.unchanged == (live.id,)
    assert db.task_row(expired.id)["state"] == "ready"
    assert db.task_row(live.id)["state"] == "leased"


def test_actions_refuse_malformed_ids_before_changing_anything(db):
    task = db.make_task("q", state="scheduled", exec_time=utcnow() + dt.timedelta(hours=1))
    with pytest.raises(InvalidInput):
        browse.run_now(db.store, "q", [task.id, "not-a-uuid"])
    with pytest.raises(InvalidInput):
        browse.run_now(db.store, "q", [])
    assert db.task_row(task.id)["state"] == "scheduled"


def test_actions_touch_only_the_named_queue(db):
    other = db.make_task("other", state="scheduled", exec_time=utcnow() + dt.timedelta(hours=1))
    assert browse.run_now(db.store, "q", [other.id]).changed == ()
    assert db.task_row(other.id)["state"] == "scheduled"


def test_a_cursor_survives_an_unescaped_query_string(db):
    # An ISO time's "+00:00" arrives as " 00:00" when a client puts the cursor in a URL unquoted.
    made = [db.make_task("q") for _ in range(3)]
    page = browse.browse(db.store, "q", "ready", limit=1)
    assert all(c.isalnum() or c in "-_" for c in page.next)
    rest, _ = _all_pages(db.store, "q", "ready", limit=1)
    assert rest == [t.id for t in sorted(made, key=lambda t: (t.priority, t.key.exec_time, t.key.id))]
    later = browse.browse(db.store, "q", "ready", limit=5, after=page.next)
    assert [t.id for t in later.tasks] == rest[1:]


def test_a_first_page_of_scheduled_tasks_seeks_to_their_span_instead_of_walking_the_ready_one(pg_db):
    # The first page's cursor is the lowest key; with it below the span's rank range, PostgreSQL's
    # B-tree scan started at the ready tasks (rank 0) and walked them all to reach the scheduled ones.
    from shardq.models import RANK_SCHEDULED
    from shardq.sql import statements_for

    db = pg_db
    db.client.store.queue_ensure("q")
    db.fill_bucket_zero("q", ready=30000, scheduled=100, scheduled_rank=RANK_SCHEDULED)
    db.sql("VACUUM ANALYZE shardq_tasks")
    filters = Filters()
    params = {
        "queue": "q",
        **filters.params(utcnow()),
        **browse.span_params(1, "scheduled", filters, None, descending=False, limit=50),
    }
    text = statements_for("postgresql")["task_browse_span"].text
    plan = "\n".join(r["QUERY PLAN"] for r in db.sql("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + text, params))
    scan = plan[plan.index("Index Only Scan") :]
    buffers = re.search(r"Buffers: shared ([^\n]*)", scan).group(1)
    pages = sum(int(n) for n in re.findall(r"(?:hit|read)=(\d+)", buffers))
    assert pages < 20, plan
    page = browse.browse(db.store, "q", "scheduled", limit=50)
    assert len(page.tasks) == 50
