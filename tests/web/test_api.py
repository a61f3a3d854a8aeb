"""`shardq web`'s JSON API and pages, in-process (Starlette's TestClient) against a real database:
what each route returns, what each action changes, and that nothing without the token, the CSRF
token or a valid body reads or changes anything."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from psycopg.conninfo import make_conninfo
from starlette.testclient import TestClient

from shardq.admin import actions as admin
from shardq.admin.stats import collect_plan
from shardq.client import Client
from shardq.errors import InvalidInput
from shardq.sessions.dsn import Dsn
from shardq.web.app import create_app
from shardq.web.auth import Sessions, resolve_token
from tests.support.factories import TestDatabase, utcnow
from tests.support.web import BEARER, CURRENT, SCRIPT, TOKEN, DashboardClient, make_dead, snapshot

SHARDQ = str(Path(sys.executable).with_name("shardq"))


@pytest.fixture
def web(db: TestDatabase) -> Iterator[DashboardClient]:
    with DashboardClient(create_app(db.client, TOKEN, stats_options=CURRENT), db, follow_redirects=False) as client:
        yield client


def login(web) -> str:
    """Log in through the form; returns the session's CSRF token (from a page's hidden field)."""
    response = web.post("/login", data={"token": TOKEN, "next": "/"})
    assert response.status_code == 303
    page = web.get("/").text
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


# -- reading ------------------------------------------------------------------------------------
def test_queues_api_reports_each_queue_as_stats_does(web):
    db = web.db
    now = utcnow()
    for _ in range(3):
        db.make_task("emails")
    db.make_task("emails", state="scheduled", exec_time=now + dt.timedelta(hours=1))
    db.make_task("emails", state="leased")
    make_dead(db, "emails")
    db.make_task("billing")
    data = web.get("/api/queues", headers=BEARER).json()
    by_name = {q["name"]: q for q in data["queues"]}
    assert set(by_name) == {"emails", "billing"}
    emails = by_name["emails"]
    assert (emails["ready"], emails["scheduled"], emails["leased"], emails["dead"]) == (3, 1, 1, 1)
    assert emails["accuracy"]["ready"] == "exact"
    stats = db.store.run(collect_plan(CURRENT.validate())).queues["emails"]
    assert (stats.ready, stats.scheduled, stats.leased, stats.dead) == (3, 1, 1, 1)
    for key in ("enqueue_rate", "ack_rate", "completion_rate", "failure_rate", "lead_time_s", "oldest_ready_age_s"):
        assert key in emails
    assert data["buckets"] == db.layout.bucket_count and data["bucket_cap"] == CURRENT.bucket_cap


def test_counts_that_reach_the_cap_are_marked_at_least_like_stats(db):
    from shardq.admin.stats import StatsOptions

    capped = StatsOptions(follower_read=False, bucket_cap=2)
    for _ in range(3):
        db.make_task("q", bucket=0 if db.dialect == "postgresql" else None)
    with TestClient(create_app(db.client, TOKEN, stats_options=capped)) as client:
        q = client.get("/api/queues", headers=BEARER).json()["queues"][0]
        page = client.get("/", headers=BEARER).text
    if db.dialect == "postgresql":
        assert q["accuracy"]["ready"] == "at_least"
        assert "≥" in page


def test_queue_api_shows_settings_depth_per_bucket_and_skew(web):
    db = web.db
    bucket = 1 if db.dialect == "postgresql" else None
    for _ in range(4):
        db.make_task("q", bucket=bucket)
    db.make_task("q", state="leased")
    data = web.get("/api/queues/q", headers=BEARER).json()
    assert data["settings"]["name"] == "q" and data["settings"]["paused_dequeue"] is False
    assert len(data["per_bucket"]) == db.layout.bucket_count
    assert sum(b["ready"] for b in data["per_bucket"]) == 4
    assert sum(b["leased"] for b in data["per_bucket"]) == 1
    if db.dialect == "postgresql":
        assert data["per_bucket"][1]["ready"] == 4
        assert data["skew"]["max_over_mean"] >= 3.2  # 4 or 5 of 5 in one of 4 buckets
    page = web.get("/queues/q", headers=BEARER)
    assert page.status_code == 200 and 'id="buckets"' in page.text and "Skew max/mean" in page.text


def test_task_api_shows_state_attempts_lease_and_times(web):
    db = web.db
    leased = db.make_task("q", state="leased", attempts=2, max_attempts=5)
    data = web.get(f"/api/tasks/{leased.key.id}", headers=BEARER).json()
    assert data["state"] == "leased" and data["attempts"] == 2 and data["max_attempts"] == 5
    assert data["lease_expires_at"] is not None and data["created_at"] is not None
    dead = make_dead(db, "q", error="it broke")
    data = web.get(f"/api/tasks/{dead.key.id}", headers=BEARER).json()
    assert data["state"] == "dead" and data["last_error"] == "it broke" and data["died_at"] is not None
    page = web.get(f"/tasks/{dead.key.id}", headers=BEARER).text
    assert "it broke" in page and 'id="requeue"' in page


def test_dead_api_lists_dead_tasks_with_payload_text_cut_short(web):
    db = web.db
    make_dead(db, "q", payload=b"x" * 5000, error="too long")
    data = web.get("/api/queues/q/dead", headers=BEARER).json()
    assert data["dead"] == 1 and data["accuracy"] == "exact"
    (task,) = data["tasks"]
    assert task["last_error"] == "too long" and task["attempts"] == 3
    assert task["payload"] == {"text": "x" * 200, "binary": False, "truncated": True, "bytes": 5000}
    assert web.get("/api/queues/q/dead?limit=0", headers=BEARER).status_code == 400
    assert web.get("/api/queues/q/dead?limit=many", headers=BEARER).status_code == 400


def test_a_queues_limits_and_slots_in_use_are_on_its_page_and_in_the_api(web):
    web.db.client.set_queue("q", concurrency=3, rate=50, burst=10)
    web.db.make_task("q")
    data = web.get("/api/queues/q", headers=BEARER).json()
    assert (data["queue"]["concurrency_limit"], data["queue"]["slots_in_use"], data["queue"]["rate_limit"]) == (
        3,
        0,
        50,
    )
    page = web.get("/queues/q", headers=BEARER).text
    assert "3 (0 in use)" in page and "50/s, burst 10" in page


def test_unknown_queue_or_task_is_a_404_page_and_a_json_error(web):
    for path in (
        "/queues/nope",
        "/queues/nope/dead",
        f"/tasks/{uuid.uuid4()}",
        "/tasks/not-a-uuid",
        "/queues/bad%20name!",
    ):
        page = web.get(path, headers=BEARER)
        assert page.status_code == 404 and "Not found" in page.text, path
        api = web.get("/api" + path, headers=BEARER)
        assert api.status_code == 404 and "error" in api.json(), path
    assert web.get("/no/such/page", headers=BEARER).status_code == 404
    assert web.get("/api/nothing", headers=BEARER).json()["error"]


# -- acting -------------------------------------------------------------------------------------
def test_pause_and_resume_change_the_queue_settings(web):
    db = web.db
    db.make_task("q")
    assert web.post("/api/queues/q/pause", headers=BEARER).json()["paused_dequeue"] is True
    settings = db.store.run(admin.queue_show_plan("q"))
    assert settings.paused_enqueue and settings.paused_dequeue
    web.post("/api/queues/q/resume", headers=BEARER, json={"enqueue": False})
    settings = db.store.run(admin.queue_show_plan("q"))
    assert settings.paused_enqueue and not settings.paused_dequeue
    web.post("/api/queues/q/resume", headers=BEARER)
    assert not db.store.run(admin.queue_show_plan("q")).paused_enqueue


def test_requeue_by_ids_or_all_moves_dead_tasks_back(web):
    db = web.db
    first, second, third = (make_dead(db, "q") for _ in range(3))
    result = web.post("/api/queues/q/dead/requeue", headers=BEARER, json={"ids": [str(first.key.id)]}).json()
    assert result == {"requeued": 1, "not_found_or_kept": 0}
    assert db.task_row(first.key.id)["state"] == "ready" and db.dead_row(first.key.id) is None
    assert web.post("/api/queues/q/dead/requeue", headers=BEARER, json={"all": True}).json()["requeued"] == 2
    assert db.count("shardq_dead") == 0 and db.task_row(third.key.id) is not None and db.task_row(second.key.id)


def test_purge_deletes_the_queues_dead_tasks_only(web):
    db = web.db
    make_dead(db, "q")
    make_dead(db, "q")
    other = make_dead(db, "other")
    assert web.post("/api/queues/q/dead/purge", headers=BEARER).json() == {"purged": 2}
    assert db.count("shardq_dead") == 1 and db.dead_row(other.key.id)


def test_cancel_removes_a_live_task(web):
    db = web.db
    task = db.make_task("q", state="leased")
    assert web.post(f"/api/tasks/{task.key.id}/cancel", headers=BEARER).json()["cancelled"] == str(task.key.id)
    assert db.task_row(task.key.id) is None
    assert web.post(f"/api/tasks/{task.key.id}/cancel", headers=BEARER).status_code == 404


# -- refusals change nothing --------------------------------------------------------------------
ACTIONS = [
    ("/api/queues/q/pause", None),
    ("/api/queues/q/resume", None),
    ("/api/queues/q/dead/requeue", {"all": True}),
    ("/api/queues/q/dead/purge", None),
]


@pytest.fixture
def populated(web):
    db = web.db
    db.admin_task = db.make_task("q", payload=b"live-payload-marker")
    db.dead_task = make_dead(db, "q", payload=b"dead-payload-marker", error="dead-error-marker")
    db.store.run(admin.queue_set_plan("q", {"paused_enqueue": True}))
    return web


def test_without_the_token_nothing_is_read_or_changed(populated):
    web = populated
    before = snapshot(web.db)
    task_id = web.db.admin_task.key.id
    for path in (
        "/",
        "/queues/q",
        "/queues/q/dead",
        f"/tasks/{task_id}",
        "/static/dashboard.js",
        "/static/style.css",
        "/api/queues",
        "/api/queues/q",
        "/api/queues/q/dead",
        f"/api/tasks/{task_id}",
    ):
        for headers in (
            {},
            {"Authorization": "Bearer wrong-token-xyz"},
            {"Authorization": TOKEN},
            {"Cookie": "shardq_session=made-up"},
        ):
            response = web.get(path, headers=headers)
            assert response.status_code in (401, 429), (path, headers)  # 429: too many wrong tokens by now
            for marker in ("payload-marker", "dead-error-marker", "paused: enqueue", "shardq_session="):
                assert marker not in response.text, (path, headers, marker)
            assert "set-cookie" not in response.headers
    for path, body in [
        *ACTIONS,
        (f"/api/tasks/{task_id}/cancel", None),
        ("/queues/q/pause", None),
        ("/queues/q/dead/purge", None),
        (f"/tasks/{task_id}/cancel", None),
    ]:
        assert web.post(path, json=body).status_code in (401, 429), path
    assert snapshot(web.db) == before
    api = web.get("/api/queues")
    assert api.headers["www-authenticate"] == "Bearer" and api.json()["error"]


def test_unknown_queues_and_bad_bodies_are_refused_and_change_nothing(populated):
    web = populated
    before = snapshot(web.db)
    dead_id = str(web.db.dead_task.key.id)
    refusals = [
        ("/api/queues/nope/pause", None, 404),
        ("/api/queues/nope/dead/purge", None, 404),
        ("/api/queues/nope/dead/requeue", {"all": True}, 404),
        (f"/api/tasks/{uuid.uuid4()}/cancel", None, 404),
        ("/api/tasks/not-a-uuid/cancel", None, 404),
        ("/api/queues/q/dead/requeue", {}, 400),
        ("/api/queues/q/dead/requeue", {"ids": [dead_id], "all": True}, 400),
        ("/api/queues/q/dead/requeue", {"ids": [dead_id, "not-a-uuid"]}, 400),
        ("/api/queues/q/dead/requeue", {"ids": dead_id}, 400),
        ("/api/queues/q/dead/requeue", {"all": "yes"}, 400),
        ("/api/queues/q/pause", {"enqueue": "no"}, 400),
        ("/api/queues/q/resume", {"enqueue": False, "dequeue": False}, 400),
        ("/api/queues/q/resume", [1, 2], 400),
    ]
    for path, body, status in refusals:
        response = web.post(path, headers=BEARER, json=body)
        assert response.status_code == status, (path, body, response.text)
        assert response.json()["error"]
    for raw in (b"{not json", b"\xff\xfe", b'"a string"'):
        response = web.post("/api/queues/q/resume", headers={**BEARER, "Content-Type": "application/json"}, content=raw)
        assert response.status_code == 400 and response.json()["error"]
    assert snapshot(web.db) == before
    assert web.db.count("shardq_queues") == 1  # an unknown queue was not created


def test_actions_are_post_only(populated):
    web = populated
    before = snapshot(web.db)
    for path, _ in ACTIONS:
        assert web.get(path, headers=BEARER).status_code == 405
        assert web.get(path.removeprefix("/api"), headers=BEARER).status_code == 405
    assert snapshot(web.db) == before


# -- the cookie path ----------------------------------------------------------------------------
def test_login_sets_an_httponly_samesite_strict_cookie_and_a_wrong_token_does_not(web):
    refused = web.post("/login", data={"token": "wrong-token-xyz", "next": "/"})
    assert refused.status_code == 401 and "set-cookie" not in refused.headers
    response = web.post("/login", data={"token": TOKEN, "next": "/queues/q"})
    assert response.status_code == 303 and response.headers["location"] == "/queues/q"
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert TOKEN not in cookie
    assert web.get("/api/queues").status_code == 200  # the cookie alone now reads


def test_login_only_redirects_to_this_server(web):
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example", "javascript:alert(1)"):
        response = web.post("/login", data={"token": TOKEN, "next": target})
        assert response.headers["location"] == "/", target


def test_a_cookie_request_must_carry_the_sessions_csrf_token(populated):
    web = populated
    csrf = login(web)
    before = snapshot(web.db)
    for path, body in ACTIONS:
        assert web.post(path, json=body).status_code == 403, path
        assert web.post(path, json=body, headers={"X-CSRF-Token": "forged"}).status_code == 403, path
    for path in (
        "/queues/q/pause",
        "/queues/q/resume",
        "/queues/q/dead/purge",
        f"/tasks/{web.db.admin_task.key.id}/cancel",
    ):
        assert web.post(path, data={"confirm": "1"}).status_code == 403, path
        assert web.post(path, data={"confirm": "1", "csrf": "forged"}).status_code == 403, path
    assert snapshot(web.db) == before
    assert web.post("/api/queues/q/pause", headers={"X-CSRF-Token": csrf}).status_code == 200
    assert web.db.store.run(admin.queue_show_plan("q")).paused_dequeue


def test_the_forms_act_and_redirect_back_with_a_message(populated):
    web = populated
    db = web.db
    csrf = login(web)
    response = web.post("/queues/q/resume", data={"csrf": csrf})
    assert response.status_code == 303 and response.headers["location"] == "/queues/q?done=resumed-both"
    assert not db.store.run(admin.queue_show_plan("q")).paused_enqueue
    assert "Resumed enqueue and dequeue." in web.get(response.headers["location"]).text
    response = web.post("/queues/q/dead/requeue", data={"csrf": csrf, "id": str(db.dead_task.key.id)})
    assert response.headers["location"] == "/queues/q/dead?done=requeued&n=1"
    assert db.dead_row(db.dead_task.key.id) is None
    assert web.post("/queues/q/dead/purge", data={"csrf": csrf}).status_code == 400  # not confirmed
    response = web.post(f"/tasks/{db.admin_task.key.id}/cancel", data={"csrf": csrf})
    assert response.headers["location"] == "/queues/q?done=cancelled"
    assert db.task_row(db.admin_task.key.id) is None


def test_logging_out_ends_the_session(web):
    csrf = login(web)
    assert web.post("/logout", data={"csrf": csrf}).status_code == 303
    assert web.get("/api/queues").status_code == 401


def test_sessions_expire_and_are_bounded():
    now = [0.0]
    sessions = Sessions(lifetime=10, limit=2, clock=lambda: now[0])
    first, _ = sessions.create()
    second, csrf = sessions.create()
    third, _ = sessions.create()
    assert sessions.csrf_of(first) is None and sessions.csrf_of(second) == csrf
    now[0] = 11
    assert sessions.csrf_of(second) is None and sessions.csrf_of(third) is None


# -- escaping and secrets -----------------------------------------------------------------------
def test_a_script_payload_is_shown_as_text_everywhere(web):
    db = web.db
    dead = make_dead(db, "q", payload=SCRIPT, error="<img src=x onerror=alert(1)>")
    live = db.make_task("q", payload=SCRIPT)
    for path in ("/queues/q/dead", f"/tasks/{dead.key.id}", f"/tasks/{live.key.id}"):
        page = web.get(path, headers=BEARER).text
        assert "<script>alert" not in page and "<img src=x" not in page, path
        assert "&lt;script&gt;alert(" in page, path
    assert web.get(f"/api/tasks/{live.key.id}", headers=BEARER).json()["payload"]["text"] == SCRIPT.decode()


def test_pages_forbid_inline_scripts_and_framing(web):
    response = web.get("/", headers=BEARER)
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe-inline" not in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    assert not re.search(r"<script>(?!</script>)", response.text)  # only <script src=...>
    assert "http://" not in response.text and "https://" not in response.text  # nothing loaded from elsewhere


def test_the_database_password_never_reaches_a_page(db):
    password = "s3cret-pass-" + uuid.uuid4().hex[:8]
    with_password = Dsn.parse(make_conninfo(db.dsn.conninfo, password=password))
    unreachable = Dsn.parse(make_conninfo(db.dsn.conninfo, password=password, port="1", connect_timeout="2"))
    make_dead(db, "q")
    for dsn in (with_password, unreachable):
        client = Client(dsn, application_name="shardq-web-test")
        try:
            with TestClient(create_app(client, TOKEN, stats_options=CURRENT)) as web:
                for path in (
                    "/",
                    "/queues/q",
                    "/queues/q/dead",
                    f"/tasks/{uuid.uuid4()}",
                    "/api/queues",
                    "/api/queues/q",
                    "/api/queues/q/dead",
                ):
                    response = web.get(path, headers=BEARER)
                    assert password not in response.text, path
                    if dsn is unreachable:
                        assert response.status_code == 503, path
        finally:
            client.close()


# -- starting -----------------------------------------------------------------------------------
def test_a_token_is_generated_for_loopback_only():
    token, generated = resolve_token(None, "127.0.0.1")
    assert generated and len(token) >= 32
    assert resolve_token(None, "::1")[1] and resolve_token(None, "localhost")[1]
    assert resolve_token("a-given-token-of-24chars", "0.0.0.0") == ("a-given-token-of-24chars", False)
    for host in ("0.0.0.0", "192.168.1.5", "example.com", "::"):
        with pytest.raises(InvalidInput, match="without an explicit token"):
            resolve_token(None, host)
    with pytest.raises(InvalidInput):
        resolve_token("short", "127.0.0.1")


def test_the_command_refuses_a_public_address_without_a_token_in_one_line(pg_db):
    env = {k: v for k, v in os.environ.items() if k != "SHARDQ_WEB_TOKEN"}
    result = subprocess.run(
        [SHARDQ, "--dsn", pg_db.dsn.conninfo, "web", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "explicit token" in result.stderr


def test_the_command_serves_with_a_printed_token_until_interrupted(pg_db):
    env = {k: v for k, v in os.environ.items() if k != "SHARDQ_WEB_TOKEN"}
    pg_db.make_task("emails")
    process = subprocess.Popen(
        [SHARDQ, "--dsn", pg_db.dsn.conninfo, "web", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        url = process.stdout.readline().split("serving ")[1].strip()
        token = process.stdout.readline().split("(shown once): ")[1].strip()
        assert url.startswith("http://127.0.0.1:")
        request = urllib.request.Request(url + "api/queues", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert [q["name"] for q in json.load(response)["queues"]] == ["emails"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "api/queues", timeout=30)
        assert refused.value.code == 401
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


# -- holes found in use (issue #33) -------------------------------------------------------------
def _post_streamed(app, path: str, chunks: int, chunk_size: int, headers: Sequence[tuple[bytes, bytes]] = ()):
    """POST ``chunks`` x ``chunk_size`` bytes to ``app`` at the ASGI level; returns the status
    and how many chunks the app pulled (what a server would have had to buffer)."""
    import anyio

    pulled = 0
    sent: list[dict] = []

    async def receive():
        nonlocal pulled
        if pulled >= chunks:
            return {"type": "http.disconnect"}
        pulled += 1
        return {"type": "http.request", "body": b"t" * chunk_size, "more_body": pulled < chunks}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"content-type", b"application/x-www-form-urlencoded"), *headers],
        "client": ("203.0.113.9", 5000),
        "server": ("127.0.0.1", 80),
        "scheme": "http",
        "http_version": "1.1",
        "root_path": "",
        "state": {},
    }
    anyio.run(app, scope, receive, send)
    return next(m["status"] for m in sent if m["type"] == "http.response.start"), pulled


def test_login_refuses_a_large_streamed_body_after_reading_only_up_to_the_limit(db):
    from shardq.web.pages import FORM_MAX

    app = create_app(db.client, TOKEN, stats_options=CURRENT)
    chunk = 64 * 1024
    status, pulled = _post_streamed(app, "/login", chunks=10_000, chunk_size=chunk)  # 640 MiB offered
    assert status == 413
    assert pulled * chunk <= FORM_MAX + chunk  # bounded by the limit, not by what was sent
    status, pulled = _post_streamed(
        app, "/login", chunks=10_000, chunk_size=chunk, headers=[(b"content-length", str(10_000 * chunk).encode())]
    )
    assert (status, pulled) == (413, 0)  # refused on the declared length before any byte is read


def test_an_unreadable_cookie_of_another_app_does_not_hide_the_session(web):
    response = web.post("/login", data={"token": TOKEN, "next": "/"})
    session = response.cookies["shardq_session"]
    web.cookies.clear()
    for header in (
        f'prefs={{"theme":"dark"}}; shardq_session={session}',
        f'a="unterminated; shardq_session={session}; b=\\x',
        f'shardq_session={session}; prefs={{"theme":"dark"}}',
    ):
        assert web.get("/api/queues", headers={"Cookie": header}).status_code == 200, header
        assert "<h1>Queues</h1>" in web.get("/", headers={"Cookie": header}).text, header


def test_a_non_ascii_token_works_as_a_bearer_header_and_at_login(db):
    token = "schlüssel-für-die-tür-ß"
    with TestClient(create_app(db.client, token, stats_options=CURRENT), follow_redirects=False) as web:
        assert web.get("/api/queues", headers={b"Authorization": b"Bearer " + token.encode()}).status_code == 200
        assert web.post("/login", data={"token": token}).status_code == 303


def test_wrong_tokens_are_throttled_per_address_with_retry_after(web):
    from shardq.web.throttle import FREE_FAILURES

    for attempt in range(FREE_FAILURES):
        assert web.post("/login", data={"token": f"guess-{attempt}"}).status_code == 401
    assert web.get("/api/queues", headers={"Authorization": "Bearer guess-x"}).status_code == 401
    for response in (
        web.post("/login", data={"token": TOKEN}),
        web.get("/api/queues", headers=BEARER),
        web.post("/login", data={"token": "guess-y"}),
    ):
        # even the right token waits: while throttled nothing is compared
        assert response.status_code == 429 and int(response.headers["retry-after"]) >= 1
    assert "try again in" in web.get("/api/queues", headers=BEARER).json()["error"]
    assert "set-cookie" not in web.post("/login", data={"token": TOKEN}).headers


def test_the_throttle_doubles_the_delay_forgets_on_success_and_keeps_addresses_apart():
    from shardq.web.throttle import Throttle

    now = [0.0]
    throttle = Throttle(clock=lambda: now[0], free=2, first_delay=1, max_delay=8, forget_after=100)
    for _ in range(2):
        throttle.failed("a")
    assert throttle.wait_seconds("a") == 0
    delays = []
    for _ in range(5):
        throttle.failed("a")
        delays.append(throttle.wait_seconds("a"))
        now[0] += delays[-1]
    assert delays == [1, 2, 4, 8, 8]
    throttle.failed("a")
    assert throttle.wait_seconds("b") == 0
    throttle.succeeded("a")
    assert throttle.wait_seconds("a") == 0
    throttle.failed("c")
    throttle.failed("c")
    throttle.failed("c")
    now[0] += 1000
    assert throttle.wait_seconds("c") == 0
    throttle.failed("c")
    assert throttle.wait_seconds("c") == 0  # forgotten after a long quiet: starts afresh


def test_a_chosen_token_shorter_than_16_characters_is_refused_in_one_line(pg_db):
    with pytest.raises(InvalidInput, match="at least 16"):
        resolve_token("fifteen-chars-x", "127.0.0.1")
    assert resolve_token("sixteen-chars-xx", "127.0.0.1") == ("sixteen-chars-xx", False)
    env = {k: v for k, v in os.environ.items() if k != "SHARDQ_WEB_TOKEN"}
    result = subprocess.run(
        [SHARDQ, "--dsn", pg_db.dsn.conninfo, "web", "--port", "0", "--token", "12345678"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "at least 16 characters" in result.stderr


def test_skew_from_capped_counts_is_a_lower_bound_or_unknown_never_a_false_one(pg_db):
    from shardq.admin.stats import StatsOptions

    db = pg_db
    n = db.layout.bucket_count
    capped = StatsOptions(follower_read=False, bucket_cap=3)
    for _ in range(12):
        db.make_task("hot", bucket=0)
    for bucket in range(1, n):
        db.make_task("hot", bucket=bucket)
    with TestClient(create_app(db.client, TOKEN, stats_options=capped)) as web:
        skew = web.get("/api/queues/hot", headers=BEARER).json()["skew"]
        assert skew["exact"] is False and skew["capped_buckets"] == 1
        assert skew["max_over_mean"] == round(3 * n / ((n - 1) + 3), 2)  # the lowest skew those counts allow
        page = web.get("/queues/hot", headers=BEARER).text
        assert re.search(r'id="skew">at least [\d.]+<', page) and "≥" in page
        for bucket in range(1, n):  # now every bucket reaches the cap: 16 equal bars would say "even"
            for _ in range(3):
                db.make_task("hot", bucket=bucket)
        data = web.get("/api/queues/hot", headers=BEARER).json()
        assert data["skew"]["max_over_mean"] is None and data["skew"]["capped_buckets"] == n
        assert all(b["capped"] for b in data["per_bucket"])
        page = web.get("/queues/hot", headers=BEARER).text
        assert 'id="skew">unknown<' in page and 'Skew max/mean <strong id="skew">1.0' not in page


def test_the_task_page_shows_the_whole_payload_binary_as_hex_and_errors_with_their_line_breaks(web):
    db = web.db
    text = "".join(f"line {i}: {'é' * 10}\n" for i in range(400))  # ~9 KB, well past the old 200 characters
    long_task = db.make_task("q", payload=text.encode())
    page = web.get(f"/tasks/{long_task.key.id}", headers=BEARER).text
    assert "line 399: éééééééééé" in page and "binary" not in page
    assert web.get(f"/api/tasks/{long_task.key.id}", headers=BEARER).json()["payload"]["text"] == text
    binary = make_dead(
        db,
        "q",
        payload=b"\x00\x01\xfe\xff<script>" + bytes(range(256)),
        error='Traceback (most recent call last):\n  File "job.py", line 3\n<b>ValueError</b>: bad',
    )
    page = web.get(f"/tasks/{binary.key.id}", headers=BEARER).text
    assert "00 01 fe ff 3c 73 63 72" in page and "\ufffd" not in page and "binary" in page
    assert "&lt;script&gt;" in page and "<script>" not in page.split("<body>")[1].replace('<script src="/static', "")
    error = re.search(r'<pre class="card error" id="task-error">(.*?)</pre>', page, re.S).group(1)
    assert error == (
        "Traceback (most recent call last):\n  File &#34;job.py&#34;, line 3\n&lt;b&gt;ValueError&lt;/b&gt;: bad"
    )
    data = web.get(f"/api/tasks/{binary.key.id}", headers=BEARER).json()["payload"]
    assert data["binary"] is True and data["text"] is None and data["hex"].startswith("00000000  00 01 fe ff")
    dead_page = web.get("/queues/q/dead", headers=BEARER).text
    assert "\ufffd" not in dead_page and "00 01 fe ff" in dead_page


def test_times_on_the_pages_are_to_the_second_with_their_zone(web):
    db = web.db
    dead = make_dead(db, "q")
    for path in (f"/tasks/{dead.key.id}", "/queues/q/dead", "/"):
        page = web.get(path, headers=BEARER).text
        assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", page), path
        assert not re.search(r"\d\d:\d\d:\d\d\.\d{6}", page), path  # no raw ISO with microseconds
    assert re.search(
        r"\.\d+\+00:00$", web.get(f"/api/tasks/{dead.key.id}", headers=BEARER).json()["died_at"]
    ) or web.get(f"/api/tasks/{dead.key.id}", headers=BEARER).json()["died_at"].endswith("+00:00")  # the API keeps ISO


def test_dead_letters_are_paged_by_keyset_past_the_first_page(web):
    db = web.db
    dead = [make_dead(db, "q", error=f"error {i}") for i in range(7)]
    seen, cursor, pages = [], None, 0
    while True:
        query = "/api/queues/q/dead?limit=3" + (f"&after={urllib.parse.quote(cursor)}" if cursor else "")
        data = web.get(query, headers=BEARER).json()
        seen += [t["id"] for t in data["tasks"]]
        pages += 1
        cursor = data["next"]
        if cursor is None:
            break
    assert pages == 3 and sorted(seen) == sorted(str(t.key.id) for t in dead) and len(set(seen)) == 7
    first = web.get("/queues/q/dead", headers=BEARER).text  # 100 a page: one page here, no next link
    assert 'id="next-page"' not in first and "7 shown" in first
    assert web.get("/api/queues/q/dead?after=garbage", headers=BEARER).status_code == 400


def test_rates_are_labelled_as_averages_over_the_stats_window(web):
    web.db.make_task("q")
    for path in ("/", "/queues/q"):
        page = web.get(path, headers=BEARER).text
        assert page.count("5-min avg") >= 3, path


def test_the_forms_pause_dequeue_or_enqueue_apart(populated):
    web = populated
    db = web.db
    csrf = login(web)
    db.store.run(admin.queue_set_plan("q", {"paused_enqueue": False}))
    page = web.get("/queues/q").text
    assert 'id="pause-dequeue"' in page and 'id="pause-enqueue"' in page and "data-confirm=" in page
    response = web.post("/queues/q/pause", data={"csrf": csrf, "what": "dequeue"})
    assert response.headers["location"] == "/queues/q?done=paused-dequeue"
    settings = db.store.run(admin.queue_show_plan("q"))
    assert settings.paused_dequeue and not settings.paused_enqueue  # producers still enqueue
    assert web.post("/queues/q/pause", data={"csrf": csrf}).status_code == 400  # pausing what?
    web.post("/queues/q/pause", data={"csrf": csrf, "what": "enqueue"})
    assert db.store.run(admin.queue_show_plan("q")).paused_enqueue
    web.post("/queues/q/resume", data={"csrf": csrf, "what": "dequeue"})
    settings = db.store.run(admin.queue_show_plan("q"))
    assert not settings.paused_dequeue and settings.paused_enqueue


def test_requeue_all_asks_with_the_count_and_is_disabled_with_none_dead(web):
    db = web.db
    db.make_task("q")
    page = web.get("/queues/q/dead", headers=BEARER).text
    assert re.search(r'id="requeue-all" disabled', page)
    for _ in range(2):
        make_dead(db, "q")
    page = web.get("/queues/q/dead", headers=BEARER).text
    assert 'data-confirm="Requeue all 2 dead tasks of q?' in page and not re.search(r'id="requeue-all" disabled', page)


def test_a_wildcard_address_is_printed_as_one_a_browser_can_open_with_a_note(pg_db):
    env = {k: v for k, v in os.environ.items() if k != "SHARDQ_WEB_TOKEN"}
    process = subprocess.Popen(
        [SHARDQ, "--dsn", pg_db.dsn.conninfo, "web", "--host", "0.0.0.0", "--port", "0", "--token", TOKEN],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        url = process.stdout.readline().split("serving ")[1].strip()
        note = process.stdout.readline()
        assert url.startswith("http://127.0.0.1:") and "0.0.0.0" not in url
        assert "every interface" in note and url.rsplit(":", 1)[1] in note
        request = urllib.request.Request(url + "api/queues", headers=BEARER)
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


def test_shardq_stats_cuts_a_long_queue_name_with_an_ellipsis(db):
    from rich.console import Console

    from shardq.cli import terminal as dashboard

    long_name = "tenant-" + "x" * 110 + "-end"
    db.make_task(long_name)
    console = Console(width=120, record=True, color_system=None)
    console.print(dashboard.queues_table(db.store.run(collect_plan(CURRENT.validate()))))
    lines = console.export_text().splitlines()
    row = next(line for line in lines if line.startswith("tenant-"))
    assert "…" in row and "-end" not in row and row.rstrip().endswith("∞")  # lead time, the last column, is visible
    assert all(len(line) <= 120 for line in lines) and "lead time" in lines[0]


def test_a_kept_finished_task_has_its_state_and_attempts_on_its_page_and_in_the_api(web):
    db = web.db
    db.client.set_queue("kept", keep_finished_seconds=3600)
    (task_id,) = db.client.enqueue("kept", b"x").enqueued_ids
    db.client.work(["kept"], lambda task: None, until_empty=True, install_signal_handlers=False)
    data = web.get(f"/api/tasks/{task_id}", headers=BEARER).json()
    assert data["state"] == "succeeded" and data["payload"] is None
    assert [a["outcome"] for a in data["lifecycle"]["history"]] == ["succeeded"]
    status = web.get(f"/api/tasks/{task_id}/status", headers=BEARER).json()
    assert (status["state"], status["queue"], status["attempts"]) == ("succeeded", "kept", 1)
    page = web.get(f"/tasks/{task_id}", headers=BEARER).text
    assert 'id="task-attempts"' in page and "succeeded" in page and 'id="cancel"' not in page
    running = db.make_task("q", state="leased", attempts=2)
    assert "running (attempt 2)" in web.get(f"/tasks/{running.key.id}", headers=BEARER).text
    assert web.get(f"/api/tasks/{uuid.uuid4()}/status", headers=BEARER).json()["state"] == "unknown"
    assert web.get("/api/tasks/not-a-uuid/status", headers=BEARER).status_code == 400


def test_a_workflow_has_its_state_and_steps_in_the_api(web):
    import shardq

    app = shardq.App(web.db.dsn)
    try:

        @app.task(name="t")
        def t() -> None: ...

        wf = app.workflow("api")
        wf.chain(t.step(), t.step())
        handle = wf.enqueue()
    finally:
        app.close()
    data = web.get(f"/api/workflows/{handle}", headers=BEARER).json()
    assert data["state"] == "running" and [s["state"] for s in data["steps"]] == ["ready", "waiting"]
    assert web.get(f"/api/workflows/{uuid.uuid4()}", headers=BEARER).json()["state"] == "unknown"
    assert web.get("/api/workflows/not-a-uuid", headers=BEARER).status_code == 400
