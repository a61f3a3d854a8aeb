"""shardq.Client and shardq.AsyncClient are twins: every call they share sends the same named
statements in the same order (they run the same plan, after the same checks of the input), and
they offer the same public calls but for a named few, each with its reason."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import shardq
from shardq.errors import InvalidInput
from shardq.models import NewTask
from shardq.models.workflow_graph import Graph, StepSpec
from shardq.operations.stats import EnqueueCounts
from tests.support.recording import _record_async, _record_sync

#: public calls only the sync Client has, and why
SYNC_ONLY = {
    "store": "this thread's TaskStore: the sync sessions' seam (an AsyncClient has one connection, `session`)",
    "new_session": "makes the sync sessions its workers, reapers and resizes run on",
    "producer": "the sync Producer (the AsyncClient's enqueue is itself the producer)",
    "dialect": "read from this thread's sync session; the AsyncClient learns the engine on connecting",
    "migrate": "an operator's call, run once per deploy (see the AsyncClient's 'Does not')",
    "worker": "a Worker object runs on threads with sync sessions; AsyncClient.work runs one and awaits it",
    "reaper": "a background service on its own sync session",
    "reap_once": "an operator's call (`shardq reap --once`)",
    "resize_buckets": "an operator's call that runs for minutes on sync sessions (`shardq buckets resize`)",
    "dead_tasks": "an operator's call (`shardq dead list`)",
    "requeue_dead": "an operator's call (`shardq dead requeue`), a transaction per page of dead letters",
    "purge_dead": "an operator's call (`shardq dead purge`), a statement per batch",
    "buckets": "an operator's call (`shardq buckets show`)",
    "schedules": "an operator's call (`shardq periodic list`)",
}

#: public calls only the AsyncClient has, and why
ASYNC_ONLY = {
    "connect": "opens its one connection now (a sync Client's sessions connect lazily, one per thread)",
    "abandon": "releases the connection after its event loop has ended, which no sync client has",
    "send": "enqueues tasks validated already; the sync spelling is Client.producer().send",
}

#: shared calls whose signatures differ, and why
SIGNATURES_DIFFER = {
    "work": "the sync worker may install signal handlers; the asyncio one stops when its task is cancelled",
}


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_both_clients_offer_the_same_calls_but_the_named_ones():
    sync, asyncio_ = _public(shardq.Client), _public(shardq.AsyncClient)
    assert sync - asyncio_ == set(SYNC_ONLY)
    assert asyncio_ - sync == set(ASYNC_ONLY)
    for name in sync & asyncio_:
        assert inspect.iscoroutinefunction(getattr(shardq.AsyncClient, name)), name
    assert all(SYNC_ONLY.values()) and all(ASYNC_ONLY.values()) and all(SIGNATURES_DIFFER.values())


def test_the_calls_both_clients_offer_take_the_same_arguments_with_the_same_defaults():
    for name in (_public(shardq.Client) & _public(shardq.AsyncClient)) - set(SIGNATURES_DIFFER):
        mine = inspect.signature(getattr(shardq.Client, name))
        theirs = inspect.signature(getattr(shardq.AsyncClient, name))
        assert [(p.name, p.kind, p.default) for p in mine.parameters.values()] == [
            (p.name, p.kind, p.default) for p in theirs.parameters.values()
        ], name


# -- the same statements ---------------------------------------------------------------------------
def _graph() -> Graph:
    return Graph("twins", [StepSpec("first", "t", b"{}", "q"), StepSpec("second", "t", b"{}", "q", parents=("first",))])


#: (call, how to make it on either client given what earlier calls returned, by call)
Call = tuple[str, Callable[[Any, dict[str, Any]], Any]]

CALLS: list[Call] = [
    ("set_queue (settings)", lambda c, got: c.set_queue("q", keep_finished_seconds=3600, keep_results=True)),
    ("set_queue (limits)", lambda c, got: c.set_queue("q", concurrency=2, rate=5, burst=3)),
    ("queue_settings", lambda c, got: c.queue_settings("q")),
    ("queue_settings (unknown)", lambda c, got: c.queue_settings("nowhere")),
    ("queues", lambda c, got: c.queues()),
    ("flow_usage", lambda c, got: c.flow_usage()),
    ("pause", lambda c, got: c.pause("q", dequeue=False)),
    ("resume", lambda c, got: c.resume("q", dequeue=False)),
    ("set_key_limit", lambda c, got: c.set_key_limit("q", "tenant:*", 3)),
    ("key_limits", lambda c, got: c.key_limits("q")),
    ("remove_key_limit", lambda c, got: c.remove_key_limit("q", "tenant:*")),
    ("enqueue", lambda c, got: c.enqueue("q", b"a", dedupe_key="d", priority=1)),
    ("enqueue (duplicate)", lambda c, got: c.enqueue("q", b"b", dedupe_key="d")),
    (
        "enqueue_many",
        lambda c, got: c.enqueue_many("q", [b"c", NewTask(b"e", exclusive_key="k"), NewTask(b"f", exclusive_key="k")]),
    ),
    ("enqueue_many (batches)", lambda c, got: c.enqueue_many("other", [b"x"] * 5, batch_size=2)),
    ("stats", lambda c, got: c.stats()),
    ("stats (options)", lambda c, got: c.stats(bucket_cap=2, window_minutes=1)),
    ("status", lambda c, got: c.status(got["enqueue"].enqueued_ids[0])),
    ("status (unknown)", lambda c, got: c.status(uuid.UUID(int=7))),
    ("cancel", lambda c, got: c.cancel(*got["enqueue_many"].enqueued_ids[1:], str(uuid.UUID(int=7)))),
    ("history", lambda c, got: c.history("q")),
    ("history (filtered)", lambda c, got: c.history("q", state="cancelled", limit=1)),
    ("enqueue_workflow", lambda c, got: c.enqueue_workflow(_graph())),
    ("workflow_status", lambda c, got: c.workflow_status(got["enqueue_workflow"].id)),
    ("parent_results", lambda c, got: c.parent_results(got["enqueue_workflow"].task_ids["second"])),
    ("cancel_workflow", lambda c, got: c.cancel_workflow(got["enqueue_workflow"].id)),
    ("workflow_status (cancelled)", lambda c, got: c.workflow_status(got["enqueue_workflow"].id)),
]

#: bad input each client refuses the same way before sending anything
REFUSED: list[Call] = [
    ("cancel (no id)", lambda c, got: c.cancel()),
    ("cancel (malformed)", lambda c, got: c.cancel("not-an-id")),
    ("status (malformed)", lambda c, got: c.status("not-an-id")),
    ("stats (bad cap)", lambda c, got: c.stats(bucket_cap=0)),
    ("set_queue (bad lease)", lambda c, got: c.set_queue("q", lease_seconds=0)),
    ("set_queue (unknown setting)", lambda c, got: c.set_queue("q", colour="red")),
    ("set_queue (burst alone)", lambda c, got: c.set_queue("q", burst=3)),
    ("queue_settings (bad name)", lambda c, got: c.queue_settings("")),
    ("history (bad state)", lambda c, got: c.history("q", state="running")),
    ("enqueue_many (bad batch)", lambda c, got: c.enqueue_many("q", [b"x"], batch_size=0)),
    ("parent_results (malformed)", lambda c, got: c.parent_results("not-an-id")),
    ("set_key_limit (limit 0)", lambda c, got: c.set_key_limit("q", "tenant:*", 0)),
]


def _names(sent: list) -> list[str]:
    return [name for name, _params in sent]


def _frozen() -> float:
    # The enqueue counter writes at once for a queue it has not counted, then when a second has
    # passed: a frozen clock keeps that from depending on how fast each client ran.
    return 0.0


def _sync_calls(dsn) -> tuple[list[tuple[str, list[str]]], list[tuple[str, str]]]:
    client = shardq.Client(dsn, notify=False)
    try:
        client.store.enqueue_counts = EnqueueCounts(clock=_frozen)
        sent: list = []
        _record_sync(client.store.session, sent)
        got: dict[str, Any] = {}
        per_call = []
        for name, call in CALLS:
            del sent[:]
            got[name] = call(client, got)
            per_call.append((name, _names(sent)))
        refused = []
        for name, call in REFUSED:
            del sent[:]
            with pytest.raises(InvalidInput) as error:
                call(client, got)
            refused.append((name, str(error.value)))
            assert sent == [], name
        return per_call, refused
    finally:
        client.close()


async def _async_calls(dsn) -> tuple[list[tuple[str, list[str]]], list[tuple[str, str]]]:
    async with shardq.connect_async(dsn, notify=False) as client:
        client.enqueue_counts = EnqueueCounts(clock=_frozen)
        sent: list = []
        _record_async(client.session, sent)
        got: dict[str, Any] = {}
        per_call = []
        for name, call in CALLS:
            del sent[:]
            got[name] = await call(client, got)
            per_call.append((name, _names(sent)))
        refused = []
        for name, call in REFUSED:
            del sent[:]
            with pytest.raises(InvalidInput) as error:
                await call(client, got)
            refused.append((name, str(error.value)))
            assert sent == [], name
        return per_call, refused


def test_every_shared_call_sends_the_same_statements_on_both_clients(pg_server, pg_template):
    from tests.conftest import _fresh_postgres

    sync_db, async_db = _fresh_postgres(pg_server, pg_template), _fresh_postgres(pg_server, pg_template)
    try:
        sync_sent, sync_refused = _sync_calls(sync_db.dsn)
        async_sent, async_refused = asyncio.run(_async_calls(async_db.dsn))
    finally:
        sync_db.close()
        async_db.close()
    assert sync_sent == async_sent
    assert sync_refused == async_refused
    sent = dict(sync_sent)
    # Each call did reach the database (a call that sent nothing would compare equal trivially).
    assert all(sent.values()), [name for name, names in sent.items() if not names]
    inserts = [n for n in sent["enqueue_many (batches)"] if n.startswith("task_insert_many")]
    assert len(inserts) == 3  # 5 tasks, 2 per statement
    assert "flow_slots_add" in sent["set_queue (limits)"]  # the limits' rows, in the same transaction
