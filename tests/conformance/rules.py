"""Rules every statement the CockroachDB engine sends must keep, each taken from CockroachDB's
source (the file named in its ``source``; ``../shared/reference/cockroachdb-audit.md`` quotes the
code). A rule returns the problems it finds in one sent statement, or none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pglast
from pglast import ast

from .collect import Sent
from .normalise import for_pglast


@dataclass(frozen=True)
class Rule:
    name: str
    source: str
    check: Callable[[Sent], list[str]]

    def __call__(self, sent: Sent) -> list[str]:
        return [f"{self.name} ({self.source}): {problem}" for problem in self.check(sent)]


class Unparsable(Exception):
    pass


def parse(sent: Sent) -> tuple[ast.Node, ...]:
    try:
        return tuple(raw.stmt for raw in pglast.parse_sql(for_pglast(sent.text)))
    except pglast.parser.ParseError as exc:
        raise Unparsable(str(exc)) from exc


def walk(node: object) -> Iterator[ast.Node]:
    """Every AST node under ``node``, itself included."""
    if isinstance(node, ast.Node):
        yield node
        for name in node.__slots__:
            yield from walk(getattr(node, name, None))
    elif isinstance(node, (tuple, list)):
        for item in node:
            yield from walk(item)


def _nodes(sent: Sent) -> list[ast.Node]:
    try:
        return [n for stmt in parse(sent) for n in walk(stmt)]
    except Unparsable:
        return []  # reported by the parse rule


# -- 1. data-modifying CTEs return columns -------------------------------------------------------

def _returns_columns(statement: ast.InsertStmt | ast.UpdateStmt | ast.DeleteStmt) -> bool:
    clause = statement.returningClause  # PostgreSQL 18's parser (pglast 8): RETURNING [WITH …] exprs
    return bool(clause is not None and clause.exprs)


def _mutation_ctes_return(sent: Sent) -> list[str]:
    problems = []
    for node in _nodes(sent):
        if isinstance(node, ast.CommonTableExpr) and isinstance(
            node.ctequery, (ast.InsertStmt, ast.UpdateStmt, ast.DeleteStmt)
        ) and not _returns_columns(node.ctequery):
            problems.append(f'WITH clause "{node.ctename}" does not return any columns (missing RETURNING)')
    return problems


CTE_RETURNING = Rule(
    "data-modifying CTE without RETURNING",
    "pkg/sql/opt/optbuilder/with.go (getCTECols: every non-recursive CTE is built and one without "
    "columns fails with 0A000 'WITH clause %q does not return any columns'); "
    "pkg/sql/logictest/testdata/logic_test/with (#22420)",
    _mutation_ctes_return,
)


# -- 2. startup options and session variables every supported version accepts ------------------

#: Variables settable through the ``options`` startup parameter (or SET) on every supported version.
#: pkg/sql/pgwire/pre_serve_options.go, loadParameter: configurable → session default; unknown →
#: logged and ignored; existing but read-only → the connection is refused (55P02).
ACCEPTED_VARIABLES = {
    "timezone": "pkg/sql/vars.go: configurable (a Set function) in every version",
    "statement_timeout": "pkg/sql/vars.go: configurable; unitless values are milliseconds (validateTimeoutVar)",
    "application_name": "pkg/sql/vars.go: configurable",
    "default_transaction_isolation": "pkg/sql/vars.go: configurable",
    # Exists from 25.x; unknown before, which loadParameter logs and ignores (audit F4).
    "allow_unsafe_internals": "pkg/sql/vars.go (25.x+); unknown on older servers: ignored by loadParameter",
}
#: Variables that exist but are read-only on a supported version: sending one refuses the connection.
READ_ONLY_ON_SUPPORTED = {
    "results_buffer_size": "read-only before 24.2 (no Set in pkg/sql/vars.go; made settable in options by "
    "cockroachdb#124437, pkg/sql/pgwire/pre_serve_options.go)",
}
_OPTION = re.compile(r"^-c\s*([a-z_.]+)=(.*)$")


def _variables_accepted(sent: Sent) -> list[str]:
    names: list[str] = []
    if sent.origin.startswith("startup"):
        match = _OPTION.match(sent.text)
        if not match:
            return [f"startup option {sent.text!r} is not of the form -c name=value"]
        names.append(match.group(1))
    else:
        # SET name = value; not SET TRANSACTION … (transaction modes, kind VAR_SET_MULTI).
        names += [n.name for n in _nodes(sent) if isinstance(n, ast.VariableSetStmt) and n.name
                  and n.kind != pglast.enums.VariableSetKind.VAR_SET_MULTI]
    problems = []
    for name in names:
        if name in READ_ONLY_ON_SUPPORTED:
            problems.append(f"{name} is {READ_ONLY_ON_SUPPORTED[name]}: the server refuses the connection (55P02)")
        elif name not in ACCEPTED_VARIABLES:
            problems.append(f"{name} is not known to be settable on every supported version")
        elif name == "allow_unsafe_internals" and not sent.internals:
            problems.append("allow_unsafe_internals on a session that does not read engine internals")
    return problems


VARIABLES = Rule(
    "session variable a supported version refuses",
    "pkg/sql/pgwire/pre_serve_options.go (loadParameter), pkg/sql/vars.go",
    _variables_accepted,
)


# -- 3. crdb_internal only on sessions that opt in ------------------------------------------------

#: crdb_internal tables a session may read without allow_unsafe_internals. From 26.1 the default is
#: off and only an allowlist passes (cockroachdb#151804, #158085; audit F4); shardq relies on none.
CRDB_INTERNAL_ALLOWED: frozenset[str] = frozenset()


def _internal_tables(sent: Sent) -> list[str]:
    if sent.internals:
        return []
    return [
        f"reads crdb_internal.{n.relname} on a session without allow_unsafe_internals"
        for n in _nodes(sent)
        if isinstance(n, ast.RangeVar) and n.schemaname == "crdb_internal" and n.relname not in CRDB_INTERNAL_ALLOWED
    ]


CRDB_INTERNAL = Rule(
    "crdb_internal outside its allowlist",
    "pkg/sql/crdb_internal.go and pkg/sql/vars.go (allow_unsafe_internals, default off from 26.1: "
    "cockroachdb#151804, #158085)",
    _internal_tables,
)


# -- 4. nothing CockroachDB lacks ------------------------------------------------------------------

#: PostgreSQL functions CockroachDB does not provide as PostgreSQL does, with where that is said.
MISSING_FUNCTIONS = {
    "pg_advisory_lock": "pkg/sql/sem/builtins/pg_builtins.go: compatibility stubs, no lock is taken",
    "pg_advisory_xact_lock": "pkg/sql/sem/builtins/pg_builtins.go: compatibility stubs, no lock is taken",
    "pg_try_advisory_lock": "pkg/sql/sem/builtins/pg_builtins.go: compatibility stubs, no lock is taken",
    "pg_try_advisory_xact_lock": "pkg/sql/sem/builtins/pg_builtins.go: compatibility stubs, no lock is taken",
    "pg_advisory_unlock": "pkg/sql/sem/builtins/pg_builtins.go: compatibility stubs, no lock is taken",
    "pg_notify": "no LISTEN/NOTIFY (pkg/sql/parser/sql.y: LISTEN/NOTIFY unimplemented)",
    "hashtextextended": "not a CockroachDB builtin (docs/generated/sql/functions.md)",
    "pg_postmaster_start_time": "not a CockroachDB builtin (docs/generated/sql/functions.md)",
}
#: PostgreSQL system columns; CockroachDB's are crdb_internal_mvcc_timestamp and tableoid
#: (pkg/sql/catalog/colinfo/system_columns.go).
POSTGRESQL_SYSTEM_COLUMNS = {"ctid", "xmin", "xmax", "cmin", "cmax"}


def _nothing_missing(sent: Sent) -> list[str]:
    problems = []
    for node in _nodes(sent):
        if isinstance(node, ast.FuncCall):
            name = node.funcname[-1].sval
            if name in MISSING_FUNCTIONS:
                problems.append(f"calls {name}(): {MISSING_FUNCTIONS[name]}")
        elif isinstance(node, (ast.ListenStmt, ast.NotifyStmt, ast.UnlistenStmt)):
            problems.append(f"{type(node).__name__}: no LISTEN/NOTIFY (pkg/sql/parser/sql.y: unimplemented)")
        elif isinstance(node, ast.ColumnRef):
            last = node.fields[-1]
            if isinstance(last, ast.String) and last.sval in POSTGRESQL_SYSTEM_COLUMNS:
                problems.append(f"reads the PostgreSQL system column {last.sval}")
        elif isinstance(node, (ast.CreateStmt, ast.CreateTableAsStmt)):
            relation = node.relation if isinstance(node, ast.CreateStmt) else node.into.rel
            if relation.relpersistence == "u":
                problems.append("an UNLOGGED table: CockroachDB keeps every table replicated and durable "
                                "(pkg/sql/parser/sql.y accepts UNLOGGED only as a no-op)")
    return problems


NOTHING_MISSING = Rule(
    "PostgreSQL-only feature",
    "pkg/sql/sem/builtins/pg_builtins.go, pkg/sql/parser/sql.y, pkg/sql/catalog/colinfo/system_columns.go",
    _nothing_missing,
)


# -- 5. every statement parses ---------------------------------------------------------------------

def _parses(sent: Sent) -> list[str]:
    if sent.origin.startswith("startup"):
        return []
    try:
        parse(sent)
    except Unparsable as exc:
        return [f"does not parse after the documented rewrites: {exc}"]
    return []


PARSES = Rule(
    "statement does not parse",
    "pglast (PostgreSQL's parser) where the grammars agree; CockroachDB's extensions rewritten per "
    "pkg/sql/parser/sql.y (tests/conformance/normalise.py)",
    _parses,
)

# -- 6. SKIP LOCKED scans are hard-limited spans of the key ----------------------------------------

#: The primary keys SKIP LOCKED scans read, in key order: the tasks table's (its hidden shard column
#: first: migration 0001, sql/cockroachdb/tasks.sql) and the flow slots' (migration 0006).
LOCKED_SCAN_KEYS = {
    "shardq_tasks": ("{shard_col}", "state", "queue", "rank", "exec_time", "id"),
    "shardq_slots": ("queue", "free_at", "slot"),
}


def _column(node: object) -> str | None:
    if isinstance(node, ast.ColumnRef) and isinstance(node.fields[-1], ast.String):
        name = node.fields[-1].sval
        return "{shard_col}" if name.startswith("crdb_internal_") and name.endswith("_shard_16") else name
    return None


def _hard_limited(sent: Sent) -> list[str]:
    """A SKIP LOCKED SELECT of a table in LOCKED_SCAN_KEYS filters only on key columns, equalities
    on a prefix of the key and at most one range on the next column, and orders by the columns
    that follow the equalities: its whole WHERE is then the index span, the LIMIT is pushed into
    the scan, and only the rows returned are locked."""
    problems = []
    for node in _nodes(sent):
        if not isinstance(node, ast.SelectStmt) or not node.lockingClause:
            continue
        if not any(c.waitPolicy == pglast.enums.LockWaitPolicy.LockWaitSkip for c in node.lockingClause):
            continue
        tables = [r.relname for r in node.fromClause or () if isinstance(r, ast.RangeVar)]
        if len(tables) != 1 or tables[0] not in LOCKED_SCAN_KEYS:
            continue
        key = LOCKED_SCAN_KEYS[tables[0]]
        where = node.whereClause
        terms = list(where.args) if isinstance(where, ast.BoolExpr) and where.boolop == 0 else [where]
        equal, ranged = set(), []
        for term in terms:
            column = _column(term.lexpr) if isinstance(term, ast.A_Expr) else None
            operator = term.name[-1].sval if isinstance(term, ast.A_Expr) else None
            if column not in key or operator not in {"=", "<", "<=", ">", ">="}:
                problems.append(f"{tables[0]}: a residual filter in a SKIP LOCKED scan ({type(term).__name__})")
            elif operator == "=":
                equal.add(column)
            else:
                ranged.append(column)
        prefix = 0
        while prefix < len(key) and key[prefix] in equal:
            prefix += 1
        if equal != set(key[:prefix]):
            problems.append(f"{tables[0]}: equalities {sorted(equal)} are not a prefix of the key {key}")
        if ranged and (len(ranged) > 1 or ranged[0] != key[prefix]):
            problems.append(f"{tables[0]}: range on {ranged} is not on the key column after the prefix")
        order = [_column(s.node) for s in node.sortClause or ()]
        if order != list(key[prefix:prefix + len(order)]):
            problems.append(f"{tables[0]}: ORDER BY {order} is not the key order after {key[:prefix]}")
    return problems


HARD_LIMITED = Rule(
    "SKIP LOCKED scan with a residual filter",
    "cockroachdb#121917 (a soft-limit locking scan locks every row it reads, filtered out or not); "
    "../shared/reference/cockroachdb.md, SKIP LOCKED",
    _hard_limited,
)

RULES = (CTE_RETURNING, VARIABLES, CRDB_INTERNAL, NOTHING_MISSING, PARSES, HARD_LIMITED)
