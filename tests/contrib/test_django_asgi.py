"""The Django project of tests/contrib/test_django.py served through ASGI (``get_asgi_application()``, as
uvicorn or daphne run it), driven over httpx's ASGITransport: the dashboard behind Django's staff
login, read-only for staff, acting for the permission's holders, under its prefix."""

from __future__ import annotations

import asyncio
import re
from urllib.parse import quote

import pytest

pytest.importorskip("pytest_django")
pytest.importorskip("httpx")

import httpx
from django.core.asgi import get_asgi_application

from shardq.contrib.django import app
from tests.support.django_project import django_db_setup, make_user  # noqa: F401 - the fixture, for this module

DASHBOARD = "/queue-admin/"


def _session_cookie(user) -> dict[str, str]:
    """The cookie a browser holds once ``user`` signed in (Django's own session, made by its test client)."""
    from django.test import Client as DjangoClient

    browser = DjangoClient()
    browser.force_login(user)
    return {"sessionid": browser.cookies["sessionid"].value}


def _over_asgi(steps, cookies: dict[str, str] | None = None, root_path: str = ""):
    """Run ``steps(http)`` against the project's ASGI application, on an event loop of its own."""

    async def main():
        transport = httpx.ASGITransport(app=get_asgi_application(), root_path=root_path)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver", cookies=cookies) as http:
            return await steps(http)

    return asyncio.run(main())


def _csrf(page: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


@pytest.mark.django_db(transaction=True)
def test_over_asgi_an_anonymous_user_is_sent_to_the_login_page():
    async def steps(http):
        return [(path, await http.get(path)) for path in (DASHBOARD, DASHBOARD + "api/queues")]

    for path, response in _over_asgi(steps):
        assert response.status_code == 302, path
        assert response.headers["location"] == f"/accounts/login/?next={quote(path)}"


@pytest.mark.django_db(transaction=True)
def test_over_asgi_a_staff_user_reads_the_dashboard_under_its_prefix_and_changes_nothing():
    app.client.set_queue("mail")
    cookies = _session_cookie(make_user("reader", staff=True))

    async def steps(http):
        page = await http.get(DASHBOARD)
        script = await http.get(DASHBOARD + "static/dashboard.js")
        api = await http.get(DASHBOARD + "api/queues")
        queue = await http.get(DASHBOARD + "queues/mail")
        refused = await http.post(DASHBOARD + "queues/mail/pause", data={"csrf": "any", "what": "dequeue"})
        # at once: each view holds a Django worker thread while the dashboard answers on the loop
        together = await asyncio.gather(*(http.get(DASHBOARD + path) for path in ("", "api/queues", "queues/mail")))
        return page, script, api, queue, refused, together

    page, script, api, queue, refused, together = _over_asgi(steps, cookies)
    assert [response.status_code for response in together] == [200, 200, 200]
    assert page.status_code == 200 and "<h1>Queues</h1>" in page.text and 'id="read-only"' in page.text
    assert 'src="/queue-admin/static/dashboard.js"' in page.text
    links = re.findall(r'(?:href|src|action)="(/[^"]*)"', page.text + queue.text)
    assert links and all(link.startswith("/queue-admin/") for link in links), links
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert api.status_code == 200 and "mail" in api.text
    assert refused.status_code == 403 and "read-only" in refused.text
    assert not app.client.queue_settings("mail").paused_dequeue


@pytest.mark.django_db(transaction=True)
def test_over_asgi_a_holder_of_the_permission_pauses_a_queue_and_is_named_in_the_audit():
    app.client.set_queue("mail")
    cookies = _session_cookie(make_user("operator", staff=True, operator=True))

    async def steps(http):
        csrf = _csrf((await http.get(DASHBOARD + "queues/mail")).text)
        paused = await http.post(DASHBOARD + "queues/mail/pause", data={"what": "dequeue", "csrf": csrf})
        audit = await http.get(DASHBOARD + "audit")
        return paused, audit

    paused, audit = _over_asgi(steps, cookies)
    assert paused.status_code == 303 and paused.headers["location"] == "/queue-admin/queues/mail?done=paused-dequeue"
    assert app.client.queue_settings("mail").paused_dequeue
    assert "Django user operator" in audit.text


@pytest.mark.django_db(transaction=True)
def test_over_asgi_under_a_root_path_every_link_keeps_the_whole_prefix():
    cookies = _session_cookie(make_user("reader", staff=True))

    async def steps(http):
        return await http.get("/site" + DASHBOARD), await http.get("/site" + DASHBOARD + "static/dashboard.js")

    page, script = _over_asgi(steps, cookies, root_path="/site")
    assert page.status_code == 200 and 'src="/site/queue-admin/static/dashboard.js"' in page.text
    links = re.findall(r'(?:href|src|action)="(/[^"]*)"', page.text)
    assert links and all(link.startswith("/site/queue-admin/") for link in links), links
    assert script.status_code == 200
