"""Whatever a handler raises is stored, and never costs the rest of its batch; workers alone run
tasks whose lease expired (no reaper anywhere).

Error texts are for people: a NUL byte (PostgreSQL text cannot hold one), a lone surrogate (not
encodable as UTF-8), an exception whose ``__str__`` raises, or megabytes of text must each be
stored sanitised or truncated (with a marker saying so), and the other outcomes settled with it
must be settled as if it were not there.
"""

from __future__ import annotations

import datetime as dt
import threading

import pytest

import shardq
from shardq import error_text
from tests.support.factories import utcnow
from tests.support.outcomes import assert_good_acked, run_until_empty


def batch_with_one_bad(
    db, raise_bad, *, n: int = 20, bad_payload: bytes = b"bad", max_attempts: int = 1
) -> tuple[set[str], str]:
    """Enqueue ``n - 1`` tasks whose handler returns and one (``bad_payload``) whose handler calls
    ``raise_bad(task)``; run one worker over them in one claim. Returns (good ids, bad id)."""
    payloads = [f"good-{i}".encode() for i in range(n - 1)] + [bad_payload]
    ids = db.client.enqueue_many("q", [shardq.NewTask(p, max_attempts=max_attempts) for p in payloads]).enqueued_ids
    bad = ids[-1]

    def handler(task) -> None:
        if task.id == bad:
            raise_bad(task)

    run_until_empty(db.client, handler, concurrency=2, batch=n)
    return set(ids[:-1]), bad


def stored_error(db, task_id: str) -> str:
    row = db.dead_row(task_id)
    assert row is not None, "the failing task was not dead-lettered"
    assert isinstance(row["last_error"], str) and row["last_error"]
    return row["last_error"]


def assert_storable(text: str) -> None:
    """Text PostgreSQL and CockroachDB can hold and anyone can print."""
    assert "\x00" not in text
    text.encode("utf-8")  # no lone surrogate


def test_a_permanent_error_with_a_nul_byte_is_dead_lettered_sanitised_and_its_batch_is_acked(db):
    def raise_bad(task):
        raise shardq.Permanent(task.payload.decode("utf-8", "replace"))

    good, bad = batch_with_one_bad(db, raise_bad, bad_payload=b"bin\x00ary\xff")
    assert_good_acked(db, good)
    text = stored_error(db, bad)
    assert_storable(text)
    assert "bin" in text and "ary" in text  # the NUL removed or replaced, not the message


def test_a_retried_error_with_a_nul_byte_keeps_a_sanitised_last_error_and_its_batch_is_acked(db):
    ids = db.client.enqueue_many("q", [f"good-{i}".encode() for i in range(9)] + [b"bad"]).enqueued_ids
    bad = ids[-1]

    def handler(task) -> None:
        if task.id == bad:
            raise ValueError("before\x00after")

    run_until_empty(db.client, handler, concurrency=2, batch=10)
    assert_good_acked(db, set(ids[:-1]))
    row = db.task_row(bad)
    assert row is not None and row["state"] in ("ready", "scheduled") and row["attempts"] == 1
    assert_storable(row["last_error"])
    assert "before" in row["last_error"] and "after" in row["last_error"]


def test_an_error_text_with_a_lone_surrogate_is_stored_encodable_and_its_batch_is_acked(db):
    def raise_bad(task):
        raise ValueError("lone \udcff surrogate")

    good, bad = batch_with_one_bad(db, raise_bad)
    assert_good_acked(db, good)
    text = stored_error(db, bad)
    assert_storable(text)
    assert "lone" in text and "surrogate" in text


def test_invalid_utf8_decoded_with_surrogateescape_is_stored_encodable(db):
    def raise_bad(task):
        raise shardq.Permanent(task.payload.decode("utf-8", "surrogateescape"))

    good, bad = batch_with_one_bad(db, raise_bad, bad_payload=b"head\xff\xfe\x00tail")
    assert_good_acked(db, good)
    text = stored_error(db, bad)
    assert_storable(text)
    assert "head" in text and "tail" in text


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class StrNotStr(shardq.Permanent):
    def __str__(self):  # on purpose: str() of it raises TypeError
        return 42


@pytest.mark.parametrize("exception", [StrRaises("x"), StrNotStr("x")], ids=["str-raises", "str-returns-int"])
def test_an_exception_whose_str_fails_is_stored_by_its_type_name(db, exception):
    def raise_bad(task):
        raise exception

    good, bad = batch_with_one_bad(db, raise_bad)
    assert_good_acked(db, good)
    text = stored_error(db, bad)
    assert_storable(text)
    assert type(exception).__name__ in text


def test_a_retry_reason_with_a_nul_byte_and_a_surrogate_reschedules_without_an_attempt(db):
    ids = db.client.enqueue_many("q", [f"good-{i}".encode() for i in range(9)] + [b"bad"]).enqueued_ids
    bad = ids[-1]
    runs: list[int] = []

    def handler(task) -> None:
        if task.id == bad:
            runs.append(task.attempt)
            if len(runs) == 1:
                raise shardq.Retry(0, reason="later\x00\udcff please")

    run_until_empty(db.client, handler, concurrency=2, batch=10)
    assert_good_acked(db, set(ids[:-1]))
    assert len(runs) == 2 and runs[0] == runs[1], f"runs of the rescheduled task, by attempt: {runs}"
    assert db.task_row(bad) is None and db.dead_row(bad) is None


@pytest.mark.parametrize("exception", [shardq.Permanent, ValueError], ids=["permanent", "retried"])
def test_a_five_megabyte_error_text_is_stored_truncated_with_a_marker(db, exception):
    # "ж" is 2 bytes in UTF-8: 5 MiB of text, and a character no truncation marker uses.
    message = "ж" * (5 * 1024 * 1024 // 2)

    def raise_bad(task):
        raise exception(message)

    # Permanent: written by the dead-letter statement; ValueError on attempt 1 of 3: by the retry.
    good, bad = batch_with_one_bad(db, raise_bad, max_attempts=3)
    assert_good_acked(db, good)
    row = db.dead_row(bad) if exception is shardq.Permanent else db.task_row(bad)
    assert row is not None and row["attempts"] == 1
    text = row["last_error"]
    assert "жжж" in text
    marker = text[text.rfind("ж") + 1 :]
    assert "truncated" in marker, f"no truncation marker at the end of the stored text: ...{text[-80:]!r}"
    assert len(text) <= error_text.ERROR_TEXT_MAX + len(marker)
    assert len(marker) <= 200


def test_one_bad_outcome_among_many_leaves_every_other_outcome_settled_its_own_way(db):
    payloads = [b"ok"] * 12 + [b"retry"] * 4 + [b"dead"] * 3 + [b"nul"]
    ids = db.client.enqueue_many("q", [shardq.NewTask(p, max_attempts=3) for p in payloads]).enqueued_ids
    kind = dict(zip(ids, payloads))

    def handler(task) -> None:
        if task.payload == b"retry":
            raise RuntimeError("try again")
        if task.payload == b"dead":
            raise shardq.Permanent("never")
        if task.payload == b"nul":
            raise shardq.Permanent("N\x00L")

    run_until_empty(db.client, handler, concurrency=3, batch=len(ids))
    for task_id, payload in kind.items():
        row, dead = db.task_row(task_id), db.dead_row(task_id)
        if payload == b"ok":
            assert row is None and dead is None, "a task whose handler returned was not acked"
        elif payload == b"retry":
            assert row is not None and row["attempts"] == 1 and row["last_error"].endswith("try again")
            assert row["state"] in ("ready", "scheduled")
        else:
            assert row is None and dead is not None and dead["attempts"] == 1


# -- workers alone recover expired leases ----------------------------------------------------------


def test_a_worker_alone_runs_tasks_whose_lease_expired_without_any_reaper(db):
    """A crashed worker's tasks (leased, lease long expired) are run by the next worker: no
    ``shardq reap`` process, no reaper call, one ``until_empty`` worker."""
    db.client.set_queue("q", backoff_base=0.001, backoff_cap=0.001)
    expired = {
        db.make_task(state="leased", attempts=1, lease_expires_at=utcnow() - dt.timedelta(seconds=30)).id
        for _ in range(6)
    }
    fresh = set(db.client.enqueue_many("q", [b"new"] * 4).enqueued_ids)
    seen: set[str] = set()
    lock = threading.Lock()

    def handler(task) -> None:
        with lock:
            seen.add(task.id)

    run_until_empty(db.client, handler, concurrency=2, batch=10)
    still = db.count_expired_leases()
    assert still == 0, f"until_empty reported done with {still} expired leases left"
    if not expired <= seen:  # swept into a retry a moment ahead: the next run takes them
        run_until_empty(db.client, handler, concurrency=2, batch=10)
    assert fresh <= seen
    assert expired <= seen, f"{len(expired - seen)} of {len(expired)} tasks with an expired lease never ran"
    assert db.count("shardq_tasks") == 0


def test_a_long_running_worker_alone_recovers_tasks_of_a_consumer_that_vanished(db):
    """A consumer claims with a 1 s lease and disappears (a crash); a worker that is already
    running, with no reaper anywhere, runs those tasks once their lease has expired."""
    db.client.set_queue("q", backoff_base=0.001, backoff_cap=0.001)
    ids = set(db.client.enqueue_many("q", [b"x"] * 8).enqueued_ids)
    crashed = shardq.Consumer(db.store, ["q"], batch=8, lease_seconds=1)
    claimed = {t.id for t in crashed.claim().tasks}
    assert claimed, "the consumer claimed nothing"
    seen: set[str] = set()
    everything = threading.Event()

    def handler(task) -> None:
        seen.add(task.id)
        if ids <= seen:
            everything.set()

    worker = db.client.worker(["q"], handler, concurrency=2, batch=8)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
    thread.start()
    try:
        # the lease (1 s) plus a few seconds, as the README promises
        assert everything.wait(10.0), (
            f"{len(claimed - seen)} of {len(claimed)} tasks of the vanished consumer never ran again"
        )
    finally:
        worker.stop()
        thread.join(30)
    assert db.count("shardq_tasks") == 0
