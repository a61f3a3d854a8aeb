"""Debounce and throttle by key (shardq.lifecycle.debounce): debounce keeps the newest payload of a
key's waiting task and pushes it back; throttle keeps a key's first task per window and drops the
rest; the enqueue says what it did; bad input writes nothing."""

from __future__ import annotations

import pytest

from shardq.errors import InvalidInput
from shardq.lifecycle.claim import Consumer
from shardq.models import NewTask
from tests.support.factories import fenced


def rows(db):
    return db.tasks_by_age()


def test_debounce_keeps_the_newest_payload_and_pushes_the_task_back(db):
    first = db.client.enqueue("q", b"v1", dedupe_key="doc:7", debounce=60)
    assert first.enqueued == 1 and not first.debounced_ids
    [row] = rows(db)
    assert row["state"] == "scheduled"
    due = row["exec_time"]
    second = db.client.enqueue("q", b"v2", dedupe_key="doc:7", debounce=120)
    assert second.enqueued == 0 and second.debounced_ids == first.enqueued_ids
    [row] = rows(db)
    assert bytes(row["payload"]) == b"v2" and row["exec_time"] > due  # quiet again from now


def test_debounce_within_one_batch_keeps_the_last(db):
    result = db.client.enqueue_many(
        "q", [NewTask(b"%d" % i, dedupe_key="k", debounce=30) for i in range(5)] + [NewTask(b"other")]
    )
    assert result.enqueued == 2 and len(result.debounced_ids) == 4
    payloads = sorted(bytes(r["payload"]) for r in rows(db))
    assert payloads == [b"4", b"other"]


def test_debounce_of_a_ready_task_that_has_not_started_replaces_it_too(db):
    db.client.enqueue("q", b"old", dedupe_key="k", debounce=1)
    db.make_every_task_due()
    Consumer(db.store, ["q"]).claim()  # promotes it; its claim is not for us: release it again
    db.hand_back_every_task()
    result = db.client.enqueue("q", b"new", dedupe_key="k", debounce=30)
    assert len(result.debounced_ids) == 1
    [row] = rows(db)
    assert row["state"] == "scheduled" and bytes(row["payload"]) == b"new"


def test_debounce_while_the_keys_task_runs_is_a_duplicate(db):
    db.client.enqueue("q", b"run", dedupe_key="k", debounce=1)
    db.make_every_task_ready_now()
    [task] = Consumer(db.store, ["q"]).claim().tasks
    result = db.client.enqueue("q", b"new", dedupe_key="k", debounce=30)
    assert result.duplicate_keys == ("k",) and not result.debounced_ids
    db.store.task_ack_many([fenced(task)])
    assert db.client.enqueue("q", b"new", dedupe_key="k", debounce=30).enqueued == 1


def test_throttle_keeps_the_first_task_and_drops_the_rest_of_the_window(db):
    first = db.client.enqueue("q", b"1", dedupe_key="user:1", throttle=3600)
    assert first.enqueued == 1
    db.delete_all_tasks()  # it ran: the window still holds
    second = db.client.enqueue_many(
        "q",
        [
            NewTask(b"2", dedupe_key="user:1", throttle=3600),
            NewTask(b"3", dedupe_key="user:2", throttle=3600),
            NewTask(b"4", dedupe_key="user:2", throttle=3600),
        ],
    )
    assert second.enqueued == 1 and second.throttled_keys == ("user:1", "user:2")
    assert [bytes(r["payload"]) for r in rows(db)] == [b"3"]


def test_a_throttle_window_that_ended_opens_again(db):
    db.client.enqueue("q", b"1", dedupe_key="k", throttle=3600)
    db.delete_all_tasks()
    db.end_throttle_windows()
    assert db.client.enqueue("q", b"2", dedupe_key="k", throttle=3600).enqueued == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"debounce": 5}, "needs a dedupe_key"),
        ({"throttle": 5}, "needs a dedupe_key"),
        ({"dedupe_key": "k", "debounce": 0}, "debounce"),
        ({"dedupe_key": "k", "throttle": -1}, "throttle"),
        ({"dedupe_key": "k", "debounce": 5, "throttle": 5}, "not both"),
        ({"dedupe_key": "k", "debounce": 5, "delay": 3}, "no delay"),
        ({"dedupe_key": "k", "throttle": 5, "exclusive_key": "e"}, "does not go with"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(db, options, message):
    with pytest.raises(InvalidInput, match=message):
        db.client.enqueue("q", b"x", **options)
    assert db.count() == 0 and db.count_throttle_windows() == 0


def test_the_cli_says_what_debounce_and_throttle_did(shardq_cli):
    assert shardq_cli("enqueue", "q", "a", "--dedupe-key", "k", "--debounce", "60").stdout.strip() == "enqueued 1"
    assert (
        "debounced into the waiting task"
        in shardq_cli("enqueue", "q", "b", "--dedupe-key", "k", "--debounce", "60").stdout
    )
    shardq_cli("enqueue", "q", "a", "--dedupe-key", "t", "--throttle", "60")
    assert (
        "throttled (window open): 1" in shardq_cli("enqueue", "q", "b", "--dedupe-key", "t", "--throttle", "60").stdout
    )
    bad = shardq_cli("enqueue", "q", "a", "--debounce", "60", check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_an_app_tasks_debounced_defer_returns_the_task_that_carries_it(db, app):
    @app.task(name="reindex")
    def reindex(doc: int) -> None: ...

    first = reindex.configure(dedupe_key="doc:1", debounce=60).defer(doc=1)
    again = reindex.configure(dedupe_key="doc:1", debounce=60).defer(doc=2)
    assert first is not None and again == first
    with pytest.raises(InvalidInput, match="one call at a time"):
        reindex.configure(dedupe_key="doc:1", debounce=60).defer_many([{"doc": 3}])
