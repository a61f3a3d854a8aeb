"""Rules every statement the CockroachDB engine sends must keep, each taken from CockroachDB's
source (the file named in its ``source``; ``../shared/reference/cockroachdb-audit.md`` quotes the
code). A rule returns the problems it finds in one sent statement, or none.
"""

from __future__ import annotations

import re

import pglast
from pglast import ast

from tests.conformance.base import Rule, Unparsable, parse, walk  # noqa: F401  (re-exported for the tests)
from tests.conformance.base import nodes as _nodes
from tests.conformance.collect import Sent
from tests.conformance.rules_keys import HARD_LIMITED, SHARD_INPUT_EQUALITY
from tests.conformance.rules_semantic import LATERAL_OFFSETS, MULTIPLE_MODIFICATIONS, PLACEHOLDERS
from tests.conformance.rules_support import CRDB_INTERNAL, FUNCTIONS, TEMP_TABLES, UNIMPLEMENTED, UNSUPPORTED_CLAUSES

__all__ = [
    "CRDB_INTERNAL",
    "CTE_RETURNING",
    "FUNCTIONS",
    "HARD_LIMITED",
    "LATERAL_OFFSETS",
    "MULTIPLE_MODIFICATIONS",
    "NOTHING_MISSING",
    "PARSES",
    "PLACEHOLDERS",
    "RULES",
    "SHARD_INPUT_EQUALITY",
    "TEMP_TABLES",
    "UNIMPLEMENTED",
    "UNSUPPORTED_CLAUSES",
    "VARIABLES",
]


# -- 1. data-modifying CTEs return columns -------------------------------------------------------


def _returns_columns(statement: ast.InsertStmt | ast.UpdateStmt | ast.DeleteStmt) -> bool:
    clause = statement.returningClause  # PostgreSQL 18's parser (pglast 8): RETURNING [WITH …] exprs
    return bool(clause is not None and clause.exprs)


def _mutation_ctes_return(sent: Sent) -> list[str]:
    problems = []
    for node in _nodes(sent):
        if (
            isinstance(node, ast.CommonTableExpr)
            and isinstance(node.ctequery, (ast.InsertStmt, ast.UpdateStmt, ast.DeleteStmt))
            and not _returns_columns(node.ctequery)
        ):
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
        names += [
            n.name
            for n in _nodes(sent)
            if isinstance(n, ast.VariableSetStmt) and n.name and n.kind != pglast.enums.VariableSetKind.VAR_SET_MULTI
        ]
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


# -- 4. nothing CockroachDB lacks ------------------------------------------------------------------

_ADVISORY = (
    "real transaction-level locks only on master (pkg/sql/logictest/testdata/logic_test/advisory_lock, "
    "kept out of the 25.4, 26.1 and 26.2 mixed-version configurations); on the supported lines before "
    "it pkg/sql/sem/builtins/pg_builtins.go registers compatibility stubs that take no lock"
)
_NOTIFY = (
    "master turns NOTIFY into an UPSERT INTO system.notifications (pkg/sql/delegate/notify.go "
    "delegateNotify); the supported lines before it have no LISTEN/NOTIFY (pkg/sql/parser/sql.y)"
)
#: PostgreSQL features that exist on some CockroachDB line but not on every supported one, or not
#: with PostgreSQL's meaning, so the CockroachDB path must not rely on them. (Whether a function
#: exists at all is the FUNCTIONS rule's allowlist; these keep their reason even if that list is
#: widened to the whole registry.)
NOT_ON_EVERY_LINE = {
    "pg_advisory_lock": _ADVISORY,
    "pg_advisory_xact_lock": _ADVISORY,
    "pg_try_advisory_lock": _ADVISORY,
    "pg_try_advisory_xact_lock": _ADVISORY,
    "pg_advisory_unlock": _ADVISORY,
    "pg_notify": _NOTIFY,
}
#: PostgreSQL system columns; CockroachDB's are crdb_internal_mvcc_timestamp and tableoid
#: (pkg/sql/catalog/colinfo/system_columns.go).
POSTGRESQL_SYSTEM_COLUMNS = {"ctid", "xmin", "xmax", "cmin", "cmax"}


def _nothing_missing(sent: Sent) -> list[str]:
    problems = []
    for node in _nodes(sent):
        if isinstance(node, ast.FuncCall):
            name = node.funcname[-1].sval
            if name in NOT_ON_EVERY_LINE:
                problems.append(f"calls {name}(): {NOT_ON_EVERY_LINE[name]}")
        elif isinstance(node, (ast.ListenStmt, ast.NotifyStmt, ast.UnlistenStmt)):
            problems.append(f"{type(node).__name__}: {_NOTIFY}")
        elif isinstance(node, ast.ColumnRef):
            last = node.fields[-1]
            if isinstance(last, ast.String) and last.sval in POSTGRESQL_SYSTEM_COLUMNS:
                problems.append(f"reads the PostgreSQL system column {last.sval}")
        elif isinstance(node, (ast.CreateStmt, ast.CreateTableAsStmt)):
            relation = node.relation if isinstance(node, ast.CreateStmt) else node.into.rel
            if relation.relpersistence == "u":
                problems.append(
                    "an UNLOGGED table: accepted with the notice 'UNLOGGED TABLE will behave as a "
                    "regular table in CockroachDB' (pkg/sql/create_table.go, persistence.IsUnlogged()), "
                    "so it buys nothing; the CockroachDB path does not ask for it"
                )
    return problems


NOTHING_MISSING = Rule(
    "PostgreSQL feature not on every supported CockroachDB line",
    "pkg/sql/sem/builtins/pg_builtins.go, logic_test/advisory_lock, pkg/sql/delegate/notify.go, "
    "pkg/sql/create_table.go, pkg/sql/catalog/colinfo/system_columns.go",
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

RULES = (
    CTE_RETURNING,
    VARIABLES,
    CRDB_INTERNAL,
    NOTHING_MISSING,
    PARSES,
    HARD_LIMITED,
    UNIMPLEMENTED,
    UNSUPPORTED_CLAUSES,
    FUNCTIONS,
    TEMP_TABLES,
    PLACEHOLDERS,
    MULTIPLE_MODIFICATIONS,
    SHARD_INPUT_EQUALITY,
    LATERAL_OFFSETS,
)
