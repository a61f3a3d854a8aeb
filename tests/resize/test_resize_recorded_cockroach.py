"""Online resizing on CockroachDB (``shardq.resize.cockroachdb``), run against CockroachDB's
recorded answers (tests/support/recorded_cockroach.py): the statements, the connections they
arrive on, the progress reported, every failure branch, and ``shardq buckets resize``.

Where each recorded answer comes from (``cockroachdb/cockroach``; names adapted to shardq's table
where the source records another one, as said at each):

* the layout row (``shard_layout_get``): ``pkg/sql/logictest/testdata/logic_test/hash_sharded_index``,
  the ``pg_indexes`` block of ``sharded_primary`` (``CREATE UNIQUE INDEX "primary" ON
  test.public.sharded_primary USING btree (a ASC) USING HASH WITH (bucket_count=10)``) and its
  ``SHOW INDEXES`` block (the shard column is the key's first column, ``implicit`` true), with
  shardq's index name, database and key columns; the shard column's name is
  ``crdb_internal_`` + the key columns *sorted* + ``_shard_N`` (``pkg/sql/catalog/tabledesc``,
  ``GetShardColumnName``: ``sort.Strings(colNames)``);
* ALTER PRIMARY KEY to the same columns with another bucket count keeps the old shard column and
  copies no old key (``logic_test/alter_primary_key``, "Regression for #45889": after
  ``ALTER PRIMARY KEY USING COLUMNS (x) USING HASH WITH (bucket_count=3)`` SHOW CREATE lists
  ``crdb_internal_x_shard_2`` and ``crdb_internal_x_shard_3``, the key ``USING HASH WITH
  (bucket_count=3)``);
* the job rows (``table_schema_jobs_running``): the column types of ``crdb_internal.jobs``
  (``pkg/sql/crdb_internal.go``, crdbInternalJobsTable: ``job_id INT``, ``job_type STRING``,
  ``status STRING``, ``running_status STRING``, ``fraction_completed FLOAT``, ``description
  STRING``); job types ``SCHEMA CHANGE`` (``logic_test/jobs``, first ``SHOW JOBS`` block) and
  ``NEW SCHEMA CHANGE`` (the declarative schema changer's, ``jobspb``); the description and
  running status of a declarative ALTER PRIMARY KEY job
  (``pkg/sql/schemachanger/testdata/end_to_end/alter_table_alter_primary_key_vanilla/
  alter_table_alter_primary_key_vanilla.side_effects``: ``create job #1 … "ALTER TABLE
  defaultdb.public.t ALTER PRIMARY KEY USING COLUMNS (j)"``, ``update progress of schema change
  job #1: "PostCommitPhase stage 2 of 7 with 2 BackfillType ops pending"``), the legacy cleanup
  job's description (``logic_test/alter_primary_key``: ``CLEANUP JOB for 'ALTER TABLE
  test.public.t ALTER PRIMARY KEY USING COLUMNS (y)'``), with shardq's statement in them;
* the command tag ``ALTER TABLE`` (the side_effects file above: ``statementTag: ALTER TABLE``).
"""

from __future__ import annotations

import json
import threading

import pytest
from click.testing import CliRunner

from shardq.errors import DatabaseError, DatabaseUnavailable, InvalidInput, ResizeInProgress
from shardq.resize import cockroachdb as crdb_resize
from shardq.resize import resize_buckets
from shardq.resize.results import ResizeProgress, ResizeResult
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from tests.support.recorded_cockroach import Command, Disconnect, Error, Received, RecordedCockroach, Rows

pytestmark = pytest.mark.recorded

KEY = "(state ASC, queue ASC, rank ASC, exec_time ASC, id ASC)"
COLUMN_16 = "crdb_internal_exec_time_id_queue_rank_state_shard_16"
COLUMN_32 = "crdb_internal_exec_time_id_queue_rank_state_shard_32"
ALTER_32 = (
    "ALTER TABLE shardq_tasks ALTER PRIMARY KEY USING COLUMNS (state, queue, rank, exec_time, id)\n"
    "    USING HASH WITH (bucket_count = 32)"
)
DROP_16 = f'ALTER TABLE shardq_tasks DROP COLUMN "{COLUMN_16}"'
JOB_COLUMNS = [
    ("job_id", "INT8"),
    ("job_type", "TEXT"),
    ("status", "TEXT"),
    ("running_status", "TEXT"),
    ("fraction_completed", "FLOAT8"),
    ("description", "TEXT"),
]
ALTER_DESCRIPTION = (
    "ALTER TABLE defaultdb.public.shardq_tasks ALTER PRIMARY KEY USING COLUMNS "
    "(state, queue, rank, exec_time, id) USING HASH WITH (bucket_count = 32)"
)
#: The declarative schema changer's job mid-backfill (side_effects file, module docstring).
BACKFILLING = (
    1145445286329516033,
    "NEW SCHEMA CHANGE",
    "running",
    "PostCommitPhase stage 2 of 7 with 2 BackfillType ops pending",
    0.25,
    ALTER_DESCRIPTION,
)
#: The legacy schema changer's cleanup job, still running once the ALTER has returned (its NOTICE
#: says "primary key changes are finalized asynchronously", logic_test/alter_primary_key).
CLEANUP = (1145445286329516034, "SCHEMA CHANGE", "running", None, 0.0, f"CLEANUP JOB for '{ALTER_DESCRIPTION}'")
#: Another schema change of the table (logic_test/jobs records CREATE INDEX jobs' descriptions).
OTHER = (
    1145445286329516000,
    "SCHEMA CHANGE",
    "running",
    None,
    0.5,
    "CREATE INDEX ON defaultdb.public.shardq_tasks (queue)",
)


def layout(buckets: int) -> Rows:
    column = f"crdb_internal_exec_time_id_queue_rank_state_shard_{buckets}"
    definition = (
        f"CREATE UNIQUE INDEX shardq_tasks_pkey ON defaultdb.public.shardq_tasks USING btree {KEY} "
        f"USING HASH WITH (bucket_count={buckets})"
    )
    return Rows(
        [("index_name", "TEXT"), ("shard_column", "TEXT"), ("index_definition", "TEXT")],
        [("shardq_tasks_pkey", column, definition)],
    )


def jobs(*rows: tuple) -> Rows:
    return Rows(JOB_COLUMNS, rows)


class Cluster:
    """What a cluster answers while one resize runs: the layout before and after the ALTER, the
    jobs each poll sees (a list consumed in order, then none), and the answers to the ALTER and
    the DROP COLUMN (a function of the received statement, or an answer)."""

    def __init__(
        self,
        *,
        before: int = 16,
        after: int = 32,
        jobs_before: tuple = (),
        jobs_after: list | None = None,
        alter=None,
        drop=None,
        took: bool = True,
    ) -> None:
        self.buckets = before
        self.after = after
        self.jobs_before = jobs_before
        self.jobs_after = list(jobs_after or [])
        self.alter = alter if alter is not None else Command("ALTER TABLE")
        self.drop = drop if drop is not None else Command("ALTER TABLE")
        self.took = took  # whether an ALTER whose connection is lost reached the server
        self.resize_connection: int | None = None
        self.altered = False

    def __call__(self, received: Received):
        if received.name == "shard_layout_get":
            return layout(self.buckets)
        if received.name == "table_schema_jobs_running":
            if self.watching(received):
                return jobs()  # the watcher's own session, before the job exists
            if not self.altered:
                return jobs(*self.jobs_before)
            if not self.jobs_after:
                return jobs()
            polled = self.jobs_after.pop(0)
            return polled if isinstance(polled, Error | Disconnect) else jobs(*polled)
        if received.text.startswith("ALTER TABLE shardq_tasks ALTER PRIMARY KEY"):
            self.resize_connection = received.connection
            answer = self.alter(received) if callable(self.alter) else self.alter
            if isinstance(answer, Command):
                self.altered, self.buckets = True, self.after
            elif isinstance(answer, Disconnect):
                self.altered = True
                self.buckets = self.after if self.took else self.buckets
            return answer
        if received.name == "shard_column_drop":
            return self.drop(received) if callable(self.drop) else self.drop
        return None

    def watching(self, received: Received) -> bool:
        # The watcher polls only while the ALTER runs, on the one connection opened meanwhile.
        return self.resize_connection is not None and not self.altered and received.connection != self.resize_connection


def sessions(server: RecordedCockroach):
    dsn = Dsn.parse(server.url())
    return lambda: Session(dsn)


def arrived(server: RecordedCockroach, *, connection: int | None = None) -> list[tuple[str, bool]]:
    """(the statement's name, or its text; whether in a transaction), in order."""
    return [
        (r.name or r.text, r.in_transaction)
        for r in server.received
        if connection is None or r.connection == connection
    ]


# -- the whole sequence -----------------------------------------------------------------------


def test_a_resize_alters_the_key_alone_in_autocommit_waits_for_its_jobs_then_drops_the_old_shard_column():
    cluster = Cluster(jobs_after=[(CLEANUP,)])
    reports: list[ResizeProgress] = []
    with RecordedCockroach(cluster) as server:
        result = resize_buckets(sessions(server), 32, poll=0.001, on_progress=reports.append)

    # One internals session runs it all, every statement alone (no BEGIN, none in a transaction);
    # the watcher's polls, if it got to any before the ALTER returned, come on another one.
    assert arrived(server, connection=1) == [
        ("shard_layout_get", False),
        ("table_schema_jobs_running", False),
        (ALTER_32, False),
        ("table_schema_jobs_running", False),
        ("table_schema_jobs_running", False),
        ("shard_layout_get", False),
        ("shard_column_drop", False),
        ("table_schema_jobs_running", False),
    ]
    assert [r.text for r in server.received if r.name == "shard_column_drop"] == [DROP_16]
    assert cluster.resize_connection == 1
    assert {r.name for r in server.received if r.connection != 1} <= {"table_schema_jobs_running"}
    assert server.startups[0].parameters["options"] == "-c timezone=UTC -c allow_unsafe_internals=on"
    assert result == ResizeResult(
        "cockroachdb",
        16,
        32,
        True,
        f"resized from 16 to 32 buckets; shard column {COLUMN_32} (dropped the old shard column {COLUMN_16})",
        shard_column_before=COLUMN_16,
        shard_column_after=COLUMN_32,
        stale_column_dropped=True,
    )
    assert reports == [
        ResizeProgress("schema-change", "ALTER PRIMARY KEY to 32 buckets"),
        ResizeProgress("schema-change", f"job {CLEANUP[0]} running", fraction=0.0),
        ResizeProgress("dropping-column", f"dropping stale shard column {COLUMN_16}"),
        ResizeProgress("done", result.message, fraction=1.0),
    ]


def test_while_the_alter_blocks_a_second_internals_session_reports_the_jobs_progress():
    # The ALTER returns only once the watcher's report of the running job has arrived: no sleep,
    # and the report is the watcher's (the resizing session is blocked in the ALTER).
    seen = threading.Event()
    reports: list[ResizeProgress] = []

    def on_progress(progress: ResizeProgress) -> None:
        reports.append(progress)
        if progress.fraction == 0.25:
            seen.set()

    def alter(received: Received):
        assert seen.wait(10), "the watcher never reported the job"
        return Command("ALTER TABLE")

    class Watched(Cluster):
        # The watcher's first poll finds no job yet (the ALTER has not created it): no report.
        polls = 0

        def __call__(self, received: Received):
            if (
                received.name == "table_schema_jobs_running"
                and self.resize_connection is not None
                and received.connection != self.resize_connection
            ):
                self.polls += 1
                return jobs() if self.polls == 1 else jobs(BACKFILLING)
            return super().__call__(received)

    cluster = Watched(alter=alter)
    with RecordedCockroach(cluster) as server:
        result = resize_buckets(sessions(server), 32, poll=0.001, on_progress=on_progress)

    watcher = {r.connection for r in server.received} - {cluster.resize_connection}
    assert len(watcher) == 1
    (watcher_connection,) = watcher
    assert {name for name, _ in arrived(server, connection=watcher_connection)} == {"table_schema_jobs_running"}
    assert cluster.polls >= 2
    startup = {s.connection: s.parameters for s in server.startups}[watcher_connection]
    assert startup["options"] == "-c timezone=UTC -c allow_unsafe_internals=on"
    backfill = ResizeProgress("schema-change", f"job {BACKFILLING[0]} running: {BACKFILLING[3]}", fraction=0.25)
    assert reports[:2] == [ResizeProgress("schema-change", "ALTER PRIMARY KEY to 32 buckets"), backfill]
    # Later polls may repeat the report until the watcher stops; nothing else comes from it.
    assert set(reports[1:-2]) == {backfill}
    assert reports[-2:] == [
        ResizeProgress("dropping-column", f"dropping stale shard column {COLUMN_16}"),
        ResizeProgress("done", result.message, fraction=1.0),
    ]
    assert result.stale_column_dropped


def test_without_a_progress_hook_no_watcher_session_is_opened():
    with RecordedCockroach(Cluster()) as server:
        result = resize_buckets(sessions(server), 32, poll=0.001)
    assert result.changed and {r.connection for r in server.received} == {1}
    assert len(server.startups) == 1


def test_the_watcher_survives_a_failing_poll_and_the_resize_goes_on():
    # Progress is a courtesy: a watcher whose session fails logs it and the resize completes.
    failed = threading.Event()

    def alter(received: Received):
        assert failed.wait(10)
        return Command("ALTER TABLE")

    class Watched(Cluster):
        def __call__(self, received: Received):
            if (
                received.name == "table_schema_jobs_running"
                and self.resize_connection is not None
                and received.connection != self.resize_connection
            ):
                failed.set()
                return Disconnect()
            return super().__call__(received)

    with RecordedCockroach(Watched(alter=alter)) as server:
        result = resize_buckets(sessions(server), 32, poll=0.001, on_progress=lambda p: None)
    assert result.changed and result.stale_column_dropped


# -- no-ops and refusals before any DDL -------------------------------------------------------


def test_the_same_bucket_count_is_a_no_op_that_sends_no_ddl():
    with RecordedCockroach(Cluster(before=16)) as server:
        result = resize_buckets(sessions(server), 16)
    assert arrived(server) == [("shard_layout_get", False), ("table_schema_jobs_running", False)]
    assert result == ResizeResult(
        "cockroachdb",
        16,
        16,
        False,
        "already 16 buckets: nothing to do",
        shard_column_before=COLUMN_16,
        shard_column_after=COLUMN_16,
    )


def test_the_same_bucket_count_names_a_schema_change_still_running():
    with RecordedCockroach(Cluster(before=32, jobs_before=(CLEANUP,))) as server:
        result = resize_buckets(sessions(server), 32)
    assert result.message == f"already 32 buckets: nothing to do (schema change job {CLEANUP[0]} still running)"
    assert not result.changed


def test_a_resize_while_another_schema_change_of_the_table_runs_is_refused_before_any_ddl():
    with RecordedCockroach(Cluster(jobs_before=(OTHER, BACKFILLING))) as server:
        with pytest.raises(ResizeInProgress) as raised:
            resize_buckets(sessions(server), 32)
    assert str(raised.value) == (
        f"a schema change of shardq_tasks is still running (job {OTHER[0]}: {OTHER[5]}); wait for it before resizing"
    )
    assert [name for name, _ in arrived(server)] == ["shard_layout_get", "table_schema_jobs_running"]


def test_an_alter_refused_because_a_schema_change_started_after_the_check_raises_resize_in_progress():
    # Another schema change begins between the job check and the ALTER. The server refuses the
    # ALTER (pkg/sql/schema_changer_test.go, TestPrimaryKeyChangeWithPrecedingIndexCreation,
    # "pk-change-before": "unimplemented: table test is currently undergoing a schema change",
    # an unimplemented error: 0A000), with shardq's table name.
    busy = Error("0A000", "unimplemented: table shardq_tasks is currently undergoing a schema change")
    with RecordedCockroach(Cluster(alter=busy)) as server:
        with pytest.raises(ResizeInProgress) as raised:
            resize_buckets(sessions(server), 32, poll=0.001)
    assert str(raised.value) == (
        "a schema change of shardq_tasks is still running (unimplemented: table shardq_tasks is currently "
        "undergoing a schema change); wait for it before resizing"
    )
    assert [name for name, _ in arrived(server, connection=1)] == [
        "shard_layout_get",
        "table_schema_jobs_running",
        ALTER_32,
    ]


@pytest.mark.parametrize("buckets", [1, 2049])
def test_bucket_counts_out_of_range_are_refused_before_connecting(buckets):
    with RecordedCockroach(Cluster()) as server:
        with pytest.raises(InvalidInput):
            resize_buckets(sessions(server), buckets)
        with Session(Dsn.parse(server.url())) as session, pytest.raises(InvalidInput):
            crdb_resize.resize(session.engine, session, buckets, open_session=sessions(server))  # type: ignore[arg-type]
    assert server.received == [] and server.startups == []


# -- failures after the ALTER -----------------------------------------------------------------


def test_an_alter_the_server_refuses_raises_and_drops_nothing():
    # A BUCKET_COUNT the server refuses (logic_test/hash_sharded_index: "statement error pgcode
    # 22023 BUCKET_COUNT must be a 32-bit integer greater than 1, got 1"; shardq validates first,
    # so only a server with another limit would say it).
    refusal = Error("22023", "BUCKET_COUNT must be a 32-bit integer greater than 1, got 32")
    with RecordedCockroach(Cluster(alter=refusal)) as server:
        with pytest.raises(DatabaseError, match="BUCKET_COUNT must be a 32-bit integer"):
            resize_buckets(sessions(server), 32, poll=0.001)
    assert [name for name, _ in arrived(server)] == ["shard_layout_get", "table_schema_jobs_running", ALTER_32]


def test_a_job_that_ends_without_the_new_bucket_count_is_an_error():
    # The ALTER returned but its job was reverted (status 'reverting', then gone from the
    # unfinished list): the key still has 16 buckets, and the old shard column is kept.
    reverting = (BACKFILLING[0], "NEW SCHEMA CHANGE", "reverting", None, 0.25, ALTER_DESCRIPTION)
    cluster = Cluster(after=16, jobs_after=[(reverting,)])
    with RecordedCockroach(cluster) as server:
        with pytest.raises(DatabaseError) as raised:
            resize_buckets(sessions(server), 32, poll=0.001)
    assert str(raised.value) == "ALTER PRIMARY KEY finished but shardq_tasks has 16 buckets, not 32"
    assert "shard_column_drop" not in [r.name for r in server.received]


def test_a_refused_drop_of_the_old_shard_column_is_reported_not_raised():
    # sql_safe_updates refuses DROP COLUMN (pkg/sql/pgwire/pgerror/errors.go, DangerousStatementf:
    # "rejected (sql_safe_updates = true)" prefixed, pgcode.Warning 01000; the statement's text in
    # pkg/sql/alter_table.go, AlterTableDropColumn).
    refusal = "rejected (sql_safe_updates = true): ALTER TABLE DROP COLUMN will remove all data in that column"
    reports: list[ResizeProgress] = []
    with RecordedCockroach(Cluster(drop=Error("01000", refusal))) as server:
        result = resize_buckets(sessions(server), 32, poll=0.001, on_progress=reports.append)
    assert result.stale_column_kept == refusal and not result.stale_column_dropped
    assert result.message == (
        f"resized from 16 to 32 buckets; shard column {COLUMN_32} (the old shard column {COLUMN_16} stays: {refusal})"
    )
    assert reports[-1] == ResizeProgress("done", result.message, fraction=1.0)
    # No wait for a drop that did not happen.
    assert [name for name, _ in arrived(server, connection=1)][-2:] == ["shard_layout_get", "shard_column_drop"]


def test_no_drop_is_tried_when_the_shard_column_did_not_change():
    # A server that reused the shard column's name (none does: the name carries the count) would
    # leave nothing stale to drop.
    class Same(Cluster):
        def __call__(self, received: Received):
            answer = super().__call__(received)
            if received.name == "shard_layout_get" and self.altered:
                rows = layout(32).rows[0]
                return Rows(layout(32).columns, [(rows[0], COLUMN_16, rows[2])])
            return answer

    with RecordedCockroach(Same()) as server:
        result = resize_buckets(sessions(server), 32, poll=0.001)
    assert "shard_column_drop" not in [r.name for r in server.received]
    assert result.message == f"resized from 16 to 32 buckets; shard column {COLUMN_16}"
    assert not result.stale_column_dropped and result.stale_column_kept is None


# -- lost connections -------------------------------------------------------------------------

#: What a draining node sends a connection before closing it (pkg/sql/pgwire/server.go:
#: ErrDrainingExistingConn = "server is shutting down", sent through newAdminShutdownErr, whose
#: code is pgcode.AdminShutdown, 57P01).
SHUTTING_DOWN = Error("57P01", "server is shutting down")


def test_a_connection_lost_during_the_alter_reconnects_waits_for_the_job_and_finishes():
    # The job goes on without the connection that started it: the resize waits for it on a new
    # connection, then drops the old shard column as usual.
    cluster = Cluster(alter=Disconnect(), jobs_after=[(BACKFILLING,)])
    with RecordedCockroach(cluster) as server:
        result = resize_buckets(sessions(server), 32, poll=0.001)
    assert result.changed and result.after == 32 and result.stale_column_dropped
    assert [(r.connection, r.name or r.text) for r in server.received] == [
        (1, "shard_layout_get"),
        (1, "table_schema_jobs_running"),
        (1, ALTER_32),
        (2, "table_schema_jobs_running"),
        (2, "table_schema_jobs_running"),
        (2, "shard_layout_get"),
        (2, "shard_column_drop"),
        (2, "table_schema_jobs_running"),
    ]
    assert server.startups[1].parameters["options"] == "-c timezone=UTC -c allow_unsafe_internals=on"


def test_a_connection_lost_before_the_alter_arrived_raises_the_lost_connection():
    # No job, the old layout: the ALTER never reached the server. The error says so, not "the
    # ALTER finished with 16 buckets".
    cluster = Cluster(alter=Disconnect(), took=False)
    with RecordedCockroach(cluster) as server:
        with pytest.raises(DatabaseUnavailable):
            resize_buckets(sessions(server), 32, poll=0.001)
    assert "shard_column_drop" not in [r.name for r in server.received]


def test_lost_connections_while_waiting_for_the_job_are_reconnected():
    cluster = Cluster(jobs_after=[(CLEANUP,), Disconnect(), SHUTTING_DOWN, (CLEANUP,)])
    with RecordedCockroach(cluster) as server:
        result = resize_buckets(sessions(server), 32, poll=0.001)
    assert result.stale_column_dropped
    polls = [r.connection for r in server.received if r.name == "table_schema_jobs_running"]
    assert polls == [1, 1, 1, 2, 2, 2, 2]  # before; CLEANUP, lost; drained, CLEANUP, none; after the drop


def test_a_wait_gives_up_after_more_lost_connections_in_a_row_than_allowed():
    lost = [Disconnect()] * (crdb_resize.RECONNECTS_MAX + 1)
    with RecordedCockroach(Cluster(jobs_after=lost)) as server:
        with pytest.raises(DatabaseUnavailable):
            resize_buckets(sessions(server), 32, poll=0.001)
    polls = [r for r in server.received if r.name == "table_schema_jobs_running"]
    assert len(polls) == 1 + crdb_resize.RECONNECTS_MAX + 1
    assert "shard_column_drop" not in [r.name for r in server.received]


# -- the command ------------------------------------------------------------------------------


def cli_run(server: RecordedCockroach, *args: str, env_dsn: bool = False):
    from shardq.cli.main import cli

    runner = CliRunner()
    if env_dsn:
        return runner.invoke(cli, list(args), env={"SHARDQ_DSN": server.url()})
    return runner.invoke(cli, ["--dsn", server.url(), *args])


def test_buckets_resize_prints_each_phase_once_then_the_result_and_exits_0(monkeypatch):
    monkeypatch.setattr(crdb_resize, "JOB_POLL_SECONDS_DEFAULT", 0.001)  # the command has no --poll
    with RecordedCockroach(Cluster(jobs_after=[(CLEANUP,), (CLEANUP,)])) as server:
        run = cli_run(server, "buckets", "resize", "32")
    assert run.exit_code == 0, run.output
    assert run.output.splitlines() == [
        "schema-change: ALTER PRIMARY KEY to 32 buckets",
        f"schema-change: job {CLEANUP[0]} running",  # polled twice, printed once
        f"dropping-column: dropping stale shard column {COLUMN_16}",
        f"resized from 16 to 32 buckets; shard column {COLUMN_32} (dropped the old shard column {COLUMN_16})",
    ]
    assert server.startups[0].parameters["application_name"] == "shardq-cli"


def test_buckets_resize_json_prints_the_result_only():
    with RecordedCockroach(Cluster()) as server:
        run = cli_run(server, "buckets", "resize", "32", "--json", env_dsn=True)
    assert run.exit_code == 0, run.output
    printed = json.loads(run.output)
    assert (printed["dialect"], printed["before"], printed["after"], printed["changed"]) == (
        "cockroachdb",
        16,
        32,
        True,
    )


def test_buckets_resize_during_another_schema_change_exits_1_with_one_line():
    with RecordedCockroach(Cluster(jobs_before=(OTHER,))) as server:
        run = cli_run(server, "buckets", "resize", "32")
    assert run.exit_code == 1
    assert run.output.splitlines() == [
        f"shardq: a schema change of shardq_tasks is still running (job {OTHER[0]}: {OTHER[5]}); "
        "wait for it before resizing"
    ]


def test_buckets_resize_out_of_range_exits_2():
    with RecordedCockroach(Cluster()) as server:
        run = cli_run(server, "buckets", "resize", "4096")
    assert run.exit_code == 2
    assert len(run.output.splitlines()) == 1 and run.output.startswith("shardq: ")
    assert server.received == []


def test_buckets_resize_with_the_same_count_says_so_and_exits_0():
    with RecordedCockroach(Cluster(before=32)) as server:
        run = cli_run(server, "buckets", "resize", "32")
    assert (run.exit_code, run.output) == (0, "already 32 buckets: nothing to do\n")
