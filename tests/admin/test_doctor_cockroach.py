"""`shardq doctor` against a recorded CockroachDB: a healthy cluster passes (its housekeeping reads
scan whole small tables by design, and the checklist says which and why), a hot statement's full
scan, fan-out or unbounded SKIP LOCKED still fails it, every plan is asked for with literals inside
a rolled-back SERIALIZABLE transaction, and bad input (no server, a wrong password, a version too
old, a database without shardq tables) is one line, never a traceback, and writes nothing.

Every answer is CockroachDB's, cited where it is given. EXPLAIN answers are built in the
non-verbose text format of ``pkg/sql/opt/exec/explain/emit.go`` from the outputs recorded in
``pkg/sql/opt/exec/execbuilder/testdata/`` (each cited at its builder); only table, index and span
values are shardq's.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Sequence

import pytest
from click.testing import CliRunner

from shardq.admin import explain_checks
from shardq.admin.doctor import WORKER_TABLES, diagnose
from shardq.cli.main import cli
from shardq.engine import COCKROACHDB
from shardq.errors import DatabaseUnavailable, UnsupportedServer
from shardq.migrations import apply as migrate
from shardq.sessions.dsn import Dsn
from tests.support.recorded_cockroach import (
    CRDB_VERSION_22_2,
    Answer,
    AnswerFunction,
    Disconnect,
    Error,
    Received,
    RecordedCockroach,
    Rows,
)

pytestmark = pytest.mark.recorded

PLANNED = explain_checks.planned(COCKROACHDB)
HEAD = migrate.head_revision()

#: Every statement CockroachDB plans that reads a table whole by design, and the table. The first
#: six are the housekeeping reads no index can constrain (audit 3, N11): CockroachDB prints FULL
#: SCAN for each whatever the data.
BY_DESIGN = {
    "queue_list": "shardq_queues",
    "flow_usage": "shardq_slots",
    "stats_window": "shardq_stats",
    "stats_prune": "shardq_stats",
    "stats_hourly_rollup": "shardq_stats",
    "stats_hourly_prune": "shardq_stats_hourly",
    "task_count_by_bucket": "shardq_tasks",
    "task_count_by_bucket_current": "shardq_tasks",
    "periodic_slots_prune": "shardq_periodic",
    "spark_runs_expire": "shardq_spark_runs",
    "spark_stages_stale": "shardq_spark_stages",
    "outcome_listener_gone": "shardq_listeners",
    "outcome_listeners_present": "shardq_listeners",
    "worker_by_token": "shardq_workers",
    "worker_list": "shardq_workers",
    "worker_prune": "shardq_workers",
}

# -- recorded answers -----------------------------------------------------------------------------

# doctor_settings: logic_test/txn records `SHOW default_transaction_read_only` -> off and
# `SHOW DEFAULT_TRANSACTION_ISOLATION` -> serializable; logic_test/set records `SHOW session_user`
# -> root and `SHOW TABLES FROM foo` -> schema public. current_setting, current_user and
# current_schema() return STRING (TEXT's OID: pkg/sql/sem/builtins/pg_builtins.go, builtins.go).
SETTINGS = Rows(
    [("read_only", "TEXT"), ("isolation", "TEXT"), ("user_name", "TEXT"), ("schema_name", "TEXT")],
    [("off", "serializable", "root", "public")],
)

# shard_layout_get: logic_test/hash_sharded_index records, for a hash-sharded primary key,
# `SHOW INDEXES` -> (primary, crdb_internal_a_shard_10, implicit true) and pg_indexes.indexdef ->
# `CREATE UNIQUE INDEX "primary" ON test.public.sharded_primary USING btree (a ASC) USING HASH
# WITH (bucket_count=10)`. Adapted: shardq_tasks' key columns, index name and 16 buckets.
SHARD_COLUMN = "crdb_internal_exec_time_id_queue_rank_state_shard_16"
LAYOUT = Rows(
    [("index_name", "TEXT"), ("shard_column", "TEXT"), ("index_definition", "TEXT")],
    [
        (
            "shardq_tasks_pkey",
            SHARD_COLUMN,
            "CREATE UNIQUE INDEX shardq_tasks_pkey ON defaultdb.public.shardq_tasks USING btree "
            "(state ASC, queue ASC, rank ASC, exec_time ASC, id ASC) USING HASH WITH (bucket_count=16)",
        )
    ],
)

# has_table_privilege / has_schema_privilege return BOOL (pg_builtins.go); root holds every
# privilege (admin). shardq_buckets is PostgreSQL's only.
_TABLES = sorted(t for t in WORKER_TABLES if t != "shardq_buckets")
PRIVILEGES = Rows(
    [
        ("table_name", "TEXT"),
        ("can_select", "BOOL"),
        ("can_insert", "BOOL"),
        ("can_update", "BOOL"),
        ("can_delete", "BOOL"),
    ],
    [(t, True, True, True, True) for t in _TABLES],
)
CAN_CREATE = Rows([("can_create", "BOOL")], [(True,)])
REVISION = Rows([("version_num", "TEXT")], [(HEAD,)])
# crdb_internal.jobs' columns as table_schema_jobs_running selects them; no schema change running.
NO_JOBS = Rows(
    [
        ("job_id", "INT8"),
        ("job_type", "TEXT"),
        ("status", "TEXT"),
        ("running_status", "TEXT"),
        ("fraction_completed", "FLOAT8"),
        ("description", "TEXT"),
    ],
    [],
)

# -- EXPLAIN answers ------------------------------------------------------------------------------
# One row per line in the single STRING column "info" (pkg/sql/catalog/colinfo/result_columns.go,
# ExplainPlanColumns). Every plan starts "distribution: local", "vectorized: true", "·" (each
# EXPLAIN in execbuilder/testdata/limit).
_HEADER = ["distribution: local", "vectorized: true", "·"]


def full_scan(table: str) -> list[str]:
    """An unconstrained scan of a table without statistics: execbuilder/testdata/select_for_update
    (`EXPLAIN (VERBOSE) SELECT * FROM t FOR UPDATE`: `• scan`, `table: t@t_pkey`,
    `spans: FULL SCAN`), in the non-verbose form, where a scan of a table without statistics carries
    the field "missing stats" (emit.go, emitNodeAttributes)."""
    return ["• scan", "  missing stats", f"  table: {table}@{table}_pkey", "  spans: FULL SCAN"]


def bucket_scan(table: str, *, bucket: int = 0, limit: int | None = 100, skip_locked: bool = False) -> list[str]:
    """A scan constrained to one bucket's span: execbuilder/testdata/limit, regression test for
    #55156 (non-verbose `• scan`, `table: …@…`, `spans: [/0/'a2a0…'/… - /0/'a2a0…'/…]`,
    `limit: 5`); the locking lines as emit.go prints them (emitLockingPolicy: "locking strength"
    "for update" as in select_for_update, "locking wait policy" with
    ScanLockingWaitPolicy_SKIP.PrettyString() "skip locked", pkg/sql/catalog/descpb/locking.go)."""
    key = f"/{bucket}/'ready'/'default'" if table == "shardq_tasks" else "/'default'"
    lines = ["• scan", "  missing stats", f"  table: {table}@{table}_pkey", f"  spans: [{key} - {key}]"]
    if limit is not None:
        lines.append(f"  limit: {limit}")
    if skip_locked:
        lines += ["  locking strength: for update", "  locking wait policy: skip locked"]
    return lines


def every_bucket(table: str = "shardq_tasks", buckets: int = 16) -> list[str]:
    """An ordered read of a hash-sharded index split into one limited scan per bucket under
    `union all` nodes: execbuilder/testdata/limit, regression test for #55156 (8 buckets there)."""

    def tree(first: int, count: int, indent: str) -> list[str]:
        if count == 1:
            return [f"{indent}{line}" for line in bucket_scan(table, bucket=first, limit=100)]
        half = count // 2
        left = tree(first, half, indent + "│   ")
        right = tree(first + half, count - half, indent + "    ")
        return (
            [f"{indent}• union all", f"{indent}│ estimated row count: {count * 100}", f"{indent}│"]
            + [f"{indent}├── {left[0].lstrip()}"]
            + left[1:]
            + [f"{indent}│"]
            + [f"{indent}└── {right[0].lstrip()}"]
            + right[1:]
        )

    return [
        "• limit",
        "│ count: 100",
        "│",
        "└── " + tree(0, buckets, "    ")[0].lstrip(),
        *tree(0, buckets, "    ")[1:],
    ]


def first_table(name: str) -> str:
    body = "\n".join(
        line for line in COCKROACHDB.statements()[name].text.splitlines() if not line.strip().startswith("--")
    )
    found = re.findall(r"\bshardq_\w+", body)
    return found[0] if found else "shardq_tasks"


def healthy_plan(name: str) -> list[str]:
    """What a healthy cluster plans for a statement: a whole-table read by design scans its table
    whole; a locking statement locks in one bucket's span under a hard limit; anything else reads
    one span."""
    if name in BY_DESIGN:
        return full_scan(BY_DESIGN[name])
    table = first_table(name)
    return bucket_scan(table, skip_locked="SKIP LOCKED" in COCKROACHDB.statements()[name].text.upper())


def explain_rows(lines: Sequence[str]) -> Rows:
    return Rows([("info", "TEXT")], [(line,) for line in [*_HEADER, *lines]])


Plans = dict[str, list[str]]


def cluster(plans: Plans | None = None, **overrides: Answer) -> AnswerFunction:
    """The answer function of a healthy, migrated cluster; ``plans`` replaces statements' EXPLAIN
    answers, ``overrides`` statements' answers by name."""
    answers: dict[str, Answer] = {
        "doctor_settings": SETTINGS,
        "doctor_schema_revision": REVISION,
        "shard_layout_get": LAYOUT,
        "doctor_schema_create": CAN_CREATE,
        "doctor_table_privileges": PRIVILEGES,
        "table_schema_jobs_running": NO_JOBS,
        **overrides,
    }

    def answer(received: Received) -> Answer | None:
        if received.explained is not None:
            return explain_rows((plans or {}).get(received.explained) or healthy_plan(received.explained))
        return answers.get(received.name or "")

    return answer


WRITES = re.compile(r"^\s*(INSERT|UPDATE|DELETE|UPSERT|CREATE|ALTER|DROP|GRANT|REVOKE|TRUNCATE|SET\s+CLUSTER)\b", re.I)


def assert_nothing_written(server: RecordedCockroach) -> None:
    """Only reads, transaction control and EXPLAIN reached the server: no data change or DDL ran."""
    ran = [r.text for r in server.received if r.explained is None]
    assert not [text for text in ran if WRITES.match(text) or re.match(r"\s*WITH\b", text)], ran


# -- a healthy cluster ----------------------------------------------------------------------------


def test_a_healthy_cluster_passes_and_names_each_whole_table_read_with_its_reason():
    with RecordedCockroach(cluster()) as server:
        diagnosis = diagnose(Dsn.parse(server.url()))
    assert diagnosis.ok, "\n".join(check.line() for check in diagnosis.problems)
    assert diagnosis.engine == "cockroachdb" and diagnosis.server.startswith("CockroachDB CCL v24.3.1")
    details = {c.name: c.detail for c in diagnosis.checks if c.area == "plans"}
    assert set(details) == set(PLANNED)
    assert details["queue_list"] == "ok: reads every row by design (one row per queue)"
    for name in BY_DESIGN:
        assert details[name].startswith("ok: reads every row by design ("), (name, details[name])
    assert [name for name, detail in details.items() if detail != "ok"] == sorted(BY_DESIGN)
    # A read planned in one span holds plainly.
    assert details["task_claim_batch"] == "ok" and details["queue_get"] == "ok"
    layout = {c.name: c.detail for c in diagnosis.checks if c.area == "layout"}
    assert layout == {"buckets": "16", "shard column": SHARD_COLUMN}
    session = {c.name: c.detail for c in diagnosis.checks if c.area == "session"}
    assert session["user"] == "root in schema public" and session["default_transaction_read_only"] == "off"
    privileges = {c.name: c.detail for c in diagnosis.checks if c.area == "privileges"}
    assert privileges["work"] == f"SELECT, INSERT, UPDATE, DELETE on {len(_TABLES)} tables"
    assert privileges["resize"] == "allowed (0 schema change(s) of shardq_tasks running)"
    assert {c.name: c.detail for c in diagnosis.checks if c.area == "schema"}["revision"] == f"{HEAD} (newest {HEAD})"


def test_the_command_exits_0_on_a_healthy_cluster_and_prints_why_whole_tables_are_read():
    with RecordedCockroach(cluster()) as server:
        result = CliRunner().invoke(cli, ["doctor", "--dsn", server.url()])
    assert result.exit_code == 0, result.output
    assert "FAIL" not in result.output and "Traceback" not in result.output
    lines = result.output.splitlines()
    assert "ok   plans: queue_list: ok: reads every row by design (one row per queue)" in lines
    designed = [line for line in lines if "by design (" in line and line.startswith("ok   plans: ")]
    assert len(designed) == len(BY_DESIGN)
    assert lines[-1] == (
        f"ok   plans: {len(PLANNED)} of {len(PLANNED)} statements planned without a full scan "
        f"({len(designed)} by design, above), a fan-out over buckets or an unbounded SKIP LOCKED"
    )
    assert "ok   layout: shard column: " + SHARD_COLUMN in lines
    with RecordedCockroach(cluster()) as server:
        data = json.loads(CliRunner().invoke(cli, ["doctor", "--dsn", server.url(), "--json"]).output)
    assert data["ok"] is True and data["engine"] == "cockroachdb"
    assert {
        "area": "plans",
        "name": "queue_list",
        "ok": True,
        "detail": "ok: reads every row by design (one row per queue)",
    } in data["checks"]


def test_a_check_the_cluster_cannot_answer_is_one_failed_line_and_the_rest_still_run():
    # The internals session reading the schema-change jobs loses its node.
    with RecordedCockroach(cluster(table_schema_jobs_running=Disconnect())) as server:
        diagnosis = diagnose(Dsn.parse(server.url()))
    assert [(c.area, c.name) for c in diagnosis.problems] == [("privileges", "resize")]
    assert "\n" not in diagnosis.problems[0].detail and diagnosis.problems[0].detail
    assert len([c for c in diagnosis.checks if c.area == "plans"]) == len(PLANNED)


def test_every_plan_is_asked_with_its_values_inlined_inside_a_rolled_back_serializable_transaction():
    with RecordedCockroach(cluster()) as server:
        assert diagnose(Dsn.parse(server.url())).ok
    received = server.received
    explains = [i for i, r in enumerate(received) if r.explained is not None]
    assert {received[i].explained for i in explains} == set(PLANNED) and len(explains) == len(PLANNED)
    for i in explains:
        explain = received[i]
        assert explain.text.startswith("EXPLAIN ") and explain.params == () and explain.in_transaction
        assert not re.search(r"\$\d+|%\(", explain.text), explain.text
        before, after = received[i - 1], received[i + 1]
        assert before.text == "BEGIN ISOLATION LEVEL SERIALIZABLE" and before.connection == explain.connection
        assert after.text == "ROLLBACK" and after.connection == explain.connection
    claim = next(received[i].text for i in explains if received[i].explained == "task_claim_batch")
    assert "'default'" in claim and f'"{SHARD_COLUMN}" = 0' in claim, claim
    assert not any(r.text.strip().upper() == "COMMIT" for r in received)
    assert_nothing_written(server)
    # The schema-change jobs are read on a session that opts in to crdb_internal.
    jobs = next(r for r in received if r.name == "table_schema_jobs_running")
    assert "allow_unsafe_internals=on" in jobs.startup.get("options", "")


# -- what is still flagged ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "plan", "expected"),
    [
        # A claim reading the whole tasks table, on a cluster that has no statistics yet.
        (
            "task_claim_batch",
            full_scan("shardq_tasks"),
            "full scan of shardq_tasks; planned without table statistics (run `ANALYZE <table>` or let the cluster "
            "collect them, then check again)",
        ),
        # The reaper's read of one bucket split over every bucket.
        ("task_reap_candidates", every_bucket(), "fans out over buckets"),
        # A claim locking with SKIP LOCKED in a scan no hard limit bounds.
        (
            "task_claim_batch",
            [
                "• limit",
                "│ count: 100",
                "│",
                *(
                    "└── " + line if i == 0 else "    " + line
                    for i, line in enumerate(bucket_scan("shardq_tasks", limit=None, skip_locked=True))
                ),
            ],
            "SKIP LOCKED without a hard limit",
        ),
        # A read allowed to scan shardq_queues whole is not allowed to scan the tasks table (audit N12:
        # workflow_prune_page's LEFT JOIN into shardq_tasks, planned as a hash join over a full scan).
        ("queue_list", full_scan("shardq_tasks"), "full scan of shardq_tasks; planned without table statistics"),
        (
            "workflow_prune_page",
            [*full_scan("shardq_workflows"), *full_scan("shardq_tasks")],
            "full scan of shardq_tasks, shardq_workflows; planned without table statistics",
        ),
    ],
    ids=[
        "claim-full-scan",
        "reap-fan-out",
        "claim-skip-locked-unbounded",
        "design-read-other-table",
        "prune-page-join",
    ],
)
def test_a_hot_statement_planned_badly_fails_the_check_and_the_command_exits_1(name, plan, expected):
    with RecordedCockroach(cluster({name: plan})) as server:
        diagnosis = diagnose(Dsn.parse(server.url()))
        result = CliRunner().invoke(cli, ["doctor", "--dsn", server.url()])
    assert [c.name for c in diagnosis.problems] == [name]
    assert diagnosis.problems[0].detail.startswith(expected), diagnosis.problems[0].detail
    assert result.exit_code == 1, result.output
    failed = [line for line in result.output.splitlines() if line.startswith("FAIL")]
    assert failed[0].startswith(f"FAIL plans: {name}: {expected}") and len(failed) == 2, result.output
    assert failed[1].startswith(f"FAIL plans: {len(PLANNED) - 1} of {len(PLANNED)} statements")


def test_a_statement_the_cluster_cannot_plan_fails_with_the_clusters_message():
    # pgcode 42P01 and `relation "t.b" does not exist`: logic_test/txn (`SELECT a FROM t.b`);
    # adapted to a table a mid-migration database lacks.
    with RecordedCockroach(_refusing(cluster(), "shardq_workflow_edges")) as server:
        diagnosis = diagnose(Dsn.parse(server.url()))
    failed = {c.name: c.detail for c in diagnosis.problems}
    naming = {name for name, statement in PLANNED.items() if "shardq_workflow_edges" in statement.text}
    assert set(failed) == naming and naming, diagnosis.lines()
    assert all(
        detail.startswith("cannot be planned: ") and 'relation "shardq_workflow_edges" does not exist' in detail
        for detail in failed.values()
    ), failed


def _refusing(answer: AnswerFunction, table: str) -> AnswerFunction:
    def refuse(received: Received) -> Answer | None:
        if received.explained is not None and table in received.text:
            return Error("42P01", f'relation "{table}" does not exist')
        return answer(received)

    return refuse


# -- bad input ------------------------------------------------------------------------------------


def _one_line(result) -> str:
    assert "Traceback" not in result.output, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardq: "), result.output
    return lines[0]


def test_an_unreachable_cockroachdb_is_one_line_and_exit_1():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"cockroachdb://root@127.0.0.1:{port}/defaultdb?sslmode=disable&connect_timeout=2"
    with pytest.raises(DatabaseUnavailable):
        diagnose(Dsn.parse(url))
    result = CliRunner().invoke(cli, ["doctor", "--dsn", url])
    assert result.exit_code == 1
    assert str(port) in _one_line(result)


def test_a_wrong_password_is_cockroachdbs_one_line_refusal_without_the_password():
    with RecordedCockroach(cluster(), password="the-right-one") as server:
        url = server.url().replace("root@", "root:s3cret-wrong@", 1)
        with pytest.raises(DatabaseUnavailable, match="password authentication failed for user root"):
            diagnose(Dsn.parse(url))
        result = CliRunner().invoke(cli, ["doctor", "--dsn", url])
        assert len(server.refused) == 2 and all(s.parameters["user"] == "root" for s in server.refused)
        assert server.received == []  # refused at startup: no statement ran
    assert result.exit_code == 1
    line = _one_line(result)
    assert "password authentication failed for user root" in line and "s3cret-wrong" not in line


def test_a_cluster_older_than_supported_is_refused_at_connect_with_exit_2():
    with RecordedCockroach(cluster(), crdb_version=CRDB_VERSION_22_2) as server:
        with pytest.raises(UnsupportedServer):
            diagnose(Dsn.parse(server.url()))
        result = CliRunner().invoke(cli, ["doctor", "--dsn", server.url()])
        assert server.received == []
    assert result.exit_code == 2
    assert _one_line(result) == "shardq: CockroachDB v22.2.19 is older than v23.1, the oldest shardq supports"


def test_a_database_without_shardq_tables_fails_with_one_line_per_problem_and_writes_nothing():
    # pgcode 42P01 `relation "…" does not exist`: logic_test/txn; no alembic_version here. The
    # catalogs list nothing of the tables (empty results).
    empty = cluster(
        doctor_schema_revision=Error("42P01", 'relation "alembic_version" does not exist'),
        shard_layout_get=Rows(LAYOUT.columns, []),
        doctor_table_privileges=Rows(PRIVILEGES.columns, []),
    )
    with RecordedCockroach(empty) as server:
        diagnosis = diagnose(Dsn.parse(server.url()))
        result = CliRunner().invoke(cli, ["doctor", "--dsn", server.url()])
        assert_nothing_written(server)
        assert not any(r.explained for r in server.received)
    problems = {(c.area, c.name): c.detail for c in diagnosis.problems}
    assert problems == {
        ("schema", "revision"): f"not migrated (newest {HEAD}): run `shardq migrate`",
        ("layout", "buckets"): "shardq_tasks has no hash-sharded primary key: run `shardq migrate` first",
        ("privileges", "work"): "no shardq tables in this schema",
        ("plans", "not planned"): "the tasks table has no layout: run `shardq migrate`",
    }
    assert result.exit_code == 1 and "Traceback" not in result.output
    failed = [line for line in result.output.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 4 and "FAIL schema: revision: not migrated" in failed[0], result.output


def test_an_ordered_read_split_into_one_scan_per_bucket_is_a_fan_out():
    # CockroachDB reads a hash-sharded index in order as one limited scan per bucket under
    # `union all` (execbuilder/testdata/limit, #55156): each scan has one span, the plan has one
    # per bucket. One bucket's span is not a fan-out, nor the same bucket read twice.
    plan = "\n".join([*_HEADER, *every_bucket()])
    assert COCKROACHDB.explain_fans_out(plan, 16)
    assert not COCKROACHDB.explain_fans_out(plan, 17)
    twice = "\n".join([*_HEADER, *bucket_scan("shardq_tasks", bucket=3), *bucket_scan("shardq_tasks", bucket=3)])
    assert not COCKROACHDB.explain_fans_out(twice, 2)
