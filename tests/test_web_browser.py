"""`shardq web` in a real browser: headless Chromium (the system's, driven by Playwright) loads
every page from uvicorn serving in a thread, clicks pause, requeue and cancel, and the database is
checked afterwards. Skipped only where no Chromium binary exists (scripts/system-deps.sh installs
it)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from shardq import admin
from shardq.models import Activity
from shardq.web.server import BackgroundServer

from .web_support import CURRENT, SCRIPT, TOKEN, make_dead

CHROMIUM = os.environ.get("SHARDQ_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
#: With SHARDQ_WEB_SCREENSHOT=1 the overview's screenshot replaces the one in the docs.
DOCS_SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "web-overview.png"

if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium binary at {CHROMIUM} (apt install chromium, or set SHARDQ_TEST_CHROMIUM)",
                allow_module_level=True)

from playwright.sync_api import expect, sync_playwright  # noqa: E402  (after the skip: needs the browser)


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def site(pg_db, browser):
    """The dashboard on a free loopback port, and a browser page logged in to it."""
    with BackgroundServer(pg_db.client, TOKEN, stats_options=CURRENT, refresh_seconds=0.25) as server:
        context = browser.new_context(viewport={"width": 1280, "height": 860})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.goto(server.url)
        expect(page.locator("#token")).to_be_visible()  # the login form: nothing else without the token
        page.fill("#token", TOKEN)
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text("Queues")
        errors.clear()  # the console reports the login page's own 401
        page.db = pg_db
        page.server = server
        page.errors = errors
        yield page
        context.close()


def test_the_overview_refreshes_by_itself_and_draws_charts(site, tmp_path):
    db = site.db
    db.store.stats_add_many(0, {"emails": Activity(enqueued=900, acked=780, handled=780, handler_seconds=60.0),
                                "billing": Activity(enqueued=240, acked=200, retried=12, dead=1)})
    for queue, ready in (("emails", 6), ("billing", 3), ("reports", 1)):
        for _ in range(ready):
            db.make_task(queue)
    db.make_task("emails", state="leased")
    make_dead(db, "billing", error="card declined")
    site.goto(site.server.url)
    rows = site.locator("#queues tbody tr")
    expect(rows).to_have_count(3)
    overview = site.locator("#overview")
    # (no wait_for_function: the page's Content-Security-Policy forbids evaluating strings)
    expect(overview).to_have_attribute("data-samples", re.compile(r"^([3-9]|\d\d+)$"))
    for _ in range(4):  # appears without a reload: the page polls the API
        db.make_task("reports")
    expect(site.locator('#queues tr[data-queue="reports"] td').nth(1)).to_have_text("5")
    expect(site.locator("#chart-ready polyline")).to_have_count(3)
    expect(site.locator("#chart-rates polyline")).to_have_count(2)
    expect(overview).to_have_attribute("data-samples", re.compile(r"^(1[2-9]|[2-9]\d|\d\d\d+)$"))
    assert not site.errors, site.errors  # no script error, no CSP violation
    shot = tmp_path / "overview.png"
    site.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes().startswith(b"\x89PNG")
    if os.environ.get("SHARDQ_WEB_SCREENSHOT") == "1":
        DOCS_SCREENSHOT.write_bytes(shot.read_bytes())


def test_pausing_and_resuming_a_queue_from_its_page(site):
    db = site.db
    for _ in range(5):
        db.make_task("emails")
    site.goto(site.server.url + "queues/emails")
    expect(site.locator("#buckets rect.ready")).to_have_count(db.layout.bucket_count)
    site.click("#pause")
    expect(site.locator(".flash")).to_have_text("Paused enqueue and dequeue.")
    expect(site.locator("#queue-state")).to_contain_text("paused")
    settings = admin.queue_show(db.store, "emails")
    assert settings.paused_enqueue and settings.paused_dequeue
    site.click("#resume")
    expect(site.locator("#queue-state")).to_have_text("open")
    assert not admin.queue_show(db.store, "emails").paused_dequeue
    assert not site.errors, site.errors


def test_requeueing_one_then_all_dead_tasks_and_the_payload_stays_text(site):
    db = site.db
    poison = make_dead(db, "q", payload=SCRIPT, error="<b>bold</b> failure")
    others = [make_dead(db, "q") for _ in range(2)]
    dialogs: list[str] = []
    site.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    site.goto(site.server.url + "queues/q/dead")
    expect(site.locator("#dead tbody tr")).to_have_count(3)
    expect(site.locator(f'tr[data-id="{poison.key.id}"] td.payload')).to_have_text(SCRIPT.decode())
    expect(site.locator(f'tr[data-id="{poison.key.id}"] td.error')).to_have_text("<b>bold</b> failure")
    site.locator(f'tr[data-id="{poison.key.id}"] button.requeue-one').click()
    expect(site.locator(".flash")).to_have_text("Requeued 1 dead task(s).")
    assert db.dead_row(poison.key.id) is None and db.task_row(poison.key.id)["state"] == "ready"
    expect(site.locator("#dead tbody tr")).to_have_count(2)
    site.click("#requeue-all")
    expect(site.locator(".flash")).to_have_text("Requeued 2 dead task(s).")
    assert db.count("shardq_dead") == 0 and all(db.task_row(t.key.id) for t in others)
    assert not dialogs and not site.errors, (dialogs, site.errors)


def test_purging_needs_the_box_ticked(site):
    db = site.db
    make_dead(db, "q")
    site.goto(site.server.url + "queues/q/dead")
    site.click("#purge")  # the browser refuses the form: the box is required
    assert db.count("shardq_dead") == 1
    site.check("#purge-confirm")
    site.click("#purge")
    expect(site.locator(".flash")).to_have_text("Purged 1 dead task(s).")
    assert db.count("shardq_dead") == 0


def test_finding_a_task_by_id_and_cancelling_it(site):
    db = site.db
    task = db.make_task("emails", state="leased", attempts=1)
    site.goto(site.server.url)
    site.fill("input[name=id]", str(task.key.id))
    site.press("input[name=id]", "Enter")
    expect(site.locator("#task-state")).to_have_text("leased")
    site.click("#cancel")
    expect(site.locator(".flash")).to_have_text("Cancelled the task.")
    assert db.task_row(task.key.id) is None
    site.goto(site.server.url + f"tasks/{task.key.id}")
    expect(site.locator("h1")).to_have_text("Not found")
    assert all("404" in e for e in site.errors), site.errors
