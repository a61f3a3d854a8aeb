"""Rules about how statements address shardq's hash-sharded keys: SKIP LOCKED scans that are
hard-limited spans, and keyed lookups and writes that reach one bucket, not every bucket."""

from __future__ import annotations

import re

import pglast
from pglast import ast

from .base import Rule, column_name, column_qualifier, conjuncts, is_plain_equality, nodes, operator
from .collect import Sent

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


def _relations(items: object) -> list[ast.Node]:
    """The FROM items of a clause, joins flattened."""
    found: list[ast.Node] = []
    for item in items or ():
        if isinstance(item, ast.JoinExpr):
            found += _relations((item.larg, item.rarg))
        else:
            found.append(item)
    return found


# -- SKIP LOCKED scans are hard-limited spans ------------------------------------------------------

def _hard_limited(sent: Sent) -> list[str]:
    """A SKIP LOCKED SELECT reads one table of LOCKED_SCAN_KEYS, no join, and filters only on its key
    columns: plain equalities on a prefix of the key (not ``IN (…)`` nor ``= ANY(…)``, which are
    several spans each) and at most one range on the next column, ordered by the columns that
    follow the equalities. Its whole WHERE is then one index span, the LIMIT is pushed into the
    scan, and only the rows returned are locked."""
    problems = []
    for node in nodes(sent):
        if not isinstance(node, ast.SelectStmt) or not node.lockingClause:
            continue
        if not any(c.waitPolicy == pglast.enums.LockWaitPolicy.LockWaitSkip for c in node.lockingClause):
            continue
        relations = _relations(node.fromClause)
        if len(relations) != 1 or any(isinstance(r, ast.JoinExpr) for r in node.fromClause or ()):
            problems.append(f"a SKIP LOCKED scan over a join of {len(relations)} sources: the locking scan "
                            "is not a hard-limited span of one index")
            continue
        if not isinstance(relations[0], ast.RangeVar) or relations[0].relname not in LOCKED_SCAN_KEYS:
            continue
        table = relations[0].relname
        key = LOCKED_SCAN_KEYS[table]
        equal, ranged = set(), []
        for term in conjuncts(node.whereClause):
            column = key_column(term.lexpr, table) if isinstance(term, ast.A_Expr) else None
            if is_plain_equality(term) and column in key:
                equal.add(column)
            elif (isinstance(term, ast.A_Expr) and term.kind == pglast.enums.A_Expr_Kind.AEXPR_OP
                  and operator(term) in {"<", "<=", ">", ">="} and column in key):
                ranged.append(column)
            else:
                what = "IN (…) / = ANY(…), several spans" if isinstance(term, ast.A_Expr) and term.kind in (
                    pglast.enums.A_Expr_Kind.AEXPR_IN, pglast.enums.A_Expr_Kind.AEXPR_OP_ANY) else type(term).__name__
                problems.append(f"{table}: a residual filter in a SKIP LOCKED scan ({what})")
        prefix = 0
        while prefix < len(key) and key[prefix] in equal:
            prefix += 1
        if equal != set(key[:prefix]):
            problems.append(f"{table}: equalities {sorted(equal)} are not a prefix of the key {key}")
        if ranged and (len(ranged) > 1 or prefix >= len(key) or ranged[0] != key[prefix]):
            problems.append(f"{table}: range on {ranged} is not on the key column after the prefix")
        order = [key_column(s.node, table) for s in node.sortClause or ()]
        if order != list(key[prefix:prefix + len(order)]):
            problems.append(f"{table}: ORDER BY {order} is not the key order after {key[:prefix]}")
    return problems


HARD_LIMITED = Rule(
    "SKIP LOCKED scan that is not a hard-limited key span",
    "cockroachdb#121917 (a soft-limited locking scan locks every row it reads, filtered out or not, "
    "batch by batch; hard limits pushed into the scan by PR #85720); spans: pkg/sql/opt/idxconstraint",
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
            where = conjuncts(node.whereClause) + [t for j in node.fromClause if isinstance(j, ast.JoinExpr)
                                                   for t in conjuncts(j.quals)]
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
            problems.append(f"shardq_tasks {alias}: addressed by id from another relation, but shard inputs "
                            f"{sorted(SHARD_INPUTS - joined)} are not join equalities and the shard column is "
                            "not constrained: the lookup reads every bucket for each row")
    return problems


SHARD_INPUT_EQUALITY = Rule(
    "keyed lookup that fans out over every bucket",
    "pkg/sql/opt/lookupjoin/constraint_builder.go (findComputedColJoinEquality: a computed key column "
    "is derived only when the columns of its expression are a subset of the join-equality columns); "
    "audit F5 (../shared/reference/cockroachdb-audit.md)",
    _shard_input_equalities,
)
