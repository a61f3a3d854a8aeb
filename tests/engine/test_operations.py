"""The engines' operations stepped without a database: each is a plan, so the requests it yields
and what it makes of canned answers can be checked in microseconds. CockroachDB's side has no
server here; these pin down what its operations send."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from shardq.engine import COCKROACHDB, POSTGRESQL
from shardq.errors import ShardLayoutChanged
from shardq.models import NewTask
from shardq.sql.plan import Call, SchemaChange, WithInternals
from tests.support.plans import drive, names


def test_postgresql_claims_a_round_in_one_statement_starting_one_bucket_further_each_turn():
    assert POSTGRESQL.claim_groups(4, 0) == [[0, 1, 2, 3]]
    assert POSTGRESQL.claim_groups(4, 5) == [[1, 2, 3, 0]]
    tasks, sent = drive(POSTGRESQL.claim([1, 2, 3, 0], "q", 10, 30.0))
    assert tasks == [] and names(sent) == ["task_claim_round"]
    assert sent[0].params["buckets"] == [1, 2, 3, 0] and len(sent[0].params["tokens"]) == 4
    assert sent[0].binary and sent[0].tuples


def test_cockroachdb_claims_one_bucket_per_statement():
    assert COCKROACHDB.claim_groups(3, 7) == [[0], [1], [2]]
    tasks, sent = drive(COCKROACHDB.claim([2], "q", 10, 30.0))
    assert tasks == [] and names(sent) == ["task_claim_batch"] and sent[0].params["bucket"] == 2
    promoted, sent = drive(COCKROACHDB.promote_due([2], "q", 500), lambda request: [{}, {}])
    assert promoted == 2 and names(sent) == ["task_promote_due"]
    with pytest.raises(ValueError):  # a group is one bucket there: more is a caller's mistake
        drive(COCKROACHDB.claim([0, 1], "q", 10, 30.0))


def test_closing_claims_without_tasks_sends_a_statement_only_where_lease_records_exist():
    token = uuid.uuid4()
    done, sent = drive(POSTGRESQL.ack_keys([], [token]), lambda request: [(0, None)])
    assert done == set() and names(sent) == ["task_ack_many"] and sent[0].params["closed_tokens"] == [token]
    done, sent = drive(COCKROACHDB.ack_keys([], [token]))
    assert done == set() and sent == []


def test_only_postgresql_sweeps_lease_records():
    swept, sent = drive(POSTGRESQL.sweep_lease_records(3, 100), lambda request: {"dropped": 2, "pushed": 1})
    assert swept == (2, 1) and names(sent) == ["lease_records_settle"]
    assert drive(COCKROACHDB.sweep_lease_records(3, 100)) == ((0, 0), [])


def test_a_historical_snapshot_exists_only_on_cockroachdb():
    assert drive(COCKROACHDB.stats_snapshot(True), lambda request: None) == (
        True,
        [Call("stats_snapshot_historical", rows="none")],
    )
    assert drive(COCKROACHDB.stats_snapshot(False), lambda request: None)[0] is False
    historical, sent = drive(POSTGRESQL.stats_snapshot(True), lambda request: None)
    assert historical is False and names(sent) == ["stats_snapshot_begin"]


def test_cockroachdb_counts_by_bucket_in_the_present_when_the_layout_is_younger_than_the_historical_read():
    def answer(request: Call) -> list[dict]:
        if request.name == "task_count_by_bucket":
            raise ShardLayoutChanged("the shard column did not exist then")
        return [{"bucket": 1, "tasks": 5}]

    counts, sent = drive(COCKROACHDB.count_by_bucket(True), answer)
    assert counts == {1: 5} and names(sent) == ["task_count_by_bucket", "task_count_by_bucket_current"]
    assert names(drive(COCKROACHDB.count_by_bucket(False), answer)[1]) == ["task_count_by_bucket_current"]
    assert names(drive(POSTGRESQL.count_by_bucket(True))[1]) == ["task_count_by_bucket"]


def test_cockroachdb_reads_depth_per_queue_and_bucket_and_the_oldest_ready_task_per_priority():
    heads = iter([{"exec_time": 20, "rank": 0}, {"exec_time": 10, "rank": 5}, None])

    def answer(request: Call) -> Any:
        if request.name == "stats_depth_one":
            return {
                "ready": 3,
                "due_scheduled": 1,
                "scheduled": 2,
                "leased": 4,
                "expired": 1,
                "backlog": 0,
                "waiting": 5,
                "oldest_due_scheduled": 15,
            }
        return next(heads)

    rows, sent = drive(COCKROACHDB.depth(["q"], [7], 100), answer)
    assert names(sent) == [
        "stats_depth_one",
        "stats_ready_head_after",
        "stats_ready_head_after",
        "stats_ready_head_after",
    ]
    assert rows == [
        {
            "queue": "q",
            "bucket": 7,
            "ready": 4,
            "scheduled": 2,
            "leased": 3,
            "expired": 1,
            "backlog": 0,
            "waiting": 5,
            "oldest_ready": 10,
            "ready_capped": False,
            "scheduled_capped": False,
            "leased_capped": False,
            "expired_capped": False,
            "backlog_capped": False,
            "waiting_capped": False,
        }
    ]


def test_schema_jobs_are_read_with_internals_on_cockroachdb_and_are_none_on_postgresql():
    assert drive(POSTGRESQL.schema_jobs()) == ([], [])
    jobs, sent = drive(COCKROACHDB.schema_jobs(), lambda request: [])
    assert jobs == [] and len(sent) == 1 and isinstance(sent[0], WithInternals)
    assert names(drive(sent[0].body())[1]) == ["table_schema_jobs_running"]


def test_only_postgresql_sends_an_unset_optional_enqueue_column_as_one_null():
    tasks, ids = [NewTask(b"a"), NewTask(b"b")], [uuid.uuid4(), uuid.uuid4()]
    assert POSTGRESQL.task_arrays(tasks, ids)["priorities"] is None
    assert COCKROACHDB.task_arrays(tasks, ids)["priorities"] == [0, 0]


def test_only_postgresql_indexes_a_spark_staging_table_before_the_merge():
    assert drive(POSTGRESQL.spark_stage_ready("shardq_stage_x"))[1] == [
        SchemaChange("spark_stage_index", identifiers={"stage": "shardq_stage_x"})
    ]
    assert drive(COCKROACHDB.spark_stage_ready("shardq_stage_x")) == (None, [])


def test_cockroachdb_asks_for_explain_output_with_the_values_inlined():
    inline = lambda text, params: text.replace("%(q)s", repr(params["q"]))  # noqa: E731
    assert COCKROACHDB.explain_query("SELECT %(q)s", {"q": "x"}, inline) == ("EXPLAIN SELECT 'x'", None)
    assert POSTGRESQL.explain_query("SELECT %(q)s", {"q": "x"}, inline) == (
        "EXPLAIN (FORMAT JSON) SELECT %(q)s",
        {"q": "x"},
    )
