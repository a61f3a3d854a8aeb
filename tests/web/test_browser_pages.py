"""Dashboard round three in a real browser (headless Chromium through Playwright, as
tests/web/test_browser_tasks.py): the finished tab, the workflow page and its link from a step's
task page, the note on a running list cut at its cap, and the latency chart. With
SHARDQ_WEB_SCREENSHOT=1 the screenshots replace those in docs/."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

import shardq
from shardq.admin import browse
from shardq.lifecycle.claim import Consumer
from shardq.models import Activity
from shardq.workflows import steps as workflows
from tests.support.factories import fenced
from tests.support.web import _shot, make_finished


def test_the_finished_tab_lists_filters_and_links_to_each_tasks_page(site, tmp_path):
    db = site.db
    db.client.set_queue("emails", keep_finished_seconds=7 * 86_400)
    make_finished(db, "emails", count=4, task="emails.send")
    (dead,) = make_finished(
        db,
        "emails",
        state="dead",
        error="SMTPError: 550 mailbox unavailable\n  at send()",
        minutes_ago=3,
        task="emails.send",
    )
    make_finished(db, "emails", state="cancelled", minutes_ago=9, task="emails.digest")
    site.goto(site.server.url + "queues/emails/tasks")
    site.click("#tab-finished")
    rows = site.locator("#finished tbody tr")
    expect(rows).to_have_count(6)
    _shot(site, "web-finished.png", tmp_path)
    site.wait_for_load_state()
    site.select_option("#outcome", "dead")
    site.click("#apply-filters")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("SMTPError")
    site.fill("input[name=since]", "2m")
    site.click("#apply-filters")
    expect(site.locator("#finished tbody td.muted")).to_contain_text("No finished task")
    site.goto(site.server.url + "queues/emails/tasks?state=finished&outcome=dead")
    site.click(f'a[href="/tasks/{dead}"]')
    expect(site.locator("#task-state")).to_have_text("dead")
    assert not site.errors, site.errors


@pytest.fixture
def diamond(site):
    app = shardq.App(site.db.dsn)

    @app.task(name="etl.step")
    def step(x: int) -> None: ...

    wf = app.workflow("nightly")
    a = wf.add(step.step(x=1), name="extract")
    b = wf.add(step.step(x=2), name="transform-users", after=a)
    c = wf.add(step.step(x=3), name="transform-orders", after=a)
    d = wf.add(step.step(x=4), name="load", after=[b, c])
    wf.add(step.step(x=5), name="alert", after=d, on_failure=True)
    handle = wf.enqueue()
    [task_a] = Consumer(site.db.store, ["default"]).claim().tasks
    workflows.remove_and_release(site.db.store, lambda: site.db.store.task_ack_many([fenced(task_a)]), "succeeded")
    yield handle
    app.close()


def test_a_step_task_page_leads_to_the_workflow_graph_whose_boxes_lead_to_their_tasks(site, diamond, tmp_path):
    site.goto(site.server.url + f"tasks/{diamond.task_ids['transform-users']}")
    site.click("#task-workflow")
    expect(site.locator("#workflow-state")).to_have_text("running")
    boxes = site.locator("#workflow-graph a.step")
    expect(boxes).to_have_count(5)
    expect(site.locator("#workflow-graph line.edge")).to_have_count(5)
    expect(site.locator('#workflow-graph a[data-step="extract"]')).to_have_attribute("data-state", "succeeded")
    expect(site.locator('#workflow-graph a[data-step="load"]')).to_have_attribute("data-state", "waiting")
    extract = site.locator('#workflow-graph a[data-step="extract"] rect').bounding_box()
    load = site.locator('#workflow-graph a[data-step="load"] rect').bounding_box()
    assert extract and load and load["x"] > extract["x"]  # drawn left to right by depth
    _shot(site, "web-workflow.png", tmp_path)
    site.locator('#workflow-graph a[data-step="load"]').click()
    expect(site.locator("#task-id")).to_have_text(diamond.task_ids["load"])
    assert not site.errors, site.errors


def test_a_running_list_cut_at_its_cap_says_so(site, monkeypatch):
    monkeypatch.setattr(browse, "LEASED_CAP", 2)
    for _ in range(3):
        site.db.make_task("q", state="leased")
    site.goto(site.server.url + "queues/q/tasks?state=running")
    expect(site.locator("#capped")).to_contain_text("Showing the first 2 running tasks found")
    expect(site.locator("#tasks tbody tr")).to_have_count(2)
    assert not site.errors, site.errors


def test_the_queue_page_draws_lead_time_and_start_latency(site, tmp_path):
    db = site.db
    db.client.store.queue_ensure("emails")
    db.store.stats_add_many(
        0,
        {
            "emails": Activity(
                enqueued=30,
                acked=24,
                lead_acks=24,
                lead_seconds=96.0,
                first_starts=26,
                start_wait_seconds=13.0,
                handled=26,
            )
        },
    )
    site.goto(site.server.url + "queues/emails")
    expect(site.locator("#latency polyline")).to_have_count(2)
    expect(site.locator("#latency-legend")).to_contain_text("lead time: mean 4.0s")
    expect(site.locator("#latency-legend")).to_contain_text("start latency: mean 500ms")
    site.click("#range-24h")
    expect(site.locator("#latency polyline")).to_have_count(2)
    # Half an hour of minutes before the first row's, a quiet minute after it and a quiet stretch
    # in the middle: each series breaks twice. Counted from the first row's minute, not from now,
    # which may have moved on to the next minute since it was written.
    db.add_broken_latency_history("emails")
    site.click("#range-1h")
    expect(site.locator("#latency polyline")).to_have_count(6)
    _shot(site, "web-latency.png", tmp_path)
    assert not site.errors, site.errors
