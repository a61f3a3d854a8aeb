"""The FastAPI example (examples/fastapi_orders.py) in-process: the lifespan opens and closes the
async client, a request's task commits with its order, a failed request leaves neither."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

import shardq
from examples import fastapi_orders
from shardq.contrib import asgi
from tests.support.web import TOKEN


def test_a_committed_request_runs_its_task_and_a_failed_one_leaves_neither_row(db):
    app = fastapi_orders.create_tasks(db.dsn)
    api = fastapi_orders.create_api(db.dsn.conninfo, app)
    fastapi_orders.sent.clear()
    with TestClient(api) as http:
        assert app._async_clients, "the lifespan did not open the async client"
        created = http.post("/orders", params={"email": "a@example.com"})
        assert created.status_code == 201
        refused = http.post("/orders", params={"email": "b@example.com", "fail": "1"})
        assert refused.status_code == 409
    assert not app._async_clients, "the lifespan did not close the async client"
    assert [r["email"] for r in db.sql("SELECT email FROM example_orders")] == ["a@example.com"]
    assert db.count() == 1
    assert app.work(until_empty=True).acked == 1
    assert fastapi_orders.sent == [(created.json()["order"], "a@example.com")]
    app.close()


def test_the_lifespan_closes_the_client_when_the_inner_lifespan_fails(db):
    app = shardq.App(db.dsn)

    @contextlib.asynccontextmanager
    async def broken(_api):
        raise RuntimeError("the application did not start")
        yield

    async def start() -> None:
        async with asgi.lifespan(app, inner=broken)(None):
            pass

    with pytest.raises(RuntimeError, match="did not start"):
        asyncio.run(start())
    assert not app._async_clients


def test_the_example_mounts_the_dashboard_under_its_prefix_behind_its_token(db):
    app = fastapi_orders.create_tasks(db.dsn)
    api = fastapi_orders.create_api(db.dsn.conninfo, app, dashboard_token=TOKEN)
    prefix = fastapi_orders.DASHBOARD_PREFIX
    with TestClient(api, follow_redirects=False) as http:
        assert http.post("/orders", params={"email": "a@example.com"}).status_code == 201
        assert http.get(prefix + "/api/queues").status_code == 401
        login = http.post(prefix + "/login", data={"token": TOKEN, "next": "/queues/receipts"})
        assert login.status_code == 303 and login.headers["location"] == prefix + "/queues/receipts"
        page = http.get(login.headers["location"])
        assert page.status_code == 200 and f'action="{prefix}/queues/receipts/pause"' in page.text
        assert [q["name"] for q in http.get(prefix + "/api/queues").json()["queues"]] == ["receipts"]
    app.close()
