"""Tasks declared with @app.task: arguments as JSON, defer and configure, dispatch by name, Retry,
transactional enqueue on the caller's connection, and app.work for users' own test suites."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
import sqlalchemy
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session as SASession

import shardq
from shardq.arguments import decode_call, encode_call
from shardq.errors import InvalidInput


def test_a_task_is_still_a_plain_function_and_defers_with_its_arguments(app, db):
    seen = []

    @app.task
    def resize_image(path: str, width: int) -> str:
        seen.append((path, width))
        return "done"

    assert resize_image("a.png", 1) == "done"  # a direct call runs here
    assert (
        resize_image.name
        == f"{__name__}.test_a_task_is_still_a_plain_function_and_defers_with_its_arguments.<locals>.resize_image"
    )
    task_id = resize_image.defer(path="b.png", width=64)
    assert isinstance(task_id, str) and uuid.UUID(task_id)
    assert db.count() == 1
    stats = app.work(until_empty=True)
    assert stats.acked == 1 and seen == [("a.png", 1), ("b.png", 64)]


def test_every_supported_type_comes_back_as_the_same_type_and_value(app):
    received: dict[str, Any] = {}

    @app.task(name="types", queue="typed")
    def types(**kwargs: object) -> None:
        received.update(kwargs)

    aware = dt.datetime(2026, 11, 25, 3, 4, 5, 678901, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30)))
    naive = dt.datetime(2026, 1, 2, 3, 4, 5)
    sent = {
        "aware": aware,
        "naive": naive,
        "day": dt.date(2026, 2, 28),
        "uid": uuid.uuid4(),
        "money": Decimal("12345.678900"),
        "nested": {"when": [naive, aware]},
        "n": 3,
        "x": 1.5,
        "s": "ü",
        "none": None,
        "flag": True,
    }
    types.defer(**sent)
    app.work(until_empty=True)
    assert received == sent
    for name in ("aware", "naive", "day", "uid", "money"):
        assert type(received[name]) is type(sent[name])
    assert received["aware"].utcoffset() == aware.utcoffset() and received["naive"].tzinfo is None
    assert str(received["money"]) == "12345.678900"


@pytest.mark.parametrize(
    "bad,words",
    [
        ((1, 2), "argument bad: tuple"),
        ({1, 2}, "argument bad: set"),
        (b"x", "argument bad: bytes"),
        (object(), "argument bad: object"),
        (float("nan"), "not a finite number"),
        ({1: "a"}, "keys must be str"),
    ],
)
def test_an_argument_that_cannot_come_back_unchanged_is_refused_before_anything_is_written(app, db, bad, words):
    @app.task
    def takes(bad: object) -> None: ...

    with pytest.raises(InvalidInput, match=words):
        takes.defer(bad=bad)
    assert db.count() == 0


def test_arguments_are_checked_against_the_signature(app, db):
    @app.task
    def two(a: int, b: int = 2) -> None: ...

    with pytest.raises(InvalidInput, match="missing a required argument: 'a'"):
        two.defer(b=1)
    with pytest.raises(InvalidInput, match="unexpected keyword argument 'c'"):
        two.defer(a=1, c=3)
    with pytest.raises(InvalidInput):
        two.defer_many([{"a": 1}, {"b": 1}])  # the whole batch is checked first
    assert db.count() == 0
    two.defer(a=1)
    assert db.count() == 1


def test_configure_sets_per_call_options(app, db):
    @app.task(queue="q1", priority=3, max_attempts=7)
    def job(n: int) -> None: ...

    first = job.configure(queue="q2", priority=-1, delay=3600, dedupe_key="k", max_attempts=2).defer(n=1)
    again = job.configure(queue="q2", dedupe_key="k").defer(n=2)
    plain = job.defer(n=3)
    assert again is None  # the key is live
    row = db.task_row(uuid.UUID(first))
    assert (row["queue"], row["priority"], row["state"], row["max_attempts"]) == ("q2", -1, "scheduled", 2)
    row = db.task_row(uuid.UUID(plain))
    assert (row["queue"], row["priority"], row["max_attempts"]) == ("q1", 3, 7)
    with pytest.raises(InvalidInput, match="unknown option"):
        job.configure(colour="red")


def test_defer_many_is_one_statement_per_batch_and_returns_ids_in_order(app, db):
    @app.task
    def job(n: int) -> None: ...

    names = []
    app.client.store.session.before_statement = names.append
    ids = job.configure(dedupe_key=None).defer_many([{"n": i} for i in range(250)])
    assert len(ids) == 250 and len(set(ids)) == 250
    assert [n for n in names if n.startswith("task_insert")] == ["task_insert_many_fresh"]


def test_defer_many_maps_live_dedupe_keys_to_none_in_order(app, db):
    @app.task
    def job(n: int) -> None: ...

    job.configure(dedupe_key="a").defer(n=0)
    calls = [{"n": 1}, {"n": 2}]
    first = job.configure(dedupe_key="a").defer_many(calls)
    assert first == [None, None]
    mixed = [job.configure(dedupe_key=k).defer(n=i) for i, k in enumerate(["b", "b", "c"])]
    assert mixed[0] is not None and mixed[1] is None and mixed[2] is not None


def test_context_carries_id_queue_attempt_name_and_enqueue_time(app):
    seen = []

    @app.task(name="emails.send", queue="emails", pass_context=True)
    def send(ctx: shardq.TaskContext, to: str) -> None:
        seen.append((ctx.id, ctx.queue, ctx.attempt, ctx.task, ctx.enqueued_at.tzinfo is not None, to))

    task_id = send.defer(to="a@example.com")
    app.work(until_empty=True)
    assert seen == [(task_id, "emails", 1, "emails.send", True, "a@example.com")]


def test_a_task_name_no_worker_knows_is_dead_lettered_at_once_with_the_reason(app, db):
    db.client.enqueue("default", encode_call("gone.task", {"x": 1}))
    db.client.enqueue("default", b"not json at all")

    @app.task
    def known() -> None: ...

    stats = app.work(until_empty=True)
    assert stats.dead == 2 and stats.retried == 0
    dead = {d.last_error: d for d in db.client.store.dead_list("default", 10)}
    assert any("unknown task 'gone.task'" in (error or "") for error in dead)
    assert any("payload is not valid task JSON" in (error or "") for error in dead)
    assert all(d.attempts == 1 for d in dead.values())


def test_retry_reschedules_without_using_an_attempt_and_permanent_dead_letters(app, db):
    runs = []

    @app.task
    def flaky(n: int) -> None:
        runs.append(n)
        if len(runs) < 3:
            raise shardq.Retry(in_seconds=0)

    @app.task
    def doomed() -> None:
        raise shardq.Permanent("no")

    flaky.defer(n=1)
    doomed.defer()
    stats = app.work(until_empty=True)
    assert runs == [1, 1, 1]
    assert stats.acked == 1 and stats.dead == 1
    dead = db.client.store.dead_list("default", 10)
    assert len(dead) == 1 and "no" in (dead[0].last_error or "")


def test_retry_in_seconds_schedules_the_task_for_later_with_its_attempt_refunded(app, db):
    @app.task
    def later() -> None:
        raise shardq.Retry(in_seconds=3600, reason="not yet")

    task_id = later.defer()
    app.work(until_empty=True)
    row = db.task_row(uuid.UUID(task_id))
    assert row["state"] == "scheduled" and row["attempts"] == 0 and "not yet" in row["last_error"]


def test_retry_refuses_a_negative_delay():
    with pytest.raises(InvalidInput):
        shardq.Retry(in_seconds=-1)


def test_a_task_deferred_on_a_psycopg_connection_exists_only_if_that_transaction_commits(app, db):
    @app.task
    def job(n: int) -> None: ...

    with psycopg.connect(db.dsn.conninfo) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS orders (n INT)")
        conn.commit()
        conn.execute("INSERT INTO orders VALUES (1)")
        job.configure(connection=conn).defer(n=1)
        conn.rollback()
        assert db.count() == 0
        conn.execute("INSERT INTO orders VALUES (2)")
        kept = job.configure(connection=conn).defer(n=2)
        assert db.count() == 0  # not visible before the commit
        conn.commit()
    assert db.count() == 1 and db.task_row(uuid.UUID(kept)) is not None


def test_the_client_enqueues_on_a_connection_too_and_keyed_tasks_stay_in_the_transaction(db):
    with psycopg.connect(db.dsn.conninfo) as conn:
        db.client.enqueue("q", b"one", connection=conn, exclusive_key="k")
        db.client.enqueue("q", b"two", connection=conn, exclusive_key="k")  # backlogged, same transaction
        conn.rollback()
    assert db.count() == 0
    with psycopg.connect(db.dsn.conninfo, autocommit=True) as conn:
        result = db.client.enqueue_many("q", [b"a", b"b"], connection=conn)
    assert result.enqueued == 2 and db.count() == 2


def test_sqlalchemy_sessions_and_connections_join_their_transaction(app, db):
    @app.task
    def job(n: int) -> None: ...

    params = db.dsn.params()
    url = sqlalchemy.engine.URL.create(
        "postgresql+psycopg",
        username=params.get("user"),
        password=params.get("password"),
        host=params.get("host"),
        port=int(params["port"]) if "port" in params else None,
        database=params.get("dbname"),
    )
    engine = sqlalchemy.create_engine(url)
    try:
        with SASession(engine) as session:
            job.configure(connection=session).defer(n=1)
            session.rollback()
        assert db.count() == 0
        with SASession(engine) as session:
            job.configure(connection=session).defer(n=2)
            session.commit()
        assert db.count() == 1
        with engine.connect() as connection:
            job.configure(connection=connection).defer(n=3)
            connection.commit()
        assert db.count() == 2
    finally:
        engine.dispose()


def test_an_unsupported_connection_object_is_refused(app, db):
    @app.task
    def job() -> None: ...

    with pytest.raises(InvalidInput, match="connection= takes"):
        job.configure(connection=object()).defer()
    assert db.count() == 0


def test_task_declarations_are_checked(app):
    @app.task(name="once")
    def first() -> None: ...

    with pytest.raises(InvalidInput, match="already declared"):
        app.task(name="once")(lambda: None)
    with pytest.raises(InvalidInput):
        app.task(queue="bad queue")
    with pytest.raises(InvalidInput, match="characters"):
        app.task(name="x" * 300)(lambda: None)


@settings(max_examples=60, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.text()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.datetimes()
        | st.datetimes(timezones=st.timezones())
        | st.dates()
        | st.uuids()
        | st.decimals(allow_nan=False, allow_infinity=False),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
        max_leaves=12,
    )
)
def test_encoded_calls_decode_to_equal_values_of_the_same_types(value):
    name, args = decode_call(encode_call("t", {"v": value}))

    def same(a: object, b: object) -> bool:
        if type(a) is not type(b):
            return False
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
            return a == b and a.utcoffset() == b.utcoffset()
        return a == b or (isinstance(a, Decimal) and str(a) == str(b))

    assert name == "t" and same(args["v"], value)


@pytest.mark.parametrize(
    "value",
    [
        # a wall time inside a gap (clocks went from 00:00 to 01:00): found by the property test above
        dt.datetime(1966, 10, 30, 0, 0, tzinfo=ZoneInfo("America/Santo_Domingo")),
        # the second pass of a repeated hour
        dt.datetime(2026, 11, 1, 1, 30, fold=1, tzinfo=ZoneInfo("America/New_York")),
        dt.datetime(2026, 11, 1, 1, 30, fold=0, tzinfo=ZoneInfo("America/New_York")),
    ],
    ids=["gap", "repeated hour, second pass", "repeated hour, first pass"],
)
def test_a_zoned_datetime_comes_back_with_its_wall_time_and_fold(value):
    _, args = decode_call(encode_call("t", {"v": value}))
    back = args["v"]
    assert (back.replace(tzinfo=None), back.fold, back.tzinfo, back.utcoffset()) == (
        value.replace(tzinfo=None),
        value.fold,
        value.tzinfo,
        value.utcoffset(),
    )


def test_a_zoned_datetime_whose_offset_the_zone_no_longer_has_keeps_its_instant():
    payload = b'{"task": "t", "args": {"v": {"$shardq": "datetime", "v": "2026-06-01T12:00:00+03:17", "zone": "Europe/Paris"}}}'
    _, args = decode_call(payload)
    assert args["v"] == dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=3, minutes=17)))
    assert args["v"].tzinfo == ZoneInfo("Europe/Paris")


def test_an_app_with_async_and_sync_tasks_runs_both(app, db):
    import asyncio

    seen = []

    @app.task
    async def fetch(url: str) -> None:
        await asyncio.sleep(0.01)
        seen.append(("async", url))

    @app.task
    def store(key: str) -> None:
        seen.append(("sync", key))

    fetch.defer(url="https://example.com")
    store.defer(key="k")
    counts = app.work(until_empty=True)
    assert counts.acked == 2
    assert sorted(seen) == [("async", "https://example.com"), ("sync", "k")]
