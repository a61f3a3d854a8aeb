"""What every rule module shares: the :class:`Rule` record and walking a statement's pglast AST."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeGuard

import pglast
from pglast import ast

from tests.conformance.collect import Sent
from tests.conformance.normalise import for_pglast


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
        return tuple(raw.stmt for raw in pglast.parse_sql(for_pglast(sent.text)) if raw.stmt is not None)
    except pglast.parser.ParseError as exc:
        raise Unparsable(str(exc)) from exc


def walk(node: object) -> Iterator[ast.Node]:
    """Every AST node under ``node``, itself included."""
    if isinstance(node, ast.Node):
        yield node
        for name in node:  # a node iterates over its field names
            yield from walk(getattr(node, name, None))
    elif isinstance(node, (tuple, list)):
        for item in node:
            yield from walk(item)


def walk_with_parent(node: object, parent: ast.Node | None = None) -> Iterator[tuple[ast.Node, ast.Node | None]]:
    """Every AST node under ``node`` with the node that holds it (lists are looked through)."""
    if isinstance(node, ast.Node):
        yield node, parent
        for name in node:  # a node iterates over its field names
            yield from walk_with_parent(getattr(node, name, None), node)
    elif isinstance(node, (tuple, list)):
        for item in node:
            yield from walk_with_parent(item, parent)


def statements(sent: Sent) -> tuple[ast.Node, ...]:
    """The parsed statements of ``sent``, or none when it does not parse (the parse rule reports that)."""
    if sent.origin.startswith("startup"):
        return ()
    try:
        return parse(sent)
    except Unparsable:
        return ()


def nodes(sent: Sent) -> list[ast.Node]:
    return [n for stmt in statements(sent) for n in walk(stmt)]


def column_name(node: object) -> str | None:
    """The (unqualified) column a ColumnRef names."""
    if isinstance(node, ast.ColumnRef) and isinstance(node.fields[-1], ast.String):
        return node.fields[-1].sval
    return None


def column_qualifier(node: object) -> str | None:
    """The table alias a ColumnRef is qualified with (``t`` in ``t.id``), if any."""
    if isinstance(node, ast.ColumnRef) and len(node.fields or ()) >= 2 and isinstance(node.fields[-2], ast.String):
        return node.fields[-2].sval
    return None


def operator(node: ast.A_Expr) -> str | None:
    last = node.name[-1] if node.name else None
    return last.sval if isinstance(last, ast.String) else None


def is_plain_equality(node: object) -> TypeGuard[ast.A_Expr]:
    """``a = b`` as a binary operator; not ``a IN (…)`` nor ``a = ANY(…)``, which pglast also names ``=``."""
    return isinstance(node, ast.A_Expr) and node.kind == pglast.enums.A_Expr_Kind.AEXPR_OP and operator(node) == "="


def conjuncts(where: object) -> list[ast.Node]:
    """The terms of a WHERE clause's top-level AND (the clause itself when it is not an AND; none
    when there is no clause)."""
    if not isinstance(where, ast.Node):
        return []
    if isinstance(where, ast.BoolExpr) and where.boolop == pglast.enums.BoolExprType.AND_EXPR:
        return [t for arg in where.args or () for t in conjuncts(arg)]
    return [where]
