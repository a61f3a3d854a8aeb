"""HARD_LIMITED against mutations generated from the SKIP LOCKED statements shardq sends (issue 47,
item 4): every key-column equality of every locked scan turned into several spans, and every
locked scan's LIMIT removed, widened or offset. Each mutation is made on the parsed statement and
printed back, so no statement or column is picked by hand."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pglast
import pytest
from pglast import ast
from pglast.enums import A_Expr_Kind, LockWaitPolicy
from pglast.stream import RawStream

from tests.conformance import collect
from tests.conformance.base import conjuncts, walk
from tests.conformance.collect import Sent
from tests.conformance.normalise import for_pglast
from tests.conformance.rules import HARD_LIMITED
from tests.conformance.rules_keys import LOCKED_SCAN_KEYS, SHARD, key_column

pytestmark = pytest.mark.conformance

LOCKED = [s for s in collect.everything() if "SKIP LOCKED" in s.text.upper()]
EQ = (ast.String(sval="="),)


def _row(args: tuple[object, ...]) -> ast.RowExpr:
    """``(a, b, …)`` as the parser builds it (an implicit row constructor)."""
    return ast.RowExpr(args=args, row_format=pglast.enums.CoercionForm.COERCE_IMPLICIT_CAST)


def _locked_scan(stmt: ast.Node) -> ast.SelectStmt:
    found = [
        n
        for n in walk(stmt)
        if isinstance(n, ast.SelectStmt)
        and n.lockingClause
        and any(c.waitPolicy == LockWaitPolicy.LockWaitSkip for c in n.lockingClause)
    ]
    assert len(found) == 1
    return found[0]


def _parse(sent: Sent) -> tuple[ast.Node, ast.SelectStmt]:
    stmt = pglast.parse_sql(for_pglast(sent.text))[0].stmt
    assert stmt is not None
    return stmt, _locked_scan(stmt)


def _equalities(scan: ast.SelectStmt) -> Iterator[tuple[int, ast.A_Expr, str]]:
    """(position in the top-level AND, term, key column) of each key-column equality."""
    table = scan.fromClause[0].relname
    for i, term in enumerate(conjuncts(scan.whereClause)):
        if isinstance(term, ast.A_Expr) and term.kind == A_Expr_Kind.AEXPR_OP and term.name[-1].sval == "=":
            column = key_column(term.lexpr, table)
            if column in LOCKED_SCAN_KEYS[table]:
                yield i, term, column


def _fresh_number(stmt: ast.Node) -> int:
    return 1 + max((n.number or 0 for n in walk(stmt) if isinstance(n, ast.ParamRef)), default=0)


def _fresh_param(stmt: ast.Node) -> ast.ParamRef:
    return ast.ParamRef(number=_fresh_number(stmt))


def _replace_term(scan: ast.SelectStmt, index: int, new: ast.Node) -> None:
    terms = conjuncts(scan.whereClause)
    terms[index] = new
    scan.whereClause = (
        terms[0] if len(terms) == 1 else ast.BoolExpr(boolop=pglast.enums.BoolExprType.AND_EXPR, args=tuple(terms))
    )


#: Ways to turn ``col = v`` into several spans; each receives (column, value, a fresh placeholder).
SPREADS: dict[str, Callable[[ast.Node, ast.Node, ast.ParamRef], ast.Node]] = {
    "IN (v, v2)": lambda col, v, p: ast.A_Expr(kind=A_Expr_Kind.AEXPR_IN, name=EQ, lexpr=col, rexpr=(v, p)),
    "= ANY($n)": lambda col, v, p: ast.A_Expr(kind=A_Expr_Kind.AEXPR_OP_ANY, name=EQ, lexpr=col, rexpr=p),
    "= ANY(ARRAY[v, v2])": lambda col, v, p: ast.A_Expr(
        kind=A_Expr_Kind.AEXPR_OP_ANY, name=EQ, lexpr=col, rexpr=ast.A_ArrayExpr(elements=(v, p))
    ),
    "(col) IN ((v), (v2)) row-valued": lambda col, v, p: ast.A_Expr(
        kind=A_Expr_Kind.AEXPR_IN, name=EQ, lexpr=_row(args=(col,)), rexpr=(_row(args=(v,)), _row(args=(p,)))
    ),
}
#: Ways to keep ``col = …`` a plain equality whose other side is no value: the scan then filters
#: row by row (a residual filter above it), not by a span bound.
NOT_VALUES: dict[str, Callable[[ast.Node, ast.Node, ast.ParamRef], ast.Node]] = {
    "= another column": lambda col, v, p: ast.A_Expr(
        kind=A_Expr_Kind.AEXPR_OP, name=EQ, lexpr=col, rexpr=ast.ColumnRef(fields=(ast.String(sval="attempts"),))
    ),
    "= (SELECT v)": lambda col, v, p: ast.A_Expr(
        kind=A_Expr_Kind.AEXPR_OP,
        name=EQ,
        lexpr=col,
        rexpr=ast.SubLink(
            subLinkType=pglast.enums.SubLinkType.EXPR_SUBLINK,
            subselect=ast.SelectStmt(targetList=(ast.ResTarget(val=v),), limitOption=0, op=0),
        ),
    ),
}


def _spread_mutations() -> Iterator[tuple[str, Sent]]:
    for sent in LOCKED:
        _, scan = _parse(sent)
        for index, _term, column in list(_equalities(scan)):
            for how, build in (SPREADS | NOT_VALUES).items():
                stmt, scan = _parse(sent)  # a fresh tree for each mutation
                term = conjuncts(scan.whereClause)[index]
                assert isinstance(term, ast.A_Expr) and term.lexpr is not None and isinstance(term.rexpr, ast.Node)
                _replace_term(scan, index, build(term.lexpr, term.rexpr, _fresh_param(stmt)))
                yield f"{sent.origin}:{column}:{how}", Sent(f"mutated:{sent.origin}", RawStream()(stmt))


def _pair_mutations() -> Iterator[tuple[str, Sent]]:
    """The first two key equalities of each scan as one row-valued IN over two rows."""
    for sent in LOCKED:
        stmt, scan = _parse(sent)
        found = list(_equalities(scan))[:2]
        if len(found) < 2:
            continue
        (i, a, ca), (j, b, cb) = found
        pair = ast.A_Expr(
            kind=A_Expr_Kind.AEXPR_IN,
            name=EQ,
            lexpr=_row(args=(a.lexpr, b.lexpr)),
            rexpr=(
                _row(args=(a.rexpr, b.rexpr)),
                _row(args=(_fresh_param(stmt), ast.ParamRef(number=_fresh_number(stmt) + 1))),
            ),
        )
        terms = conjuncts(scan.whereClause)
        terms = [pair if k == i else t for k, t in enumerate(terms) if k != j]
        scan.whereClause = ast.BoolExpr(boolop=pglast.enums.BoolExprType.AND_EXPR, args=tuple(terms))
        yield f"{sent.origin}:({ca}, {cb}) IN", Sent(f"mutated:{sent.origin}", RawStream()(stmt))


SPREAD = list(_spread_mutations()) + list(_pair_mutations())


def test_every_locked_scan_shardq_sends_is_collected_and_passes():
    assert {s.origin for s in LOCKED} >= {"sql:task_claim_batch", "sql:task_promote_due", "sql:flow_slots_take"}
    for sent in LOCKED:
        assert HARD_LIMITED(sent) == [], sent.origin
        # Printing the parsed statement back changes nothing the rule looks at.
        assert HARD_LIMITED(Sent(sent.origin, RawStream()(_parse(sent)[0]))) == [], sent.origin


def test_every_key_column_of_every_locked_scan_is_mutated():
    columns = {name.split(":")[2] for name, _ in SPREAD if name.count(":") == 3}
    assert {SHARD, "state", "queue", "rank"} <= columns  # the tasks key's equality columns
    assert len(SPREAD) >= len(SPREADS | NOT_VALUES) * 8


@pytest.mark.parametrize("name, sent", SPREAD, ids=[name for name, _ in SPREAD])
def test_a_key_equality_made_several_spans_or_no_value_is_refused(name, sent):
    problems = HARD_LIMITED(sent)
    assert problems and any("residual filter" in p for p in problems), (name, sent.text)


def _limit_mutations() -> Iterator[tuple[str, Sent]]:
    edits: dict[str, Callable[[ast.SelectStmt, ast.Node], None]] = {
        "no LIMIT": lambda scan, stmt: setattr(scan, "limitCount", None),
        "LIMIT ALL": lambda scan, stmt: setattr(scan, "limitCount", ast.A_Const(isnull=True)),
        "LIMIT $n + 1": lambda scan, stmt: setattr(
            scan,
            "limitCount",
            ast.A_Expr(
                kind=A_Expr_Kind.AEXPR_OP,
                name=(ast.String(sval="+"),),
                lexpr=scan.limitCount,
                rexpr=ast.A_Const(val=ast.Integer(ival=1)),
            ),
        ),
        "LIMIT (SELECT 1)": lambda scan, stmt: setattr(
            scan,
            "limitCount",
            ast.SubLink(
                subLinkType=pglast.enums.SubLinkType.EXPR_SUBLINK, subselect=pglast.parse_sql("SELECT 1")[0].stmt
            ),
        ),
        "OFFSET 1": lambda scan, stmt: setattr(scan, "limitOffset", ast.A_Const(val=ast.Integer(ival=1))),
        "OFFSET $n": lambda scan, stmt: setattr(scan, "limitOffset", _fresh_param(stmt)),
    }
    for sent in LOCKED:
        for how, edit in edits.items():
            stmt, scan = _parse(sent)
            edit(scan, stmt)
            yield f"{sent.origin}:{how}", Sent(f"mutated:{sent.origin}", RawStream()(stmt))


LIMITS = list(_limit_mutations())


@pytest.mark.parametrize("name, sent", LIMITS, ids=[name for name, _ in LIMITS])
def test_a_locked_scan_without_a_hard_limit_is_refused(name, sent):
    problems = HARD_LIMITED(sent)
    assert problems and any("LIMIT" in p or "OFFSET" in p for p in problems), (name, sent.text)


def test_with_ties_on_a_locked_scan_does_not_even_parse():
    # PostgreSQL's grammar refuses the pair ("SKIP LOCKED and WITH TIES options cannot be used
    # together"), so PARSES stops it before HARD_LIMITED's own WITH TIES check is reached.
    from tests.conformance.rules import PARSES

    text = next(s for s in LOCKED if s.origin == "sql:flow_slots_take").text
    assert PARSES(Sent("mutated", text.replace("LIMIT %(limit)s", "FETCH FIRST %(limit)s ROWS WITH TIES")))


@pytest.mark.parametrize(
    "text",
    [
        "SELECT name FROM shardq_queues WHERE name = %(queue)s FOR UPDATE SKIP LOCKED",
        "SELECT name FROM shardq_queues WHERE name = %(queue)s ORDER BY name LIMIT %(limit)s FOR UPDATE SKIP LOCKED",
    ],
)
def test_skip_locked_on_a_table_without_a_listed_key_is_refused(text):
    problems = HARD_LIMITED(Sent("example", text))
    assert any("LOCKED_SCAN_KEYS does not list" in p for p in problems)
    assert ("LIMIT" not in text) == any("without LIMIT" in p for p in problems)


def test_the_listed_keys_are_the_migrations_primary_keys():
    # Mechanically: the last primary key each upgrade gives the two tables, in key order, with the
    # hidden shard column first where the key is USING HASH.
    keys: dict[str, tuple[str, ...]] = {}
    for sent in collect.migration_statements():
        if not sent.origin.endswith(":upgrade"):
            continue
        for raw in pglast.parse_sql(for_pglast(sent.text)):
            stmt = raw.stmt
            constraints: list[ast.Constraint] = []
            if isinstance(stmt, ast.CreateStmt):
                table = stmt.relation.relname
                constraints = [e for e in stmt.tableElts or () if isinstance(e, ast.Constraint)]
            elif isinstance(stmt, ast.AlterTableStmt):
                table = stmt.relation.relname
                constraints = [c.def_ for c in stmt.cmds if isinstance(c.def_, ast.Constraint)]
            for c in constraints:
                if c.contype == pglast.enums.ConstrType.CONSTR_PRIMARY and table in LOCKED_SCAN_KEYS:
                    hashed = "USING HASH" in sent.text.upper() and table == "shardq_tasks"
                    keys[table] = ((SHARD,) if hashed else ()) + tuple(k.sval for k in c.keys or ())
    assert keys == LOCKED_SCAN_KEYS
