"""PostgreSQL's round claims (one statement over every bucket) and whole-claim acks by key range."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import psycopg
import pytest

from shardq.models import RANK_BACKLOG, RANK_SCHEDULED, NewTask
from shardq.sql import statements_for
from tests.support.explain import generic_plan, nodes, plan, scans_of
from tests.support.factories import utcnow


@pytest.fixture
def seeded(pg_db):
    """Enough rows, expired leases and lease records that the planner's choices are real ones."""
    pg_db.client.enqueue_many("q", [b"x"] * 20_000, batch_size=5000)
    pg_db.client.enqueue_many("other", [b"y"] * 5_000, batch_size=5000)
    for _ in range(50):
        pg_db.make_task(state="leased", lease_expires_at=utcnow() - dt.timedelta(seconds=5))
    pg_db.sql("ANALYZE")
    return pg_db


def test_a_round_claim_walks_buckets_in_order_with_a_token_and_lease_record_per_bucket(pg_db):
    for bucket in range(4):
        for _ in range(2):
            pg_db.make_task(bucket=bucket)
    claimed = pg_db.store.task_claim_round([2, 3, 0, 1], "q", 5, 30.0)
    assert sorted(t.key.bucket for t in claimed) == [0, 2, 2, 3, 3]
    tokens = {t.key.bucket: t.lease_token for t in claimed}
    assert all(t.lease_token == tokens[t.key.bucket] for t in claimed) and len(set(tokens.values())) == 3
    leases = pg_db.lease_record_sizes()
    assert [(r["bucket"], r["n"]) for r in leases] == [(0, 1), (2, 2), (3, 2)]
    assert all(r["token"] == tokens[r["bucket"]] for r in leases)
    assert pg_db.count_tasks(state="leased") == 5


def test_a_round_claim_hands_tasks_out_in_priority_order(pg_db):
    pg_db.client.enqueue_many("q", [NewTask(b"x", priority=p) for p in (3, -1, 2, 0, 1, 5, -4, 4)])
    claimed = pg_db.store.task_claim_round(list(range(pg_db.layout.visit_count)), "q", 100, 30.0)
    assert [t.priority for t in claimed] == sorted(t.priority for t in claimed) and len(claimed) == 8


def test_a_round_claim_scans_each_bucket_span_of_the_primary_key(seeded):
    tree = plan(
        seeded,
        "task_claim_round",
        {
            "buckets": [2, 3, 0, 1],
            "tokens": [uuid.uuid4() for _ in range(4)],
            "queue": "q",
            "limit": 100,
            "lease_seconds": 30,
            "durable": False,
            "backlog_rank": RANK_BACKLOG,
        },
    )
    scans = scans_of(tree, "shardq_tasks")
    assert scans and all(s["Node Type"] != "Seq Scan" for s in scans)
    assert any(s["Node Type"] == "Tid Scan" for s in scans)  # the UPDATE reaches locked rows by ctid
    picking = [s for s in scans if "rank <" in s.get("Index Cond", "")]
    assert picking and picking[0]["Index Name"] == "shardq_tasks_pkey"
    assert "bucket = w.bucket" in picking[0]["Index Cond"]
    # bucket by bucket (a nested loop under the LIMIT), never a sort over every bucket's rows
    # (the statement sorts only what it returns, at most the limit, into key order)
    (picked,) = [n for n in nodes(tree) if n.get("Subplan Name") == "CTE picked"]
    assert any(n["Node Type"] == "Nested Loop" for n in nodes(picked))
    assert not any(n["Node Type"] == "Sort" for n in nodes(picked))


def test_a_round_promotion_scans_only_due_scheduled_rows(seeded):
    seeded.client.enqueue_many("q", [NewTask(b"x", delay=3600)] * 5000, batch_size=5000)
    seeded.sql("ANALYZE")
    tree = plan(
        seeded,
        "task_promote_due_round",
        {"buckets": [1, 2, 3, 0], "queue": "q", "limit": 500, "scheduled_rank": RANK_SCHEDULED},
    )
    scans = scans_of(tree, "shardq_tasks")
    assert scans and all(s["Node Type"] != "Seq Scan" for s in scans)
    conditions = " ".join(s.get("Index Cond", "") + s.get("Recheck Cond", "") for s in nodes(tree))
    assert "rank = " in conditions and "exec_time <= now()" in conditions


def test_a_whole_claim_ack_scans_the_claims_key_range_whatever_the_parameters(seeded):
    claimed = seeded.store.task_claim_round([1], "q", 50, 30.0)
    first = min((t.key.rank, t.key.exec_time, t.key.id) for t in claimed)
    last = max((t.key.rank, t.key.exec_time, t.key.id) for t in claimed)
    custom = plan(
        seeded,
        "task_ack_claim",
        {
            "bucket": 1,
            "queue": "q",
            "first_rank": first[0],
            "first_exec": first[1],
            "first_id": first[2],
            "last_rank": last[0],
            "last_exec": last[1],
            "last_id": last[2],
            "token": claimed[0].lease_token,
            "expected": len(claimed),
        },
    )
    # Once prepared, the server may stop planning per ack and reuse a plan made without the
    # values: that one must scan the key range too, never the table.
    for tree in (custom, generic_plan(seeded, "task_ack_claim")):
        scans = scans_of(tree, "shardq_tasks")
        assert scans and all(s["Node Type"] != "Seq Scan" for s in scans)
        conditions = " ".join(s.get("Index Cond", "") + s.get("Recheck Cond", "") for s in scans)
        assert "bucket" in conditions and "exec_time" in conditions and ", id)" in conditions


def test_a_whole_claim_ack_reads_only_its_claims_rows_among_tasks_enqueued_in_one_transaction(seeded):
    # The 20,000 tasks of "q" came in batches of 5,000, each batch's sharing one exec_time (its
    # transaction's now()). Bounded by (rank, exec_time) alone, the ack of 50 read every row of
    # the bucket with that exec_time: a fan-out of 100,000 steps enqueued at once cost 40 µs per
    # task to ack (docs/loadtest.md).
    claimed = seeded.store.task_claim_round([1], "q", 50, 30.0)
    assert len(claimed) == 50 and len({t.key.exec_time for t in claimed}) == 1
    first = min((t.key.rank, t.key.exec_time, t.key.id) for t in claimed)
    last = max((t.key.rank, t.key.exec_time, t.key.id) for t in claimed)
    text = statements_for("postgresql")["task_ack_claim"].text
    params = {
        "bucket": 1,
        "queue": "q",
        "first_rank": first[0],
        "first_exec": first[1],
        "first_id": first[2],
        "last_rank": last[0],
        "last_exec": last[1],
        "last_id": last[2],
        "token": claimed[0].lease_token,
        "expected": len(claimed),
    }
    with psycopg.connect(seeded.dsn.conninfo) as conn:  # rolled back on leaving: nothing is deleted
        data = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + text, params).fetchone()[0]
        conn.rollback()
    tree = (json.loads(data) if isinstance(data, str) else data)[0]["Plan"]
    (scan,) = scans_of(tree, "shardq_tasks")
    assert scan["Actual Rows"] == 50
    assert scan.get("Rows Removed by Filter", 0) == 0, scan
    assert seeded.count("shardq_tasks") == 25_050  # the 50 leased rows of the set-up too: nothing deleted
