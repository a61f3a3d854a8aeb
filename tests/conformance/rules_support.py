"""Rules about what CockroachDB has at all: statement kinds, builtin functions, gated internals and
temporary tables. Each names the CockroachDB source it is taken from."""

from __future__ import annotations

from pathlib import Path

from pglast import ast
from pglast.enums import AlterTableType, ConstrType, LimitOption, ObjectType, SetOperation, SortByDir

from tests.conformance.base import Rule, nodes, statements, walk
from tests.conformance.collect import Sent

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
            problems += [
                f"ALTER TABLE {AlterTableType(c.subtype).name}: not a known alter_table_cmd"
                for c in stmt.cmds
                if c.subtype not in ALTER_TABLE_COMMANDS
            ]
        elif isinstance(stmt, ast.DropStmt) and stmt.removeType not in DROP_KINDS:
            kind_name = "(no kind)" if stmt.removeType is None else ObjectType(stmt.removeType).name
            problems.append(f"DROP {kind_name}: not a known drop_ddl_stmt")
    return problems


UNIMPLEMENTED = Rule(
    "statement kind CockroachDB's grammar lacks",
    "pkg/sql/parser/sql.y (stmt, stmt_without_legacy_transaction, reindex_stmt), "
    "pkg/sql/parser/lexer.go (PurposelyUnimplemented: 42601 'unimplemented: this syntax')",
    _statement_kinds,
)

# -- clauses inside allowed statement kinds ---------------------------------------------------------

#: Where each refused clause stands in CockroachDB's grammar, pkg/sql/parser/sql.y at
#: 8c50557574e6dd23b3f8623453b45bb9935ccd93 (an "unimplemented" production fails with 0A000 through
#: lexer.go's Unimplemented*; a clause with no production is a 42601 syntax error).
SQL_Y = "pkg/sql/parser/sql.y at 8c50557"
CLAUSES = {
    "returning old/new": f"{SQL_Y} returning_clause: only RETURNING target_list | RETURNING NOTHING; "
    "RETURNING OLD/NEW (and WITH (OLD AS …)) is PostgreSQL 18's, with no production here",
    "grouping sets": f"{SQL_Y} group_by_item: ROLLUP/CUBE/GROUPING SETS are "
    "unimplementedWithIssueDetail(sqllex, 46280, …)",
    "with ties": f"{SQL_Y} limit_clause: FETCH first_or_next … ONLY; no WITH TIES production",
    "tablesample": f"{SQL_Y} table_ref: no TABLESAMPLE production",
    "recursive union": "pkg/sql/opt/optbuilder/with.go at 03080eb (splitRecursiveCTE requires union.All; a "
    "self-reference otherwise fails 'recursive query %q does not have the form "
    "non-recursive-term UNION ALL recursive-term')",
    "order by using": f"{SQL_Y} sortby: a_expr opt_asc_desc opt_nulls_order; no USING operator",
    "current of": f"{SQL_Y} where_clause: WHERE a_expr; no WHERE CURRENT OF production",
    "partition": f"{SQL_Y} partition_by_inner: RANGE/LIST '(' name_list ')' '(' partitions ')' — "
    "PostgreSQL's declarative partitioning (PARTITION BY … without the list, PARTITION OF) "
    "has no production",
    "exclude": f"{SQL_Y} constraint_elem: EXCLUDE USING error → unimplementedWithIssueDetail(sqllex, 46657, "
    '"add constraint exclude using")',
    "nulls not distinct": f"{SQL_Y} constraint_elem UNIQUE / create_index_stmt: no NULLS [NOT] DISTINCT",
    "access method": f"{SQL_Y} opt_index_access_method: gin, gist, btree only; hash, spgist, brin "
    "→ unimplemented(sqllex, \"index using \" + $2), anything else 'unrecognized access method'",
    "opclass": f"{SQL_Y} index_elem_options: an operator class → unimplementedWithIssue(sqllex, 47420)",
    "inherits": f"{SQL_Y} opt_create_table_inherits: INHERITS error → "
    'unimplementedWithIssueDetail(sqllex, 22456, "create table inherits")',
}
TYPES_FILE = Path(__file__).with_name("cockroachdb_types.txt")


def _load_types() -> dict[str, tuple[str, str]]:
    rows = [line.split("\t") for line in TYPES_FILE.read_text().splitlines() if line and not line.startswith("#")]
    return {row[0]: (row[1], row[2]) for row in rows}


#: name -> (verdict, source); see cockroachdb_types.txt for where and how it was taken.
TYPES = _load_types()


def _type_problem(node: ast.TypeName) -> str | None:
    names = [n.sval for n in node.names]
    if names[:1] == ["pg_catalog"]:
        names = names[1:]
    if len(names) != 1:
        return f"type {'.'.join(names)}: a qualified (user-defined) type name, not in cockroachdb_types.txt"
    verdict, source = TYPES.get(names[0], ("missing", ""))
    if verdict == "type":
        return None
    if verdict == "unimplemented":
        return f"type {names[0]}: {SQL_Y} simple_typename → unimplemented for a name in pkg/sql/types/types.go {source}"
    return (
        f"type {names[0]}: not a CockroachDB type name (cockroachdb_types.txt); {SQL_Y} simple_typename makes "
        "it a user-defined type reference, which fails 'type does not exist'"
    )


def _names_in_scope(stmt: ast.Node) -> set[str]:
    """Every table name and alias the statement's FROM, USING and targets bring into scope."""
    found: set[str] = set()
    for n in walk(stmt):
        name = None
        if isinstance(n, ast.RangeVar):
            name = n.alias.aliasname if n.alias else n.relname
        elif isinstance(n, (ast.RangeSubselect, ast.RangeFunction)) and n.alias:
            name = n.alias.aliasname
        if name is not None:
            found.add(name)
    return found


def _refers_to(query: ast.Node, name: str) -> bool:
    return any(isinstance(n, ast.RangeVar) and n.relname == name and not n.schemaname for n in walk(query))


def _clauses(sent: Sent) -> list[str]:
    """Clause-level syntax inside an allowed statement kind that CockroachDB's grammar lacks or
    refuses as unimplemented, and type names outside cockroachdb_types.txt: PostgreSQL 18's parser
    (PARSES) accepts them all."""
    problems = []
    for stmt in statements(sent):
        in_scope = _names_in_scope(stmt)
        for node in walk(stmt):
            if isinstance(node, ast.ReturningClause):
                qualifiers = {
                    c.fields[0].sval
                    for t in node.exprs or ()
                    for c in walk(t)
                    if isinstance(c, ast.ColumnRef) and len(c.fields or ()) >= 2 and isinstance(c.fields[0], ast.String)
                }
                if node.options or ({"old", "new"} & qualifiers) - in_scope:
                    problems.append(CLAUSES["returning old/new"])
            elif isinstance(node, ast.GroupingSet):
                problems.append(CLAUSES["grouping sets"])
            elif isinstance(node, ast.SelectStmt) and node.limitOption == LimitOption.LIMIT_OPTION_WITH_TIES:
                problems.append(CLAUSES["with ties"])
            elif isinstance(node, ast.RangeTableSample):
                problems.append(CLAUSES["tablesample"])
            elif isinstance(node, ast.WithClause) and node.recursive:
                for cte in node.ctes:
                    query = cte.ctequery
                    if (
                        isinstance(query, ast.SelectStmt)
                        and query.op == SetOperation.SETOP_UNION
                        and not query.all
                        and _refers_to(query, cte.ctename)
                    ):
                        problems.append(
                            f"WITH RECURSIVE {cte.ctename}: UNION without ALL, {CLAUSES['recursive union']}"
                        )
            elif isinstance(node, ast.SortBy) and node.sortby_dir == SortByDir.SORTBY_USING:
                problems.append(CLAUSES["order by using"])
            elif isinstance(node, ast.CurrentOfExpr):
                problems.append(CLAUSES["current of"])
            elif isinstance(node, ast.CreateStmt):
                if node.partspec is not None or node.partbound is not None:
                    problems.append(CLAUSES["partition"])
                if node.inhRelations and node.partbound is None:
                    problems.append(CLAUSES["inherits"])
            elif isinstance(node, ast.Constraint):
                if node.contype == ConstrType.CONSTR_EXCLUSION:
                    problems.append(CLAUSES["exclude"])
                if node.nulls_not_distinct:
                    problems.append(CLAUSES["nulls not distinct"])
            elif isinstance(node, ast.IndexStmt):
                if node.nulls_not_distinct:
                    problems.append(CLAUSES["nulls not distinct"])
                if node.accessMethod not in ("btree", "gin", "gist"):
                    problems.append(f"USING {node.accessMethod}: {CLAUSES['access method']}")
            elif isinstance(node, ast.IndexElem) and node.opclass:
                problems.append(CLAUSES["opclass"])
            elif isinstance(node, ast.TypeName):
                problem = _type_problem(node)
                if problem:
                    problems.append(problem)
    return problems


UNSUPPORTED_CLAUSES = Rule(
    "clause or type CockroachDB's grammar lacks",
    f"{SQL_Y} (returning_clause, group_by_item, limit_clause, table_ref, sortby, where_clause, partition_by_inner, "
    "constraint_elem, opt_index_access_method, index_elem_options, opt_create_table_inherits, simple_typename), "
    "pkg/sql/parser/lexer.go (Unimplemented*, PurposelyUnimplemented), pkg/sql/opt/optbuilder/with.go "
    "(splitRecursiveCTE), pkg/sql/types (allowlist in tests/conformance/cockroachdb_types.txt)",
    _clauses,
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
                problems.append(
                    f"calls {name}(), which is not in the allowlist taken from CockroachDB's "
                    "builtin registry (tests/conformance/cockroachdb_builtins.txt)"
                )
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
            if relation.relpersistence == "t" or relation.schemaname == "pg_temp":
                how = "TEMP TABLE" if relation.relpersistence == "t" else "TABLE pg_temp."
                problems.append(
                    f"CREATE {how}{relation.relname}: temporary (pg_temp is as good as TEMP: "
                    "pkg/sql/opt/optbuilder/util.go resolveTemporaryStatus), refused unless the "
                    "session sets experimental_enable_temp_tables (0A000 'temporary tables are only "
                    "supported experimentally', cockroachdb#46260)"
                )
    return problems


TEMP_TABLES = Rule(
    "temporary table",
    "pkg/sql/create_table.go (persistence.IsTemporary() && !SessionData().TempTablesEnabled: "
    "pgcode.FeatureNotSupported, hint SET experimental_enable_temp_tables = 'on'); "
    "pkg/sql/opt/optbuilder/util.go at 0031e1f (resolveTemporaryStatus: a pg_temp schema makes it temporary)",
    _temp_tables,
)
