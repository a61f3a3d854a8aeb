"""A claim of workflow steps whose every task finished is acked by key range and token, as a claim
of plain tasks, with the moves of the steps' workflows in the same transaction: no key arrays,
the fan-in still released exactly once, a step whose lease passed to someone else neither acked
nor counted, and history rows written where the queue keeps finished tasks."""

from __future__ import annotations

import uuid

import pytest

from shardq.sessions.session import Session
from tests.support.factories import run_until_settled


@pytest.fixture
def sent(monkeypatch):
    """Every statement any session sends during the test: (name, params)."""
    calls: list[tuple[str, dict]] = []
    run = Session._run

    def recording(self, name, params, *args, **kwargs):
        calls.append((name, dict(params or {})))
        return run(self, name, params, *args, **kwargs)

    monkeypatch.setattr(Session, "_run", recording)
    return calls


def _fan_in(app, queue: str, width: int, ran: list[str]):
    @app.task(name="member", queue=queue)
    def member(n: int) -> None:
        ran.append(f"member-{n}")

    @app.task(name="callback", queue=queue)
    def callback() -> None:
        ran.append("callback")

    wf = app.workflow("fan")
    members = wf.group(*[member.step(n=i) for i in range(width)])
    wf.add(callback.step(), after=members, name="fan-in")
    return wf.enqueue()


def test_whole_claims_of_steps_are_acked_by_key_range_and_release_the_fan_in_once(app, db, sent):
    ran: list[str] = []
    handle = _fan_in(app, "steps", 40, ran)
    totals = app.work(until_empty=True, batch=40)
    assert totals.acked == 41 and totals.lease_lost == 0
    assert ran.count("callback") == 1 and ran[-1] == "callback" and len(ran) == 41
    assert handle.status().state == "succeeded"
    ranged = [params for name, params in sent if name == "task_ack_claim"]
    keyed = [params for name, params in sent if name in ("task_ack_many", "task_ack_many_kept") and params.get("ids")]
    member_ids = {uuid.UUID(i) for step, i in handle.task_ids.items() if step != "fan-in"}
    if db.dialect == "postgresql":
        assert sum(params["expected"] for params in ranged) == 41
        assert not keyed, keyed  # no step went per key
    else:  # CockroachDB acks every claim per key: the same statement as before, in the same transaction
        assert member_ids <= {i for params in keyed for i in params["ids"]}
    assert db.count("shardq_tasks") == 0
    if db.dialect == "postgresql":
        assert db.count("shardq_leases") == 0


def test_a_step_whose_lease_passed_to_someone_else_is_neither_acked_nor_counted_off(app, db):
    ran: list[str] = []

    @app.task(name="member", queue="steps")
    def member(n: int) -> None:
        ran.append(f"member-{n}")
        if n == 0:  # what the lease sweep and another worker would do: the row carries another token
            db.replace_lease_token(handle.task_ids["member-0"], uuid.uuid4())

    @app.task(name="callback", queue="steps")
    def callback() -> None:
        ran.append("callback")

    wf = app.workflow("fan")
    members = [wf.add(member.step(n=i), name=f"member-{i}") for i in range(6)]
    wf.add(callback.step(), after=members, name="fan-in")
    handle = wf.enqueue()

    totals = run_until_settled(db.client.worker(["steps"], app, concurrency=1, batch=6), 6)
    assert (totals.acked, totals.lease_lost) == (5, 1)
    assert db.task_row(handle.task_ids["member-0"]) is not None  # still there, for its new holder
    fan_in = {s.name: s for s in handle.status().steps}["fan-in"]
    assert (fan_in.state, fan_in.waiting_on) == ("waiting", 1)
    assert "callback" not in ran


def test_whole_claims_of_steps_in_a_queue_that_keeps_finished_tasks_write_their_history(app, db):
    db.client.set_queue("kept", keep_finished_seconds=3600)
    ran: list[str] = []
    handle = _fan_in(app, "kept", 12, ran)
    totals = app.work(until_empty=True, batch=12)
    assert totals.acked == 13 and ran[-1] == "callback" and ran.count("callback") == 1
    assert handle.status().state == "succeeded"
    assert db.count_history(state="succeeded") == 13
