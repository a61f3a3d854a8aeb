"""`shardq doctor`: the checklist on a migrated, an unmigrated and a degraded database; exit codes,
JSON, bad input; and that it writes nothing."""

from __future__ import annotations

import json
import uuid

import pytest
from click.testing import CliRunner

from shardq.admin import explain_checks
from shardq.admin.doctor import diagnose
from shardq.cli.main import cli
from shardq.engine import ENGINES
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session


def test_a_migrated_database_passes_every_check(db):
    diagnosis = diagnose(db.dsn)
    assert diagnosis.ok, "\n".join(check.line() for check in diagnosis.problems)
    areas = {check.area for check in diagnosis.checks}
    assert areas == {"server", "session", "schema", "layout", "privileges", "plans"}
    planned = [check for check in diagnosis.checks if check.area == "plans"]
    assert len(planned) == len(explain_checks.planned(db.session.engine)) > 40
    assert any(c.area == "layout" and c.detail.startswith("4") for c in diagnosis.checks)


def test_the_checks_write_nothing(pg_db):
    before = pg_db.sql("SELECT sum(n_tup_ins + n_tup_upd + n_tup_del) AS n FROM pg_stat_user_tables")[0]["n"]
    assert diagnose(pg_db.dsn).ok
    pg_db.sql("SELECT pg_stat_force_next_flush()")
    after = pg_db.sql("SELECT sum(n_tup_ins + n_tup_upd + n_tup_del) AS n FROM pg_stat_user_tables")[0]["n"]
    assert after == before


def test_an_unmigrated_database_fails_with_one_line_saying_to_migrate(pg_server):
    name = f"t_{uuid.uuid4().hex[:12]}"
    with Session(Dsn.parse(pg_server.url("postgres"))) as admin:
        admin.execute_raw(f'CREATE DATABASE "{name}"')
    try:
        diagnosis = diagnose(Dsn.parse(pg_server.url(name)))
        assert not diagnosis.ok
        lines = [check.line() for check in diagnosis.problems]
        assert any(
            line.startswith("FAIL schema: revision: not migrated") and "shardq migrate" in line for line in lines
        ), lines
        assert any("run `shardq migrate`" in line and "plans" in line for line in lines), lines
    finally:
        with Session(Dsn.parse(pg_server.url("postgres"))) as admin:
            admin.execute_raw(f'DROP DATABASE "{name}"')


def test_a_dropped_index_shows_as_a_full_scan_of_the_statements_it_served(pg_db):
    pg_db.sql("DROP INDEX shardq_dead_by_queue")
    diagnosis = diagnose(pg_db.dsn)
    assert not diagnosis.ok
    failed = {check.name: check.detail for check in diagnosis.problems}
    assert failed and all(area == "plans" for area in {c.area for c in diagnosis.problems})
    assert "full scan" in failed.get("dead_list", ""), failed


def test_a_claim_without_its_limit_is_flagged_as_an_unbounded_skip_locked_scan(pg_db):
    from shardq.engine import POSTGRESQL

    statement = POSTGRESQL.statements()["task_claim_batch"]
    plan = pg_db.session.explain("task_claim_batch", explain_checks.example_values(statement))
    assert not POSTGRESQL.explain_skip_locked_unbounded(plan)
    unbounded = json.dumps(
        [
            {
                "Plan": {
                    "Node Type": "LockRows",
                    "Plans": [
                        {"Node Type": "Index Scan", "Relation Name": "shardq_tasks", "Index Cond": "(bucket = 0)"}
                    ],
                }
            }
        ]
    )
    assert POSTGRESQL.explain_skip_locked_unbounded(unbounded)


def test_a_scan_without_the_bucket_is_a_fan_out_over_buckets():
    from shardq.engine import COCKROACHDB, POSTGRESQL

    everywhere = json.dumps(
        [{"Plan": {"Node Type": "Index Scan", "Relation Name": "shardq_tasks", "Index Cond": "(queue = 'q'::text)"}}]
    )
    assert POSTGRESQL.explain_fans_out(everywhere, 4)
    one = json.dumps(
        [
            {
                "Plan": {
                    "Node Type": "Index Scan",
                    "Relation Name": "shardq_tasks",
                    "Index Cond": "((bucket = 0) AND (queue = 'q'::text))",
                }
            }
        ]
    )
    assert not POSTGRESQL.explain_fans_out(one, 4)
    # CockroachDB's EXPLAIN shows at most 4 spans and "… (N more)" (explain/emit.go, spansStr).
    assert COCKROACHDB.explain_fans_out(
        "  • scan\n    spans: [/0/'ready'] [/1/'ready'] [/2/'ready'] [/3/'ready'] … (12 more)", 16
    )
    assert not COCKROACHDB.explain_fans_out("  • scan\n    spans: [/3/'ready'/'q' - /3/'ready'/'q']", 16)
    assert COCKROACHDB.explain_skip_locked_unbounded(
        "• scan\n  spans: [/3/'ready']\n  locking strength: for update\n  locking wait policy: skip locked"
    )
    assert not COCKROACHDB.explain_skip_locked_unbounded(
        "• scan\n  spans: [/3/'ready']\n  limit: 100\n  locking wait policy: skip locked"
    )


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_every_planned_statement_gets_a_value_for_every_parameter(engine):
    for statement in explain_checks.planned(engine).values():
        explain_checks.example_values(statement)  # KeyError names a parameter nobody gives a value


# -- the command ----------------------------------------------------------------------------------
def test_the_command_exits_0_and_prints_the_checklist(pg_db):
    result = CliRunner().invoke(cli, ["doctor", "--dsn", pg_db.dsn.conninfo])
    assert result.exit_code == 0, result.output
    assert "ok   server: postgresql" in result.output and "ok   plans:" in result.output
    assert "FAIL" not in result.output


def test_the_command_prints_json_for_scripts(pg_db):
    result = CliRunner().invoke(cli, ["doctor", "--dsn", pg_db.dsn.conninfo, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ok"] is True and data["engine"] == "postgresql"
    assert {"area", "name", "ok", "detail"} <= set(data["checks"][0])


def test_the_command_exits_1_with_one_line_per_problem(pg_db):
    pg_db.sql("DROP INDEX shardq_dead_by_queue")
    result = CliRunner().invoke(cli, ["doctor", "--dsn", pg_db.dsn.conninfo])
    assert result.exit_code == 1
    problems = [line for line in result.output.splitlines() if line.startswith("FAIL")]
    assert problems and all(line.count("\n") == 0 for line in problems)
    assert any("dead_list: full scan" in line for line in problems), result.output


def test_an_unreachable_server_is_one_line_and_exit_1():
    result = CliRunner().invoke(cli, ["doctor", "--dsn", "postgresql://nobody@127.0.0.1:9/none?connect_timeout=2"])
    assert result.exit_code == 1
    assert result.output.strip().startswith("shardq:") and len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_a_refused_login_is_one_line_and_never_shows_the_password(pg_server):
    # The embedded server trusts local logins, so a login is refused here for an unknown role.
    url = pg_server.url("postgres").replace("postgres@", "nobody_here:s3cret-word@", 1)
    result = CliRunner().invoke(cli, ["doctor", "--dsn", url])
    assert result.exit_code in (1, 2)
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert result.output.startswith("shardq:") and "s3cret-word" not in result.output
