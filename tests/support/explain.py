"""Reading PostgreSQL plans in tests: EXPLAIN (FORMAT JSON) of a named statement, its nodes and scans."""

from __future__ import annotations

import json
import re

from shardq.sql import statements_for


def plan(db, name: str, params: dict) -> dict:
    text = statements_for("postgresql")[name].text
    rows = db.sql("EXPLAIN (FORMAT JSON) " + text, params)
    data = rows[0]["QUERY PLAN"]
    return (json.loads(data) if isinstance(data, str) else data)[0]["Plan"]


def generic_plan(db, name: str) -> dict:
    """The plan the server caches for the prepared statement once it stops planning per
    execution: parameters unknown (EXPLAIN GENERIC_PLAN, PostgreSQL 16+)."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)[sb]", number, statements_for("postgresql")[name].text)
    rows = db.sql("EXPLAIN (GENERIC_PLAN, FORMAT JSON) " + text.replace("%%", "%"))
    data = rows[0]["QUERY PLAN"]
    return (json.loads(data) if isinstance(data, str) else data)[0]["Plan"]


def nodes(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def scans_of(tree: dict, relation: str) -> list[dict]:
    return [n for n in nodes(tree) if n.get("Relation Name") == relation and "Scan" in n["Node Type"]]
