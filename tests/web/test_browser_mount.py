"""The dashboard mounted under a prefix, in a real browser: the FastAPI example
(examples/fastapi_orders.py) served by uvicorn from a thread with its dashboard at /queue-admin,
and headless Chromium (as tests/web/test_browser.py) logging in and clicking through. Every page
it reaches, every script and API call it makes stays under the prefix."""

from __future__ import annotations

import re
import threading

import pytest

pytest.importorskip("fastapi")

import uvicorn
from playwright.sync_api import expect, sync_playwright

from examples import fastapi_orders
from shardq.web.server import _bind, _url
from tests.support.web import CHROMIUM, TOKEN, make_dead

PREFIX = fastapi_orders.DASHBOARD_PREFIX


class _Started:
    """ASGI wrapper that sets ``event`` once the application's lifespan has started."""

    def __init__(self, app, event: threading.Event) -> None:
        self.app, self.event = app, event

    async def __call__(self, scope, receive, send):
        async def sending(message):
            if message["type"] == "lifespan.startup.complete":
                self.event.set()
            await send(message)

        await self.app(scope, receive, sending)


@pytest.fixture
def example(pg_db):
    """The example API with its dashboard, on a free loopback port; yields its base URL."""
    tasks = fastapi_orders.create_tasks(pg_db.dsn)
    started = threading.Event()
    app = _Started(fastapi_orders.create_api(pg_db.dsn.conninfo, tasks, dashboard_token=TOKEN), started)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    sock = _bind("127.0.0.1", 0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        assert started.wait(30), "the example did not start"
        yield _url(sock, "127.0.0.1").rstrip("/"), pg_db
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        tasks.close()


def test_logging_in_and_clicking_through_the_dashboard_under_a_prefix(example):
    base, db = example
    for _ in range(3):
        db.make_task("receipts")
    make_dead(db, "receipts", error="mail server down")
    requests: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("request", lambda request: requests.append(request.url))
        page.goto(base + PREFIX + "/queues/receipts")
        expect(page.locator("#token")).to_be_visible()
        page.fill("#token", TOKEN)
        page.click("button[type=submit]")
        page.wait_for_url(base + PREFIX + "/queues/receipts")  # back where the login began
        page.click("text=Dead letters")
        expect(page.locator("#dead-count")).to_have_text("1")
        page.click("button.requeue-one")
        expect(page.locator(".flash")).to_contain_text("Requeued 1 dead task(s).")
        page.click("header >> text=shardq")
        page.wait_for_url(base + PREFIX + "/")
        overview = page.locator("#overview")
        expect(overview).to_have_attribute("data-samples", re.compile(r"^([2-9]|\d\d+)$"))  # it polled the prefixed API
        page.click('#queues tr[data-queue="receipts"] a')
        page.wait_for_url(base + PREFIX + "/queues/receipts")
        page.click("text=Workers")
        page.wait_for_url(base + PREFIX + "/workers")
        page.click("text=Log out")
        page.wait_for_url(base + PREFIX + "/login")
        assert page.context.cookies() == []  # the prefixed session cookie is gone
        browser.close()
    assert db.count_dead() == 0
    assert not errors, errors
    own = [u for u in requests if u.startswith(base)]
    assert own and all(u.startswith(base + PREFIX + "/") for u in own), own
