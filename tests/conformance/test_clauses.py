"""UNSUPPORTED_CLAUSES (and TEMP_TABLES for pg_temp) against real shardq statements mutated into
PostgreSQL-only clause syntax that PostgreSQL 18's parser accepts, so PARSES lets it through
(issue 47, item 4). Each case names the production of CockroachDB's sql.y the message must cite."""

from __future__ import annotations

import pytest

from tests.conformance import collect
from tests.conformance.collect import Sent
from tests.conformance.rules import PARSES, TEMP_TABLES, UNSUPPORTED_CLAUSES
from tests.conformance.rules_support import TYPES

pytestmark = pytest.mark.conformance
SENT: dict[str, list[str]] = {}
for _sent in collect.everything():
    SENT.setdefault(_sent.origin.removeprefix("sql:"), []).append(_sent.text)


def mutated(origin: str, old: str, new: str) -> Sent:
    text = next(t for t in SENT[origin] if old in t)
    return Sent(f"mutated:{origin}", text.replace(old, new, 1))


CLAIM_RETURNING = "RETURNING %(bucket)s::INT8 AS bucket"
SLOTS_DDL = "PRIMARY KEY (queue, free_at, slot),\n            UNIQUE (queue, slot)\n        )"
DEAD_INDEX = "CREATE INDEX IF NOT EXISTS shardq_dead_by_queue ON shardq_dead (queue, died_at)"

CASES = [
    # (name, origin, old, new, what the message must name)
    (
        "RETURNING old.x",
        "task_claim_batch",
        CLAIM_RETURNING,
        "RETURNING old.state, %(bucket)s::INT8 AS bucket",
        "returning_clause",
    ),
    (
        "RETURNING new.x",
        "task_claim_batch",
        CLAIM_RETURNING,
        "RETURNING new.state, %(bucket)s::INT8 AS bucket",
        "returning_clause",
    ),
    (
        "RETURNING WITH (OLD AS o)",
        "task_claim_batch",
        CLAIM_RETURNING,
        "RETURNING WITH (OLD AS o) o.state, %(bucket)s::INT8 AS bucket",
        "returning_clause",
    ),
    ("GROUP BY ROLLUP", "flow_usage", "GROUP BY queue", "GROUP BY ROLLUP (queue)", "46280"),
    ("GROUP BY CUBE", "flow_usage", "GROUP BY queue", "GROUP BY CUBE (queue)", "46280"),
    ("GROUP BY GROUPING SETS", "flow_usage", "GROUP BY queue", "GROUP BY GROUPING SETS ((queue), ())", "46280"),
    (
        "FETCH … WITH TIES",
        "spark_runs_expire",
        "LIMIT %(limit)s",
        "FETCH FIRST %(limit)s ROWS WITH TIES",
        "limit_clause",
    ),
    ("TABLESAMPLE", "queue_list", "FROM shardq_queues", "FROM shardq_queues TABLESAMPLE SYSTEM (10)", "table_ref"),
    ("ORDER BY … USING", "queue_list", "ORDER BY name", "ORDER BY name USING <", "sortby"),
    ("WHERE CURRENT OF", "flow_tokens_drop", "WHERE queue = %(queue)s", "WHERE CURRENT OF c", "where_clause"),
    (
        "WITH RECURSIVE … UNION",
        "queue_list",
        "SELECT name,",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION SELECT n + 1 FROM r WHERE n < 3) SELECT name,",
        "splitRecursiveCTE",
    ),
    (
        "cast to int4range",
        "task_claim_batch",
        "%(bucket)s::INT8 AS bucket",
        "%(bucket)s::int4range AS bucket",
        "type does not exist",
    ),
    ("cast to money", "task_claim_batch", "%(bucket)s::INT8 AS bucket", "%(bucket)s::money AS bucket", "41578"),
    ("cast to xml", "task_claim_batch", "%(bucket)s::INT8 AS bucket", "%(bucket)s::xml AS bucket", "43355"),
    ("column of type money", "spark_stage_create", "delay FLOAT8", "delay money", "41578"),
    (
        "PARTITION BY RANGE (c) without a list",
        "migration:0006_flow_control:upgrade",
        SLOTS_DDL,
        SLOTS_DDL + " PARTITION BY RANGE (free_at)",
        "partition_by_inner",
    ),
    (
        "EXCLUDE constraint",
        "migration:0006_flow_control:upgrade",
        SLOTS_DDL,
        SLOTS_DDL.replace("UNIQUE (queue, slot)", "EXCLUDE USING gist (slot WITH =)"),
        "46657",
    ),
    (
        "UNIQUE NULLS NOT DISTINCT",
        "migration:0006_flow_control:upgrade",
        SLOTS_DDL,
        SLOTS_DDL.replace("UNIQUE (queue, slot)", "UNIQUE NULLS NOT DISTINCT (queue, slot)"),
        "NULLS [NOT] DISTINCT",
    ),
    (
        "CREATE UNIQUE INDEX … NULLS NOT DISTINCT",
        "migration:0001_initial:upgrade",
        DEAD_INDEX,
        DEAD_INDEX.replace("CREATE INDEX", "CREATE UNIQUE INDEX") + " NULLS NOT DISTINCT",
        "NULLS [NOT] DISTINCT",
    ),
    (
        "USING brin",
        "migration:0001_initial:upgrade",
        DEAD_INDEX,
        DEAD_INDEX.replace("ON shardq_dead", "ON shardq_dead USING brin"),
        "opt_index_access_method",
    ),
    (
        "an operator class",
        "migration:0001_initial:upgrade",
        DEAD_INDEX,
        DEAD_INDEX.replace("(queue, died_at)", "(queue text_pattern_ops, died_at)"),
        "47420",
    ),
    ("INHERITS", "migration:0006_flow_control:upgrade", SLOTS_DDL, SLOTS_DDL + " INHERITS (shardq_queues)", "22456"),
]


@pytest.mark.parametrize("name, origin, old, new, cited", CASES, ids=[c[0] for c in CASES])
def test_postgresql_only_clauses_are_refused(name, origin, old, new, cited):
    real = next(t for t in SENT[origin] if old in t)
    assert UNSUPPORTED_CLAUSES(Sent(origin, real)) == []
    sent = mutated(origin, old, new)
    assert PARSES(sent) == [], "the blind spot: PostgreSQL 18's parser takes it"
    problems = " ".join(UNSUPPORTED_CLAUSES(sent))
    assert cited in problems, (name, problems)


def test_a_table_aliased_old_may_be_returned_from():
    text = "UPDATE shardq_queues AS old SET paused_enqueue = true WHERE old.name = %(q)s RETURNING old.name"
    assert UNSUPPORTED_CLAUSES(Sent("test", text)) == []


def test_a_recursive_cte_with_union_all_or_without_self_reference_passes():
    assert (
        UNSUPPORTED_CLAUSES(
            Sent("test", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT n FROM r")
        )
        == []
    )
    assert UNSUPPORTED_CLAUSES(Sent("test", "WITH RECURSIVE r(n) AS (SELECT 1 UNION SELECT 2) SELECT n FROM r")) == []


def test_a_pg_temp_table_is_a_temporary_table():
    problems = TEMP_TABLES(mutated("spark_stage_create", 'CREATE TABLE "', 'CREATE TABLE pg_temp."'))
    assert problems and "resolveTemporaryStatus" in problems[0] and "experimental_enable_temp_tables" in problems[0]


def test_every_type_shardq_uses_is_in_the_allowlist_and_the_list_keeps_its_refusals():
    assert {"int2", "int4", "int8", "float8", "text", "uuid", "timestamptz", "bool", "bytea", "interval"} <= {
        name for name, (verdict, _) in TYPES.items() if verdict == "type"
    }
    assert TYPES["money"][0] == TYPES["xml"][0] == TYPES["tsvector"][0] == "unimplemented"
    assert "int4range" not in TYPES
