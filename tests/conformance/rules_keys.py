"""Rules about how statements address shardq's hash-sharded keys: SKIP LOCKED scans that are
hard-limited spans, and keyed lookups and writes that reach one bucket, not every bucket."""

from __future__ import annotations

import re
from collections.abc import Iterable

import pglast
from pglast import ast

from tests.conformance.base import (
    Rule,
    column_name,
    column_qualifier,
    conjuncts,
    is_plain_equality,
    nodes,
    operator,
    walk,
)
from tests.conformance.collect import Sent

#: The primary keys shardq addresses, in key order: the tasks table's (its hidden shard column
#: first: migration 0001, sql/cockroachdb/tasks.sql) and the flow slots' (migration 0006).
SHARD = "{shard_col}"
LOCKED_SCAN_KEYS = {
    "shardq_tasks": (SHARD, "state", "queue", "rank", "exec_time", "id"),
    "shardq_slots": ("queue", "free_at", "slot"),
}
#: The columns the tasks table's shard column is computed from (PRIMARY KEY (state, queue, rank,
#: exec_time, id) USING HASH, migration 0001).
SHARD_INPUTS = {"state", "queue", "rank", "exec_time", "id"}
_SHARD_NAME = re.compile(r"^crdb_internal_(?P<columns>.+)_shard_(?P<buckets>\d+)$")


def key_column(node: object, table: str = "shardq_tasks") -> str | None:
    """The column ``node`` names, with ``table``'s shard column recognised by its role: the name
    CockroachDB derives for the hidden column of a hash-sharded key, ``crdb_internal_`` + the key's
    columns sorted and joined by ``_`` + ``_shard_<bucket count>`` (GetShardColumnName,
    pkg/sql/catalog/tabledesc), whatever the bucket count."""
    name = column_name(node)
    match = _SHARD_NAME.match(name or "")
    if match and table == "shardq_tasks" and match["columns"] == "_".join(sorted(SHARD_INPUTS)):
        return SHARD
    return name


def _relations(items: Iterable[object] | None) -> list[ast.Node]:
    """The FROM items of a clause, joins flattened."""
    found: list[ast.Node] = []
    for item in items or ():
        if isinstance(item, ast.JoinExpr):
            found += _relations((item.larg, item.rarg))
        elif isinstance(item, ast.Node):
            found.append(item)
    return found


# -- SKIP LOCKED scans are hard-limited spans ------------------------------------------------------

_RANGES = {"<", "<=", ">", ">="}
_INT_TYPES = {"int2", "int4", "int8", "int", "integer", "bigint", "smallint"}


def _is_value(node: object) -> bool:
    """An expression the optimizer folds to one constant before it plans the scan: it names no
    column and holds no subquery (placeholders become constants, AssignPlaceholders in
    pkg/sql/opt/optgen/cmd/optgen/factory_gen.go; calls such as now() are folded), so a key
    column compared with it is a single bound of a span."""
    return not any(isinstance(n, (ast.ColumnRef, ast.SubLink, ast.RowExpr, ast.A_ArrayExpr)) for n in walk(node))


def _is_limit_value(node: object) -> bool:
    """A constant or a placeholder (either optionally cast to an integer type): what
    GenerateLimitedScans / PushLimitIntoConstrainedScan match as ``(Const $limit)``."""
    if isinstance(node, ast.TypeCast):
        names = [p.sval for p in node.typeName.names]
        return names[-1].lower() in _INT_TYPES and not node.typeName.arrayBounds and _is_limit_value(node.arg)
    if isinstance(node, ast.A_Const):
        return isinstance(node.val, ast.Integer) and not node.isnull
    return isinstance(node, ast.ParamRef)


def _key_term(term: object, table: str, aliases: set[str]) -> tuple[str, str] | None:
    """``(column, operator)`` when ``term`` compares one key column of ``table`` (unqualified or
    qualified by ``aliases``) with a value by =, <, <=, > or >=; None for anything else."""
    if not (isinstance(term, ast.A_Expr) and term.kind == pglast.enums.A_Expr_Kind.AEXPR_OP):
        return None
    op = operator(term)
    if op != "=" and op not in _RANGES:
        return None
    for mine, other in ((term.lexpr, term.rexpr), (term.rexpr, term.lexpr)):
        if not isinstance(mine, ast.ColumnRef) or column_qualifier(mine) not in aliases | {None}:
            continue
        if len(mine.fields or ()) > 2:
            continue
        column = key_column(mine, table)
        if column in LOCKED_SCAN_KEYS[table] and _is_value(other):
            return column, ("=" if op == "=" else "range")
    return None


def _locked_limit(node: ast.SelectStmt) -> list[str]:
    """The LIMIT of a SKIP LOCKED scan, on any table: present, a constant or a placeholder, no
    OFFSET and no WITH TIES. GenerateLimitedScans and PushLimitIntoConstrainedScan (both in
    pkg/sql/opt/xform/rules/limit.opt at 0070b88) push only ``(Const $limit)`` into a Scan; without
    that hard limit the locking scan is soft-limited and locks every row of each KV batch it reads
    (cockroachdb#121917). An OFFSET is pushed below as Offset(Limit(input, offset + limit))
    (PushLimitIntoOffset, pkg/sql/opt/norm/rules/limit.opt at 02c1ad6d), so the scan locks the
    offset rows it never returns; WITH TIES has no production in sql.y's limit_clause."""
    problems = []
    if node.limitCount is None:
        problems.append(
            "a SKIP LOCKED scan without LIMIT: nothing is pushed into the scan as a hard limit, "
            "so it locks every row of every batch it reads (cockroachdb#121917)"
        )
    elif not _is_limit_value(node.limitCount):
        what = "LIMIT ALL" if isinstance(node.limitCount, ast.A_Const) else type(node.limitCount).__name__
        problems.append(
            f"a SKIP LOCKED scan whose LIMIT is {what}, not a constant or placeholder: only "
            "(Const $limit) becomes the scan's hard limit (xform/rules/limit.opt GenerateLimitedScans)"
        )
    if node.limitOffset is not None:
        problems.append(
            "a SKIP LOCKED scan with OFFSET: PushLimitIntoOffset limits the scan to offset + limit "
            "rows, so it locks the offset rows it never returns"
        )
    if node.limitOption == pglast.enums.LimitOption.LIMIT_OPTION_WITH_TIES:
        problems.append("a SKIP LOCKED scan with FETCH … WITH TIES (no such production in sql.y limit_clause)")
    return problems


def _hard_limited(sent: Sent) -> list[str]:
    """A SKIP LOCKED SELECT has a hard LIMIT (a constant or placeholder, no OFFSET) and reads one
    table of LOCKED_SCAN_KEYS, no join; every term of its WHERE's top-level AND compares one key
    column with a value (no column, no subquery on the other side) by a plain equality or a range,
    the equalities cover a prefix of the key and at most one range bounds the next column, and
    it is ordered by the columns that follow the equalities. Its whole WHERE is then one index
    span, the LIMIT is pushed into the scan, and only the rows returned are locked. Anything else
    is refused, whatever the column: ``IN (…)``, ``= ANY(…)`` and row-valued ``IN`` are several
    spans (SplitScanIntoUnionScans, pkg/sql/opt/xform/limit_funcs.go, scans each key with its own
    hard limit and discards what the Limit above does not keep: locked rows not returned), and
    OR, NOT, IS NULL, LIKE or a comparison with another column are residual filters above the
    scan, which keep its limit soft. A SKIP LOCKED scan of a table not in LOCKED_SCAN_KEYS is
    refused too: its key is unknown, so its span cannot be checked."""
    problems = []
    for node in nodes(sent):
        if not isinstance(node, ast.SelectStmt) or not node.lockingClause:
            continue
        if not any(c.waitPolicy == pglast.enums.LockWaitPolicy.LockWaitSkip for c in node.lockingClause):
            continue
        problems += _locked_limit(node)
        relations = _relations(node.fromClause)
        if len(relations) != 1 or any(isinstance(r, ast.JoinExpr) for r in node.fromClause or ()):
            problems.append(
                f"a SKIP LOCKED scan over a join of {len(relations)} sources: the locking scan "
                "is not a hard-limited span of one index"
            )
            continue
        if not isinstance(relations[0], ast.RangeVar) or relations[0].relname not in LOCKED_SCAN_KEYS:
            name = relations[0].relname if isinstance(relations[0], ast.RangeVar) else type(relations[0]).__name__
            problems.append(
                f"a SKIP LOCKED scan of {name}, whose key LOCKED_SCAN_KEYS does not list: its "
                "span cannot be checked (add the table's primary key, from its migration)"
            )
            continue
        table = relations[0].relname
        assert table is not None  # a key in LOCKED_SCAN_KEYS
        alias = relations[0].alias.aliasname if relations[0].alias else None
        aliases = {table} | ({alias} if alias else set())
        key = LOCKED_SCAN_KEYS[table]
        equal, ranged = set(), []
        for term in conjuncts(node.whereClause):
            found = _key_term(term, table, aliases)
            if found and found[1] == "=":
                equal.add(found[0])
            elif found:
                ranged.append(found[0])
            else:
                what = type(term).__name__
                if isinstance(term, ast.A_Expr) and term.kind in (
                    pglast.enums.A_Expr_Kind.AEXPR_IN,
                    pglast.enums.A_Expr_Kind.AEXPR_OP_ANY,
                ):
                    what = "IN (…) / = ANY(…), several spans"
                elif isinstance(term, ast.A_Expr):
                    what = f"{operator(term)!r} that is not a key column against a value"
                problems.append(f"{table}: a residual filter in a SKIP LOCKED scan ({what})")
        prefix = 0
        while prefix < len(key) and key[prefix] in equal:
            prefix += 1
        if equal != set(key[:prefix]):
            problems.append(f"{table}: equalities {sorted(equal)} are not a prefix of the key {key}")
        if ranged and (len(ranged) > 1 or prefix >= len(key) or ranged[0] != key[prefix]):
            problems.append(f"{table}: range on {ranged} is not on the key column after the prefix")
        order = [key_column(s.node, table) for s in node.sortClause or ()]
        if order != list(key[prefix : prefix + len(order)]):
            problems.append(f"{table}: ORDER BY {order} is not the key order after {key[:prefix]}")
    return problems


HARD_LIMITED = Rule(
    "SKIP LOCKED scan that is not a hard-limited key span",
    "cockroachdb#121917 (a soft-limited locking scan locks every row it reads, filtered out or not, "
    "batch by batch; hard limits pushed into the scan by PR #85720); pkg/sql/opt/xform/rules/limit.opt "
    "(GenerateLimitedScans, PushLimitIntoConstrainedScan: (Const $limit) only; SplitScanIntoUnionScans), "
    "pkg/sql/opt/norm/rules/limit.opt (PushLimitIntoOffset); spans: pkg/sql/opt/idxconstraint",
    _hard_limited,
)

# -- keyed lookups and writes reach one bucket -----------------------------------------------------


def _shard_input_equalities(sent: Sent) -> list[str]:
    """A lookup or write that addresses shardq_tasks rows by ``id`` taken from another relation (an
    ``unnest``, VALUES, CTE or subquery: a join equality on ``id``) must let the optimizer find each
    row's bucket: either every shard input (state, queue, rank, exec_time, id) is a join equality
    with that relation, so it computes the shard column per input row, or the shard column itself
    is constrained by an equality (the claim's ``t.{shard_col} = %(bucket)s``). A shard input equal
    to a constant does not count (findComputedColJoinEquality considers join equalities only), and
    the lookup then reads every bucket for every input row. A join on ``id`` alone is allowed: it
    goes through the unique index shardq_tasks_id (migration 0001), whatever the bucket count."""
    problems = []
    for node in nodes(sent):
        if isinstance(node, (ast.UpdateStmt, ast.DeleteStmt)):
            targets = [node.relation]
            where = conjuncts(node.whereClause)
        elif isinstance(node, ast.SelectStmt) and node.fromClause:
            targets = [r for r in _relations(node.fromClause) if isinstance(r, ast.RangeVar)]
            where = conjuncts(node.whereClause) + [
                t for j in node.fromClause if isinstance(j, ast.JoinExpr) for t in conjuncts(j.quals)
            ]
        else:
            continue
        for target in targets:
            if target.relname != "shardq_tasks":
                continue
            alias = target.alias.aliasname if target.alias else target.relname
            joined, constant = set(), set()
            for term in where:
                if not is_plain_equality(term):
                    continue
                for mine, other in ((term.lexpr, term.rexpr), (term.rexpr, term.lexpr)):
                    if column_qualifier(mine) != alias:
                        continue
                    column = key_column(mine)
                    if isinstance(other, ast.ColumnRef) and column_qualifier(other) not in (None, alias):
                        joined.add(column)
                    elif not isinstance(other, ast.ColumnRef):
                        constant.add(column)
            if "id" not in joined or joined <= {"id"} or joined >= SHARD_INPUTS or SHARD in constant:
                continue
            problems.append(
                f"shardq_tasks {alias}: addressed by id from another relation, but shard inputs "
                f"{sorted(SHARD_INPUTS - joined)} are not join equalities and the shard column is "
                "not constrained: the lookup reads every bucket for each row"
            )
    return problems


SHARD_INPUT_EQUALITY = Rule(
    "keyed lookup that fans out over every bucket",
    "pkg/sql/opt/lookupjoin/constraint_builder.go (findComputedColJoinEquality: a computed key column "
    "is derived only when the columns of its expression are a subset of the join-equality columns); "
    "audit F5 (../shared/reference/cockroachdb-audit.md)",
    _shard_input_equalities,
)
