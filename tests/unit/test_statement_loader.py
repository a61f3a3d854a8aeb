"""The named-statement files: parsing, and that code and SQL agree on names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shardq import sql as queries

SRC = Path(__file__).resolve().parents[2] / "src" / "shardq"


def test_parse_splits_named_blocks_with_descriptions():
    text = "-- name: a_get\n-- first\n-- second\nSELECT 1;\n\n-- name: b_set\nUPDATE t SET x = 1\n"
    parsed = queries.parse(text)
    assert parsed["a_get"].description == "first second"
    assert parsed["a_get"].text == "SELECT 1"
    assert parsed["b_set"].text == "UPDATE t SET x = 1"


def test_parse_rejects_duplicate_and_empty_blocks():
    with pytest.raises(ValueError):
        queries.parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")
    with pytest.raises(ValueError):
        queries.parse("-- name: a\n-- only words\n")


# DDL takes no bind parameters: these statements get integer literals or identifiers through
# Session.execute_ddl (psycopg.sql.Literal / Identifier), and are never run any other way.
DDL_SLOTS = {
    "bucket_default_set": {"bucket_count"},
    "table_primary_key_alter": {"bucket_count"},
    "shard_column_drop": {"column"},
    "spark_stage_create": {"stage"},
    "spark_stage_index": {"stage"},
    "spark_stage_drop": {"stage"},
    "spark_chunk_table_create": {"stage"},
}
# Statements with bind parameters that also name a per-call table: Session.fetch_*/execute fill
# the slot with psycopg.sql.Identifier through their `identifiers` argument.
IDENTIFIER_SLOTS = {
    "spark_chunk_merge": {"stage"},
    "spark_chunk_keyed_rows": {"stage"},
    "spark_stage_rows": {"stage"},
    "spark_chunk_copy_rows": {"stage"},
    "embedded_database_create": {"database"},
}


# CopyIn: ``COPY … FROM STDIN`` of a named statement (shardq.spark.writer).
ALL_CALLS = "fetch_all|fetch_one|fetch_row|execute|execute_ddl|listen|Call|SchemaChange|CopyIn"


def used_names(call: str = ALL_CALLS) -> set[str]:
    # ``Call("name", …)``: a statement a plan sends (shardq.sql.plan), through either gateway.
    pattern = re.compile(r"(?:" + call + r')\(\s*"([a-z0-9_]+)"')
    # The embedded server's bootstrap runs statement texts on a plain connection before any
    # session exists: statements["name"].
    bootstrap = re.compile(r'statements\["([a-z0-9_]+)"\]')
    found = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        found |= set(pattern.findall(text))
        if call == ALL_CALLS:
            found |= set(bootstrap.findall(text))
    return found


@pytest.mark.parametrize("dialect", queries.FOLDERS)
def test_every_statement_used_in_code_exists_for_each_dialect(dialect):
    defined = set(queries.statements_for(dialect))
    dialect_only = {
        "postgresql": {
            "shard_layout_get",
            "table_schema_jobs_running",
            "task_count_by_bucket_current",
            "table_primary_key_alter",
            "shard_column_drop",
            "stats_depth_one",
            "stats_ready_head_after",
            "stats_snapshot_historical",
        },
        "cockroachdb": {
            "layout_get",
            "embedded_database_present",
            "embedded_database_create",
            "lease_records_settle",
            "task_ack_claim",
            "queue_notify",
            "notify_listen",
            "task_claim_round",
            "task_promote_due_round",
            "resize_lock_try",
            "resize_lock_release",
            "lock_timeout_set_local",
            "buckets_lock_get",
            "buckets_update",
            "bucket_default_set",
            "task_move_out_batch",
            "task_count_beyond",
            "lease_delete_beyond",
            "spark_stage_index",
            "stats_depth_many",
            "stats_leased_by_bucket",
            # the Spark COPY writer runs on PostgreSQL only (Engine.spark_copy_writer)
            "spark_chunk_open",
            "spark_chunk_copy_tasks",
            "spark_chunk_copy_run_tasks",
            "spark_chunk_table_create",
            "spark_chunk_copy_rows",
            # shardq doctor: planner setting and table ownership, PostgreSQL's only
            "doctor_plan_setup",
            "doctor_tasks_owned",
            # outcome wake-ups ride on LISTEN/NOTIFY (shardq.lifecycle.waiting; CockroachDB polls),
            # and a kept ack of a whole claim goes through the lease records
            "outcome_listen",
            "outcome_notify",
            "task_ack_claim_kept",
            # a released chain step is leased to the acking worker in place on PostgreSQL
            # only (Engine.steps_acked: CockroachDB takes none)
            "workflow_steps_acked_take",
        },
    }
    missing = used_names() - defined - dialect_only[dialect]
    assert not missing


def test_every_defined_statement_is_used_somewhere():
    defined = set().union(*(queries.statements_for(d) for d in queries.FOLDERS))
    assert defined - used_names() == set()


def test_no_statement_builds_sql_from_python_values():
    for dialect in queries.FOLDERS:
        for statement in queries.statements_for(dialect).values():
            # only the {shard_col} identifier slot is ever formatted into a statement, plus the
            # DDL slots Session.execute_ddl fills with validated integers or identifiers and the
            # identifier slots of IDENTIFIER_SLOTS
            slots = set(re.findall(r"\{([a-z_]+)\}", statement.text))
            allowed = {"shard_col"} | DDL_SLOTS.get(statement.name, set()) | IDENTIFIER_SLOTS.get(statement.name, set())
            assert slots <= allowed, statement.name


def test_ddl_statements_run_only_through_execute_ddl():
    assert used_names("execute_ddl|SchemaChange") == set(DDL_SLOTS)
    assert not set(DDL_SLOTS) & used_names("fetch_all|fetch_one|fetch_row|execute|listen|Call")


def test_postgresqls_waking_insert_inserts_exactly_what_the_common_insert_does():
    # sql/postgresql/enqueue.sql copies the common task_insert_many_fresh to add the wake-up to
    # its last SELECT; everything before that SELECT must stay the same text.
    common = queries._read_folder("common")["task_insert_many_fresh"].text
    waking = queries.statements_for("postgresql")["task_insert_many_fresh"].text

    def before_last_select(text: str) -> str:
        return text[: text.rindex("\nSELECT ")]

    assert before_last_select(waking) == before_last_select(common)
    assert "%(wake)s" in waking and "%(wake)s" not in common
