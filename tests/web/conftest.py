"""Fixtures of the web tests: the dashboard served from a thread, a headless browser, a signed-in page."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import sync_playwright

from tests.support.factories import TestDatabase
from tests.support.web import CHROMIUM, CURRENT, READ_TOKEN, TOKEN, _open, _ServedDashboard


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def server(pg_db: TestDatabase) -> Iterator[_ServedDashboard]:
    with _ServedDashboard(pg_db, stats_options=CURRENT, refresh_seconds=5, read_token=READ_TOKEN) as running:
        yield running


@pytest.fixture
def site(server, browser):
    context, page = _open(browser, server, TOKEN)
    page.db = server.db
    yield page
    context.close()
