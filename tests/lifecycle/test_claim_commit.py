"""A worker's claim on PostgreSQL commits without waiting for its WAL flush, unless it must be
durable: a claim of a flow-limited queue (its slots and tokens share the transaction) or one that
took a task with an exclusive key (its lease keeps the key's next task from running beside it).

The claim sets ``synchronous_commit`` for its own transaction only, so these tests run the claim
inside an open transaction and read the setting the commit would use."""

from __future__ import annotations

from shardq.lifecycle.claim import Consumer
from tests.support.probes import synchronous_commit


def setting_inside_claim(db, queue: str, *, durable: bool) -> tuple[int, str]:
    """Claim in ``queue`` inside one transaction and read, before it commits, the setting its
    commit will use."""

    def body(session):
        tasks = db.store.claim(list(range(db.layout.visit_count)), queue, 10, 30.0, durable=durable)
        return len(tasks), synchronous_commit(session)

    return db.store.session.transaction(body)


def test_a_claim_of_plain_tasks_commits_without_waiting_for_disk(pg_db):
    pg_db.make_task("q")
    assert setting_inside_claim(pg_db, "q", durable=False) == (1, "off")
    # Only that transaction: the session keeps its own setting.
    assert synchronous_commit(pg_db.session) == "on"


def test_a_claim_asked_to_be_durable_keeps_the_sessions_setting(pg_db):
    pg_db.make_task("q")
    assert setting_inside_claim(pg_db, "q", durable=True) == (1, "on")


def test_a_claim_that_takes_a_task_with_an_exclusive_key_is_durable(pg_db):
    pg_db.make_task("q")
    pg_db.make_task("q", exclusive_key="customer-7")
    assert setting_inside_claim(pg_db, "q", durable=False) == (2, "on")


def test_a_worker_claims_a_flow_limited_queue_durably_and_others_not(pg_db):
    pg_db.make_task("plain")
    pg_db.make_task("limited")
    pg_db.client.set_queue("limited", concurrency=2)
    sent: list[tuple[str, bool]] = []
    claim = pg_db.store.claim

    def recording(buckets, queue, limit, lease_seconds, *, durable=True):
        sent.append((queue, durable))
        return claim(buckets, queue, limit, lease_seconds, durable=durable)

    pg_db.store.claim = recording
    consumer = Consumer(pg_db.store, ["plain", "limited"])
    found = [len(consumer.claim().tasks), len(consumer.claim().tasks)]
    assert found == [1, 1]
    assert sorted(sent) == [("limited", True), ("plain", False)]
