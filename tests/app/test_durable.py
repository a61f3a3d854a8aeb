"""Durable execution inside a task (docs/durable.md): steps replayed in order, fenced checkpoints,
a changed sequence, versions, durable sleep, signals and their waits, bad input."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import shardq
from shardq.app.durable import DurableRun
from shardq.errors import InvalidInput, LeaseLost, TaskNotLive
from shardq.maintenance.pruning import prune_durable
from shardq.models.leases import Fenced
from shardq.models.tasks import Task
from shardq.operations import durable as durable_operations
from shardq.sql.plan import Atomically, Call
from tests.support.factories import TestDatabase

Q = "durable"


def steps_of(db: TestDatabase, task_id: object) -> list[dict[str, Any]]:
    return db.durable_steps(task_id)


def wake_now(db: TestDatabase, task_id: object) -> None:
    """Move a parked task's wake time (its row's and its step's) into the past, instead of sleeping."""
    db.wake_parked(task_id)


def test_completed_steps_return_their_recorded_values_without_running_again(app, db):
    calls: list[str] = []

    def charge(order: int) -> dict[str, Any]:
        calls.append("charge")
        return {"charged": order, "at": (1, 2)}

    @app.task(name="order", queue=Q, pass_context=True)
    def order(ctx: shardq.TaskContext, n: int) -> None:
        first = ctx.step("charge", charge, n)
        assert first == {"charged": n, "at": [1, 2]}  # as JSON decodes it, on every run
        second = ctx.step("ship", lambda: calls.append("ship") or "shipped")
        assert second == "shipped"
        if ctx.attempt == 1:
            raise RuntimeError("crash after two steps")
        ctx.step("mail", lambda: calls.append("mail"))

    task_id = order.defer(n=7)
    db.client.set_queue(Q, backoff_base=0.001, backoff_cap=0.001)
    app.work(until_empty=True)
    status = db.client.status(task_id)
    if status.state != "succeeded" and db.task_row(task_id) is not None:
        wake_now(db, task_id)
        app.work(until_empty=True)
    assert db.task_row(task_id) is None
    assert calls == ["charge", "ship", "mail"]


def _run_for(db: TestDatabase, claimed: Any, version: str | None = None) -> DurableRun:
    async def no_async_client() -> Any:
        raise AssertionError("not used")

    return DurableRun(Task(claimed, lambda _task, _seconds: None), version, lambda: db.client, no_async_client)


def test_a_worker_whose_lease_passed_to_another_cannot_checkpoint(db):
    claimed = db.make_task(Q, state="leased")
    run = _run_for(db, claimed)
    assert run.step("before", lambda: 1) == 1
    # Another worker now holds the task: its lease token is no longer ours.
    db.replace_lease_token(claimed.key.id, uuid.uuid4())
    ran: list[int] = []
    with pytest.raises(LeaseLost, match="lease lost before step 1"):
        run.step("after", lambda: ran.append(1))
    assert ran == [1]  # the work ran; its checkpoint was refused
    assert [s["name"] for s in steps_of(db, claimed.id)] == ["before"]
    with pytest.raises(LeaseLost):
        run.sleep(60)  # nor can it park the task
    assert db.task_row(claimed.id)["state"] == "leased"


def test_a_reaped_lease_cannot_checkpoint_either(db):
    claimed = db.make_task(Q, state="leased", lease_expires_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5))
    run = _run_for(db, claimed)
    db.client.reap_once()  # back to the queue, token cleared
    with pytest.raises(LeaseLost):
        run.step("late", lambda: "x")
    assert steps_of(db, claimed.id) == []


def test_a_changed_sequence_fails_the_attempt_naming_the_first_mismatch(app, db):
    renamed = {"on": False}

    @app.task(name="seq", queue=Q, pass_context=True, max_attempts=1)
    def seq(ctx: shardq.TaskContext) -> None:
        ctx.step("a", lambda: 1)
        ctx.step("c" if renamed["on"] else "b", lambda: 2)
        ctx.sleep(3600)

    task_id = seq.defer()
    app.work(until_empty=True)  # a, b and the sleep recorded: parked
    renamed["on"] = True  # the code changed while it slept
    wake_now(db, task_id)
    app.work(until_empty=True)
    dead = db.dead_row(task_id)
    assert dead is not None
    assert dead["last_error"].splitlines() == [
        f"shardq.errors.StepMismatch: task {task_id}: durable step 1 is now 'c' but was recorded as 'b' "
        "(declare a new version= to start such tasks afresh)"
    ]


def test_a_new_version_starts_afresh_instead_of_failing(app, db):
    calls: list[str] = []

    @app.task(name="ver", queue=Q, pass_context=True, version="1")
    def ver(ctx: shardq.TaskContext) -> None:
        ctx.step("old", lambda: calls.append("old"))
        ctx.sleep(3600)

    task_id = ver.defer()
    app.work(until_empty=True)
    assert [s["name"] for s in steps_of(db, task_id)] == ["old", "shardq:sleep"]
    second = shardq.App(db.dsn)
    try:

        @second.task(name="ver", queue=Q, pass_context=True, version="2")
        def ver2(ctx: shardq.TaskContext) -> None:
            ctx.step("new", lambda: calls.append("new"))

        wake_now(db, task_id)
        second.work(until_empty=True)
    finally:
        second.close()
    assert calls == ["old", "new"]
    assert db.task_row(task_id) is None


def test_sleep_parks_the_task_without_an_attempt_and_resumes_after_its_steps(app, db):
    calls: list[str] = []

    @app.task(name="nap", queue=Q, pass_context=True, max_attempts=1)
    def nap(ctx: shardq.TaskContext) -> str:
        ctx.step("before", lambda: calls.append("before"))
        ctx.sleep(3600)
        ctx.step("after", lambda: calls.append("after"))
        return "woke"

    task_id = nap.defer()
    totals = app.work(until_empty=True)
    assert totals.acked == 0 and calls == ["before"]
    row = db.task_row(task_id)
    assert row["state"] == "scheduled" and row["lease_token"] is None and row["attempts"] == 0
    assert row["exec_time"] > dt.datetime.now(dt.UTC) + dt.timedelta(minutes=59)
    assert row["last_error"].startswith("sleeping until ")
    (_, sleep) = steps_of(db, task_id)  # every step's value is JSON text, a sleep's its wake time
    assert sleep["name"] == "shardq:sleep" and dt.datetime.fromisoformat(json.loads(sleep["value"])) == row["exec_time"]
    assert db.client.status(task_id).state == "scheduled"
    app.work(until_empty=True)  # not due: nothing runs
    assert calls == ["before"]
    wake_now(db, task_id)
    totals = app.work(until_empty=True)
    assert totals.acked == 1 and calls == ["before", "after"]  # max_attempts=1 and it still ran twice


def test_sleeping_until_a_past_time_records_the_step_and_goes_on(app, db):
    @app.task(name="past", queue=Q, pass_context=True)
    def past(ctx: shardq.TaskContext) -> None:
        ctx.sleep_until(dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
        ctx.sleep(0)

    past.defer()
    assert app.work(until_empty=True).acked == 1


def test_a_signal_sent_before_the_wait_is_kept_for_it(app, db):
    got: list[Any] = []

    @app.task(name="approve", queue=Q, pass_context=True)
    def approve(ctx: shardq.TaskContext) -> None:
        got.append(ctx.wait_for("approved"))

    task_id = approve.defer()
    assert db.client.signal(task_id, "approved", {"by": "ann"}) is True
    assert app.work(until_empty=True).acked == 1
    assert got == [{"by": "ann"}]


def test_a_signal_after_the_wait_makes_the_parked_task_due_in_its_own_transaction(app, db):
    got: list[Any] = []

    @app.task(name="approve", queue=Q, pass_context=True)
    def approve(ctx: shardq.TaskContext) -> None:
        ctx.step("asked", lambda: "asked")
        got.append(ctx.wait_for("approved", timeout=3600))

    task_id = approve.defer()
    app.work(until_empty=True)
    row = db.task_row(task_id)
    assert row["state"] == "scheduled" and row["last_error"] == "waiting for signal 'approved'"
    assert db.client.signal(task_id, "other", 1)  # not what it waits for: it stays asleep
    assert db.task_row(task_id)["state"] == "scheduled"
    assert db.client.signal(task_id, "approved", [1, "two"])
    assert db.task_row(task_id)["state"] == "ready"
    assert app.work(until_empty=True).acked == 1
    assert got == [[1, "two"]]


def test_a_wait_that_times_out_raises_signal_timeout_and_replays_it(app, db):
    seen: list[str] = []

    @app.task(name="late", queue=Q, pass_context=True)
    def late(ctx: shardq.TaskContext) -> None:
        try:
            ctx.wait_for("approved", timeout=60)
        except shardq.SignalTimeout as exc:
            seen.append(str(exc))
        ctx.step("then", lambda: None)
        if len(seen) == 1:
            raise shardq.Retry(0)  # run again: the timeout is replayed, not waited for again

    task_id = late.defer()
    app.work(until_empty=True)
    wake_now(db, task_id)
    app.work(until_empty=True)
    assert db.task_row(task_id) is None
    assert len(seen) == 2 and "no signal 'approved' before the wait's timeout" in seen[0]


def test_each_signal_is_consumed_once_in_order_and_a_retried_send_is_a_no_op(app, db):
    got: list[Any] = []

    @app.task(name="many", queue=Q, pass_context=True)
    def many(ctx: shardq.TaskContext) -> None:
        got.append(ctx.wait_for("go"))
        got.append(ctx.wait_for("go"))
        got.append(ctx.wait_for("go"))

    task_id = many.defer()
    assert db.client.signal(task_id, "go", 1, key="k1") is True
    assert db.client.signal(task_id, "go", 1, key="k1") is False  # the sender retried
    assert db.client.signal(task_id, "go", 2) is True
    app.work(until_empty=True)
    assert got == [1, 2]  # the third wait parked
    assert db.client.signal(task_id, "go", 1, key="k1") is False  # consumed already: still one
    assert db.task_row(task_id)["state"] == "scheduled"
    assert db.client.signal(task_id, "go", 3) is True
    app.work(until_empty=True)
    assert got == [1, 2, 1, 2, 3]  # the replays returned the recorded payloads; each consumed once
    assert db.count_signals(consumed=True) == 3


def test_async_tasks_use_the_async_twins(app, db):
    calls: list[str] = []

    async def fetch(n: int) -> int:
        await asyncio.sleep(0)
        calls.append("fetch")
        return n * 2

    @app.task(name="atask", queue=Q, pass_context=True)
    async def atask(ctx: shardq.TaskContext) -> None:
        doubled = await ctx.step_async("fetch", fetch, 21)
        payload = await ctx.wait_for_async("go", timeout=3600)
        calls.append(f"{doubled}:{payload}")
        await ctx.sleep_async(0)

    task_id = atask.defer()
    app.work(until_empty=True)
    assert db.task_row(task_id)["state"] == "scheduled"
    db.client.signal(task_id, "go", "now")
    assert app.work(until_empty=True).acked == 1
    assert calls == ["fetch", "42:now"]


def test_a_value_that_is_not_json_or_too_large_fails_the_attempt_in_one_line(app, db):
    @app.task(name="bad", queue=Q, pass_context=True, max_attempts=1)
    def bad(ctx: shardq.TaskContext, big: bool) -> None:
        ctx.step("blob" if big else "thing", lambda: "x" * 300_000 if big else object())

    object_id, big_id = bad.defer(big=False), bad.defer(big=True)
    app.work(until_empty=True)
    assert (
        db.dead_row(object_id)["last_error"]
        == "shardq.errors.StepNotStorable: step 0 ('thing'): a object is not JSON-encodable"
    )
    assert db.dead_row(big_id)["last_error"] == (
        "shardq.errors.StepNotStorable: step 0 ('blob'): 300,002 bytes of JSON, over the limit of 262,144"
    )


def test_signals_to_unknown_or_finished_tasks_and_oversized_payloads_are_refused(app, db):
    @app.task(name="quick", queue=Q)
    def quick() -> None:
        pass

    with pytest.raises(TaskNotLive, match="is not live"):
        db.client.signal(uuid.uuid4(), "go")
    task_id = quick.defer()
    app.work(until_empty=True)
    with pytest.raises(TaskNotLive):
        db.client.signal(task_id, "go", {})
    live = quick.defer()
    with pytest.raises(InvalidInput, match="65,5"):
        db.client.signal(live, "go", "x" * 70_000)
    with pytest.raises(InvalidInput, match="not JSON-encodable"):
        db.client.signal(live, "go", {1, 2})
    with pytest.raises(InvalidInput, match="signal name"):
        db.client.signal(live, "", 1)
    assert db.count_signals() == 0


def test_bad_step_names_and_arguments_are_refused(db):
    run = _run_for(db, db.make_task(Q, state="leased"))
    for name in ("", "shardq:mine", "x" * 201, 5):
        with pytest.raises(InvalidInput):
            run.step(name, lambda: 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        run.sleep(-1)
    with pytest.raises(InvalidInput):
        run.sleep_until(dt.datetime(2030, 1, 1))  # naive
    with pytest.raises(InvalidInput):
        run.wait_for("go", timeout=-5)


def test_the_async_client_signals_too(app, db):
    @app.task(name="w", queue=Q, pass_context=True)
    def w(ctx: shardq.TaskContext) -> None:
        ctx.wait_for("go")

    task_id = w.defer()

    async def send() -> bool:
        async with shardq.AsyncClient(db.dsn) as client:
            with pytest.raises(TaskNotLive):
                await client.signal(uuid.uuid4(), "go")
            return await client.signal(task_id, "go", None)

    assert asyncio.run(send()) is True
    assert app.work(until_empty=True).acked == 1


def test_steps_and_signals_of_finished_tasks_are_pruned_and_a_dead_tasks_kept(app, db):
    @app.task(name="p", queue=Q, pass_context=True, max_attempts=1)
    def p(ctx: shardq.TaskContext, fail: bool) -> None:
        ctx.step("one", lambda: 1)
        if fail:
            raise RuntimeError("no")

    done, dead = p.defer(fail=False), p.defer(fail=True)
    app.work(until_empty=True)
    assert db.dead_row(dead) is not None
    assert prune_durable(db.store) == 1
    assert steps_of(db, done) == [] and len(steps_of(db, dead)) == 1


def test_plain_tasks_send_no_durable_statement(app, db, monkeypatch):
    sent: list[str] = []
    real = durable_operations.steps_read

    def spy(task_id: uuid.UUID) -> Any:
        sent.append(str(task_id))
        return real(task_id)

    monkeypatch.setattr(durable_operations, "steps_read", spy)

    @app.task(name="ctx_only", queue=Q, pass_context=True)
    def ctx_only(ctx: shardq.TaskContext) -> str:
        return ctx.id

    ctx_only.defer()
    assert app.work(until_empty=True).acked == 1
    assert sent == []


SHARDQ = str(Path(sys.executable).with_name("shardq"))


def test_the_signal_command_sends_and_refuses_in_one_line_with_exit_2(app, pg_db):
    pg_app = shardq.App(pg_db.dsn)
    try:

        @pg_app.task(name="cli_wait", queue=Q, pass_context=True)
        def cli_wait(ctx: shardq.TaskContext) -> None:
            ctx.wait_for("go")

        task_id = cli_wait.defer()
        env = {**os.environ, "SHARDQ_DSN": pg_db.dsn.conninfo}

        def shardq_cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([SHARDQ, *args], capture_output=True, text=True, env=env, timeout=120)

        pg_app.work(until_empty=True)  # parks on the wait
        shown = shardq_cli("task", task_id)
        assert shown.returncode == 0, shown.stderr
        assert f"{task_id}: waiting" in shown.stdout and "waiting for signal 'go'" in shown.stdout
        sent = shardq_cli("signal", task_id, "go", json.dumps({"ok": True}))
        assert sent.returncode == 0, sent.stderr
        assert f"signal 'go' sent to task {task_id}" in sent.stdout
        for args in (
            ("signal", str(uuid.uuid4()), "go"),
            ("signal", task_id, "go", "{not json"),
            ("signal", "not-a-uuid", "go"),
        ):
            refused = shardq_cli(*args)
            assert refused.returncode == 2, refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
        assert pg_app.work(until_empty=True).acked == 1
    finally:
        pg_app.close()


def test_a_waiting_task_shows_as_waiting_with_its_signal_and_progress_in_status(app, db):
    @app.task(name="shown", queue=Q, pass_context=True)
    def shown(ctx: shardq.TaskContext) -> None:
        ctx.progress({"done": 1, "of": 3})
        ctx.progress({"done": 2, "of": 3})  # within a second of the first: not written
        ctx.wait_for("approved")

    task_id = shown.defer()
    app.work(until_empty=True)
    status = db.client.status(task_id)
    assert status.state == "waiting" and status.waiting_for == "approved"
    assert status.as_json()["progress"] == {"done": 1, "of": 3}
    assert steps_of(db, task_id)[0]["idx"] == -1  # the progress row, apart from the steps
    db.client.signal(task_id, "approved")
    assert db.client.status(task_id).state == "ready"
    app.work(until_empty=True)
    assert db.client.status(task_id).state in ("unknown", "succeeded")


def test_progress_is_bounded_and_fenced(db):
    claimed = db.make_task(Q, state="leased")
    run = _run_for(db, claimed)
    from shardq.app import durable

    with pytest.raises(shardq.StepNotStorable, match="progress: 5,002 bytes"):
        durable.progress(run, "x" * 5000)
    db.replace_lease_token(claimed.key.id, uuid.uuid4())
    with pytest.raises(LeaseLost):
        durable.progress(run, 1)


def test_a_running_handler_learns_that_its_task_was_cancelled(app, db):
    seen: list[bool] = []

    @app.task(name="long", queue=Q, pass_context=True)
    def long(ctx: shardq.TaskContext) -> None:
        seen.append(ctx.cancelled)
        db.client.cancel(ctx.id)  # as `shardq cancel` would, from elsewhere
        ctx._run._checked_at = None  # the once-a-second read, due now
        seen.append(ctx.cancelled)

    long.defer()
    app.work(until_empty=True)
    assert seen == [False, True]


# -- a signal and a wait at the same moment (PostgreSQL: both lock the task row first) ----------


def _pausing(plan: Any, after: str, locked: threading.Event, release: threading.Event) -> Any:
    """``plan``, blocking once the statement named ``after`` has answered (its transaction open,
    holding what that statement locked) until ``release`` is set."""
    request = plan.send(None)
    while True:
        if isinstance(request, Atomically):
            request = Atomically(partial(_paused_body, request.body, after, locked, release))
        answer = yield request
        if isinstance(request, Call) and request.name == after:
            locked.set()
            assert release.wait(30)
        try:
            request = plan.send(answer)
        except StopIteration as stop:
            return stop.value


def _paused_body(body: Any, after: str, locked: threading.Event, release: threading.Event) -> Any:
    return _pausing(body(), after, locked, release)


def _blocked_on_a_lock(db: TestDatabase) -> None:
    """Wait until some backend waits for a row lock (the other side of the race has reached it)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if db.count_lock_waiters():
            return
        time.sleep(0.01)  # polling a condition, not waiting a fixed time
    raise AssertionError("nobody waited for the lock")


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    return thread, out


def test_a_wait_that_meets_a_signal_being_sent_waits_for_it_and_consumes_it(pg_db):
    db = pg_db
    claimed = db.make_task(Q, state="leased")
    fenced = Fenced(claimed.key, claimed.lease_token)
    locked, release = threading.Event(), threading.Event()
    sender = db.client.new_session()
    signal = _pausing(
        durable_operations.send_signal(claimed.key.id, "go", {"n": 1}), "task_signal_lock", locked, release
    )
    sending, sent = _in_thread(lambda: sender.run(signal))
    assert locked.wait(30)  # the signal's transaction holds the task row
    waiter = db.client.new_session()
    waiting, waited = _in_thread(lambda: waiter.run(durable_operations.wait_plan(fenced, 0, "go", None, None)))
    _blocked_on_a_lock(db)  # the wait's fenced write waits for the signal's commit
    release.set()
    sending.join(30)
    waiting.join(30)
    assert sent == [True]
    assert waited == [durable_operations.WaitOutcome('{"payload": {"n":1}}')]
    assert db.task_row(claimed.id)["state"] == "leased"  # it never parked


def test_a_signal_that_meets_a_wait_parking_waits_for_it_and_wakes_the_task(pg_db):
    db = pg_db
    claimed = db.make_task(Q, state="leased")
    fenced = Fenced(claimed.key, claimed.lease_token)
    locked, release = threading.Event(), threading.Event()
    waiter = db.client.new_session()
    wait = _pausing(durable_operations.wait_plan(fenced, 0, "go", None, None), "task_wait_begin", locked, release)
    waiting, waited = _in_thread(lambda: waiter.run(wait))
    assert locked.wait(30)  # the wait's transaction holds the task row, its signal not there yet
    sender = db.client.new_session()
    sending, sent = _in_thread(lambda: sender.run(durable_operations.send_signal(claimed.key.id, "go", 2)))
    _blocked_on_a_lock(db)
    release.set()
    waiting.join(30)
    sending.join(30)
    assert waited == [durable_operations.WaitOutcome()]  # parked
    assert sent == [True]
    row = db.task_row(claimed.id)
    assert row["state"] == "ready" and row["lease_token"] is None  # woken by the signal's transaction


def test_a_run_that_died_after_its_checkpoint_is_replayed_by_the_next_after_the_reaper(app, db):
    calls: list[str] = []

    @app.task(name="crashy", queue=Q, pass_context=True)
    def crashy(ctx: shardq.TaskContext) -> None:
        ctx.step("a", lambda: calls.append("a") or "A")
        ctx.step("b", lambda: calls.append("b"))

    from shardq.arguments import encode_call

    # A worker claimed it, ran and recorded step a (its lease ran out meanwhile, but nobody had
    # taken the task: its token still holds), then died before its ack.
    claimed = db.make_task(
        Q,
        state="leased",
        payload=encode_call("crashy", {}),
        lease_expires_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1),
    )
    dying = _run_for(db, claimed)
    assert dying.step("a", lambda: calls.append("a") or "A") == "A"
    assert db.client.reap_once().retried == 1
    wake_now(db, claimed.id)
    assert app.work(until_empty=True).acked == 1
    assert calls == ["a", "b"]  # a ran once, on the run that died


@pytest.mark.parametrize("name", ["'; DROP TABLE shardq_tasks; --", "ünï cødé ✓", "tab\tand\nnewline", "%(id)s {x}"])
def test_hostile_step_and_signal_names_and_payloads_are_plain_values(app, db, name):
    got: list[Any] = []
    payload = {"s": "'\"\\", "n": [None, 1.5, {"\u0000x": "ok"}], "big": 10**30}

    @app.task(name="hostile", queue=Q, pass_context=True)
    def hostile(ctx: shardq.TaskContext) -> None:
        got.append(ctx.step(name, lambda: payload))
        got.append(ctx.wait_for(name))

    task_id = hostile.defer()
    assert db.client.signal(task_id, name, payload)
    assert app.work(until_empty=True).acked == 1
    assert got == [payload, payload]


def test_a_handler_that_swallows_its_park_leaves_the_task_parked(app, db):
    after: list[str] = []

    @app.task(name="swallow", queue=Q, pass_context=True)
    def swallow(ctx: shardq.TaskContext) -> None:
        with contextlib.suppress(Exception):  # what a careless handler does
            ctx.sleep(3600)
        try:
            ctx.step("later", lambda: None)
        except LeaseLost:
            after.append("refused")

    task_id = swallow.defer()
    totals = app.work(until_empty=True)
    assert after == ["refused"] and totals.acked == 0
    assert db.task_row(task_id)["state"] == "scheduled"
