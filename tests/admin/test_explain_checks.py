"""Query-plan guards: the hot statements touch one bucket's span, never the whole table.

PostgreSQL here; the CockroachDB equivalents are in test_cockroach.py and run where a cluster is
reachable.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid

import pytest

from shardq.models import RANK_BACKLOG, RANK_SCHEDULED
from shardq.workflows.spark_callbacks import mark_of
from tests.support.explain import nodes, plan, scans_of
from tests.support.factories import utcnow


@pytest.fixture
def seeded(pg_db):
    pg_db.client.enqueue_many("q", [b"x"] * 20_000, batch_size=5000)
    pg_db.client.enqueue_many("other", [b"y"] * 5_000, batch_size=5000)
    for _ in range(50):
        pg_db.make_task(state="leased", lease_expires_at=utcnow() - dt.timedelta(seconds=5))
    # Lease records of claims still in flight elsewhere (one per claimed batch).
    pg_db.add_lease_records_in_flight(5000)
    pg_db.sql("ANALYZE")
    return pg_db


def test_claim_scans_one_bucket_span_of_the_primary_key(seeded):
    tree = plan(
        seeded,
        "task_claim_batch",
        dict(bucket=2, queue="q", limit=100, lease_seconds=30, token=uuid.uuid4(), backlog_rank=RANK_BACKLOG),
    )
    scans = scans_of(tree, "shardq_tasks")
    assert scans and all(s["Node Type"] != "Seq Scan" for s in scans)
    assert any(s["Node Type"] == "Tid Scan" for s in scans)  # the UPDATE reaches locked rows by ctid
    picking = [s for s in scans if "rank <" in s.get("Index Cond", "")]
    assert picking, scans
    cond = picking[0]["Index Cond"]
    assert re.search(r"bucket = '?2'?", cond) and "queue =" in cond
    assert picking[0]["Index Name"] == "shardq_tasks_pkey"


def test_reap_candidates_use_the_bucket_lease_index_and_whole_key_lookups(seeded):
    tree = plan(seeded, "task_reap_candidates", dict(bucket=1, limit=500))
    lease_scans = scans_of(tree, "shardq_leases")
    assert lease_scans and all(s["Node Type"] != "Seq Scan" for s in lease_scans)
    conditions = " ".join(s.get("Index Cond", "") + s.get("Recheck Cond", "") for s in lease_scans)
    assert re.search(r"bucket = '?1'?", conditions)
    task_scans = scans_of(tree, "shardq_tasks")
    assert task_scans and all(s["Node Type"] != "Seq Scan" for s in task_scans)
    assert all(s.get("Index Name") in ("shardq_tasks_pkey", "shardq_tasks_id") for s in task_scans)


def test_ack_deletes_by_whole_key(seeded):
    tree = plan(
        seeded,
        "task_ack_many",
        dict(
            buckets=[1],
            queues=["q"],
            ranks=[0],
            exec_times=[utcnow()],
            ids=[uuid.uuid4()],
            tokens=[uuid.uuid4()],
            states=["leased"],
            closed_tokens=[],
            expected=1,
        ),
    )
    task_scans = scans_of(tree, "shardq_tasks")
    assert task_scans and all(s["Node Type"] != "Seq Scan" for s in task_scans)


def test_promotion_scans_only_due_scheduled_rows(seeded):
    seeded.client.enqueue_many("q", [b"later"] * 2000, batch_size=2000)  # due now: ready
    from shardq.models import NewTask

    seeded.client.enqueue_many("q", [NewTask(b"x", delay=3600)] * 5000, batch_size=5000)
    seeded.sql("ANALYZE")
    tree = plan(seeded, "task_promote_due", dict(bucket=1, queue="q", limit=500, scheduled_rank=RANK_SCHEDULED))
    scans = scans_of(tree, "shardq_tasks")
    assert scans and all(s["Node Type"] != "Seq Scan" for s in scans)
    conditions = " ".join(s.get("Index Cond", "") + s.get("Recheck Cond", "") for s in nodes(tree))
    assert "rank = " in conditions and "exec_time <= now()" in conditions


def test_the_engine_seam_sees_a_whole_table_read_and_the_hot_claim_avoids_one(seeded):
    engine = seeded.store.engine
    round_plan = seeded.session.explain(
        "task_claim_round",
        {
            "buckets": [0, 1, 2, 3],
            "tokens": [uuid.uuid4() for _ in range(4)],
            "queue": "q",
            "limit": 10,
            "lease_seconds": 30.0,
            "durable": False,
            "scheduled_rank": RANK_SCHEDULED,
            "backlog_rank": RANK_BACKLOG,
        },
    )
    assert not engine.explain_reads_whole_table(round_plan), round_plan
    whole = seeded.session.explain("task_count_by_bucket")
    assert engine.explain_reads_whole_table(whole), whole


@pytest.fixture
def chained(pg_db):
    """2,000 workflows of 10 steps chained one after the other (18,000 edges), as
    ``loadtest.workflows`` makes them, and the first steps of 400 of them: one settle batch."""
    pg_db.add_chained_workflows()
    pg_db.sql("ANALYZE")
    firsts = pg_db.first_steps_of_chains(400)
    return pg_db, {"workflow_ids": [r["workflow_id"] for r in firsts], "steps": ["s0"] * len(firsts)}


@pytest.mark.parametrize(
    "name, extra",
    [
        ("workflow_children_advance", {}),
        ("workflow_counts_advance", {}),
        ("workflow_children_stop", {"died": True}),
        ("workflow_steps_reopen", {}),
        ("workflow_counts_reopen", {}),
    ],
)
def test_a_step_ack_finds_its_childrens_edges_by_key_not_by_reading_every_edge(chained, name, extra):
    # A settle batch is a large share of a small edges table: PostgreSQL then hashed the whole
    # table once per ack (a scan of every workflow's edges), unless each parent's edges are looked
    # up in the lateral subquery (docs/workflows.md, "Costs").
    db, params = chained
    tree = plan(db, name, {**params, **extra})
    scans = scans_of(tree, "shardq_workflow_edges")
    assert scans and all(s["Node Type"] != "Seq Scan" for s in scans), [s["Node Type"] for s in scans]


@pytest.fixture
def leased_after_analyze(pg_db):
    """20,000 waiting workflow steps and 2,000 ready tasks, analyzed while none was leased (as
    autovacuum may find the table between two settle batches), then 400 of the ready ones leased:
    the keys of one settle batch."""
    pg_db.add_ready_and_waiting_tasks()
    pg_db.sql("ANALYZE shardq_tasks")
    rows = pg_db.lease_some_ready(400)
    keys = {
        "buckets": [r["bucket"] for r in rows],
        "queues": [r["queue"] for r in rows],
        "ranks": [r["rank"] for r in rows],
        "exec_times": [r["exec_time"] for r in rows],
        "ids": [r["id"] for r in rows],
        "tokens": [r["lease_token"] for r in rows],
        "states": ["leased"] * len(rows),
        "scheduled_rank": RANK_SCHEDULED,
        "backlog_rank": RANK_BACKLOG,
    }
    return pg_db, keys


@pytest.mark.parametrize(
    "name, extra",
    [
        ("task_ack_many", {"closed_tokens": [], "expected": 1}),
        (
            "task_ack_many_kept",
            {"closed_tokens": [], "tasks": None, "run_seconds": None, "results": None, "notify": []},
        ),
        ("task_retry_many", {"delays": None, "refunds": None, "errors": None, "require_expired": False}),
        ("task_bury_many", {"errors": None, "require_expired": False}),
        ("task_release_many", {}),
        ("task_extend_many", {"lease_seconds": 30.0}),
    ],
)
def test_statements_over_leased_keys_probe_an_index_whatever_the_statistics_say_of_leased_rows(
    leased_after_analyze, name, extra
):
    # Written `t.state = 'leased'`, the planner sized the leased rows from statistics that saw
    # none, scanned the whole table for them and compared each with every key of the batch (60 ms
    # for 400 keys in 50,000 rows against 2 ms by index: docs/loadtest.md).
    db, keys = leased_after_analyze
    n = len(keys["ids"])
    params = {**keys, **{k: ([None] * n if v is None else v) for k, v in extra.items()}}
    tree = plan(db, name, params)
    scans = scans_of(tree, "shardq_tasks")
    assert scans and all(s["Node Type"] != "Seq Scan" for s in scans), [s["Node Type"] for s in scans]


@pytest.fixture
def steps_and_a_run(pg_db):
    """20,000 workflow steps' task rows (their workflow's id: a UUID version 4) and the 2,000 tasks
    of one Spark run with a callback (the run's mark: version 5), analyzed; and the run's mark."""
    mark = mark_of("explain-run")
    pg_db.add_step_tasks_and_a_run(mark)
    pg_db.sql("VACUUM ANALYZE shardq_tasks")
    return pg_db, mark


def test_a_workflow_step_writes_no_entry_in_the_index_of_spark_runs_tasks(steps_and_a_run):
    # Every step wrote an entry in the index the Spark callback reads when it was enqueued and
    # again when it was released, though only runs' tasks are looked up there (docs/workflows.md,
    # "Costs": a chain step's release 20 -> 13 µs).
    db, _mark = steps_and_a_run
    rows = db.workflow_id_indexes()
    assert rows and {r["reltuples"] for r in rows} == {2000}, rows


def test_the_spark_callback_asks_whether_a_run_has_tasks_left_by_its_index(steps_and_a_run):
    db, mark = steps_and_a_run
    tree = plan(db, "spark_callback_due", {"marks": [mark]})
    scans = scans_of(tree, "shardq_tasks")
    assert scans and all(s.get("Index Name") == "shardq_tasks_by_run" for s in scans), scans
