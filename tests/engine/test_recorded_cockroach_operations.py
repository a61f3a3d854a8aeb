"""CockroachDB's operations (shardq.engine.cockroachdb_ops and the shared plans of
shardq.engine.common) run through a real session against the recorded server: layout discovery,
schema-change jobs on an internals session, claim, promote, the acks, depth and rows per bucket
with the historical read's fallback. Answers: tests/support/cockroach_answers.py."""

from __future__ import annotations

import datetime as dt
import struct
import uuid

import pytest

from shardq.engine import COCKROACHDB
from shardq.errors import NotMigrated, ShardLayoutChanged
from shardq.models import RANK_BACKLOG, RANK_SCHEDULED, TaskKey
from shardq.models.history import Finished, SucceededColumns
from shardq.models.leases import Fenced, WholeClaim
from shardq.operations.tasks import layout
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from tests.support.cockroach_answers import (
    CLAIM_COLUMNS,
    JOB_COLUMNS,
    NOW,
    SECONDARY_INDEX_DEFINITION,
    SHARD_COLUMN_16,
    SHARD_COLUMN_32,
    claimed_row,
    layout_16,
    layout_rows,
    primary_index_definition,
    undefined_column,
    undefined_table,
)
from tests.support.recorded_cockroach import Answering, Command, Received, RecordedCockroach, Rows, recorded_cockroach

pytestmark = pytest.mark.recorded


def _session(server: RecordedCockroach, **options) -> Session:
    session = Session(Dsn.parse(server.url()), **options)
    session.set_shard_column(SHARD_COLUMN_16)
    return session


def _key(bucket: int, task_id: uuid.UUID, *, rank: int = 0, queue: str = "q") -> TaskKey:
    return TaskKey(bucket, queue, rank, NOW, task_id)


# -- layout ----------------------------------------------------------------------------------------


def test_the_layout_is_the_primary_keys_shard_column_and_bucket_count():
    with recorded_cockroach({"shard_layout_get": layout_16()}) as server, Session(Dsn.parse(server.url())) as session:
        found = session.run(layout())
        assert (found.bucket_count, found.shard_column, found.visit_count) == (16, SHARD_COLUMN_16, 16)
        # The session's statements now name the discovered column.
        assert session._shard_column == SHARD_COLUMN_16
    assert server.names_received() == ["shard_layout_get"]


def test_the_primary_key_is_preferred_to_an_operators_hash_sharded_index():
    rows = layout_rows(
        ("shardq_tasks_queue_idx", "crdb_internal_queue_shard_4", SECONDARY_INDEX_DEFINITION),
        ("shardq_tasks_pkey", SHARD_COLUMN_32, primary_index_definition(32)),
    )
    with recorded_cockroach({"shard_layout_get": rows}) as server, Session(Dsn.parse(server.url())) as session:
        found = session.run(COCKROACHDB.read_layout())
    assert (found.bucket_count, found.shard_column) == (32, SHARD_COLUMN_32)


def test_a_table_without_a_hash_sharded_key_is_not_migrated():
    with recorded_cockroach({"shard_layout_get": layout_rows()}) as server, Session(Dsn.parse(server.url())) as session:
        with pytest.raises(NotMigrated, match="no hash-sharded primary key"):
            session.run(COCKROACHDB.read_layout())


def test_a_definition_without_a_bucket_count_is_skipped():
    rows = layout_rows(
        (
            "shardq_tasks_pkey",
            SHARD_COLUMN_16,
            "CREATE UNIQUE INDEX shardq_tasks_pkey ON defaultdb.public.shardq_tasks USING btree (id ASC)",
        )
    )
    with recorded_cockroach({"shard_layout_get": rows}) as server, Session(Dsn.parse(server.url())) as session:
        with pytest.raises(NotMigrated):
            session.run(COCKROACHDB.read_layout())


# -- schema-change jobs ----------------------------------------------------------------------------

JOB = (
    1077,
    "NEW SCHEMA CHANGE",
    "running",
    None,
    0.25,
    "ALTER TABLE defaultdb.public.shardq_tasks ALTER PRIMARY KEY USING COLUMNS (state, queue, rank, exec_time, id)"
    " USING HASH WITH (bucket_count = 32)",
)


def test_schema_jobs_are_read_on_a_second_session_that_opts_in_to_internals():
    with recorded_cockroach({"table_schema_jobs_running": Rows(JOB_COLUMNS, [JOB])}) as server:
        with Session(Dsn.parse(server.url())) as session:
            jobs = session.run(COCKROACHDB.schema_jobs())
        (job,) = jobs
        assert (job.job_id, job.job_type, job.status, job.running_status, job.fraction_completed) == (
            1077,
            "NEW SCHEMA CHANGE",
            "running",
            None,
            0.25,
        )
        assert job.description.endswith("USING HASH WITH (bucket_count = 32)")
        (received,) = server.received
        assert received.name == "table_schema_jobs_running"
        # The statement ran on a connection whose startup options carried the opt-in.
        assert "-c allow_unsafe_internals=on" in received.startup["options"]
        assert [s.parameters["options"] for s in server.startups] == ["-c timezone=UTC -c allow_unsafe_internals=on"]


def test_an_internals_session_reads_schema_jobs_on_its_own_connection():
    with recorded_cockroach({"table_schema_jobs_running": Rows(JOB_COLUMNS, [])}) as server:
        with Session(Dsn.parse(server.url()), internals=True) as session:
            session.parameter_status("crdb_version")
            assert session.run(COCKROACHDB.schema_jobs()) == []
        assert len(server.startups) == 1
        assert server.received[0].connection == 1


# -- claim and promote -----------------------------------------------------------------------------


def test_a_claim_leases_one_bucket_and_hands_tasks_out_in_key_order():
    ids = [uuid.UUID(int=n) for n in (3, 1, 2)]
    rows = [
        claimed_row(5, "q", ids[0], rank=1),
        claimed_row(5, "q", ids[1], rank=0),
        claimed_row(5, "q", ids[2], rank=0),
    ]
    with recorded_cockroach({"task_claim_batch": Rows(CLAIM_COLUMNS, rows, tag="UPDATE 3")}) as server:
        with _session(server) as session:
            tasks = session.run(COCKROACHDB.claim([5], "q", 10, 30.0))
        (received,) = server.received
    assert [t.key.id for t in tasks] == [ids[1], ids[2], ids[0]]
    # One fresh token for the whole batch, the one bound to the statement.
    (token,) = {t.lease_token for t in tasks}
    assert tasks[0].key == TaskKey(5, "q", 0, NOW, ids[1])
    assert (tasks[0].attempt, tasks[0].max_attempts, tasks[0].payload) == (1, 25, b"{}")
    # The shard column is composed into the text; lease seconds, token, bucket, queue and limit
    # are bound in the order of their placeholders (psycopg sends small ints as binary INT2).
    assert f'"{SHARD_COLUMN_16}"' in received.text
    lease, sent_token, bucket, queue, limit = received.params
    assert (struct.unpack("!d", lease)[0], sent_token, bucket, queue, limit) == (
        30.0,
        token.bytes,
        struct.pack("!h", 5),
        "q",
        struct.pack("!h", 10),
    )


def test_claim_groups_are_one_bucket_each_and_shared():
    groups = COCKROACHDB.claim_groups(4, 7)
    assert groups == [[0], [1], [2], [3]]
    assert COCKROACHDB.claim_groups(4, 8) is groups


def test_promote_counts_the_tasks_made_ready():
    rows = Rows([("id", "UUID")], [(uuid.UUID(int=1),), (uuid.UUID(int=2),)], tag="UPDATE 2")
    with recorded_cockroach({"task_promote_due": rows}) as server, _session(server) as session:
        assert session.run(COCKROACHDB.promote_due([3], "q", 50)) == 2
    (received,) = server.received
    bucket, queue, rank, limit = received.params
    assert (bucket, queue, struct.unpack("!q", rank)[0], limit) == (
        struct.pack("!h", 3),
        "q",
        RANK_SCHEDULED,
        struct.pack("!h", 50),
    )


# -- acks ------------------------------------------------------------------------------------------


def _ack_answer(received: Received) -> Rows:
    # One row per deleted task: the ids sent, but the stale token's (the second) lost its lease.
    return Rows([("id", "UUID")], [(uuid.UUID(int=1),)], tag="DELETE 1")


def test_an_ack_deletes_by_whole_key_and_token_and_returns_the_ids_deleted():
    items = [Fenced(_key(2, uuid.UUID(int=1)), uuid.uuid4()), Fenced(_key(2, uuid.UUID(int=2)), uuid.uuid4())]
    with recorded_cockroach({"task_ack_many": _ack_answer}) as server, _session(server) as session:
        assert session.run(COCKROACHDB.ack_keys(items)) == {uuid.UUID(int=1)}
    assert server.names_received() == ["task_ack_many"]


def test_an_ack_of_nothing_sends_nothing():
    with recorded_cockroach() as server, _session(server) as session:
        assert session.run(COCKROACHDB.ack_keys([])) == set()
        assert session.run(COCKROACHDB.ack_claims([])) == set()
        assert session.run(COCKROACHDB.ack_keys_kept([], {})) == set()
        assert session.run(COCKROACHDB.ack_claims_kept([], SucceededColumns([], [], []))) == set()
    assert server.received == []


def test_a_whole_claim_ack_returns_the_ids_not_deleted():
    token = uuid.uuid4()
    keys = [_key(2, uuid.UUID(int=1)), _key(2, uuid.UUID(int=2))]
    claim = WholeClaim(2, "q", keys[0][2:], keys[1][2:], token, keys)
    with recorded_cockroach({"task_ack_many": _ack_answer}) as server, _session(server) as session:
        assert session.run(COCKROACHDB.ack_claims([claim])) == {uuid.UUID(int=2)}


KEPT_COLUMNS = [("id", "UUID"), ("recorded", "BOOL")]


def test_a_kept_ack_records_history_in_the_same_statement():
    items = [Fenced(_key(1, uuid.UUID(int=1)), uuid.uuid4())]
    record = Finished(uuid.UUID(int=1), "q", "succeeded", "tasks.add", NOW, 1, run_seconds=0.5, result="3")
    answer = Rows(KEPT_COLUMNS, [(uuid.UUID(int=1), True)])
    with recorded_cockroach({"task_ack_many_kept": answer}) as server, _session(server) as session:
        assert session.run(COCKROACHDB.ack_keys_kept(items, {uuid.UUID(int=1): record})) == {uuid.UUID(int=1)}
    (received,) = server.received
    assert received.name == "task_ack_many_kept"
    assert "tasks.add" in str(received.params)


def test_a_kept_whole_claim_ack_returns_the_ids_not_deleted():
    token = uuid.uuid4()
    keys = [_key(1, uuid.UUID(int=1)), _key(1, uuid.UUID(int=2))]
    claim = WholeClaim(1, "q", keys[0][2:], keys[1][2:], token, keys)
    answer = Rows(KEPT_COLUMNS, [(uuid.UUID(int=2), True)])
    with recorded_cockroach({"task_ack_many_kept": answer}) as server, _session(server) as session:
        columns = SucceededColumns(["a", None], [0.1, 0.2], [None, "1"])
        assert session.run(COCKROACHDB.ack_claims_kept([claim], columns)) == {uuid.UUID(int=1)}


# -- stats -----------------------------------------------------------------------------------------

DEPTH_COLUMNS = [
    ("ready", "INT8"),
    ("due_scheduled", "INT8"),
    ("scheduled", "INT8"),
    ("leased", "INT8"),
    ("expired", "INT8"),
    ("backlog", "INT8"),
    ("waiting", "INT8"),
    ("oldest_due_scheduled", "TIMESTAMPTZ"),
]


def test_the_stats_transaction_starts_with_a_follower_read_or_a_read_only_one():
    answers = {"stats_snapshot_historical": Command("SET"), "stats_snapshot_begin": Command("SET")}
    with recorded_cockroach(answers) as server, _session(server) as session:
        assert session.run(COCKROACHDB.stats_snapshot(True)) is True
        assert session.run(COCKROACHDB.stats_snapshot(False)) is False
    assert server.names_received() == ["stats_snapshot_historical", "stats_snapshot_begin"]


def test_depth_walks_each_priority_head_and_caps_the_counts():
    earlier = NOW - dt.timedelta(minutes=5)
    heads = iter(
        [
            Rows([("rank", "INT8"), ("exec_time", "TIMESTAMPTZ")], [(0, NOW)]),
            Rows([("rank", "INT8"), ("exec_time", "TIMESTAMPTZ")], [(7, earlier)]),
            Rows([("rank", "INT8"), ("exec_time", "TIMESTAMPTZ")], []),
        ]
    )
    afters: list[bytes] = []

    def head(received: Received) -> Rows:
        afters.append(received.params[-1])
        return next(heads)

    answers: dict[str, Answering] = {
        "stats_depth_one": Rows(DEPTH_COLUMNS, [(100, 2, 5, 100, 3, 0, 1, None)]),
        "stats_ready_head_after": head,
    }
    with recorded_cockroach(answers) as server, _session(server) as session:
        (row,) = session.run(COCKROACHDB.depth(["q"], [4], 100))
    assert row["queue"] == "q" and row["bucket"] == 4
    assert (row["ready"], row["scheduled"], row["leased"], row["expired"], row["waiting"]) == (102, 5, 97, 3, 1)
    assert row["ready_capped"] and row["leased_capped"] and not row["backlog_capped"]
    assert row["oldest_ready"] == earlier
    # The walk starts below every rank and continues after each head's rank.
    assert [int.from_bytes(a, "big", signed=True) for a in afters] == [-(2**63), 0, 7]
    assert server.names_received() == ["stats_depth_one"] + ["stats_ready_head_after"] * 3


BUCKET_COLUMNS = [("bucket", "INT4"), ("tasks", "INT8")]


def test_rows_per_bucket_are_read_in_the_past_when_historical():
    rows = Rows(BUCKET_COLUMNS, [(0, 4), (3, 1)])
    with recorded_cockroach({"task_count_by_bucket": rows}) as server, _session(server) as session:
        assert session.run(COCKROACHDB.count_by_bucket(True)) == {0: 4, 3: 1}
    assert server.names_received() == ["task_count_by_bucket"]


@pytest.mark.parametrize(
    "error",
    [undefined_column(SHARD_COLUMN_16), undefined_table("shardq_tasks")],
    ids=["shard column younger than the read", "table younger than the read"],
)
def test_rows_per_bucket_fall_back_to_a_current_read_when_the_layout_is_younger(error):
    answers = {"task_count_by_bucket": error, "task_count_by_bucket_current": Rows(BUCKET_COLUMNS, [(1, 2)])}
    with recorded_cockroach(answers) as server, _session(server) as session:
        assert session.run(COCKROACHDB.count_by_bucket(True)) == {1: 2}
    assert server.names_received() == ["task_count_by_bucket", "task_count_by_bucket_current"]


def test_rows_per_bucket_read_currently_when_asked():
    answers = {"task_count_by_bucket_current": Rows(BUCKET_COLUMNS, [])}
    with recorded_cockroach(answers) as server, _session(server) as session:
        assert session.run(COCKROACHDB.count_by_bucket(False)) == {}
    assert server.names_received() == ["task_count_by_bucket_current"]


def test_the_shard_column_missing_from_a_historical_read_is_a_layout_change_elsewhere():
    # Outside the fallback, the same 42703 reaches the caller as ShardLayoutChanged.
    with recorded_cockroach({"task_count_by_bucket": undefined_column(SHARD_COLUMN_16)}) as server:
        with _session(server) as session, pytest.raises(ShardLayoutChanged, match=SHARD_COLUMN_16):
            session.fetch_all("task_count_by_bucket")


def test_the_backlog_rank_is_below_the_scheduled_rank():
    # The depth and promote statements rely on both ranks being beyond every priority.
    assert RANK_BACKLOG == RANK_SCHEDULED - 1
