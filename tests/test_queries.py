"""The named-statement files: parsing, and that code and SQL agree on names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shardq import queries

SRC = Path(__file__).resolve().parents[1] / "src" / "shardq"


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


def used_names() -> set[str]:
    pattern = re.compile(r'(?:fetch_all|fetch_one|execute)\(\s*"([a-z0-9_]+)"')
    found = set()
    for path in SRC.rglob("*.py"):
        found |= set(pattern.findall(path.read_text()))
    return found


@pytest.mark.parametrize("dialect", queries.DIALECTS)
def test_every_statement_used_in_code_exists_for_each_dialect(dialect):
    defined = set(queries.statements_for(dialect))
    dialect_only = {"postgresql": {"shard_column_get", "shard_bucket_count_get"}, "cockroachdb": {"layout_get", "lease_sweep"}}
    missing = used_names() - defined - dialect_only[dialect]
    assert not missing


def test_every_defined_statement_is_used_somewhere():
    defined = set().union(*(queries.statements_for(d) for d in queries.DIALECTS))
    assert defined - used_names() == set()


def test_no_statement_builds_sql_from_python_values():
    for dialect in queries.DIALECTS:
        for statement in queries.statements_for(dialect).values():
            # only the {shard_col} identifier slot is ever formatted into a statement
            slots = set(re.findall(r"\{([a-z_]+)\}", statement.text))
            assert slots <= {"shard_col"}, statement.name
