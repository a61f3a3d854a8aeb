"""Workflows from asyncio code (Workflow.enqueue_async, AsyncClient's workflow calls,
WorkflowHandle.status_async): the sync API's checks and statements, awaited.

Coroutines run with asyncio.run inside plain tests (no pytest plugin needed)."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
import sqlalchemy
from sqlalchemy.ext.asyncio import AsyncSession as SAAsyncSession
from sqlalchemy.ext.asyncio import create_async_engine

import shardq
from shardq.errors import InvalidInput
from shardq.models.workflow_graph import Graph, StepSpec


def _workflow_rows(db) -> int:
    return db.count_workflows()


def _sqlalchemy_url(db) -> sqlalchemy.engine.URL:
    params = db.dsn.params()
    return sqlalchemy.engine.URL.create(
        "postgresql+psycopg",
        username=params.get("user"),
        password=params.get("password"),
        host=params.get("host"),
        port=int(params["port"]) if "port" in params else None,
        database=params.get("dbname"),
    )


def test_a_workflow_declared_in_async_code_is_enqueued_whole_and_read_back_awaited(app, db):
    ran: list[str] = []

    @app.task(name="step")
    def step(label: str) -> None:
        ran.append(label)

    async def declare():
        wf = app.workflow("async-chain")
        members = wf.group(step.step(label="a"), step.step(label="b"))
        wf.add(step.step(label="fan-in"), after=members, name="fan-in")
        handle = await wf.enqueue_async()
        first = await handle.status_async()
        await app.aclose()
        return handle, first

    handle, first = asyncio.run(declare())
    assert first.state == "running"
    assert {s.name: s.state for s in first.steps} == {"step": "ready", "step-2": "ready", "fan-in": "waiting"}
    assert first == app.workflow_status(handle)  # the same plan, the same answer
    app.work(until_empty=True)
    assert sorted(ran[:2]) == ["a", "b"] and ran[2:] == ["fan-in"]

    async def read():
        try:
            return await app.workflow_status_async(handle), await handle.status_async()
        finally:
            await app.aclose()

    by_app, by_handle = asyncio.run(read())
    assert by_app.state == by_handle.state == "succeeded"


def test_enqueue_async_on_an_async_connection_exists_only_if_that_transaction_commits(app, db):
    @app.task(name="t")
    def t(n: int) -> None: ...

    def declared():
        wf = app.workflow("in-tx")
        wf.chain(t.step(n=1), t.step(n=2))
        return wf

    async def main():
        async with await psycopg.AsyncConnection.connect(db.dsn.conninfo) as conn:
            await declared().enqueue_async(connection=conn)
            await conn.rollback()
            assert db.count() == 0 and _workflow_rows(db) == 0
            kept = await declared().enqueue_async(connection=conn)
            assert db.count() == 0 and _workflow_rows(db) == 0  # not visible before the commit
            await conn.commit()
        engine = create_async_engine(_sqlalchemy_url(db))
        try:
            async with SAAsyncSession(engine) as session:
                await declared().enqueue_async(connection=session)
                await session.rollback()
            async with SAAsyncSession(engine) as session:
                also = await declared().enqueue_async(connection=session)
                await session.commit()
        finally:
            await engine.dispose()
            await app.aclose()
        return kept, also

    kept, also = asyncio.run(main())
    assert db.count() == 4 and _workflow_rows(db) == 2
    assert app.workflow_status(kept).state == app.workflow_status(also).state == "running"


def test_enqueue_async_refuses_a_bad_graph_or_a_sync_connection_before_anything_is_written(app, db):
    @app.task(name="t")
    def t(n: int) -> None: ...

    async def main():
        cyclic = app.workflow("cycle")
        cyclic.add(t.step(n=1), name="a", after="b")
        cyclic.add(t.step(n=2), name="b", after="a")
        with pytest.raises(InvalidInput, match="cycle"):
            await cyclic.enqueue_async()
        undeclared = app.workflow("unknown")
        undeclared.add(t.step(n=1))
        undeclared.graph.steps.append(StepSpec("ghost", "ghost", b"{}", "default"))
        with pytest.raises(InvalidInput, match="not declared"):
            await undeclared.enqueue_async()
        client = await app.async_client()
        orphan = Graph("orphan", [StepSpec("child", "t", b"{}", "default", parents=("nobody",))])
        with pytest.raises(InvalidInput, match="nobody"):
            await client.enqueue_workflow(orphan)
        fine = app.workflow("fine")
        fine.add(t.step(n=1))
        with psycopg.Connection.connect(db.dsn.conninfo) as sync_conn:
            with pytest.raises(InvalidInput, match="asyncio"):
                await fine.enqueue_async(connection=sync_conn)
        await app.aclose()

    asyncio.run(main())
    assert db.count() == 0 and _workflow_rows(db) == 0


def test_the_async_client_reads_cancels_and_reports_unknown_workflows(app, db):
    @app.task(name="t")
    def t(n: int) -> None: ...

    wf = app.workflow("to-cancel")
    wf.chain(t.step(n=1), t.step(n=2), t.step(n=3))
    handle = wf.enqueue()

    async def main():
        async with shardq.connect_async(db.dsn) as client:
            missing = await client.workflow_status(uuid.uuid4())
            cancelled = await client.cancel_workflow(handle)
            after = await client.workflow_status(str(handle))
            with pytest.raises(InvalidInput, match="not a workflow id"):
                await client.workflow_status("nope")
        return missing, cancelled, after

    missing, cancelled, after = asyncio.run(main())
    assert missing.state == "unknown"
    assert cancelled == 3 and after.state == "cancelled" and db.count() == 0


def test_an_async_fan_in_receives_its_parents_results_read_through_the_asyncio_client(app, db):
    db.client.set_queue("kept", keep_finished_seconds=3600)
    seen: list[dict] = []

    @app.task(name="square", queue="kept", result=True)
    def square(n: int) -> int:
        return n * n

    @app.task(name="total")
    async def total(results: dict | None = None) -> None:
        await asyncio.sleep(0)
        seen.append(results or {})

    wf = app.workflow("sum")
    members = wf.group(square.step(n=2), square.step(n=3))
    wf.add(total.step(), after=members)
    handle = wf.enqueue()
    app.work(until_empty=True)
    assert seen == [{"square": 4, "square-2": 9}]
    assert handle.status().state == "succeeded"
