"""Durable execution's plans on CockroachDB, through a real session against the recorded server
(tests/support/recorded_cockroach.py): a signal's one serializable transaction (lock, insert, wake;
no wake-up notification, which CockroachDB has not), its whole re-run after a 40001, the refusal
of an unknown task, and a fenced step write that a stale token makes insert nothing.

Answers, from CockroachDB's logic tests (pkg/sql/logictest/testdata/logic_test/):
* ``returning``, "Issue #6092": ``UPDATE a AS alias SET b = 1 RETURNING alias.a, alias.b`` returns
  the updated row (the lock and the wake are UPDATE … RETURNING; no row matched, no row returned);
* ``upsert``, "Handle INSERT ... ON CONFLICT DO NOTHING ... RETURNING": ``INSERT INTO
  upsert_returning (a, c) VALUES (1, 1), (3, 3) ON CONFLICT (a) DO NOTHING RETURNING *`` returns
  only ``3 NULL 3 -1``, the row inserted (a signal sent again under its key returns none);
  ``INSERT INTO kv VALUES (4, 10) ON CONFLICT (k) DO UPDATE SET v = kv.v + 20`` (``statement count
  1``): the conflict arm may name the table's own row, as task_wait_begin's does."""

from __future__ import annotations

import uuid

import pytest

import shardq.sessions.session
from shardq.errors import LeaseLost, TaskNotLive
from shardq.models import TaskKey
from shardq.models.leases import Fenced
from shardq.operations import durable as durable_operations
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from tests.support.cockroach_answers import NOW, RETRY_40001, SHARD_COLUMN_16
from tests.support.recorded_cockroach import Answer, Answering, Received, RecordedCockroach, Rows, recorded_cockroach

pytestmark = pytest.mark.recorded

TASK = uuid.UUID(int=7)
LOCKED = Rows([("id", "UUID"), ("queue", "TEXT"), ("state", "TEXT")], [(TASK, "q", "scheduled")], tag="UPDATE 1")
NOT_LIVE = Rows([("id", "UUID"), ("queue", "TEXT"), ("state", "TEXT")], [], tag="UPDATE 0")
INSERTED = Rows([("id", "UUID")], [(uuid.UUID(int=9),)], tag="INSERT 0 1")
WOKE = Rows([("queue", "TEXT")], [("q",)], tag="UPDATE 1")


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch):
    monkeypatch.setattr(shardq.sessions.session, "retry_pause", lambda *a, **k: 0.0)


def _session(server: RecordedCockroach) -> Session:
    session = Session(Dsn.parse(server.url()))
    session.set_shard_column(SHARD_COLUMN_16)
    return session


def test_a_signal_is_one_serializable_transaction_without_a_notification():
    answers = {"task_signal_lock": LOCKED, "task_signal_insert": INSERTED, "task_signal_wake": WOKE}
    with recorded_cockroach(answers) as server, _session(server) as session:
        assert session.run(durable_operations.send_signal(TASK, "approved", {"by": "ann"})) is True
    assert server.names_received() == [
        "BEGIN ISOLATION LEVEL SERIALIZABLE",
        "task_signal_lock",
        "task_signal_insert",
        "task_signal_wake",
        "COMMIT",
    ]
    wake = server.received[3]
    assert wake.params and wake.params[-1] == "shardq:wait:approved"


def test_a_40001_reruns_the_whole_signal_transaction():
    failed = {"n": 0}

    def wake(received: Received) -> Answer:
        if failed["n"] == 0:
            failed["n"] = 1
            return RETRY_40001
        return WOKE

    answers: dict[str, Answering] = {
        "task_signal_lock": LOCKED,
        "task_signal_insert": INSERTED,
        "task_signal_wake": wake,
    }
    with recorded_cockroach(answers) as server, _session(server) as session:
        assert session.run(durable_operations.send_signal(TASK, "approved", None)) is True
    body = ["task_signal_lock", "task_signal_insert", "task_signal_wake"]
    assert server.names_received() == [
        "BEGIN ISOLATION LEVEL SERIALIZABLE",
        *body,
        "ROLLBACK",
        "BEGIN ISOLATION LEVEL SERIALIZABLE",
        *body,
        "COMMIT",
    ]


def test_a_signal_for_no_live_task_writes_nothing():
    with recorded_cockroach({"task_signal_lock": NOT_LIVE}) as server, _session(server) as session:
        with pytest.raises(TaskNotLive, match="is not live"):
            session.run(durable_operations.send_signal(TASK, "approved", 1))
    assert server.names_received() == ["BEGIN ISOLATION LEVEL SERIALIZABLE", "task_signal_lock", "ROLLBACK"]


def test_a_signal_sent_again_under_its_key_wakes_nothing():
    duplicate = Rows([("id", "UUID")], [], tag="INSERT 0 0")
    with (
        recorded_cockroach({"task_signal_lock": LOCKED, "task_signal_insert": duplicate}) as server,
        _session(server) as session,
    ):
        assert session.run(durable_operations.send_signal(TASK, "approved", 1, key="k")) is False
    assert server.names_received() == [
        "BEGIN ISOLATION LEVEL SERIALIZABLE",
        "task_signal_lock",
        "task_signal_insert",
        "COMMIT",
    ]


def test_a_step_write_under_a_stale_token_inserts_nothing_and_is_a_lost_lease():
    fenced = Fenced(TaskKey(3, "q", 0, NOW, TASK), uuid.uuid4())
    nothing = Rows([("idx", "INT8")], [], tag="INSERT 0 0")
    with recorded_cockroach({"task_step_record": nothing}) as server, _session(server) as session:
        with pytest.raises(LeaseLost, match="lease lost before step 0"):
            session.run(durable_operations.step_record(fenced, 0, "charge", "1", None))
    (received,) = server.received
    assert received.name == "task_step_record"
    assert received.params[0] == "{leased}" and fenced.token.hex in str(received.params)  # fenced by state and token
