"""Each rule fails on a statement that breaks it, including the statements the audit found
(F1, F2, F4) exactly as shardq once sent them, and passes the corrected form."""

from __future__ import annotations

import pytest

from shardq.engine import POSTGRESQL
from tests.conformance.collect import Sent
from tests.conformance.rules import (
    CRDB_INTERNAL,
    CTE_RETURNING,
    FUNCTIONS,
    HARD_LIMITED,
    NOTHING_MISSING,
    PARSES,
    VARIABLES,
)

pytestmark = pytest.mark.conformance

# sql/common/enqueue.sql, task_insert_many_fresh, as it was before the F1 fix.
F1_ENQUEUE = """
WITH settings AS (
    SELECT coalesce((SELECT q.paused_enqueue FROM shardq_queues AS q WHERE q.name = %(queue)s), false) AS paused,
           coalesce((SELECT q.max_attempts FROM shardq_queues AS q WHERE q.name = %(queue)s), 25) AS max_attempts
), new_queue AS (
    INSERT INTO shardq_queues (name) VALUES (%(queue)s) ON CONFLICT (name) DO NOTHING
), inserted AS (
    INSERT INTO shardq_tasks (state, rank, queue, exec_time, id, priority, attempts, max_attempts, payload)
    SELECT CASE WHEN i.due > now() THEN 'scheduled' ELSE 'ready' END,
           CASE WHEN i.due > now() THEN %(scheduled_rank)s ELSE i.priority END,
           %(queue)s, i.due, i.id, i.priority, 0, coalesce(i.max_attempts, (SELECT max_attempts FROM settings)),
           i.payload
    FROM (
        SELECT n.id, n.payload, n.max_attempts, coalesce(n.priority, 0) AS priority,
               coalesce(n.run_at, now() + coalesce(n.delay, 0) * INTERVAL '1 second') AS due
        FROM unnest(%(ids)s::UUID[], %(payloads)s::BYTEA[], %(delays)s::FLOAT8[], %(run_ats)s::TIMESTAMPTZ[],
                    %(max_attempts)s::INT4[], %(priorities)s::INT8[])
             AS n(id, payload, delay, run_at, max_attempts, priority)
    ) AS i
    WHERE NOT (SELECT paused FROM settings)
)
SELECT paused FROM settings
"""
# sql/common/spark.sql, spark_runs_expire, before the F1 fix.
F1_SPARK_EXPIRE = """
WITH old AS (
    SELECT run_id FROM shardq_spark_runs
    WHERE created_at <= now() - %(max_age_seconds)s::FLOAT8 * INTERVAL '1 second'
    ORDER BY created_at LIMIT %(limit)s
), chunks AS (
    DELETE FROM shardq_spark_chunks WHERE run_id IN (SELECT run_id FROM old)
)
DELETE FROM shardq_spark_runs WHERE run_id IN (SELECT run_id FROM old)
RETURNING run_id
"""
# sql/cockroachdb/layout.sql, shard_layout_get, before the F4 fix (a worker's session).
F4_LAYOUT = """
SELECT i.column_name AS shard_column, t.shard_bucket_count AS bucket_count, t.descriptor_id AS table_id
FROM [SHOW INDEX FROM shardq_tasks] AS i
JOIN crdb_internal.table_indexes AS t
  ON t.descriptor_name = 'shardq_tasks' AND t.index_type = 'primary' AND t.index_name = i.index_name
WHERE i.seq_in_index = 1 AND i.implicit
"""


def sql(text: str, internals: bool = False) -> Sent:
    return Sent("test", text, internals)


def option(text: str, internals: bool = False) -> Sent:
    return Sent("startup-internals" if internals else "startup", text, internals)


def test_f1_mutation_ctes_without_returning_are_caught_by_name():
    problems = CTE_RETURNING(sql(F1_ENQUEUE))
    assert len(problems) == 2
    assert any('"new_queue"' in p for p in problems) and any('"inserted"' in p for p in problems)
    assert any('"chunks"' in p for p in CTE_RETURNING(sql(F1_SPARK_EXPIRE)))
    assert all("pkg/sql/opt/optbuilder/with.go" in p for p in problems)


def test_mutation_ctes_with_returning_pass():
    fixed = F1_ENQUEUE.replace("DO NOTHING\n", "DO NOTHING RETURNING name\n").replace(
        "WHERE NOT (SELECT paused FROM settings)\n)", "WHERE NOT (SELECT paused FROM settings)\n    RETURNING id\n)"
    )
    assert CTE_RETURNING(sql(fixed)) == []
    assert CTE_RETURNING(sql("WITH x AS (UPDATE t SET a = 1 RETURNING 1) SELECT 2")) == []


def test_f2_results_buffer_size_in_the_startup_options_is_caught():
    problems = VARIABLES(option("-c results_buffer_size=524288"))
    assert problems and "55P02" in problems[0] and "pre_serve_options.go" in problems[0]


def test_unknown_variables_and_sets_of_read_only_ones_are_caught():
    assert VARIABLES(option("-c some_future_setting=on"))
    assert VARIABLES(sql("SET results_buffer_size = 1048576"))
    assert VARIABLES(option("-c allow_unsafe_internals=on", internals=False))  # only where internals are read
    assert VARIABLES(option("-c allow_unsafe_internals=on", internals=True)) == []
    assert VARIABLES(option("-c timezone=UTC")) == [] and VARIABLES(sql("SET TRANSACTION READ ONLY")) == []


def test_f4_crdb_internal_on_a_plain_session_is_caught_and_allowed_where_internals_are_on():
    problems = CRDB_INTERNAL(sql(F4_LAYOUT))
    assert problems and "crdb_internal.table_indexes" in problems[0]
    assert CRDB_INTERNAL(sql(F4_LAYOUT, internals=True)) == []


def test_postgresql_only_features_are_caught():
    cases = {
        "SELECT pg_try_advisory_xact_lock(hashtextextended('q', 0))": ["pg_try_advisory_xact_lock"],
        "LISTEN shardq_wake": ["ListenStmt"],
        "NOTIFY shardq_wake, 'q'": ["NotifyStmt"],
        "SELECT pg_notify('shardq_wake', 'q')": ["pg_notify"],
        "UPDATE shardq_tasks SET state = 'leased' WHERE ctid = ANY(%(ids)s)": ["ctid"],
        "CREATE UNLOGGED TABLE s (chunk INT4)": ["UNLOGGED"],
    }
    for text, expected in cases.items():
        problems = " ".join(NOTHING_MISSING(sql(text)))
        assert all(word in problems for word in expected), (text, problems)


def test_the_postgresql_engines_own_statements_would_be_refused():
    # The rules see real statements, not just toy ones: PostgreSQL's claim (ctid), wake-ups
    # (pg_notify / LISTEN) and resize lock (advisory) all break them.
    statements = POSTGRESQL.statements()
    for name in ("task_claim_round", "queue_notify", "notify_listen", "resize_lock_try"):
        found = NOTHING_MISSING(sql(statements[name].text)) + FUNCTIONS(sql(statements[name].text))
        assert found, name


def test_a_statement_that_does_not_parse_is_caught_and_cockroachdb_extensions_are_not():
    assert PARSES(sql("SELEC 1"))
    assert PARSES(sql("SELECT count(*) FROM shardq_tasks AS OF SYSTEM TIME follower_read_timestamp() GROUP BY 1")) == []
    assert PARSES(sql("CREATE TABLE t (a STRING, b BYTES, PRIMARY KEY (a) USING HASH WITH (bucket_count = 8))")) == []
    assert PARSES(sql("ALTER TABLE t ALTER PRIMARY KEY USING COLUMNS (a) USING HASH WITH (bucket_count = 4)")) == []


# -- SKIP LOCKED scans ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "where, order",
    [
        ("queue = %(queue)s AND (free_at IS NULL OR free_at <= now())", "free_at"),  # a residual OR
        ("queue = %(queue)s AND token IS NULL", "free_at"),  # a column outside the key
        ("free_at <= now()", "free_at"),  # a range without the equality before it
        ("queue = %(queue)s AND free_at <= now()", "slot"),  # order that is not the key's
    ],
)
def test_a_skip_locked_scan_that_is_not_a_key_span_is_refused(where, order):
    text = f"SELECT slot FROM shardq_slots WHERE {where} ORDER BY {order} LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
    assert HARD_LIMITED(Sent("example", text))


def test_the_claims_and_the_slot_take_are_key_spans():
    from tests.conformance.collect import named_statements

    checked = [
        s
        for s in named_statements()
        if "SKIP LOCKED" in s.text
        and s.origin in {"sql:task_claim_batch", "sql:task_promote_due", "sql:flow_slots_take"}
    ]
    assert len(checked) == 3
    assert not [problem for s in checked for problem in HARD_LIMITED(s)]
