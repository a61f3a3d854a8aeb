"""The sync Client and the AsyncClient run the same plans (shardq.sql.plan): the same named
statements with the same parameters, the same handling of errors, the same enqueue counts."""

from __future__ import annotations

import asyncio

import pytest

import shardq
from shardq import operations
from shardq.errors import DatabaseError, StatementTimeout
from shardq.lifecycle.enqueue import enqueue_plan
from shardq.models import NewTask
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from shardq.sessions.session_async import AsyncSession
from shardq.sql import plan as plans
from tests.support.recording import _record_async, _record_sync


def _work(client):
    """The same calls, made on a sync client (returns their results)."""
    return [
        client.enqueue("q", b"a", dedupe_key="d", priority=1),
        client.enqueue("q", b"b", dedupe_key="d"),
        client.enqueue_many("q", [b"c", NewTask(b"e", exclusive_key="k"), NewTask(b"f", exclusive_key="k")]),
        client.stats(),
    ]


async def _work_async(client):
    return [
        await client.enqueue("q", b"a", dedupe_key="d", priority=1),
        await client.enqueue("q", b"b", dedupe_key="d"),
        await client.enqueue_many("q", [b"c", NewTask(b"e", exclusive_key="k"), NewTask(b"f", exclusive_key="k")]),
        await client.stats(),
    ]


def test_sync_and_asyncio_clients_send_the_same_statements_with_the_same_parameters(pg_server, pg_template):
    from tests.conftest import _fresh_postgres

    sync_db, async_db = _fresh_postgres(pg_server, pg_template), _fresh_postgres(pg_server, pg_template)
    try:
        sync_sent: list = []
        client = shardq.Client(sync_db.dsn, notify=False)
        _record_sync(client.store.session, sync_sent)
        sync_results = _work(client)
        client.close()

        async_sent: list = []

        async def main():
            async with shardq.connect_async(async_db.dsn, notify=False) as aclient:
                _record_async(aclient.session, async_sent)
                return await _work_async(aclient)

        async_results = asyncio.run(main())
    finally:
        sync_db.close()
        async_db.close()
    assert sync_sent == async_sent
    assert [n for n, _ in sync_sent][:3] == ["task_insert_many", "stats_add_many", "task_insert_many"]
    for mine, theirs in zip(sync_results[:3], async_results[:3]):
        assert (mine.enqueued, mine.duplicate_keys, len(mine.backlogged_ids)) == (
            theirs.enqueued,
            theirs.duplicate_keys,
            len(theirs.backlogged_ids),
        )
    assert sync_results[3].queues["q"].ready == async_results[3].queues["q"].ready == 3


#: never connected to: the refusing sessions below fail every statement before any connect
_NOWHERE = Dsn.parse("postgresql://nobody@127.0.0.1:1/none")


class _Refusing(Session):
    """A session whose statements all fail, for driving plans without a database."""

    def __init__(self) -> None:
        super().__init__(_NOWHERE)

    def fetch_all(self, name, params=None, **kw):
        raise StatementTimeout(f"{name} cancelled")

    fetch_one = execute = fetch_all


class _RefusingAsync(AsyncSession):
    def __init__(self) -> None:
        super().__init__(_NOWHERE)

    async def fetch_all(self, name, params=None, **kw):
        raise StatementTimeout(f"{name} cancelled")

    fetch_one = execute = fetch_all


def _guarded() -> plans.Plan[str]:
    try:
        yield plans.Call("stats_now", rows="one")
    except DatabaseError as exc:
        return f"caught: {exc}"
    return "not reached"


def test_a_statements_error_is_raised_in_the_plan_where_it_yielded_on_both_drivers():
    assert Session.run(_Refusing(), _guarded()) == "caught: stats_now cancelled"
    assert asyncio.run(AsyncSession.run(_RefusingAsync(), _guarded())) == "caught: stats_now cancelled"
    with pytest.raises(StatementTimeout):
        Session.run(_Refusing(), operations.stats_now())


def test_enqueue_counts_keep_what_a_failed_write_held_and_what_arrived_meanwhile():
    now = [0.0]
    counts = operations.EnqueueCounts(clock=lambda: now[0])
    assert Session.run(_Refusing(), counts.flush()) is True  # nothing held: nothing sent
    counts._uncounted["q"] = 5
    assert Session.run(_Refusing(), counts.flush()) is False
    assert counts._uncounted == {"q": 5}

    # A write that succeeds subtracts what it wrote, keeping counts noted while it was on its way.
    flush = counts.flush()
    request = next(flush)
    assert isinstance(request, plans.Call) and request.name == "stats_add_many" and request.params["enqueued"] == [5]
    counts._uncounted["q"] += 2
    with pytest.raises(StopIteration) as done:
        flush.send(None)
    assert done.value.value is True and counts._uncounted == {"q": 2}


def test_a_plain_enqueue_plan_is_one_statement_per_batch():
    tasks = [NewTask(b"x")] * 5
    plan = enqueue_plan("q", tasks, batch_size=2)
    from shardq.engine import POSTGRESQL

    assert next(plan) is plans.ENGINE
    names = []
    request = plan.send(POSTGRESQL)
    while True:
        names.append(request.name)
        try:
            request = plan.send({"paused": False})
            while request is plans.ENGINE:
                request = plan.send(POSTGRESQL)
        except StopIteration as stop:
            result = stop.value
            break
    assert names == ["task_insert_many_fresh"] * 3 and result.enqueued == 5
