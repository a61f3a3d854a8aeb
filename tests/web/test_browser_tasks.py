"""`shardq web` round two in a real browser (headless Chromium through Playwright, as
tests/web/test_browser.py): the task list's tabs, filters, paging and bulk actions, a task's page,
the Workers and Audit pages, a read-only session, dark mode and a phone-sized screen. The database
is checked after every action. With SHARDQ_WEB_SCREENSHOT=1 the screenshots replace those in
docs/."""

from __future__ import annotations

import datetime as dt

from playwright.sync_api import expect

from shardq import arguments
from shardq.maintenance.worker_registry import Holding, WorkerRegistry
from shardq.models import Activity
from tests.support.factories import utcnow
from tests.support.web import READ_TOKEN, SCRIPT, TOKEN, _open, _shot


def test_browsing_tabs_filters_and_pages_of_a_queues_tasks(site, tmp_path):
    db = site.db
    for i in range(7):
        db.make_task("emails", priority=i % 2, exclusive_key="acct-9" if i == 3 else None)
    later = db.make_task("emails", state="scheduled", exec_time=utcnow() + dt.timedelta(hours=1))
    db.set_last_error(later.key.id, "Traceback (most recent call last):\nKeyError: 'plan'")
    site.goto(site.server.url + "queues/emails")
    site.click("#browse-tasks")
    rows = site.locator("#tasks tbody tr")
    expect(rows).to_have_count(7)
    site.fill("input[name=exclusive_key]", "acct-9")
    site.click("#apply-filters")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("acct-9")
    site.goto(site.server.url + "queues/emails/tasks?state=ready&limit=3")
    expect(rows).to_have_count(3)
    site.click("#next-page")
    expect(rows).to_have_count(3)
    site.click("#next-page")
    expect(rows).to_have_count(1)
    expect(site.locator("#next-page")).to_have_count(0)
    site.click("#tab-scheduled")
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td.error")).to_contain_text("KeyError")
    _shot(site, "web-tasks.png", tmp_path)
    assert not site.errors, site.errors


def test_bulk_actions_ask_with_the_count_and_change_the_database(site):
    db = site.db
    scheduled = [db.make_task("q", state="scheduled", exec_time=utcnow() + dt.timedelta(hours=1)) for _ in range(3)]
    messages: list[str] = []
    answers: list[str] = []
    site.on("dialog", lambda d: (messages.append(d.message), d.accept() if answers.pop(0) == "yes" else d.dismiss()))
    site.goto(site.server.url + "queues/q/tasks?state=scheduled")
    answers.append("ok")
    site.click("#act-run_now")  # nothing ticked: it says so and sends nothing
    assert "Tick the tasks" in messages[-1]
    site.check(f'input[name=id][value="{scheduled[0].id}"]')
    site.check(f'input[name=id][value="{scheduled[1].id}"]')
    answers.append("no")
    site.click("#act-run_now")
    assert "2 selected task(s)" in messages[-1]
    assert all(db.task_row(t.id)["state"] == "scheduled" for t in scheduled)
    answers.append("yes")
    site.click("#act-run_now")
    expect(site.locator(".flash")).to_contain_text("2 task(s) will run now")
    assert [db.task_row(t.id)["state"] for t in scheduled] == ["ready", "ready", "scheduled"]
    site.wait_for_load_state()  # the flash shows while the page still parses; its script comes after
    site.check("#select-all")
    expect(site.locator("input[name=id]:checked")).to_have_count(1)
    site.fill("#new-priority", "7")
    answers.append("yes")
    site.click("#act-set_priority")
    expect(site.locator(".flash")).to_contain_text("Changed the priority of 1 task(s)")
    assert db.task_row(scheduled[2].id)["priority"] == 7
    assert not answers and not site.errors, (answers, site.errors)


def test_a_task_page_shows_the_call_its_json_and_its_worker(site, tmp_path):
    db = site.db
    payload = arguments.encode_call("billing.charge", {"account": "a-17", "note": SCRIPT.decode()})
    task = db.make_task("billing", state="leased", payload=payload)
    registry = WorkerRegistry(["billing"], 8, lambda: Holding(1, 1, [task.lease_token]))
    registry.beat(db.store)
    site.goto(site.server.url + f"tasks/{task.id}")
    expect(site.locator("#app-task-name")).to_have_text("billing.charge")
    expect(site.locator("#app-task-args dt")).to_have_text(["account", "note"])
    expect(site.locator("#payload-json")).to_contain_text('"account": "a-17"')
    expect(site.locator("#task-worker a")).to_contain_text("pid")
    expect(site.locator("#payload-download")).to_have_attribute("href", f"/tasks/{task.id}/payload")
    _shot(site, "web-task.png", tmp_path)
    site.click("#task-worker a")
    expect(site.locator(f"#worker-{registry.id}")).to_contain_text("billing")
    _shot(site, "web-workers.png", tmp_path)
    assert not site.errors, site.errors  # the payload's script tag stayed text


def test_the_audit_page_lists_what_was_done(site, tmp_path):
    db = site.db
    task = db.make_task("q")
    site.on("dialog", lambda d: d.accept())
    site.goto(site.server.url + "queues/q/tasks")
    site.check(f'input[name=id][value="{task.id}"]')
    site.click("#act-cancel")
    expect(site.locator(".flash")).to_contain_text("Cancelled 1 task(s)")
    assert db.task_row(task.id) is None
    site.click("header a[href='/audit']")
    expect(site.locator("#audit tbody tr")).to_have_count(1)
    expect(site.locator("#audit tbody tr").first).to_contain_text("full token, session")
    _shot(site, "web-audit.png", tmp_path)


def test_a_read_only_session_sees_no_action(server, browser):
    db = server.db
    task = db.make_task("q")
    context, page = _open(browser, server, READ_TOKEN)
    try:
        page.goto(server.url + "queues/q")
        expect(page.locator("#read-only")).to_be_visible()
        expect(page.locator("#pause-dequeue")).to_have_count(0)
        page.goto(server.url + "queues/q/tasks")
        expect(page.locator("#tasks tbody tr")).to_have_count(1)
        expect(page.locator("#act-cancel")).to_have_count(0)
        page.goto(server.url + f"tasks/{task.id}")
        expect(page.locator("#cancel")).to_have_count(0)
        assert db.task_row(task.id) is not None and not page.errors
    finally:
        context.close()


def test_dark_mode_and_a_phone_screen(server, browser, tmp_path):
    db = server.db
    for _ in range(3):
        db.make_task("a-queue-with-a-rather-long-name-for-a-phone")
    context, page = _open(
        browser,
        server,
        TOKEN,
        color_scheme="dark",
        viewport={"width": 390, "height": 844},
        is_mobile=True,
        has_touch=True,
    )
    try:
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(11, 17, 32)"  # the dark palette
        page.goto(server.url + "queues/a-queue-with-a-rather-long-name-for-a-phone/tasks")
        expect(page.locator("#tasks tbody tr")).to_have_count(3)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, width  # nothing pushes the page sideways; wide tables scroll in place
        _shot(page, "web-phone-dark.png", tmp_path)
        assert not page.errors, page.errors
    finally:
        context.close()


def test_editing_a_queues_settings_asks_first(site, tmp_path):
    db = site.db
    db.client.store.queue_ensure("q")
    db.store.stats_add_many(0, {"q": Activity(enqueued=40, acked=31, retried=3)})
    answers = ["no", "yes"]
    site.on("dialog", lambda d: d.accept() if answers.pop(0) == "yes" else d.dismiss())
    site.goto(site.server.url + "queues/q")
    site.click("#edit-settings summary")
    site.fill("input[name=max_attempts]", "9")
    site.fill("input[name=concurrency]", "4")
    site.click("#save-settings")  # dismissed: nothing changes
    assert db.client.store.queue_get("q").max_attempts != 9
    site.click("#save-settings")
    expect(site.locator(".flash")).to_contain_text("Saved the queue's settings")
    settings = db.client.store.queue_get("q")
    assert (settings.max_attempts, settings.concurrency_limit) == (9, 4)
    expect(site.locator("#concurrency-limit")).to_contain_text("4")
    expect(site.locator("#series-acked")).to_have_count(1)
    site.click("#range-24h")
    expect(site.locator("#range-24h")).to_have_class("current")
    site.click("#edit-settings summary")
    _shot(site, "web-queue.png", tmp_path)
    assert not answers and not site.errors, site.errors
