"""The dashboard mounted under a prefix in another ASGI application (Starlette's ``Mount``, as a
FastAPI or Starlette project would): every link, form, redirect, static file, cookie and API path
it writes stays under the prefix, and its pages still require the token."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

import shardq
from shardq.web.app import create_app
from shardq.web.auth import UPSTREAM_IDENTITY, Identity
from shardq.web.mount import root, route_path
from tests.support.factories import TestDatabase
from tests.support.web import CURRENT, TOKEN, DashboardClient, make_dead

PREFIX = "/queue-admin"
#: Every URL a page writes: href, src, form action, and the overview's API address.
URL = re.compile(r'(?:href|src|action|data-api)="([^"]*)"')


async def _home(request):
    return PlainTextResponse("the host application")


@pytest.fixture
def mounted(db: TestDatabase) -> Iterator[DashboardClient]:
    host = Starlette(routes=[Route("/", _home), Mount(PREFIX, app=create_app(db.client, TOKEN, stats_options=CURRENT))])
    with DashboardClient(host, db, follow_redirects=False) as client:
        yield client


def _login(client) -> str:
    response = client.post(PREFIX + "/login", data={"token": TOKEN, "next": "/"})
    assert response.status_code == 303 and response.headers["location"] == PREFIX + "/"
    return re.search(r'name="csrf" value="([^"]+)"', client.get(PREFIX + "/").text).group(1)


def _urls(page: str) -> list[str]:
    return [u for u in URL.findall(page) if not u.startswith(("#", "data:"))]


def test_root_and_route_path_read_the_mount_prefix_from_the_scope():
    assert root({"path": "/x", "root_path": ""}) == "" and root({"path": "/x"}) == ""
    assert root({"path": "/a/x", "root_path": "/a/"}) == "/a"
    assert route_path({"path": "/a/login", "root_path": "/a"}) == "/login"  # Starlette's Mount keeps the prefix
    assert route_path({"path": "/login", "root_path": "/a"}) == "/login"  # a server that took it out
    assert route_path({"path": "/a", "root_path": "/a"}) == "/"
    assert route_path({"path": "/ab/login", "root_path": "/a"}) == "/ab/login"  # not a path segment of the prefix


def test_without_the_token_the_prefixed_pages_show_a_login_form_posting_under_the_prefix(mounted):
    page = mounted.get(PREFIX + "/queues/q")
    assert page.status_code == 401
    assert 'action="/queue-admin/login"' in page.text and 'src="/queue-admin/static/dashboard.js"' in page.text
    assert 'name="next" value="/queues/q"' in page.text  # a path inside the dashboard
    api = mounted.get(PREFIX + "/api/queues")
    assert api.status_code == 401 and api.headers["content-type"].startswith("application/json")
    assert mounted.get("/").text == "the host application"


def test_logging_in_under_a_prefix_sets_a_cookie_for_the_prefix_and_redirects_under_it(mounted):
    response = mounted.post(PREFIX + "/login", data={"token": TOKEN, "next": "/queues/q"})
    assert response.status_code == 303 and response.headers["location"] == PREFIX + "/queues/q"
    assert "Path=/queue-admin;" in response.headers["set-cookie"]
    for target in ("https://evil.example/", "//evil.example/x"):
        response = mounted.post(PREFIX + "/login", data={"token": TOKEN, "next": target})
        assert response.headers["location"] == PREFIX + "/", target


def test_every_url_a_page_writes_is_under_the_prefix_and_answers(mounted):
    db = mounted.db
    db.make_task("q")
    dead = make_dead(db, "q")
    _login(mounted)
    pages = [
        PREFIX + "/",
        PREFIX + "/queues/q",
        PREFIX + "/queues/q/dead",
        PREFIX + "/queues/q/tasks",
        f"{PREFIX}/tasks/{dead.key.id}",
        PREFIX + "/workers",
        PREFIX + "/audit",
        PREFIX + "/periodic",
        PREFIX + "/queues/q/tasks?state=finished",
    ]
    seen: set[str] = set()
    for path in pages:
        page = mounted.get(path)
        assert page.status_code == 200, path
        urls = _urls(page.text)
        assert urls, path
        outside = [u for u in urls if not u.startswith(PREFIX + "/")]
        assert not outside, (path, outside)
        seen.update(u for u in urls if "/api/" in u or "/static/" in u or ("?" not in u and "/cancel" not in u))
    for url in sorted(seen):  # links, the script and the overview's API answer under the prefix
        if url.endswith(("/requeue", "/purge", "/pause", "/resume", "/logout", "/settings", "/act", "/login")):
            continue  # form actions: POST only
        response = mounted.get(url)
        assert response.status_code == 200 or response.headers["location"].startswith(PREFIX + "/"), url


def test_forms_and_lookups_redirect_under_the_prefix_and_logging_out_clears_the_prefixed_cookie(mounted):
    db = mounted.db
    task = db.make_task("q")
    csrf = _login(mounted)
    response = mounted.post(PREFIX + "/queues/q/pause", data={"csrf": csrf, "what": "dequeue"})
    assert response.status_code == 303 and response.headers["location"] == PREFIX + "/queues/q?done=paused-dequeue"
    response = mounted.get(PREFIX + "/tasks", params={"id": str(task.key.id)})
    assert response.headers["location"] == f"{PREFIX}/tasks/{task.key.id}"
    response = mounted.post(PREFIX + "/logout", data={"csrf": csrf})
    assert response.status_code == 303 and response.headers["location"] == PREFIX + "/login"
    assert "Path=/queue-admin;" in response.headers["set-cookie"] and "Max-Age=0" in response.headers["set-cookie"]


def _handing_over(app, identity):
    async def wrapper(scope, receive, send):
        if scope["type"] == "http":
            scope = {**scope, UPSTREAM_IDENTITY: identity}
        await app(scope, receive, send)

    return wrapper


def test_an_identity_handed_over_in_the_scope_counts_only_for_a_dashboard_built_to_trust_it(db):
    db.make_task("q")
    identity = Identity("upstream", csrf="c" * 20, user="someone")
    plain = _handing_over(create_app(db.client, TOKEN, stats_options=CURRENT), identity)
    with TestClient(plain, follow_redirects=False) as client:
        assert client.get("/api/queues").status_code == 401
    trusting = _handing_over(create_app(db.client, TOKEN, stats_options=CURRENT, upstream_login=True), identity)
    with TestClient(trusting, follow_redirects=False) as client:
        assert client.get("/api/queues").status_code == 200
        assert client.post("/api/queues/q/pause").status_code == 403  # its forms must repeat its CSRF token
        assert client.post("/api/queues/q/pause", headers={"X-CSRF-Token": "c" * 20}).status_code == 200
    reader = _handing_over(
        create_app(db.client, TOKEN, stats_options=CURRENT, upstream_login=True),
        Identity("upstream", csrf="c" * 20, read_only=True, user="someone"),
    )
    with TestClient(reader, follow_redirects=False) as client:
        assert client.post("/api/queues/q/resume", headers={"X-CSRF-Token": "c" * 20}).status_code == 403


def test_a_read_only_session_under_a_prefix_may_log_out_and_nothing_else(db):
    read_token = "read-only-token-0123456789"
    dashboard = create_app(db.client, TOKEN, stats_options=CURRENT, read_token=read_token)
    host = Starlette(routes=[Mount(PREFIX, app=dashboard)])
    db.make_task("q")
    with TestClient(host, follow_redirects=False) as client:
        assert client.post(PREFIX + "/login", data={"token": read_token, "next": "/"}).status_code == 303
        csrf = re.search(r'name="csrf" value="([^"]+)"', client.get(PREFIX + "/").text).group(1)
        assert client.post(PREFIX + "/queues/q/pause", data={"csrf": csrf, "what": "dequeue"}).status_code == 403
        response = client.post(PREFIX + "/logout", data={"csrf": csrf})
        assert response.status_code == 303 and response.headers["location"] == PREFIX + "/login"


def test_a_workflows_page_and_its_steps_link_under_the_prefix(mounted):
    app = shardq.App(mounted.db.dsn)
    try:

        @app.task(name="t")
        def t(x: int) -> None: ...

        wf = app.workflow("pair")
        first = wf.add(t.step(x=1), name="first")
        wf.add(t.step(x=2), name="second", after=first)
        handle = wf.enqueue()
    finally:
        app.close()
    _login(mounted)
    page = mounted.get(f"{PREFIX}/workflows/{handle}")
    assert page.status_code == 200
    steps = [u for u in _urls(page.text) if "/tasks/" in u]
    assert len(steps) >= 2 and all(u.startswith(PREFIX + "/tasks/") for u in steps), steps
    task_page = mounted.get(steps[0])
    assert f'href="{PREFIX}/workflows/{handle}"' in task_page.text
