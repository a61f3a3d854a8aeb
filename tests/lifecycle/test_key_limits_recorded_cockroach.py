"""Limits per key on CockroachDB (shardq.lifecycle.key_slots), run through a real session against
the recorded server: which named statements a release of a key slot sends (CockroachDB's own
key_limit_promote, which names the row by its state, the first column of the primary key), with what,
and how their answers are read. A promote that finds a waiting task answers its id (one row); one that
finds the backlog empty answers no row, after which the release stops asking for the key's other free
slots.

The throttle window's upsert (sql/common/debounce.sql, throttle_windows_open) relies on CockroachDB
returning and counting only the rows an ``ON CONFLICT … DO UPDATE … WHERE`` inserted or updated:
pkg/sql/logictest/testdata/logic_test/upsert, the test for #17339 ("Support WHERE clause in ON
CONFLICT handling": two conflicting rows, one passing the WHERE, ``statement count 1``); it runs
on PostgreSQL in tests/lifecycle/test_debounce.py, which has the same rule.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from shardq.lifecycle import key_slots
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from tests.support.cockroach_answers import SHARD_COLUMN_16
from tests.support.recorded_cockroach import Answering, Received, Rows, recorded_cockroach

pytestmark = pytest.mark.recorded

PROMOTED = uuid.UUID(int=7)


def _session(server) -> Session:
    session = Session(Dsn.parse(server.url()))
    session.set_shard_column(SHARD_COLUMN_16)
    return session


def _promote_once() -> Callable[[Received], Rows]:
    """The first free slot finds a waiting task; the next finds the backlog empty."""
    answered: list[Received] = []

    def answer(received: Received) -> Rows:
        answered.append(received)
        if len(answered) == 1:
            return Rows([("id", "UUID")], [(PROMOTED,)], tag="UPDATE 1")
        return Rows([("id", "UUID")], [], tag="UPDATE 0")

    return answer


def test_a_released_slot_fills_the_keys_free_slots_from_its_backlog():
    answers: dict[str, Answering] = {
        "key_limits_of_queue": Rows([("pattern", "TEXT"), ("max_running", "INT4")], [("tenant:*", 3)]),
        # slot 0 is held; 1 and 2 are free
        "task_exclusive_active": Rows([("exclusive_key", "TEXT")], [(key_slots.slot_key("tenant:1", 0),)]),
        "key_limit_promote": _promote_once(),
    }
    with recorded_cockroach(answers) as server, _session(server) as session:
        promoted = session.run(key_slots.release_plan([("q", key_slots.slot_key("tenant:1", 1))]))
    assert promoted == {PROMOTED}
    # slot 1 took a waiting task; slot 2 found nobody waiting, so no more statements
    assert server.names_received() == [
        "key_limits_of_queue",
        "task_exclusive_active",
        "key_limit_promote",
        "key_limit_promote",
    ]
    promotes = [r for r in server.received if r.name == "key_limit_promote"]
    sent = [tuple(p.decode() if isinstance(p, bytes) else p for p in r.params[:3]) for r in promotes]
    assert sent == [
        ("q", key_slots.waiting_key("tenant:1"), key_slots.slot_key("tenant:1", 1)),
        ("q", key_slots.waiting_key("tenant:1"), key_slots.slot_key("tenant:1", 2)),
    ]


def test_a_release_of_a_plain_exclusive_key_sends_nothing_for_key_limits():
    with recorded_cockroach({}) as server, _session(server) as session:
        assert session.run(key_slots.release_plan([("q", "acct-7")])) == set()
    assert server.names_received() == []
