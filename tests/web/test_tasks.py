"""`shardq web`, round two, in-process against a real database: the task list by state with its
bulk actions, a task's page (JSON, app-task arguments, download, its worker), the Workers page,
the read-only token (refused on every route that is not a read) and the audit log."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from shardq import arguments
from shardq.maintenance.worker_registry import Holding, WorkerRegistry
from shardq.web.app import create_app
from tests.support.factories import TestDatabase, utcnow
from tests.support.web import BEARER, CURRENT, TOKEN, DashboardClient, make_dead, snapshot

READ_TOKEN = "read-only-token-0123456789"
READ_BEARER = {"Authorization": f"Bearer {READ_TOKEN}"}


class _RoutedClient(DashboardClient):
    """A dashboard client that also knows the app's routes (to find every POST action)."""

    def __init__(self, app: Starlette, db: TestDatabase, **options: Any) -> None:
        super().__init__(app, db, **options)
        self.app_routes = app.routes


@pytest.fixture
def web(db: TestDatabase) -> Iterator[_RoutedClient]:
    app = create_app(db.client, TOKEN, stats_options=CURRENT, read_token=READ_TOKEN)
    with _RoutedClient(app, db, follow_redirects=False) as client:
        yield client


def login(web, token=TOKEN) -> str:
    assert web.post("/login", data={"token": token, "next": "/"}).status_code == 303
    page = web.get("/").text
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


# -- the task list --------------------------------------------------------------------------------
def test_tasks_api_pages_a_state_with_its_cursor(web):
    made = [web.db.make_task("q") for _ in range(5)]
    first = web.get("/api/queues/q/tasks/ready?limit=3", headers=BEARER).json()
    assert len(first["tasks"]) == 3 and first["next"]
    second = web.get("/api/queues/q/tasks/ready", params={"limit": 3, "after": first["next"]}, headers=BEARER).json()
    assert {t["id"] for t in first["tasks"] + second["tasks"]} == {t.id for t in made}
    assert second["next"] is None


def test_tasks_api_filters_and_refuses_bad_input(web):
    web.db.make_task("q", exclusive_key="acct-1")
    web.db.make_task("q")
    data = web.get("/api/queues/q/tasks/ready?exclusive_key=acct-1", headers=BEARER).json()
    assert [t["exclusive_key"] for t in data["tasks"]] == ["acct-1"]
    for bad in ("priority=high", "min_age=soon", "order=sideways", "after=nope", "limit=0"):
        assert web.get(f"/api/queues/q/tasks/ready?{bad}", headers=BEARER).status_code == 400, bad
    assert web.get("/api/queues/q/tasks/done", headers=BEARER).status_code == 400
    assert web.get("/api/queues/nope/tasks/ready", headers=BEARER).status_code == 404


def test_bulk_run_now_through_the_api_changes_only_scheduled_tasks_of_the_queue(web):
    later = web.db.make_task("q", state="scheduled", exec_time=utcnow() + dt.timedelta(hours=2))
    ready = web.db.make_task("q")
    response = web.post("/api/queues/q/tasks/run_now", json={"ids": [later.id, ready.id]}, headers=BEARER)
    assert response.status_code == 200
    assert response.json() == {"action": "run_now", "changed": [later.id], "unchanged": [ready.id]}
    assert web.db.task_row(later.id)["state"] == "ready"


def test_bulk_cancel_leaves_tasks_of_other_queues_alone(web):
    mine, other = web.db.make_task("q"), web.db.make_task("other")
    data = web.post("/api/queues/q/tasks/cancel", json={"ids": [mine.id, other.id]}, headers=BEARER).json()
    assert data["changed"] == [mine.id] and data["unchanged"] == [other.id]
    assert web.db.task_row(mine.id) is None and web.db.task_row(other.id) is not None


def test_bulk_form_sets_priority_and_says_how_many(web):
    csrf = login(web)
    a, b = web.db.make_task("q"), web.db.make_task("q")
    page = web.get("/queues/q/tasks?state=ready").text
    assert a.id in page and 'id="act-set_priority"' in page
    response = web.post(
        "/queues/q/tasks/act",
        data={
            "csrf": csrf,
            "action": "set_priority",
            "priority": "-3",
            "id": [a.id, b.id],
            "back": "/queues/q/tasks?state=ready",
        },
    )
    assert response.status_code == 303
    assert "done=tasks-set_priority&n=2&m=0" in response.headers["location"]
    assert web.db.task_row(a.id)["priority"] == -3
    assert "Changed the priority of 2 task(s)" in web.get(response.headers["location"]).text


def test_bulk_form_without_csrf_changes_nothing(web):
    login(web)
    task = web.db.make_task("q")
    before = snapshot(web.db)
    response = web.post("/queues/q/tasks/act", data={"action": "cancel", "id": [task.id]})
    assert response.status_code == 403 and snapshot(web.db) == before


def test_task_list_page_escapes_keys_and_errors(web):
    login(web)
    task = web.db.make_task(
        "q", state="scheduled", exec_time=utcnow() + dt.timedelta(hours=1), exclusive_key="<script>x</script>"
    )
    web.db.set_last_error(task.key.id, "<img src=x onerror=alert(1)>")
    page = web.get("/queues/q/tasks?state=scheduled").text
    assert "<script>x</script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert "<img src=x" not in page


# -- a task's page --------------------------------------------------------------------------------
def test_task_page_shows_an_app_tasks_call_and_pretty_json(web):
    login(web)
    payload = arguments.encode_call("billing.charge", {"account": "a-1", "cents": 250, "at": dt.date(2026, 1, 2)})
    task = web.db.make_task("q", payload=payload)
    data = web.get(f"/api/tasks/{task.id}", headers=BEARER).json()
    assert data["payload"]["app_task"]["name"] == "billing.charge"
    assert [a["name"] for a in data["payload"]["app_task"]["arguments"]] == ["account", "cents", "at"]
    assert json.loads(data["payload"]["json"]) == json.loads(payload)
    page = web.get(f"/tasks/{task.id}").text
    assert 'id="app-task-name">billing.charge<' in page and 'id="payload-json"' in page
    assert data["lifecycle"]["state"] == "ready" and data["lifecycle"]["task"] == "billing.charge"


def test_payload_download_gives_the_whole_payload_as_bytes(web):
    blob = bytes(range(256)) * 1000  # binary, above the page's 64 KiB
    task = web.db.make_task("q", payload=blob)
    response = web.get(f"/api/tasks/{task.id}/payload", headers=BEARER)
    assert response.status_code == 200 and response.content == blob
    assert response.headers["content-type"] == "application/octet-stream"
    assert f'filename="{task.id}.bin"' in response.headers["content-disposition"]
    assert web.get(f"/api/tasks/{uuid.uuid4()}/payload", headers=BEARER).status_code == 404


def test_a_leased_task_links_to_its_registered_worker(web):
    login(web)
    task = web.db.make_task("q", state="leased")
    registry = WorkerRegistry(["q"], 4, lambda: Holding(1, 1, [task.lease_token]))
    registry.beat(web.db.store)
    data = web.get(f"/api/tasks/{task.id}", headers=BEARER).json()
    assert data["worker"]["id"] == str(registry.id)
    assert f'href="/workers#worker-{registry.id}"' in web.get(f"/tasks/{task.id}").text
    workers = web.get("/api/workers", headers=BEARER).json()["workers"]
    assert [(w["id"], w["concurrency"], w["running"], w["stale"]) for w in workers] == [(str(registry.id), 4, 1, False)]
    assert f'id="worker-{registry.id}"' in web.get("/workers").text


def test_a_worker_silent_for_three_beats_is_shown_stale(web):
    WorkerRegistry(["q"], 1, lambda: Holding(0, 0, [])).beat(web.db.store)
    web.db.age_workers(20)
    assert web.get("/api/workers", headers=BEARER).json()["workers"][0]["stale"] is True


# -- read-only token and audit log ----------------------------------------------------------------
def _post_routes(routes) -> list[str]:
    paths = []
    for route in routes:
        if isinstance(route, Route) and "POST" in (route.methods or ()) and route.path not in ("/login", "/logout"):
            paths.append(route.path)
    return paths


def test_the_read_only_token_reads_everything(web):
    task = web.db.make_task("q")
    make_dead(web.db, "q")
    for path in (
        "/api/queues",
        "/api/queues/q",
        "/api/queues/q/dead",
        f"/api/tasks/{task.id}",
        "/api/queues/q/tasks/ready",
        "/api/workers",
        "/api/audit",
        f"/api/tasks/{task.id}/payload",
    ):
        assert web.get(path, headers=READ_BEARER).status_code == 200, path


def test_the_read_only_token_is_refused_on_every_route_that_changes_something(web):
    task = web.db.make_task("q")
    make_dead(web.db, "q")
    paths = _post_routes(web.app_routes)
    assert len(paths) >= 12  # every action route of the API and the pages, present and future
    before = snapshot(web.db)
    for path in paths:
        concrete = path.replace("{queue}", "q").replace("{task_id}", task.id).replace("{action}", "cancel")
        body = {"ids": [task.id], "all": True, "what": "both", "confirm": "1", "action": "cancel", "id": task.id}
        response = web.post(concrete, json=body, headers=READ_BEARER)
        assert response.status_code == 403, concrete
    assert snapshot(web.db) == before
    assert web.get("/api/audit", headers=BEARER).json()["entries"] == []


def test_a_read_only_session_sees_no_action_buttons_and_cannot_post(web):
    csrf = login(web, READ_TOKEN)
    task = web.db.make_task("q")
    page = web.get("/queues/q").text
    assert 'id="read-only"' in page and 'id="pause-dequeue"' not in page
    assert 'id="cancel"' not in web.get(f"/tasks/{task.id}").text
    assert 'id="act-cancel"' not in web.get("/queues/q/tasks").text
    response = web.post(f"/tasks/{task.id}/cancel", data={"csrf": csrf})
    assert response.status_code == 403 and web.db.task_row(task.id) is not None
    assert web.post("/logout", data={"csrf": csrf}).status_code == 303  # ending its own session is allowed


def test_the_read_only_token_must_differ_from_the_full_one(db):
    from shardq.errors import InvalidInput

    with pytest.raises(InvalidInput):
        create_app(db.client, TOKEN, read_token=TOKEN)
    with pytest.raises(InvalidInput):
        create_app(db.client, TOKEN, read_token="short")


def test_actions_are_recorded_in_the_audit_log_with_who_and_what(web):
    csrf = login(web)
    task = web.db.make_task("q")
    web.post("/queues/q/pause", data={"csrf": csrf, "what": "dequeue"})
    web.post("/api/queues/q/tasks/cancel", json={"ids": [task.id]}, headers=BEARER)
    web.post("/api/queues/q/tasks/cancel", json={"ids": ["bad"]}, headers=BEARER)  # refused: not recorded
    entries = web.get("/api/audit", headers=BEARER).json()["entries"]
    assert [(e["action"], e["target"]) for e in entries] == [("cancel", "queue q"), ("pause", "queue q")]
    assert entries[0]["actor"].startswith("full token, bearer header, from ")
    assert entries[1]["actor"].startswith("full token, session ")
    assert task.id in entries[0]["detail"]
    page = web.get("/audit").text
    assert "pause" in page and "queue q" in page


def test_audit_log_pages_newest_first(web):
    web.db.client.store.queue_ensure("q")
    for i in range(5):
        assert (
            web.post("/api/queues/q/pause" if i % 2 else "/api/queues/q/resume", json={}, headers=BEARER).status_code
            == 200
        )
    first = web.get("/api/audit?limit=2", headers=BEARER).json()
    assert re.fullmatch(r"[0-9A-Za-z_-]+", first["next"])  # safe in a query string unquoted
    rest = web.get(f"/api/audit?limit=10&before={first['next']}", headers=BEARER).json()
    ids = [e["id"] for e in first["entries"] + rest["entries"]]
    assert len(ids) == len(set(ids)) == 5
    times = [e["at"] for e in first["entries"] + rest["entries"]]
    assert times == sorted(times, reverse=True)


# -- queue settings -------------------------------------------------------------------------------
def test_settings_form_changes_settings_and_limits_and_is_audited(web):
    csrf = login(web)
    web.db.client.store.queue_ensure("q")
    form = {
        "csrf": csrf,
        "lease_seconds": "45",
        "max_attempts": "7",
        "backoff_base": "2",
        "backoff_cap": "600",
        "retry_jitter": "0.5",
        "timeout_seconds": "120",
        "concurrency": "3",
        "rate": "",
        "burst": "",
        "exclusive_latest_only": "1",
    }
    response = web.post("/queues/q/settings", data=form)
    assert response.status_code == 303 and "done=settings" in response.headers["location"]
    settings = web.get("/api/queues/q", headers=BEARER).json()["settings"]
    assert (
        settings["lease_seconds"],
        settings["max_attempts"],
        settings["timeout_seconds"],
        settings["concurrency_limit"],
        settings["rate_limit"],
        settings["exclusive_latest_only"],
    ) == (45, 7, 120, 3, None, True)
    form.update(timeout_seconds="", concurrency="")
    web.post("/queues/q/settings", data=form)
    settings = web.get("/api/queues/q", headers=BEARER).json()["settings"]
    assert settings["timeout_seconds"] is None and settings["concurrency_limit"] is None
    assert web.get("/api/audit", headers=BEARER).json()["entries"][0]["action"] == "change settings"


def test_a_bad_setting_is_refused_and_changes_nothing(web):
    csrf = login(web)
    web.db.client.store.queue_ensure("q")
    before = snapshot(web.db)
    for bad in ({"lease_seconds": "soon"}, {"retry_jitter": "2"}, {"rate": "", "burst": "5"}):
        response = web.post("/queues/q/settings", data={"csrf": csrf, "max_attempts": "3", **bad})
        assert response.status_code == 400, bad
    assert web.post("/api/queues/q/settings", json={"max_attempts": -1}, headers=BEARER).status_code == 400
    assert web.post("/api/queues/nope/settings", json={"max_attempts": 3}, headers=BEARER).status_code == 404
    assert snapshot(web.db) == before
