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
