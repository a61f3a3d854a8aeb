"""An order API whose receipts are shardq tasks written in the order's own transaction.

FastAPI with a SQLAlchemy ``AsyncSession`` per request (``postgresql+psycopg``): ``POST /orders``
inserts the order and defers ``orders.send_receipt`` on that session, then commits both at once;
``POST /orders?fail=1`` raises after deferring, so the request's transaction rolls back and leaves
neither the order nor its task. The lifespan (:func:`shardq.contrib.asgi.lifespan`) opens and
closes shardq's async client with the server. With a dashboard token the queues' dashboard is
mounted at ``/queue-admin/`` (:func:`shardq.contrib.asgi.dashboard`), asking for that token.

Run it::

    pip install 'shardq[web]' fastapi uvicorn
    SHARDQ_DSN=postgresql://... SHARDQ_WEB_TOKEN=a-long-secret-token uvicorn examples.fastapi_orders:api
    shardq work --app examples.fastapi_orders:tasks          # runs the receipts

tests/contrib/test_asgi_example.py runs it in-process against the test database;
tests/web/test_browser_mount.py logs in to its dashboard in headless Chromium.
"""

# No `from __future__ import annotations`: FastAPI reads the route's annotations at run time, and
# they name db_session, a local of create_api.
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import psycopg
from fastapi import Depends, FastAPI, HTTPException
from sqlalchemy import Column, Integer, MetaData, String, Table, insert
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

import shardq
from shardq.contrib import asgi
from shardq.sessions.dsn import Dsn

orders = Table(
    "example_orders",
    MetaData(),
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("email", String(200), nullable=False),
)

sent: list[tuple[int, str]] = []  # what send_receipt did, for the test (a real one would mail)


def create_tasks(dsn: str | Dsn) -> shardq.App:
    """The app's tasks on the database ``dsn`` names."""
    tasks = shardq.App(dsn)

    @tasks.task(name="orders.send_receipt", queue="receipts")
    def send_receipt(order_id: int, email: str) -> None:
        sent.append((order_id, email))

    return tasks


#: Where the dashboard is mounted.
DASHBOARD_PREFIX = "/queue-admin"


def create_api(conninfo: str, tasks: shardq.App, dashboard_token: str | None = None) -> FastAPI:
    """The API on the database ``conninfo`` names (a libpq URL or key=value string), deferring
    through ``tasks``; with ``dashboard_token``, shardq's dashboard at :data:`DASHBOARD_PREFIX`."""
    send_receipt = tasks.tasks["orders.send_receipt"]
    engine: AsyncEngine = create_async_engine(
        "postgresql+psycopg://", async_creator=lambda: psycopg.AsyncConnection.connect(conninfo)
    )
    sessions = async_sessionmaker(engine, expire_on_commit=False)

    async def db_session() -> AsyncIterator[AsyncSession]:
        async with sessions() as session:
            yield session  # leaving without a commit rolls back

    async def schema(api: FastAPI) -> AsyncIterator[None]:
        async with engine.begin() as conn:
            await conn.run_sync(orders.metadata.create_all)
        yield
        await engine.dispose()

    api = FastAPI(lifespan=asgi.lifespan(tasks, inner=asynccontextmanager(schema)))

    @api.post("/orders", status_code=201)
    async def create_order(
        email: str, session: Annotated[AsyncSession, Depends(db_session)], fail: bool = False
    ) -> dict:
        order_id = (await session.execute(insert(orders).values(email=email).returning(orders.c.id))).scalar_one()
        task_id = await send_receipt.configure(connection=session).defer_async(order_id=order_id, email=email)
        if fail:
            raise HTTPException(409, "refused after the task was deferred: the transaction rolls back")
        await session.commit()
        return {"order": order_id, "receipt_task": task_id}

    if dashboard_token is not None:
        api.mount(DASHBOARD_PREFIX, asgi.dashboard(tasks, dashboard_token))
    return api


if "SHARDQ_DSN" in os.environ:  # `uvicorn examples.fastapi_orders:api`, `shardq work --app …:tasks`
    tasks = create_tasks(os.environ["SHARDQ_DSN"])
    api = create_api(os.environ["SHARDQ_DSN"], tasks, os.environ.get("SHARDQ_WEB_TOKEN"))
