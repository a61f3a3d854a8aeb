"""The worker's hot path: full-batch claims, acks of whole claims by key range, mixed outcomes,
fencing of stale acks, and hand-back on stop — behaviour the load-test optimisations must keep."""

from __future__ import annotations

import threading
import uuid

import shardq
from shardq import Permanent
from shardq.models.leases import WholeClaim
from tests.support.factories import run_until_settled


def _enqueue(client, queue: str, n: int) -> set[str]:
    return set(client.enqueue_many(queue, [f"task-{i}".encode() for i in range(n)]).enqueued_ids)


def test_worker_runs_every_task_once_and_leaves_no_rows_or_lease_records(db):
    ids = _enqueue(db.client, "q", 250)
    seen: list[str] = []
    lock = threading.Lock()

    def handler(task) -> None:
        with lock:
            seen.append(task.id)

    stats = db.client.work(["q"], handler, concurrency=4, batch=20, until_empty=True, install_signal_handlers=False)
    assert sorted(seen) == sorted(ids)
    assert stats.acked == 250 and stats.lease_lost == 0
    assert db.count("shardq_tasks") == 0
    if db.dialect == "postgresql":
        assert db.count("shardq_leases") == 0


def test_worker_claims_full_batches_rather_than_topping_up_a_few_tasks_at_a_time(db):
    _enqueue(db.client, "q", 400)
    stats = db.client.work(
        ["q"], lambda task: None, concurrency=4, batch=50, until_empty=True, install_signal_handlers=False
    )
    assert stats.acked == 400
    claims_with_tasks = stats.claim_statements - stats.empty_rounds * db.layout.visit_count
    # 400 tasks in batches of up to 50, spread over 4 buckets: a few partial batches per bucket
    # at most, never dozens of tiny claims.
    assert claims_with_tasks <= 400 // 50 + 2 * db.layout.visit_count


def test_mixed_outcomes_in_one_claim_are_each_settled_their_own_way(db):
    ids = _enqueue(db.client, "q", 30)
    order = sorted(ids)
    fail, dead = set(order[:5]), set(order[5:8])

    def handler(task) -> None:
        if task.id in fail:
            raise RuntimeError("try again")
        if task.id in dead:
            raise Permanent("never")

    stats = db.client.work(["q"], handler, concurrency=3, batch=30, until_empty=True, install_signal_handlers=False)
    assert (stats.acked, stats.retried, stats.dead) == (22, 5, 3)
    for task_id in fail:
        row = db.task_row(task_id)
        assert row["state"] in ("ready", "scheduled") and row["attempts"] == 1 and "try again" in row["last_error"]
    for task_id in dead:
        assert db.task_row(task_id) is None and db.dead_row(task_id) is not None
    assert db.count("shardq_tasks") == 5
    if db.dialect == "postgresql":
        assert db.count("shardq_leases") == 0


def test_ack_of_a_whole_claim_spares_a_task_whose_lease_passed_to_someone_else(db):
    _enqueue(db.client, "q", 12)
    stolen: list[str] = []

    def handler(task) -> None:
        if not stolen:
            stolen.append(task.id)
            # What the reaper plus another worker would do: the row now carries another token.
            db.replace_lease_token(task.id, uuid.uuid4())

    stats = run_until_settled(db.client.worker(["q"], handler, concurrency=1, batch=12), 12)
    assert stats.acked == 11 and stats.lease_lost == 1
    assert db.task_row(stolen[0]) is not None  # still there, for its new holder


def test_task_ack_claims_reports_only_the_ids_it_could_not_delete(db):
    db.client.enqueue_many("q", [shardq.NewTask(b"x", priority=p % 3) for p in range(10)])
    store = db.store
    claimed = []
    for bucket in range(db.layout.visit_count):
        claimed += store.task_claim_batch(bucket, "q", 10, 30.0)
    assert len(claimed) == 10
    by_token: dict = {}
    for task in claimed:
        by_token.setdefault(task.lease_token, []).append(task)
    victim = claimed[0]
    db.replace_lease_token(victim.key.id, uuid.uuid4())
    whole = [
        WholeClaim(
            tasks[0].key.bucket,
            tasks[0].queue,
            min((t.key.rank, t.key.exec_time, t.key.id) for t in tasks),
            max((t.key.rank, t.key.exec_time, t.key.id) for t in tasks),
            token,
            [t.key for t in tasks],
        )
        for token, tasks in by_token.items()
    ]
    assert store.task_ack_claims(whole) == {victim.key.id}
    assert db.count("shardq_tasks") == 1
    if db.dialect == "postgresql":
        assert db.count("shardq_leases") == 0


def test_task_ack_claims_reports_every_id_of_a_claim_whose_leases_all_passed_to_someone_else(db):
    db.client.enqueue_many("q", [b"x"] * 3)
    claimed = [t for bucket in range(db.layout.visit_count) for t in db.store.task_claim_batch(bucket, "q", 10, 30.0)]
    lost_claim = [t for t in claimed if t.lease_token == claimed[0].lease_token]
    for task in lost_claim:
        db.replace_lease_token(task.key.id, uuid.uuid4())
    whole = WholeClaim(
        lost_claim[0].key.bucket,
        "q",
        (lost_claim[0].key.rank, lost_claim[0].key.exec_time, lost_claim[0].key.id),
        (lost_claim[-1].key.rank, lost_claim[-1].key.exec_time, lost_claim[-1].key.id),
        lost_claim[0].lease_token,
        [t.key for t in lost_claim],
    )
    assert db.store.task_ack_claims([whole]) == {t.key.id for t in lost_claim}
    assert db.count("shardq_tasks") == 3


def test_stop_hands_back_claimed_tasks_that_have_not_started_with_the_attempt_refunded(db):
    _enqueue(db.client, "q", 40)
    started = threading.Event()
    release = threading.Event()

    def handler(task) -> None:
        started.set()
        release.wait(10)

    worker = db.client.worker(["q"], handler, concurrency=1, batch=40, grace_seconds=10)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    assert started.wait(10)
    worker.stop()
    release.set()
    thread.join(30)
    stats = worker.totals
    assert stats.acked + stats.released == stats.claimed
    assert stats.released >= 1
    rows = db.tasks("state", "attempts")
    assert len(rows) == 40 - stats.acked
    assert all(r["state"] == "ready" and r["attempts"] == 0 for r in rows)


def test_one_outcome_the_database_refuses_does_not_cost_the_batch_its_other_outcomes(db, monkeypatch):
    # Let a NUL byte through to the database (describe() and storable() would have replaced it):
    # the settle of the batch fails for that one row; every other outcome must still be settled,
    # that one with a plain reason, and nothing left to the lease sweep.
    monkeypatch.setattr("shardq.worker.outcomes.describe", lambda exc: f"{type(exc).__name__}: {exc}")
    monkeypatch.setattr("shardq.operations.tasks.storable", lambda text: text)
    db.client.enqueue_many("q", [b"ok"] * 20 + [b"bad"] + [b"retry"])

    def handler(task):
        if task.payload == b"bad":
            raise Permanent("nul \x00 byte")
        if task.payload == b"retry":
            raise RuntimeError("again \x00 later")

    totals = db.client.work(["q"], handler, until_empty=True, batch=50, sweep=False)
    assert totals.acked == 20 and totals.dead == 1 and totals.lease_lost == 0
    dead = db.dead_rows("last_error")
    assert len(dead) == 1 and "could not be stored" in dead[0]["last_error"]
    left = db.tasks("state", "last_error")
    assert len(left) == 1 and left[0]["state"] == "scheduled" and "could not be stored" in left[0]["last_error"]
