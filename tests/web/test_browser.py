"""`shardq web` in a real browser: headless Chromium (the system's, driven by Playwright) loads
every page from uvicorn serving in a thread, clicks pause, requeue and cancel, and the database is
checked afterwards. Skipped only where no Chromium binary exists (scripts/system-deps.sh installs
it)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from shardq.admin import actions as admin
from shardq.models import Activity
from shardq.web.server import BackgroundServer
from tests.support.web import CHROMIUM, CURRENT, SCRIPT, TOKEN, make_dead

#: With SHARDQ_WEB_SCREENSHOT=1 the overview's screenshot replaces the one in the docs.
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "web-overview.png"

if not Path(CHROMIUM).exists():
    pytest.skip(
        f"no Chromium binary at {CHROMIUM} (apt install chromium, or set SHARDQ_TEST_CHROMIUM)", allow_module_level=True
    )

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
    db.store.stats_add_many(
        0,
        {
            "emails": Activity(enqueued=900, acked=780, handled=780, handler_seconds=60.0),
            "billing": Activity(enqueued=240, acked=200, retried=12, dead=1),
        },
    )
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


def test_pausing_workers_or_producers_apart_after_a_confirmation(site):
    db = site.db
    for _ in range(5):
        db.make_task("emails")
    answers: list[str] = []
    site.on("dialog", lambda dialog: dialog.accept() if answers.pop(0) == "yes" else dialog.dismiss())
    site.goto(site.server.url + "queues/emails")
    expect(site.locator("#buckets rect.ready")).to_have_count(db.layout.bucket_count)
    answers.append("no")
    site.click("#pause-dequeue")  # dismissed: nothing is sent
    settings = db.store.run(admin.queue_show_plan("emails"))
    assert not settings.paused_dequeue and not settings.paused_enqueue
    answers.append("yes")
    site.click("#pause-dequeue")
    expect(site.locator(".flash")).to_contain_text("Paused dequeue")
    expect(site.locator("#queue-state")).to_have_text("paused: dequeue")
    settings = db.store.run(admin.queue_show_plan("emails"))
    assert settings.paused_dequeue and not settings.paused_enqueue  # producers still enqueue
    db.client.enqueue("emails", b"still accepted")
    answers.append("yes")
    site.click("#pause-enqueue")
    expect(site.locator("#queue-state")).to_have_text("paused: enqueue and dequeue")
    site.click("#resume-dequeue")  # resuming asks nothing
    expect(site.locator("#queue-state")).to_have_text("paused: enqueue")
    site.click("#resume-enqueue")
    expect(site.locator("#queue-state")).to_have_text("open")
    settings = db.store.run(admin.queue_show_plan("emails"))
    assert not settings.paused_dequeue and not settings.paused_enqueue
    assert not answers and not site.errors, (answers, site.errors)


def test_requeueing_one_then_all_dead_tasks_and_the_payload_stays_text(site):
    db = site.db
    poison = make_dead(db, "q", payload=SCRIPT, error="<b>bold</b> failure")
    others = [make_dead(db, "q") for _ in range(2)]
    dialogs: list[str] = []
    answers: list[str] = []
    site.on(
        "dialog",
        lambda dialog: (
            dialogs.append(dialog.message),
            dialog.accept() if answers.pop(0) == "yes" else dialog.dismiss(),
        ),
    )
    site.goto(site.server.url + "queues/q/dead")
    expect(site.locator("#dead tbody tr")).to_have_count(3)
    expect(site.locator(f'tr[data-id="{poison.key.id}"] td.payload')).to_have_text(SCRIPT.decode())
    expect(site.locator(f'tr[data-id="{poison.key.id}"] td.error')).to_have_text("<b>bold</b> failure")
    site.locator(f'tr[data-id="{poison.key.id}"] button.requeue-one').click()
    expect(site.locator(".flash")).to_have_text("Requeued 1 dead task(s).")
    assert db.dead_row(poison.key.id) is None and db.task_row(poison.key.id)["state"] == "ready"
    expect(site.locator("#dead tbody tr")).to_have_count(2)
    site.wait_for_load_state()  # the rows show while the page still parses; its script (the question) comes after
    assert not dialogs  # one task: no question
    answers.append("no")
    site.click("#requeue-all")
    assert db.count("shardq_dead") == 2
    answers.append("yes")
    site.click("#requeue-all")
    expect(site.locator(".flash")).to_have_text("Requeued 2 dead task(s).")
    assert db.count("shardq_dead") == 0 and all(db.task_row(t.key.id) for t in others)
    assert [m.split("?")[0] for m in dialogs] == ["Requeue all 2 dead tasks of q"] * 2
    expect(site.locator("#requeue-all")).to_be_disabled()  # nothing left to requeue
    assert not site.errors, site.errors


def test_purging_needs_the_box_ticked(site):
    db = site.db
    make_dead(db, "q")
    site.goto(site.server.url + "queues/q/dead")
    site.on("dialog", lambda dialog: dialog.accept())
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
    expect(site.locator("#task-state")).to_have_text("running (attempt 1)")
    site.click("#cancel")
    expect(site.locator(".flash")).to_have_text("Cancelled the task.")
    assert db.task_row(task.key.id) is None
    site.goto(site.server.url + f"tasks/{task.key.id}")
    expect(site.locator("h1")).to_have_text("Not found")
    assert all("404" in e for e in site.errors), site.errors


# -- holes found in use (issue #33) -------------------------------------------------------------
def _samples(site) -> int:
    return int(site.locator("#overview").get_attribute("data-samples") or 0)


def _wait_samples(site, at_least: int) -> None:
    pattern = "|".join(str(n) for n in range(at_least, at_least + 400))
    expect(site.locator("#overview")).to_have_attribute("data-samples", re.compile(rf"^({pattern})$"), timeout=15_000)


def test_when_the_api_fails_the_overview_says_since_when_its_numbers_are_stale(site):
    site.db.make_task("emails")
    site.goto(site.server.url)
    _wait_samples(site, 2)
    expect(site.locator("#stale")).to_be_hidden()
    site.route(
        "**/api/queues",
        lambda route: route.fulfill(
            status=503, content_type="application/json", body='{"error": "database error: down"}'
        ),
    )
    banner = site.locator("#stale")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text(re.compile(r"Not refreshed since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"))
    expect(banner).to_contain_text("HTTP 503 database error: down")
    site.unroute("**/api/queues")
    expect(banner).to_be_hidden()
    site.errors.clear()  # the console reports the 503s


def test_a_long_queue_name_leaves_the_state_column_on_screen_at_1280_px(site):
    long_name = "tenant-" + "x" * 114 + "-end"
    site.db.make_task(long_name)
    site.db.make_task("emails")
    site.goto(site.server.url)
    _wait_samples(site, 2)
    for width in (1280, 1440):
        site.set_viewport_size({"width": width, "height": 860})
        state = site.locator("#queues thead th").last.bounding_box()
        assert state["x"] + state["width"] <= width, (width, state)
        cell = site.locator(f'#queues tr[data-queue="{long_name}"] td').nth(12).bounding_box()
        assert cell["x"] + cell["width"] <= width, (width, cell)
    expect(site.locator(f'#queues tr[data-queue="{long_name}"] a')).to_have_attribute("title", long_name)
    site.goto(site.server.url + "queues/" + long_name)
    expect(site.locator("#queue-name")).to_have_text(long_name)  # whole on its own page
    assert not site.errors, site.errors


def test_the_refresh_keeps_keyboard_focus_in_the_table(site):
    site.db.make_task("emails")
    site.db.make_task("billing")
    site.goto(site.server.url)
    _wait_samples(site, 2)
    target = site.locator('#queues tr[data-queue="emails"] td a').first
    target.focus()
    before = _samples(site)
    site.db.make_task("emails")  # a number in the focused row changes
    expect(site.locator('#queues tr[data-queue="emails"] td').nth(1)).to_have_text("2")
    _wait_samples(site, before + 4)
    expect(target).to_be_focused()
    assert not site.errors, site.errors


def test_a_queue_keeps_its_chart_colour_when_another_queue_appears(site):
    site.db.make_task("mid")
    site.db.make_task("zeta")
    site.goto(site.server.url)
    zeta = site.locator('#chart-ready polyline[data-series="zeta"]')
    expect(zeta).to_have_count(1)
    colour = zeta.get_attribute("stroke")
    site.db.make_task("alpha")  # sorts first: by position zeta's colour would change
    expect(site.locator("#chart-ready polyline")).to_have_count(3)
    assert zeta.get_attribute("stroke") == colour
    site.goto(site.server.url)
    expect(zeta).to_have_attribute("stroke", colour)
    assert not site.errors, site.errors


def test_the_charts_keep_their_history_across_a_reload(site):
    site.db.make_task("emails")
    site.goto(site.server.url)
    _wait_samples(site, 10)
    points = len(site.locator('#chart-ready polyline[data-series="emails"]').get_attribute("points").split())
    assert points >= 10
    site.reload()
    expect(site.locator("#overview")).to_have_attribute("data-restored", re.compile(r"^[1-9]\d*$"))
    restored = int(site.locator("#overview").get_attribute("data-restored"))
    assert restored >= points
    line = site.locator('#chart-ready polyline[data-series="emails"]')
    xs = [float(p.split(",")[0]) for p in line.get_attribute("points").split()]
    # the line spans the chart (it began a sample or two after the page's first poll): no speck at the edge
    assert len(xs) >= points and xs[0] < 100 and xs[-1] == 400
    assert not site.errors, site.errors
