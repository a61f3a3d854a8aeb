"""The rules closing the first round's blind spots (issue #29): each fails on a real shardq
statement mutated the way a regression would, and passes the statement as shardq sends it."""

from __future__ import annotations

import pytest

from shardq.engine import COCKROACHDB, POSTGRESQL
from tests.conformance.collect import Sent, named_statements
from tests.conformance.rules import (
    CRDB_INTERNAL,
    FUNCTIONS,
    HARD_LIMITED,
    LATERAL_OFFSETS,
    MULTIPLE_MODIFICATIONS,
    NOTHING_MISSING,
    PLACEHOLDERS,
    SHARD_INPUT_EQUALITY,
    TEMP_TABLES,
    UNIMPLEMENTED,
)

pytestmark = pytest.mark.conformance
SENT = {s.origin.removeprefix("sql:"): s for s in named_statements()}


def real(name: str) -> Sent:
    return SENT[name]


def mutated(name: str, old: str, new: str, internals: bool = False) -> Sent:
    text = real(name).text
    assert old in text, (name, old)
    return Sent(f"mutated:{name}", text.replace(old, new), internals)


# -- 1. syntax CockroachDB's grammar lacks ---------------------------------------------------------


def test_lock_table_in_place_of_the_exclusive_keys_lock_is_refused():
    assert UNIMPLEMENTED(real("exclusive_keys_lock")) == []
    problems = UNIMPLEMENTED(
        mutated("exclusive_keys_lock", "SELECT 0 AS locked", "LOCK TABLE shardq_tasks IN SHARE ROW EXCLUSIVE MODE")
    )
    assert problems and "LOCK" in problems[0] and "sql.y" in problems[0]


def test_reindex_and_unknown_statement_kinds_are_refused():
    assert "purposelyUnimplemented" in " ".join(UNIMPLEMENTED(Sent("test", "REINDEX TABLE shardq_tasks")))
    assert UNIMPLEMENTED(Sent("test", "VACUUM shardq_tasks"))
    assert UNIMPLEMENTED(Sent("test", "CLUSTER shardq_tasks USING shardq_tasks_id"))


# -- 2. gated internals ----------------------------------------------------------------------------


def test_system_tables_and_crdb_internal_functions_are_refused_outside_an_internals_session():
    assert CRDB_INTERNAL(real("shard_layout_get")) == []
    system = mutated("shard_layout_get", "pg_catalog.pg_indexes AS x", "system.namespace AS x")
    assert "system.namespace" in " ".join(CRDB_INTERNAL(system))
    function = mutated("shard_layout_get", "current_schema()", "crdb_internal.node_id()::STRING")
    assert "crdb_internal.node_id()" in " ".join(CRDB_INTERNAL(function))


def test_resize_job_polling_is_allowed_only_on_its_internals_session():
    polling = real("table_schema_jobs_running")
    assert polling.internals and CRDB_INTERNAL(polling) == []
    assert CRDB_INTERNAL(Sent("test", polling.text, internals=False))


# -- 3. temporary tables ---------------------------------------------------------------------------


def test_a_temporary_spark_staging_table_is_refused():
    assert TEMP_TABLES(real("spark_stage_create")) == []
    problems = TEMP_TABLES(mutated("spark_stage_create", "CREATE TABLE", "CREATE TEMP TABLE"))
    assert problems and "experimental_enable_temp_tables" in problems[0]


# -- builtin functions (the allowlist that replaced the denylist) ----------------------------------


def test_a_function_outside_the_registry_allowlist_is_refused():
    assert FUNCTIONS(real("spark_stage_create")) == []
    problems = FUNCTIONS(mutated("spark_stage_create", "gen_random_uuid()", "uuid_generate_v4()"))
    assert problems and "uuid_generate_v4" in problems[0]
    assert FUNCTIONS(Sent("test", "SELECT hashtext(%(queue)s::STRING) AS h"))


def test_the_postgresql_engines_statements_call_functions_cockroachdb_does_not_list():
    statements = POSTGRESQL.statements()
    assert FUNCTIONS(Sent("test", statements["resize_lock_try"].text))


# -- 4. placeholder typing -------------------------------------------------------------------------


def test_an_uncast_placeholder_in_a_select_list_is_refused():
    assert PLACEHOLDERS(real("task_reap_candidates")) == []
    problems = PLACEHOLDERS(mutated("task_reap_candidates", "%(bucket)s::INT8 AS bucket", "%(bucket)s AS bucket"))
    assert problems and "%(bucket)s" in problems[0] and "42P18" in problems[0]


def test_an_uncast_unnest_argument_is_refused():
    assert PLACEHOLDERS(real("task_ack_many")) == []
    assert PLACEHOLDERS(mutated("task_ack_many", "%(states)s::STRING[]", "%(states)s"))


@pytest.mark.parametrize(
    "text",
    [
        "SELECT $1",  # TestPGPrepareFail
        "SELECT CASE WHEN true THEN %(x)s END",  # TestPGPrepareFail
        "SELECT id FROM shardq_tasks WHERE %(a)s = %(b)s",
        "SELECT %(x)s::INT8 AS a, %(x)s::STRING AS b",  # one placeholder, two types
        "SELECT id FROM shardq_tasks WHERE %(x)s IS NULL",
    ],
)
def test_placeholders_cockroachdb_cannot_type_are_refused(text):
    assert PLACEHOLDERS(Sent("test", text))


def test_placeholders_typed_by_their_context_pass():
    for text in (
        "SELECT id FROM shardq_tasks WHERE queue = %(q)s AND id IN (%(a)s, %(b)s) LIMIT %(n)s",
        "UPDATE shardq_queues SET paused_enqueue = %(p)s WHERE name = %(q)s",
        "INSERT INTO shardq_queues (name, max_attempts) VALUES (%(q)s, %(m)s)",
        "INSERT INTO shardq_queues (name) SELECT %(q)s",
        "SELECT coalesce(%(n)s, max_attempts) FROM shardq_queues",
    ):
        assert PLACEHOLDERS(Sent("test", text)) == [], text


@pytest.mark.parametrize(
    "text",
    [
        "UPDATE shardq_queues SET paused_enqueue = %(p)s WHERE name = %(q)s RETURNING %(x)s AS x",
        "INSERT INTO shardq_queues (name) VALUES (%(q)s) RETURNING %(x)s",
        "DELETE FROM shardq_queues WHERE name = %(q)s RETURNING name, %(x)s",
    ],
)
def test_a_bare_placeholder_in_a_returning_list_is_refused_for_that_reason(text):
    problems = " ".join(PLACEHOLDERS(Sent("test", text)))
    assert "%(x)s in a RETURNING list, which desires no type" in problems
    assert "mutation_builder.go" in problems and "%(p)s" not in problems and "%(q)s" not in problems


def test_the_claims_returned_bucket_must_stay_cast():
    problems = " ".join(
        PLACEHOLDERS(
            mutated("task_claim_batch", "RETURNING %(bucket)s::INT8 AS bucket", "RETURNING %(bucket)s AS bucket")
        )
    )
    assert "%(bucket)s" in problems and "RETURNING list" in problems


def test_one_placeholder_desired_as_two_families_is_refused():
    both = mutated("task_claim_batch", "AND queue = %(queue)s\n", "AND queue = %(queue)s AND %(limit)s\n")
    problems = " ".join(PLACEHOLDERS(both))
    assert "%(limit)s is used uncast where ['BOOL', 'INT'] are desired" in problems and "42804" in problems
    compared = "SELECT id FROM shardq_tasks WHERE %(n)s = attempts::INT8 AND %(n)s = queue::STRING LIMIT 1"
    assert "['INT', 'STRING']" in " ".join(PLACEHOLDERS(Sent("test", compared)))
    # One family in every context is fine, and so is a column whose type only the schema knows.
    assert PLACEHOLDERS(Sent("test", "SELECT id FROM shardq_tasks WHERE attempts = %(n)s::INT8 LIMIT %(n)s")) == []
    assert PLACEHOLDERS(Sent("test", "SELECT id FROM shardq_tasks WHERE %(n)s = attempts::INT4 LIMIT %(n)s")) == []


# -- 5. two modifications of one table -------------------------------------------------------------


def test_deleting_and_upserting_the_same_table_in_one_statement_is_refused():
    assert MULTIPLE_MODIFICATIONS(real("task_bury_many")) == []
    problems = MULTIPLE_MODIFICATIONS(mutated("task_bury_many", "INSERT INTO shardq_dead", "INSERT INTO shardq_tasks"))
    assert problems and "shardq_tasks is modified 2 times" in problems[0] and "ON CONFLICT" in problems[0]


def test_several_plain_inserts_into_one_table_pass():
    text = "WITH a AS (INSERT INTO t VALUES (1) RETURNING 1) INSERT INTO t SELECT 2 FROM a"
    assert MULTIPLE_MODIFICATIONS(Sent("test", text)) == []


# -- 6. hard-limited SKIP LOCKED scans -------------------------------------------------------------


@pytest.mark.parametrize(
    "old, new",
    [
        ("AND queue = %(queue)s\n    ORDER", "AND queue = ANY(%(queues)s::STRING[])\n    ORDER"),
        ("AND queue = %(queue)s\n    ORDER", "AND queue IN ('a', 'b')\n    ORDER"),
        ("AND state = 'ready'", "AND state IN ('ready', 'scheduled')"),
        (
            "    FROM shardq_tasks\n    WHERE",
            "    FROM shardq_tasks JOIN shardq_queues AS q ON q.name = queue\n    WHERE",
        ),
    ],
)
def test_a_claim_over_several_spans_or_a_join_is_refused(old, new):
    assert HARD_LIMITED(mutated("task_claim_batch", old, new))


def test_the_shard_column_is_recognised_by_its_role_whatever_the_bucket_count():
    eight = mutated("task_claim_batch", "_shard_16", "_shard_8")
    assert HARD_LIMITED(eight) == [] and SHARD_INPUT_EQUALITY(eight) == []
    # A column merely named like a shard column of other columns is not the key's first column.
    other = mutated(
        "task_claim_batch", "crdb_internal_exec_time_id_queue_rank_state_shard_16", "crdb_internal_id_shard_16"
    )
    assert HARD_LIMITED(other)


# -- 7. keyed lookups reach one bucket -------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["task_ack_many", "task_retry_many", "task_bury_many", "task_release_many", "task_extend_many"]
)
def test_a_keyed_write_with_a_constant_state_fans_out_and_is_refused(name):
    assert SHARD_INPUT_EQUALITY(real(name)) == []
    constant = mutated(name, "t.state = k.state", "t.state = 'leased'")
    problems = SHARD_INPUT_EQUALITY(constant)
    assert problems and "['state']" in problems[0] and "findComputedColJoinEquality" in problems[0]
    assert SHARD_INPUT_EQUALITY(mutated(name, "t.state = k.state AND ", ""))


@pytest.mark.parametrize("name", ["task_claim_batch", "task_promote_due"])
def test_a_claim_that_does_not_name_its_bucket_fans_out_and_is_refused(name):
    assert SHARD_INPUT_EQUALITY(real(name)) == []
    shard_col = '"crdb_internal_exec_time_id_queue_rank_state_shard_16"'  # as psycopg.sql.Identifier renders it
    problems = SHARD_INPUT_EQUALITY(mutated(name, f"WHERE t.{shard_col} = %(bucket)s AND ", "WHERE "))
    assert problems and "every bucket" in problems[0]


def test_a_lookup_by_id_alone_goes_through_the_id_index_and_passes():
    text = (
        "UPDATE shardq_tasks AS t SET attempts = 0 FROM unnest(%(ids)s::UUID[]) AS k(id) "
        "WHERE t.id = k.id AND t.state = 'leased' RETURNING t.id"
    )
    assert SHARD_INPUT_EQUALITY(Sent("test", text)) == []


# -- 8. citations that held only for older lines ---------------------------------------------------


def test_advisory_locks_notify_and_unlogged_are_refused_for_reasons_true_on_master():
    advisory = " ".join(NOTHING_MISSING(Sent("test", "SELECT pg_advisory_xact_lock(1)")))
    assert "logic_test/advisory_lock" in advisory and "stubs" in advisory
    assert "pkg/sql/delegate/notify.go" in " ".join(NOTHING_MISSING(Sent("test", "NOTIFY shardq_wake")))
    unlogged = " ".join(NOTHING_MISSING(Sent("test", "CREATE UNLOGGED TABLE s (a INT4)")))
    assert "will behave as a regular table" in unlogged


def test_every_rule_cites_cockroachdb_source():
    from tests.conformance.rules import RULES

    assert all("pkg/" in rule.source or "cockroachdb#" in rule.source or "pglast" in rule.source for rule in RULES)
    assert COCKROACHDB.statements()  # the engine under test


# -- OFFSET inside a LATERAL subquery --------------------------------------------------------------


def test_only_offset_zero_is_sent_inside_a_lateral_subquery():
    assert LATERAL_OFFSETS(real("workflow_children_advance")) == []
    for offset in ("OFFSET 2", "OFFSET 0.0", "OFFSET %(skip)s::INT8"):
        problems = LATERAL_OFFSETS(mutated("workflow_children_advance", "OFFSET 0", offset))
        assert problems and "other than the constant 0" in problems[0], offset
