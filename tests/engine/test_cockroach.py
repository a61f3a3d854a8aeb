"""CockroachDB-only behaviour: plans, retries, layout discovery and resizing.

These need a CockroachDB (``SHARDQ_TEST_COCKROACH_URL``, or a Docker engine for testcontainers)
and skip with the reason otherwise. The behavioural suite runs against CockroachDB through the
``db`` fixture; this file holds what only CockroachDB has. docs/cockroachdb.md lists which
documented fact each test checks.
"""

from __future__ import annotations

import contextlib
import re
import uuid

import pytest

from shardq.admin import actions as admin
from shardq.engine import COCKROACHDB
from shardq.engine.cockroachdb import MIN_VERSION, parse_version
from shardq.errors import DatabaseError, InvalidInput, SerializationConflict, ShardLayoutChanged
from shardq.lifecycle.claim import Consumer
from shardq.models import ShardLayout
from shardq.resize import resize_buckets
from shardq.sessions.session import Session
from shardq.sessions.store import TaskStore
from tests.support.factories import fenced

pytestmark = pytest.mark.cockroach


def explain(db, name: str, params: dict, layout: ShardLayout | None = None) -> str:
    """The engine's plan of a named statement with these values (inlined, so the plan is the one
    for those constants)."""
    layout = layout or db.layout
    with Session(db.dsn) as session:
        session.set_shard_column(layout.shard_column)
        return session.explain(name, params)


def locking_scan_spans(plan: str) -> list[str]:
    """The ``spans:`` lines of the scan that takes the SKIP LOCKED locks (the claim's inner
    subquery). The outer row lookup may print spans of its own over every shard (the shard comes
    from the hidden CHECK, audit F9), so only the locking scan's block is checked. EXPLAIN prints
    ``locking wait policy: skip locked`` inside that block (pkg/sql/opt/exec/explain/emit.go)."""
    found = []
    for block in re.split(r"\n\s*│?\s*\n|(?=\n\s*[└├]── )", plan):
        if "skip locked" in block:
            found += re.findall(r"spans: (.*)", block)
    return found


def claim_params(bucket: int) -> dict:
    return {"bucket": bucket, "queue": "q", "limit": 10, "lease_seconds": 30.0, "token": uuid.uuid4()}


def hidden_columns(db) -> set[str]:
    return db.hidden_columns()


def test_the_server_is_a_supported_version(crdb_db):
    found = parse_version(crdb_db.session.parameter_status("crdb_version"))
    assert found is not None and found[:2] >= MIN_VERSION


def test_the_layout_is_discovered_from_the_primary_key(crdb_db):
    layout = crdb_db.layout
    assert layout.bucket_count == 4
    assert re.fullmatch(r"crdb_internal_\w+_shard_4", layout.shard_column)
    assert layout.shard_column in hidden_columns(crdb_db)


def test_a_claim_scans_one_bucket_span_of_ready_tasks_and_never_the_whole_table(crdb_db):
    crdb_db.client.enqueue_many("q", [b"x"] * 200)
    plan = explain(crdb_db, "task_claim_batch", claim_params(1))
    assert not COCKROACHDB.explain_reads_whole_table(plan), plan
    spans = locking_scan_spans(plan)
    assert spans and all(s.startswith("[/1/'ready'/'q'") for s in spans), plan


def test_acks_and_retries_look_each_row_up_by_its_whole_key(crdb_db):
    # Every shard input is a join equality (state too, as an input column), so the optimizer
    # computes the shard and each row is one point lookup (audit F5), not one per bucket.
    crdb_db.client.enqueue_many("q", [b"x"] * 3)
    keys = {
        "states": ["leased"] * 3,
        "queues": ["q"] * 3,
        "ranks": [0] * 3,
        "exec_times": ["2026-01-01T00:00:00Z"] * 3,
        "ids": [uuid.uuid4() for _ in range(3)],
        "tokens": [uuid.uuid4() for _ in range(3)],
    }
    for name, extra in (
        ("task_ack_many", {}),
        (
            "task_retry_many",
            {
                "delays": [0.0] * 3,
                "refunds": [0] * 3,
                "errors": ["e"] * 3,
                "require_expired": False,
                "scheduled_rank": 0,
            },
        ),
    ):
        plan = explain(crdb_db, name, {**keys, **extra})
        assert not COCKROACHDB.explain_reads_whole_table(plan), plan
        assert "lookup join" in plan and "equality cols are key" in plan, plan


def test_the_reaper_scans_one_bucket_span_of_leased_tasks(crdb_db):
    plan = explain(crdb_db, "task_reap_candidates", {"bucket": 2, "limit": 500})
    assert not COCKROACHDB.explain_reads_whole_table(plan), plan
    spans = re.findall(r"spans: (.*)", plan)
    assert spans and all(s.startswith("[/2/'leased'") for s in spans), plan


def test_every_transaction_runs_serializable_whatever_the_session_default(crdb_db):
    # Exclusive keys rely on SERIALIZABLE (audit F6): a session defaulting to READ COMMITTED must
    # still get it inside shardq's transactions.
    with Session(crdb_db.dsn) as session:
        # Servers without READ COMMITTED refuse the SET: their default is serializable anyway.
        with contextlib.suppress(DatabaseError):
            session.execute_raw("SET default_transaction_isolation = 'read committed'")
        level = session.transaction(lambda s: s.execute_raw("SHOW transaction_isolation"))
    assert str(next(iter(level[0].values()))).lower() == "serializable"


def test_connections_carry_only_startup_options_every_version_accepts(crdb_db):
    # results_buffer_size in `options` refused every connection before v24.2 (audit F2); the
    # session's value is the server's own default.
    options = COCKROACHDB.startup_options(statement_timeout_ms=5000)
    assert not any("results_buffer_size" in o for o in options)
    with Session(crdb_db.dsn, statement_timeout_ms=5000) as session:
        assert str(next(iter(session.execute_raw("SHOW statement_timeout")[0].values()))) in {"5000", "5s", "00:00:05"}


def test_injected_retry_errors_in_a_transaction_are_retried_and_bounded(crdb_db):
    # Every statement of an explicit transaction fails with 40001 until the transaction's epoch has
    # moved on 3 times, which a plain ROLLBACK-and-retry loop never does: each attempt must fail,
    # be rolled back (nothing written), and the loop must stop after max_retries.
    runs = []
    with Session(crdb_db.dsn, max_retries=2) as session:
        session.execute_raw("SET inject_retry_errors_enabled = true")

        def body(s: Session) -> None:
            runs.append(1)
            s.execute("queue_ensure", {"queue": "injected"})

        with pytest.raises(SerializationConflict):
            session.transaction(body)
    assert len(runs) == 3
    assert crdb_db.store.queue_get("injected") is None


def test_autocommit_statements_succeed_under_injected_retry_errors(crdb_db):
    crdb_db.client.enqueue_many("q", [b"x"] * 20)
    with Session(crdb_db.dsn) as session:
        session.execute_raw("SET inject_retry_errors_enabled = true")
        store = TaskStore(session)
        layout = store.layout()
        claimed = [t for b in range(layout.bucket_count) for t in store.task_claim_batch(b, "q", 100, 30.0)]
        assert len(store.task_ack_many([fenced(t) for t in claimed])) == 20
    assert len(claimed) == 20 and all(t.attempt == 1 for t in claimed)
    assert crdb_db.count() == 0


def test_buckets_show_counts_rows_with_a_current_read(crdb_db):
    crdb_db.client.enqueue_many("q", [b"x"] * 30)
    report = admin.buckets_show(crdb_db.store, historical=False)
    assert report.layout.shard_column == crdb_db.layout.shard_column
    assert sum(report.rows_per_bucket.values()) == 30
    assert not report.resizing


def test_buckets_show_reads_history_and_falls_back_when_the_table_is_younger(crdb_db):
    # A historical read sees the table as it was ~5 s ago (audit F7): rows just written may be
    # missing, never invented; a table younger than the read falls back to a current read.
    crdb_db.client.enqueue_many("q", [b"x"] * 30)
    report = admin.buckets_show(crdb_db.store)
    assert sum(report.rows_per_bucket.values()) in {0, 30}


def test_resize_rejects_bad_counts_and_treats_the_same_count_as_a_noop(crdb_db_fresh):
    with pytest.raises(InvalidInput):
        resize_buckets(crdb_db_fresh.client.new_session, 4096)
    same = resize_buckets(crdb_db_fresh.client.new_session, 4)
    assert not same.changed and "already 4" in same.message
    assert crdb_db_fresh.store.layout().shard_column == crdb_db_fresh.layout.shard_column


def test_resize_switches_the_shard_column_and_consumers_follow_without_losing_a_task(crdb_db_fresh):
    client = crdb_db_fresh.client
    client.enqueue_many("q", [f"t{i}".encode() for i in range(60)])
    consumer = Consumer(TaskStore(client.new_session()), ["q"], batch=10, lease_seconds=300, offset=0)
    held = consumer.claim().tasks
    assert held
    before = consumer.layout()

    reports = []
    result = resize_buckets(client.new_session, 8, on_progress=reports.append, poll=0.2)
    assert (result.before, result.after, result.changed) == (4, 8, True)
    assert any(r.phase == "schema-change" for r in reports)
    after = TaskStore(client.new_session()).layout()
    assert after.bucket_count == 8 and after.shard_column.endswith("_shard_8")
    assert result.shard_column_before == before.shard_column != after.shard_column
    if result.stale_column_dropped:
        assert before.shard_column not in hidden_columns(crdb_db_fresh)
    else:
        assert result.stale_column_kept  # the refusal is reported, not hidden

    # Tasks leased before the resize are settled by key and token; no shard column involved.
    assert len(crdb_db_fresh.store.task_ack_many([fenced(t) for t in held])) == len(held)
    # The consumer that cached the old layout follows the new one and claims the rest.
    rest = []
    for _ in range(100):
        found = consumer.claim()
        rest += found.tasks
        if found.round_empty:
            break
    assert len(held) + len(rest) == 60
    assert consumer.layout().shard_column == after.shard_column

    plan = explain(crdb_db_fresh, "task_claim_batch", claim_params(5), layout=after)
    assert not COCKROACHDB.explain_reads_whole_table(plan) and re.search(r"spans: \[/5/'ready'/'q'", plan), plan
    report = admin.buckets_show(crdb_db_fresh.store, historical=False)
    assert report.layout.bucket_count == 8 and not report.resizing
    assert sum(report.rows_per_bucket.values()) == len(rest)


def test_a_claim_on_a_dropped_shard_column_raises_shard_layout_changed(crdb_db_fresh):
    old = crdb_db_fresh.layout.shard_column
    result = resize_buckets(crdb_db_fresh.client.new_session, 8, poll=0.2)
    if not result.stale_column_dropped:
        pytest.skip(f"this server keeps the old shard column: {result.stale_column_kept}")
    with Session(crdb_db_fresh.dsn) as session:
        session.set_shard_column(old)
        with pytest.raises(ShardLayoutChanged):
            TaskStore(session).task_claim_batch(0, "q", 1, 30.0)
