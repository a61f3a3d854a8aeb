"""The asyncio client (shardq.connect_async / AsyncClient) and the apps' defer_async: the same
arguments, results, errors and guarantees as the sync client, on psycopg's AsyncConnection.

Coroutines run with asyncio.run inside plain tests (no pytest plugin needed)."""

from __future__ import annotations

import asyncio
import threading
import uuid

import psycopg
import pytest
import sqlalchemy
from sqlalchemy.ext.asyncio import AsyncSession as SAAsyncSession
from sqlalchemy.ext.asyncio import create_async_engine

import shardq
from shardq.errors import DatabaseUnavailable, InvalidInput, QueuePaused
from shardq.sessions.session_async import AsyncSession


def sqlalchemy_url(db) -> sqlalchemy.engine.URL:
    params = db.dsn.params()
    return sqlalchemy.engine.URL.create(
        "postgresql+psycopg",
        username=params.get("user"),
        password=params.get("password"),
        host=params.get("host"),
        port=int(params["port"]) if "port" in params else None,
        database=params.get("dbname"),
    )


def test_the_async_client_talks_through_a_psycopg_async_connection(db):
    async def main():
        async with shardq.connect_async(db.dsn) as client:
            assert isinstance(client, shardq.AsyncClient)
            assert isinstance(client.session, AsyncSession)
            assert isinstance(await client.session.connection(), psycopg.AsyncConnection)
            await client.enqueue("q", b"x")
            return await client.session.connection()

    connection = asyncio.run(main())
    assert connection.closed  # closed with the client
    assert db.count() == 1


def test_enqueue_takes_the_sync_clients_options_and_returns_the_same_results(db):
    async def main():
        client = await shardq.connect_async(db.dsn)
        async with client:
            first = await client.enqueue("q", b"a", dedupe_key="k", priority=-5, max_attempts=3)
            again = await client.enqueue("q", b"b", dedupe_key="k")
            later = await client.enqueue("q", "c", delay=3600)
            keyed = [await client.enqueue("q", b"e", exclusive_key="account:1") for _ in range(2)]
            return first, again, later, keyed

    first, again, later, keyed = asyncio.run(main())
    assert first.enqueued == 1 and first.duplicate_keys == ()
    assert again.enqueued == 0 and again.duplicate_keys == ("k",)
    assert keyed[0].backlogged_ids == () and keyed[1].backlogged_ids == keyed[1].enqueued_ids
    row = db.task_row(uuid.UUID(first.enqueued_ids[0]))
    assert row["priority"] == -5 and row["max_attempts"] == 3 and row["dedupe_key"] == "k"
    assert db.task_row(uuid.UUID(later.enqueued_ids[0]))["state"] == "scheduled"
    assert db.count() == 4


def test_enqueue_many_batches_and_keeps_the_order_of_ids(db):
    async def main():
        async with shardq.connect_async(db.dsn) as client:
            return await client.enqueue_many("q", [b"a", "b", shardq.NewTask(b"c", priority=2)] * 5, batch_size=4)

    result = asyncio.run(main())
    assert result.enqueued == 15 and len(set(result.enqueued_ids)) == 15
    assert db.count() == 15


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.enqueue("bad queue", b"x"),
        lambda c: c.enqueue("q", b"x", delay=-1),
        lambda c: c.enqueue_many("q", [b"fine", 42]),
        lambda c: c.enqueue_many("q", [b"x"], batch_size=0),
        lambda c: c.cancel("not-a-uuid"),
        lambda c: c.cancel(),
    ],
)
def test_bad_input_is_invalid_input_before_anything_is_written(db, call):
    async def main():
        async with shardq.connect_async(db.dsn) as client:
            with pytest.raises(InvalidInput):
                await call(client)

    asyncio.run(main())
    assert db.count() == 0


def test_a_queue_paused_for_enqueue_refuses_with_queue_paused(db):
    db.client.pause("q", dequeue=False)

    async def main():
        async with shardq.connect_async(db.dsn) as client:
            with pytest.raises(QueuePaused, match="paused for enqueue"):
                await client.enqueue("q", b"x")

    asyncio.run(main())
    assert db.count() == 0


def test_an_unreachable_database_is_database_unavailable_without_the_password():
    async def main():
        client = shardq.AsyncClient("postgresql://someone:s3cretpw@127.0.0.1:1/nothing?connect_timeout=2")
        with pytest.raises(DatabaseUnavailable) as caught:
            await client.enqueue("q", b"x")
        await client.close()
        return caught.value

    error = asyncio.run(main())
    assert "s3cretpw" not in str(error) and isinstance(error.__cause__, psycopg.Error)


def test_cancel_deletes_tasks_and_releases_an_exclusive_keys_backlog(db):
    async def main():
        async with shardq.connect_async(db.dsn) as client:
            plain = await client.enqueue("q", b"x")
            active = await client.enqueue("q", b"1", exclusive_key="k")
            waiting = await client.enqueue("q", b"2", exclusive_key="k")
            missing = str(uuid.uuid4())
            result = await client.cancel(plain.enqueued_ids[0], active.enqueued_ids[0], missing)
            return result, waiting.enqueued_ids[0], missing

    result, waiting, missing = asyncio.run(main())
    assert len(result.cancelled) == 2 and result.not_found == (missing,) and result.promoted == 1
    assert db.count() == 1 and db.task_row(uuid.UUID(waiting))["state"] == "ready"


def test_stats_show_what_the_client_just_enqueued(db):
    async def main():
        async with shardq.connect_async(db.dsn) as client:
            await client.enqueue_many("q", [b"x"] * 3)
            await client.enqueue("q", b"later", delay=600)
            return await client.stats()

    stats = asyncio.run(main())
    assert stats.queues["q"].ready == 3 and stats.queues["q"].scheduled == 1
    # The first statement for a queue is counted at once, later ones within a second are held in
    # memory (as the sync client does) ...
    assert stats.queues["q"].activity.enqueued == 3
    assert stats.dialect == db.dialect
    # ... and written when the client closes.
    sync = db.client.stats()
    assert sync.queues["q"].ready == 3 and sync.queues["q"].activity.enqueued == 4


def test_work_until_empty_runs_async_handlers_on_the_callers_loop(db):
    seen = []

    async def main():
        loop = asyncio.get_running_loop()

        async def handler(task: shardq.Task) -> None:
            assert asyncio.get_running_loop() is loop
            await asyncio.sleep(0.01)
            seen.append(task.payload)

        async with shardq.connect_async(db.dsn) as client:
            await client.enqueue_many("q", [b"a", b"b", b"c"])
            ticks = 0

            async def tick() -> None:  # the loop stays free while the worker runs
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.005)

            ticker = asyncio.create_task(tick())
            totals = await client.work(["q"], handler, until_empty=True, concurrency=2)
            ticker.cancel()
            return totals, ticks

    totals, ticks = asyncio.run(main())
    assert totals.acked == 3 and sorted(seen) == [b"a", b"b", b"c"]
    assert ticks > 1
    assert db.count() == 0


def test_work_runs_sync_handlers_too_and_failures_retry_as_in_the_sync_worker(db):
    async def main():
        def handler(task: shardq.Task) -> None:
            raise shardq.Permanent("no")

        async with shardq.connect_async(db.dsn) as client:
            await client.enqueue("q", b"x")
            return await client.work(["q"], handler, until_empty=True)

    totals = asyncio.run(main())
    assert totals.dead == 1 and db.count("shardq_dead") == 1


def test_cancelling_the_awaiting_task_stops_the_worker_gracefully(db):
    started = threading.Event()

    async def main():
        async def handler(task: shardq.Task) -> None:
            started.set()
            await asyncio.sleep(0.05)

        async with shardq.connect_async(db.dsn) as client:
            await client.enqueue_many("q", [b"x"] * 2)
            work = asyncio.create_task(client.work(["q"], handler, idle_max=0.05))
            while not started.is_set():
                await asyncio.sleep(0.01)
            work.cancel()
            with pytest.raises(asyncio.CancelledError):
                await work

    asyncio.run(main())
    assert not [t for t in threading.enumerate() if t.name == "shardq-async-worker"]
    assert db.count() <= 2  # each task acked or handed back; none left leased
    assert not db.count_tasks(state="leased")


def test_defer_async_configure_and_defer_many_async_enqueue_through_the_app(app, db):
    ran = []

    @app.task
    async def fetch(url: str) -> None:
        ran.append(url)

    async def main():
        first = await fetch.defer_async(url="a")
        second = await fetch.configure(priority=-3, dedupe_key="b").defer_async(url="b")
        duplicate = await fetch.configure(dedupe_key="b").defer_async(url="b")
        many = await fetch.defer_many_async([{"url": "c"}, {"url": "d"}])
        with pytest.raises(InvalidInput):
            await fetch.defer_async(nope=1)
        client = await app.async_client()
        assert client is await app.async_client()
        totals = await client.work(app.queues(), app, until_empty=True)
        await app.aclose()
        return first, second, duplicate, many, totals

    first, second, duplicate, many, totals = asyncio.run(main())
    assert first and second and duplicate is None and len(many) == 2 and all(many)
    assert db.task_row(uuid.UUID(second)) is None  # ran and was acked
    assert totals.acked == 4 and sorted(ran) == ["a", "b", "c", "d"]


def test_defer_async_on_an_async_connection_exists_only_if_that_transaction_commits(app, db):
    @app.task
    def job(n: int) -> None: ...

    async def main():
        async with await psycopg.AsyncConnection.connect(db.dsn.conninfo) as conn:
            await job.configure(connection=conn).defer_async(n=1)
            await job.configure(connection=conn, exclusive_key="k").defer_async(n=2)
            await conn.rollback()
            assert db.count() == 0
            kept = await job.configure(connection=conn).defer_async(n=3)
            assert db.count() == 0  # not visible before the commit
            await conn.commit()
        await app.aclose()
        return kept

    kept = asyncio.run(main())
    assert db.count() == 1 and db.task_row(uuid.UUID(kept)) is not None


def test_defer_async_joins_sqlalchemy_async_sessions_and_connections(app, db):
    @app.task
    def job(n: int) -> None: ...

    async def main():
        engine = create_async_engine(sqlalchemy_url(db))
        try:
            async with SAAsyncSession(engine) as session:
                await job.configure(connection=session).defer_async(n=1)
                await session.rollback()
            assert db.count() == 0
            async with SAAsyncSession(engine) as session:
                await job.configure(connection=session).defer_many_async([{"n": 2}, {"n": 3}])
                assert db.count() == 0
                await session.commit()
            assert db.count() == 2
            async with engine.connect() as connection:
                await job.configure(connection=connection).defer_async(n=4)
                await connection.commit()
            assert db.count() == 3
        finally:
            await engine.dispose()
            await app.aclose()

    asyncio.run(main())


def test_sync_defer_refuses_an_asyncio_connection_with_one_line(app, db):
    @app.task
    def job(n: int) -> None: ...

    async def main():
        async with await psycopg.AsyncConnection.connect(db.dsn.conninfo) as conn:
            with pytest.raises(InvalidInput) as caught:
                job.configure(connection=conn).defer(n=1)
        engine = create_async_engine(sqlalchemy_url(db))
        try:
            async with SAAsyncSession(engine) as session:
                with pytest.raises(InvalidInput, match="asyncio AsyncSession"):
                    job.configure(connection=session).defer(n=1)
        finally:
            await engine.dispose()
        return caught.value

    error = asyncio.run(main())
    assert "defer_async" in str(error) and "\n" not in str(error)
    assert db.count() == 0


def test_the_asyncio_call_refuses_a_sync_connection_and_unknown_objects(app, db):
    @app.task
    def job(n: int) -> None: ...

    async def main():
        with psycopg.connect(db.dsn.conninfo) as conn:
            with pytest.raises(InvalidInput, match="sync connection"):
                await job.configure(connection=conn).defer_async(n=1)
        with pytest.raises(InvalidInput, match="connection= takes"):
            await job.configure(connection=object()).defer_async(n=1)
        await app.aclose()

    asyncio.run(main())
    assert db.count() == 0


def test_the_app_makes_one_async_client_per_event_loop(app, db):
    @app.task
    def job(n: int) -> None: ...

    async def defer_and_keep():
        await job.defer_async(n=1)
        return await app.async_client()

    first = asyncio.run(defer_and_keep())
    second = asyncio.run(defer_and_keep())  # the first loop has ended: a new client
    assert first is not second
    assert db.count() == 2
    first_connection = first.session._conn
    assert first_connection is None or first_connection.closed  # released when the second was made
    app.close()  # releases the second, whose loop has ended too
    assert second.session._conn is None


def _hooked_client(db, statement: str, error: type[psycopg.Error], times: int | None):
    calls = []

    def hook(name: str) -> None:
        if name == statement:
            calls.append(name)
            if times is None or len(calls) <= times:
                raise error(f"injected by the test ({error.__name__})")

    client = shardq.AsyncClient(db.dsn)
    client.session.before_statement = hook
    return client, calls


def test_serialization_failures_are_retried_a_statement_alone_or_the_whole_transaction(pg_db):
    from psycopg import errors as pgerrors

    async def main():
        plain, plain_calls = _hooked_client(pg_db, "task_insert_many_fresh", pgerrors.SerializationFailure, 2)
        async with plain:
            await plain.enqueue("q", b"x")
        # In the exclusive-key transaction the failure hits its second statement: the whole body
        # (key locks first) runs again.
        keyed, keyed_calls = _hooked_client(pg_db, "task_insert_many", pgerrors.SerializationFailure, 2)
        locks = []
        hook = keyed.session.before_statement

        def both(name: str) -> None:
            if name == "exclusive_keys_lock":
                locks.append(name)
            hook(name)

        keyed.session.before_statement = both
        async with keyed:
            await keyed.enqueue("q", b"y", exclusive_key="k")
        return len(plain_calls), len(keyed_calls), len(locks)

    plain_calls, keyed_calls, locks = asyncio.run(main())
    assert (plain_calls, keyed_calls, locks) == (3, 3, 3)
    assert pg_db.count() == 2


def test_an_ambiguous_enqueue_is_not_resent_and_says_so(pg_db):
    from psycopg import errors as pgerrors

    async def main():
        client, calls = _hooked_client(pg_db, "task_insert_many_fresh", pgerrors.StatementCompletionUnknown, None)
        async with client:
            with pytest.raises(shardq.AmbiguousResult):
                await client.enqueue("q", b"x")
        return len(calls)

    assert asyncio.run(main()) == 1
