"""Task history (migration 0008): finished tasks and failed attempts recorded per queue in the
transaction that finishes them, a task's status by id, paging and pruning — and a queue that keeps
nothing sends exactly what it sent before."""

from __future__ import annotations

import datetime as dt
import threading
import uuid

import pytest

import shardq
from shardq.errors import InvalidInput
from shardq.lifecycle import history
from shardq.lifecycle.failures import Failure, settle_failures
from shardq.maintenance.pruning import prune_history
from shardq.models import QueueSettings
from shardq.models.history import Finished
from shardq.models.leases import Fenced
from shardq.sessions.session import Session
from tests.support.factories import fenced, utcnow

DAY = 86_400.0


def _keep(db, queue: str, seconds: float = DAY) -> None:
    db.client.set_queue(queue, keep_finished_seconds=seconds)


def _drain(db, queue: str, handler, **options) -> shardq.WorkerTotals:
    return db.client.work(
        [queue], handler, concurrency=2, batch=20, until_empty=True, install_signal_handlers=False, **options
    )


def _history_count(db) -> int:
    return db.count_history()


def test_a_queue_that_keeps_nothing_records_nothing_and_its_finished_task_is_unknown(db):
    (task_id,) = db.client.enqueue("q", b"x").enqueued_ids
    assert _drain(db, "q", lambda task: None).acked == 1
    assert _history_count(db) == 0
    status = db.client.status(task_id)
    assert status.state == "unknown" and status.queue is None


def test_a_queue_that_keeps_nothing_sends_no_history_statement_on_its_ack_path(db, monkeypatch):
    names: list[str] = []
    lock = threading.Lock()
    original = Session._run

    def recording(self, name, *args, **kwargs):
        with lock:
            names.append(name)
        return original(self, name, *args, **kwargs)

    monkeypatch.setattr(Session, "_run", recording)
    db.client.enqueue_many("plain", [f"t{i}".encode() for i in range(40)])
    assert _drain(db, "plain", lambda task: None).acked == 40
    assert names and not [n for n in names if n.startswith(("history_record", "attempt_record"))]


def test_a_kept_queue_records_each_success_with_its_task_name_attempts_and_run_time(db):
    _keep(db, "kept")
    app = shardq.App(db.dsn)
    try:

        @app.task(name="reports.build", queue="kept")
        def build(n: int) -> None:
            pass

        ids = [build.defer(n=i) for i in range(25)]
        app.work(until_empty=True)
        assert _history_count(db) == 25
        status = app.status(ids[0])
        assert (status.state, status.queue, status.task, status.attempts) == ("succeeded", "kept", "reports.build", 1)
        assert status.finished and status.finished_at is not None and status.created_at is not None
        assert status.created_at <= status.finished_at
        assert [a.outcome for a in status.history] == ["succeeded"]
        assert status.total_run_seconds is not None and status.total_run_seconds >= 0
    finally:
        app.close()


def test_live_tasks_report_ready_scheduled_running_and_retrying(db):
    ready = db.make_task("q")
    later = db.make_task("q", state="scheduled", exec_time=utcnow() + dt.timedelta(hours=1))
    running = db.make_task("q", state="leased", attempts=2)
    retry_at = utcnow() + dt.timedelta(minutes=5)
    retrying = db.make_task("q", state="scheduled", exec_time=retry_at, attempts=1)
    db.set_last_error(retrying.key.id, "boom")
    assert db.client.status(ready.id).state == "ready"
    assert db.client.status(later.id).state == "scheduled"
    status = db.client.status(running.id)
    assert (status.state, status.attempt) == ("running", 2)
    status = db.client.status(retrying.id)
    assert (status.state, status.last_error) == ("retrying", "boom")
    assert abs((status.run_at - retry_at).total_seconds()) < 0.01


def test_an_unknown_id_is_unknown_and_a_malformed_one_is_refused_in_one_line(db):
    assert db.client.status(str(uuid.uuid4())).state == "unknown"
    with pytest.raises(InvalidInput, match="not a task id"):
        db.client.status("not-a-uuid")


def test_failed_attempts_are_recorded_with_the_final_outcome_of_a_dead_task(db):
    _keep(db, "kept")
    task = db.make_task("kept", state="leased", attempts=1, max_attempts=2)
    settings = lambda queue: QueueSettings(queue, keep_finished_seconds=DAY, backoff_base=0.001)  # noqa: E731
    first = Failure(fenced(task), 1, 2, "first failure", task="t.name", run_seconds=0.25)
    result = settle_failures(db.store, [first], settings, require_expired=False)
    assert len(result.retried) == 1
    status = db.client.status(task.id)
    assert status.state in ("retrying", "ready") and [a.error for a in status.history] == ["first failure"]
    # the second attempt, claimed again, fails for good
    row = db.lease_again(task, attempts=2)
    again = task._replace(key=task.key._replace(rank=row["rank"], exec_time=row["exec_time"]), attempt=2)
    second = Failure(fenced(again), 2, 2, "second failure", task="t.name", run_seconds=0.5)
    result = settle_failures(db.store, [second], settings, require_expired=False)
    assert len(result.dead) == 1
    status = db.client.status(task.id)
    assert (status.state, status.task, status.attempts) == ("dead", "t.name", 2)
    assert [(a.attempt, a.outcome, a.error) for a in status.history] == [
        (1, "failed", "first failure"),
        (2, "dead", "second failure"),
    ]
    assert status.total_run_seconds == pytest.approx(0.75)


def test_a_stale_ack_records_nothing(db):
    _keep(db, "kept")
    task = db.make_task("kept", state="leased", attempts=1)
    stale = Fenced(task.key, uuid.uuid4())
    record = Finished(task.key.id, "kept", "succeeded", None, task.created_at, 1, 0.1, None, '"late"')
    assert db.store.task_ack_many_recorded([stale], [record]) == set()
    assert _history_count(db) == 0 and db.task_row(task.id) is not None
    assert db.store.task_ack_many_recorded([fenced(task)], [record]) == {task.key.id}
    assert db.client.status(task.id).state == "succeeded"


def test_cancelling_records_cancelled_tasks_only_in_a_queue_that_keeps_them(db):
    _keep(db, "kept")
    kept = db.make_task("kept")
    plain = db.make_task("plain")
    db.client.cancel(kept.id, plain.id)
    assert db.client.status(kept.id).state == "cancelled"
    assert db.client.status(plain.id).state == "unknown"
    assert _history_count(db) == 1


def test_history_pages_newest_first_with_state_and_since_filters(db):
    _keep(db, "kept")
    ids = db.client.enqueue_many("kept", [f"t{i}".encode() for i in range(7)]).enqueued_ids
    _drain(db, "kept", lambda task: None)
    db.age_history(3600, ids[0])
    first = db.store.run(history.page_plan("kept", limit=4))
    rest = db.store.run(history.page_plan("kept", after=(first[-1].finished_at, uuid.UUID(first[-1].id)), limit=4))
    assert len(first) == 4 and len(rest) == 3
    assert {t.id for t in first + rest} == set(ids)
    assert rest[-1].id == ids[0]  # the oldest last
    recent = db.store.run(history.page_plan("kept", since=utcnow() - dt.timedelta(minutes=5)))
    assert len(recent) == 6
    assert db.store.run(history.page_plan("kept", state="dead")) == []
    with pytest.raises(InvalidInput):
        db.store.run(history.page_plan("kept", state="running"))


def test_pruning_removes_rows_past_the_queues_retention_and_everything_of_a_queue_set_back_to_zero(db):
    _keep(db, "kept", 3600)
    _keep(db, "was")
    db.client.enqueue_many("kept", [b"a", b"b", b"c"])
    db.client.enqueue_many("was", [b"d"])
    _drain(db, "kept", lambda task: None)
    _drain(db, "was", lambda task: None)
    db.age_some_history("kept", 2, 7200)
    db.client.set_queue("was", keep_finished_seconds=0)
    assert prune_history(db.store) == 3
    assert [r["queue"] for r in db.history("queue")] == ["kept"]


def test_keep_finished_is_a_queue_setting_shown_with_the_others(db):
    settings = db.client.set_queue("q", keep_finished_seconds=7 * DAY)
    assert settings.keep_finished_seconds == 7 * DAY
    assert settings.as_json()["keep_finished_seconds"] == 7 * DAY
    with pytest.raises(InvalidInput):
        db.client.set_queue("q", keep_finished_seconds=-1)


def test_a_task_declared_with_result_keeps_its_json_return_value_sync_or_async(db):
    _keep(db, "kept")
    app = shardq.App(db.dsn)
    try:

        @app.task(name="sums", queue="kept", result=True)
        def sums(a: int, b: int) -> dict:
            return {"sum": a + b, "parts": [a, b]}

        @app.task(name="later", queue="kept", result=True)
        async def later(x: str) -> str:
            return x.upper()

        @app.task(name="quiet", queue="kept")
        def quiet() -> int:
            return 42

        first, second, third = sums.defer(a=1, b=2), later.defer(x="ü"), quiet.defer()
        app.work(until_empty=True)
        assert app.status(first).value() == {"sum": 3, "parts": [1, 2]}
        assert app.status(second).value() == "Ü"
        assert app.status(third).result is None  # not declared with result=True
    finally:
        app.close()


@pytest.mark.parametrize(
    "returned, named", [(object(), "object is not JSON-encodable"), ("x" * 300_000, "300,002 bytes of JSON")]
)
def test_a_result_that_cannot_be_kept_fails_its_attempt_with_one_line_naming_type_or_size(db, returned, named):
    _keep(db, "kept")
    db.client.set_queue("kept", max_attempts=1)
    app = shardq.App(db.dsn)
    try:

        @app.task(name="bad", queue="kept", result=True, max_attempts=1)
        def bad() -> object:
            return returned

        task_id = bad.defer()
        app.work(until_empty=True)
        status = app.status(task_id)
        assert status.state == "dead" and status.last_error is not None and named in status.last_error
        assert len(status.last_error.strip().splitlines()) == 1
    finally:
        app.close()


def test_acks_of_a_kept_queue_send_no_notification_while_nobody_listens(db, monkeypatch):
    names: list[tuple[str, object]] = []
    lock = threading.Lock()
    original = Session._run

    def recording(self, name, params=None, *args, **kwargs):
        with lock:
            names.append((name, (params or {}).get("notify")))
        return original(self, name, params, *args, **kwargs)

    _keep(db, "kept")
    monkeypatch.setattr(Session, "_run", recording)
    db.client.enqueue_many("kept", [f"t{i}".encode() for i in range(30)])
    _drain(db, "kept", lambda task: None)
    kept_acks = [notify for name, notify in names if name.startswith("task_ack_") and name.endswith("_kept")]
    assert kept_acks and all(not notify for notify in kept_acks)
    assert _history_count(db) == 30


def test_kept_acks_of_exclusive_keys_record_each_task_and_release_the_backlog(db):
    _keep(db, "kept")
    ids = []
    for i in range(6):
        ids += db.client.enqueue("kept", f"t{i}".encode(), exclusive_key=f"k{i % 2}").enqueued_ids
    acked = 0
    for _ in range(6):  # each key's backlog is released one task at a time: drain until all ran
        acked += _drain(db, "kept", lambda task: None).acked
        if db.count() == 0:
            break
    assert acked == 6 and db.count() == 0
    assert {db.client.status(i).state for i in ids} == {"succeeded"}


def test_dedupe_for_refuses_a_key_for_a_while_after_its_task_finished(db):
    _keep(db, "hooks")
    first = db.client.enqueue("hooks", b"payload", dedupe_key="hook:1", dedupe_for=600)
    assert first.enqueued == 1
    _drain(db, "hooks", lambda task: None)
    again = db.client.enqueue("hooks", b"payload", dedupe_key="hook:1", dedupe_for=600)
    assert (again.enqueued, again.duplicate_keys) == (0, ("hook:1",))
    # without a window, or once the window has passed, the key is free again
    db.age_history(1200)
    assert db.client.enqueue("hooks", b"payload", dedupe_key="hook:1", dedupe_for=600).enqueued == 1
    assert db.client.enqueue("hooks", b"other", dedupe_key="hook:2", dedupe_for=600).enqueued == 1
    with pytest.raises(InvalidInput, match="dedupe_for needs a dedupe_key"):
        db.client.enqueue("hooks", b"payload", dedupe_for=600)


def test_an_app_task_deferred_with_dedupe_for_is_skipped_within_the_window(db):
    _keep(db, "hooks")
    app = shardq.App(db.dsn)
    try:

        @app.task(name="hook", queue="hooks")
        def hook(n: int) -> None: ...

        windowed = hook.configure(dedupe_key="order:7", dedupe_for=3600)
        assert windowed.defer(n=1) is not None
        app.work(until_empty=True)
        assert windowed.defer(n=2) is None
        assert windowed.defer_many([{"n": 3}, {"n": 4}]) == [None, None]
    finally:
        app.close()


def test_a_queue_that_keeps_results_keeps_every_plain_handlers_json_return_value_sync_or_async(db):
    db.client.set_queue("kept", keep_finished_seconds=DAY, keep_results=True)
    returned = {b"a": {"n": 1}, b"b": [1, "two"], b"c": None}
    ids = {payload: db.client.enqueue("kept", payload).enqueued_ids[0] for payload in returned}
    assert _drain(db, "kept", lambda task: returned[task.payload]).acked == 3
    assert db.client.status(ids[b"a"]).value() == {"n": 1}
    assert db.client.status(ids[b"b"]).value() == [1, "two"]
    assert db.client.status(ids[b"c"]).result is None  # None keeps no text: it reads back as None

    async def later(task):
        return task.payload.decode().upper()

    (async_id,) = db.client.enqueue("kept", b"x").enqueued_ids
    assert _drain(db, "kept", later).acked == 1
    assert db.client.status(async_id).value() == "X"


def test_a_queue_that_keeps_results_keeps_an_app_tasks_value_without_result_true(db):
    db.client.set_queue("kept", keep_finished_seconds=DAY, keep_results=True)
    app = shardq.App(db.dsn)
    try:

        @app.task(name="quiet", queue="kept")
        def quiet() -> int:
            return 42

        @app.task(name="declared", queue="kept", result=True)
        def declared() -> str:
            return "once"  # encoded once, by the task's own call, not again by the worker

        first, second = quiet.defer(), declared.defer()
        app.work(until_empty=True)
        assert app.status(first).value() == 42
        assert app.status(second).result == '"once"'
    finally:
        app.close()


def test_a_plain_handlers_result_that_cannot_be_kept_fails_its_attempt_in_one_line(db):
    db.client.set_queue("kept", keep_finished_seconds=DAY, keep_results=True, max_attempts=1)
    (task_id,) = db.client.enqueue("kept", b"x", max_attempts=1).enqueued_ids
    assert _drain(db, "kept", lambda task: object()).dead == 1
    status = db.client.status(task_id)
    assert status.state == "dead" and "object is not JSON-encodable" in status.last_error


def test_keep_results_without_keep_finished_keeps_nothing_and_can_be_switched_off(db):
    settings = db.client.set_queue("q", keep_results=True)
    assert settings.keep_results and not settings.results_kept
    assert settings.as_json()["keep_results"] is True
    (task_id,) = db.client.enqueue("q", b"x").enqueued_ids
    assert _drain(db, "q", lambda task: {"big": "value"}).acked == 1
    assert _history_count(db) == 0 and db.client.status(task_id).state == "unknown"
    assert db.client.set_queue("q", keep_results=False).keep_results is False
    with pytest.raises(InvalidInput):
        db.client.set_queue("q", keep_results="yes")


def test_each_kept_ack_records_its_own_result_when_a_batch_settles_many_claims_at_once(db):
    db.client.set_queue("kept", keep_finished_seconds=DAY, keep_results=True)
    payloads = [f"t{i}".encode() for i in range(120)]
    ids = dict(zip(payloads, db.client.enqueue_many("kept", payloads).enqueued_ids, strict=True))

    def handler(task):
        n = int(task.payload[1:])
        return None if n % 3 == 0 else {"n": n}  # claims with and without results, side by side

    assert _drain(db, "kept", handler).acked == 120
    rows = {str(r["id"]): r["result"] for r in db.history("id", "result")}
    assert len(rows) == 120
    for payload, task_id in ids.items():
        n = int(payload[1:])
        assert rows[task_id] == (None if n % 3 == 0 else f'{{"n":{n}}}'), payload


def test_status_by_id_is_one_statement_for_a_live_a_kept_a_dead_letter_and_an_unknown_id(db, monkeypatch):
    _keep(db, "kept")
    (kept_id,) = db.client.enqueue("kept", b"k").enqueued_ids
    assert _drain(db, "kept", lambda task: None).acked == 1
    (live_id,) = db.client.enqueue("live", b"l").enqueued_ids
    db.client.set_queue("plain", max_attempts=1)
    (dead_id,) = db.client.enqueue("plain", b"d", max_attempts=1).enqueued_ids
    assert _drain(db, "plain", lambda task: 1 / 0).dead == 1  # a dead letter, no history row
    names: list[str] = []
    original = Session._run

    def recording(self, name, *args, **kwargs):
        names.append(name)
        return original(self, name, *args, **kwargs)

    monkeypatch.setattr(Session, "_run", recording)
    states = [db.client.status(i).state for i in (live_id, kept_id, dead_id, str(uuid.uuid4()))]
    assert states == ["ready", "succeeded", "dead", "unknown"]
    assert names == ["task_status_read"] * 4
    assert "ZeroDivisionError" in db.client.status(dead_id).last_error
