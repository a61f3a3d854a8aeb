"""Rules about what CockroachDB has at all: statement kinds, builtin functions, gated internals and
temporary tables. Each names the CockroachDB source it is taken from."""

from __future__ import annotations

from pathlib import Path

from pglast import ast
from pglast.enums import AlterTableType, ObjectType

from .base import Rule, nodes, statements
from .collect import Sent

# -- statement kinds -------------------------------------------------------------------------------

#: The statement kinds shardq sends, each with the production of CockroachDB's grammar
#: (pkg/sql/parser/sql.y) that accepts it. pglast parses PostgreSQL's grammar, which has statements
#: CockroachDB's does not: LOCK is not among the statements of sql.y's stmt /
#: stmt_without_legacy_transaction (read on a master-era sql.y), REINDEX is
#: `purposelyUnimplemented(sqllex, "reindex table", "CockroachDB does not require reindexing.")`,
#: which pkg/sql/parser/lexer.go PurposelyUnimplemented turns into 42601 "unimplemented: this
#: syntax". An allowlist rather than a list of what is missing: a kind not listed here fails even
#: when CockroachDB has it, until someone adds it with its production.
STATEMENT_KINDS: dict[type, str] = {
    ast.SelectStmt: "select_stmt",
    ast.InsertStmt: "insert_stmt",
    ast.UpdateStmt: "update_stmt",
    ast.DeleteStmt: "delete_stmt",
    ast.CreateStmt: "create_table_stmt",
    ast.IndexStmt: "create_index_stmt",
    ast.AlterTableStmt: "alter_table_stmt (alter_onetable_stmt)",
    ast.DropStmt: "drop_stmt (drop_ddl_stmt)",
    ast.VariableSetStmt: "set_stmt / set_transaction_stmt",
    ast.TransactionStmt: "transaction_stmt (BEGIN / COMMIT / ROLLBACK)",
    ast.ExplainStmt: "explain_stmt",
}
#: ALTER TABLE commands, with their alter_table_cmd form in sql.y.
ALTER_TABLE_COMMANDS = {
    AlterTableType.AT_AddColumn: "ADD COLUMN [IF NOT EXISTS]",
    AlterTableType.AT_DropColumn: "DROP COLUMN [IF EXISTS]",
    AlterTableType.AT_AddConstraint: "ADD CONSTRAINT, and ALTER PRIMARY KEY USING COLUMNS (normalise.py)",
}
DROP_KINDS = {ObjectType.OBJECT_TABLE: "DROP TABLE", ObjectType.OBJECT_INDEX: "DROP INDEX"}
#: Kinds CockroachDB is known to refuse, for a precise message.
REFUSED_KINDS = {
    ast.LockStmt: "LOCK: not among the statements of sql.y's stmt_without_legacy_transaction (a master-era "
                  "sql.y read; its preparable_stmt was not read); lock rows with SELECT … FOR UPDATE",
    ast.ReindexStmt: "REINDEX: sql.y reindex_stmt purposelyUnimplemented ('CockroachDB does not require reindexing')",
}


def _statement_kinds(sent: Sent) -> list[str]:
    problems = []
    for stmt in statements(sent):
        kind = type(stmt)
        if kind in REFUSED_KINDS:
            problems.append(REFUSED_KINDS[kind])
        elif kind not in STATEMENT_KINDS:
            problems.append(f"{kind.__name__}: not a statement kind with a known sql.y production")
        elif isinstance(stmt, ast.AlterTableStmt):
            problems += [f"ALTER TABLE {AlterTableType(c.subtype).name}: not a known alter_table_cmd"
                         for c in stmt.cmds if c.subtype not in ALTER_TABLE_COMMANDS]
        elif isinstance(stmt, ast.DropStmt) and stmt.removeType not in DROP_KINDS:
            problems.append(f"DROP {ObjectType(stmt.removeType).name}: not a known drop_ddl_stmt")
    return problems


UNIMPLEMENTED = Rule(
    "statement kind CockroachDB's grammar lacks",
    "pkg/sql/parser/sql.y (stmt, stmt_without_legacy_transaction, reindex_stmt), "
    "pkg/sql/parser/lexer.go (PurposelyUnimplemented: 42601 'unimplemented: this syntax')",
    _statement_kinds,
)

# -- builtin functions -----------------------------------------------------------------------------

BUILTINS_FILE = Path(__file__).with_name("cockroachdb_builtins.txt")


def _load_builtins() -> dict[str, str]:
    rows = [line.split("\t") for line in BUILTINS_FILE.read_text().splitlines() if line and not line.startswith("#")]
    return {row[0]: row[1] for row in rows}


#: name -> registry file; see cockroachdb_builtins.txt for where and how it was taken.
BUILTINS = _load_builtins()


def _functions_known(sent: Sent) -> list[str]:
    problems = []
    for node in nodes(sent):
        if isinstance(node, ast.FuncCall):
            parts = [p.sval for p in node.funcname]
            if parts[0] == "crdb_internal":
                continue  # the gated-internals rule's concern
            name = parts[-1] if parts[:-1] in ([], ["pg_catalog"]) else ".".join(parts)
            if name not in BUILTINS:
                problems.append(f"calls {name}(), which is not in the allowlist taken from CockroachDB's "
                                "builtin registry (tests/conformance/cockroachdb_builtins.txt)")
    return problems


FUNCTIONS = Rule(
    "function outside CockroachDB's builtin registry",
    "pkg/sql/sem/builtins/builtins.go, aggregate_builtins.go, generator_builtins.go, pg_builtins.go (the registry maps), "
    "allowlist in tests/conformance/cockroachdb_builtins.txt",
    _functions_known,
)

# -- gated internals -------------------------------------------------------------------------------

#: crdb_internal tables a session may read without allow_unsafe_internals (from 26.1 only an
#: allowlist passes, e.g. crdb_internal.zones in unsafesql_test.go); shardq relies on none.
CRDB_INTERNAL_ALLOWED: frozenset[str] = frozenset()
GATED_SCHEMAS = ("crdb_internal", "system")


def _internals(sent: Sent) -> list[str]:
    """``crdb_internal.*`` tables and functions and ``system.*`` tables, unless the statement runs on
    a session opened with allow_unsafe_internals (Sent.internals: engine.statements_needing_internals,
    e.g. resize's job polling)."""
    if sent.internals:
        return []
    problems = []
    for node in nodes(sent):
        if isinstance(node, ast.RangeVar):
            schema = node.catalogname if node.catalogname == "system" else node.schemaname
            if schema in GATED_SCHEMAS and not (schema == "crdb_internal" and node.relname in CRDB_INTERNAL_ALLOWED):
                problems.append(f"reads {schema}.{node.relname} on a session without allow_unsafe_internals")
        elif isinstance(node, ast.FuncCall) and node.funcname[0].sval == "crdb_internal":
            name = ".".join(p.sval for p in node.funcname)
            problems.append(f"calls {name}() on a session without allow_unsafe_internals")
    return problems


CRDB_INTERNAL = Rule(
    "gated internals outside an opted-in session",
    "pkg/sql/unsafesql/unsafesql.go (CheckInternalsAccess: 'system tables and virtual tables / builtins "
    "in the crdb_internal schema', 42501 unless allow_unsafe_internals); unsafesql_test.go "
    "TestAccessCheckServer (system.namespace, crdb_internal.gossip_alerts, crdb_internal.tenant_span_stats() "
    "denied); default off from 26.1 (cockroachdb#158085)",
    _internals,
)

# -- temporary tables ------------------------------------------------------------------------------


def _temp_tables(sent: Sent) -> list[str]:
    problems = []
    for node in nodes(sent):
        if isinstance(node, (ast.CreateStmt, ast.CreateTableAsStmt)):
            relation = node.relation if isinstance(node, ast.CreateStmt) else node.into.rel
            if relation.relpersistence == "t":
                problems.append(f"CREATE TEMP TABLE {relation.relname}: refused unless the session sets "
                                "experimental_enable_temp_tables (0A000 'temporary tables are only "
                                "supported experimentally', cockroachdb#46260)")
    return problems


TEMP_TABLES = Rule(
    "temporary table",
    "pkg/sql/create_table.go (persistence.IsTemporary() && !SessionData().TempTablesEnabled: "
    "pgcode.FeatureNotSupported, hint SET experimental_enable_temp_tables = 'on')",
    _temp_tables,
)
