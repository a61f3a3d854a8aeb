"""Turning CockroachDB-only syntax into the PostgreSQL form pglast parses, without changing what
the rules look at.

CockroachDB's grammar (``pkg/sql/parser/sql.y``) is PostgreSQL's with extensions. pglast is
PostgreSQL's own parser, so a statement that uses an extension is rewritten to the PostgreSQL
construct it extends before parsing; each rewrite names the ``sql.y`` production it stands for and
keeps every table, column, function and clause the rules inspect. Nothing else is rewritten: a
statement that still does not parse is a finding.
"""

from __future__ import annotations

import re

_REWRITES: list[tuple[str, re.Pattern[str], str]] = [
    # opt_hash_sharded_bucket_count: "USING HASH [WITH (bucket_count = n)]" after an index's columns.
    ("USING HASH", re.compile(r"\bUSING\s+HASH(\s+WITH\s*\(\s*bucket_count\s*=\s*\d+\s*\))?", re.I), ""),
    # transaction_mode: "SET TRANSACTION AS OF SYSTEM TIME expr" (a read-only historical snapshot).
    (
        "SET TRANSACTION AS OF SYSTEM TIME",
        re.compile(r"SET\s+TRANSACTION\s+AS\s+OF\s+SYSTEM\s+TIME\s+[a-z_]+\(\)", re.I),
        "SET TRANSACTION READ ONLY",
    ),
    # opt_as_of_clause on a table reference: "t AS OF SYSTEM TIME expr" (expr: a function call).
    (
        "AS OF SYSTEM TIME (table)",
        re.compile(r"\bAS\s+OF\s+SYSTEM\s+TIME\s+[a-z_]+\(\)(?=\s+GROUP|\s*$|\s+WHERE)", re.I),
        "",
    ),
    # select_with_parens over a SHOW statement: "[SHOW INDEX FROM t]" as a table source.
    ("[SHOW ...] source", re.compile(r"\[\s*SHOW\s+INDEX\s+FROM\s+([a-z_]+)\s*\]", re.I), r"show_index_from_\1"),
    # alter_primary_key: "ALTER PRIMARY KEY USING COLUMNS (cols)" (a PostgreSQL ADD PRIMARY KEY in shape).
    ("ALTER PRIMARY KEY", re.compile(r"ALTER\s+PRIMARY\s+KEY\s+USING\s+COLUMNS", re.I), "ADD PRIMARY KEY"),
    # CockroachDB type names: STRING is TEXT, BYTES is BYTEA (pkg/sql/types).
    ("STRING type", re.compile(r"\bSTRING\b"), "TEXT"),
    ("BYTES type", re.compile(r"\bBYTES\b"), "BYTEA"),
]

_PLACEHOLDER = re.compile(r"%\((\w+)\)[sb]")


def for_pglast(text: str) -> str:
    """``text`` with CockroachDB's extensions rewritten and psycopg placeholders as ``$n``."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = _PLACEHOLDER.sub(number, text).replace("%%", "%")
    for _, pattern, replacement in _REWRITES:
        text = pattern.sub(replacement, text)
    return text
