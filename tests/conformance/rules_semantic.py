"""Rules about what CockroachDB's semantic analysis refuses though the grammar accepts it: a
placeholder it cannot type, and one statement modifying a table twice."""

from __future__ import annotations

import re
from collections import defaultdict

from pglast import ast
from pglast.enums import A_Expr_Kind

from tests.conformance.base import Rule, operator, statements, walk, walk_with_parent
from tests.conformance.collect import Sent

# -- placeholder typing ----------------------------------------------------------------------------

_COMPARISONS = {"=", "<>", "!=", "<", "<=", ">", ">="}
_PLACEHOLDER = re.compile(r"%\((\w+)\)[sb]")


def _untyped(node: object) -> bool:
    """A bare placeholder or NULL: an expression that gives its neighbours no type."""
    return isinstance(node, ast.ParamRef) or (isinstance(node, ast.A_Const) and bool(node.isnull))


def _type_name(cast: ast.TypeCast) -> str:
    name = ".".join(p.sval for p in cast.typeName.names).removeprefix("pg_catalog.")
    return name + "[]" * len(cast.typeName.arrayBounds or ())


def _placeholder_context(node: ast.ParamRef, parents: dict[int, ast.Node | None]) -> str | None:
    """Why CockroachDB can type ``node`` where it sits, or None when it cannot.

    Accepted (pkg/sql/sem/tree/type_check.go; a placeholder takes the type its context desires,
    Placeholder.TypeCheck, and fails with placeholderTypeAmbiguityError when none is desired):
    an explicit cast; a comparison (=, <>, <, …, IN (…), = ANY/ALL) whose other side is typed
    (typeCheckComparisonOp → typeCheckSameTypedExprs); an AND/OR/NOT operand and a CASE condition
    (typeCheckAndRequire with types.Bool); LIMIT/OFFSET (optbuilder limit: types.Int); an UPDATE
    SET value and an INSERT source column, SELECT list or VALUES row, typed by the target column
    (optbuilder mutation builder, desired types from the target columns); a COALESCE, GREATEST,
    LEAST, NULLIF or CASE result beside a typed one (typeCheckSameTypedExprs); an ARRAY[…] under a
    cast. Everything else is refused here, including function arguments (overload resolution
    depends on the function: `unnest($1)` is ambiguous), arithmetic, IS NULL, a bare SELECT list
    (TestPGPrepareFail: `SELECT $1`, `CASE WHEN TRUE THEN $1 END`) and a RETURNING list of an
    UPDATE, INSERT or DELETE, which is typed like a SELECT list with no desired types (_RETURNING).
    """
    parent = parents.get(id(node))
    if isinstance(parent, ast.TypeCast):
        return "cast"
    if isinstance(parent, ast.A_Expr):
        if parent.kind in (A_Expr_Kind.AEXPR_IN, A_Expr_Kind.AEXPR_OP_ANY, A_Expr_Kind.AEXPR_OP_ALL):
            return "compared" if parent.lexpr is not node and not _untyped(parent.lexpr) else None
        if (parent.kind == A_Expr_Kind.AEXPR_OP and operator(parent) in _COMPARISONS) or (
            parent.kind == A_Expr_Kind.AEXPR_NULLIF
        ):
            other = parent.rexpr if parent.lexpr is node else parent.lexpr
            return "compared" if not _untyped(other) else None
        return None
    if isinstance(parent, ast.BoolExpr):
        return "boolean"
    if isinstance(parent, ast.CaseWhen):
        if parent.expr is node:
            return "boolean"
        case = parents.get(id(parent))
        assert isinstance(case, ast.CaseExpr)
        results = [w.result for w in case.args] + ([case.defresult] if case.defresult is not None else [])
        return "beside a typed result" if any(not _untyped(r) for r in results) else None
    if isinstance(parent, (ast.CoalesceExpr, ast.MinMaxExpr)):
        return "beside a typed argument" if any(not _untyped(a) for a in parent.args) else None
    if isinstance(parent, ast.A_ArrayExpr):
        return "array under a cast" if isinstance(parents.get(id(parent)), ast.TypeCast) else None
    if isinstance(parent, ast.SelectStmt):
        if node in (parent.limitCount, parent.limitOffset):
            return "limit"
        in_values = any(node is item for row in parent.valuesLists or () for item in row)
        return "insert value" if in_values and isinstance(parents.get(id(parent)), ast.InsertStmt) else None
    if isinstance(parent, ast.ResTarget):
        holder = parents.get(id(parent))
        if isinstance(holder, ast.ReturningClause):
            return None  # RETURNING desires no type (see _RETURNING)
        if isinstance(holder, ast.UpdateStmt) and any(parent is t for t in holder.targetList or ()):
            return "update value"
        if isinstance(holder, ast.SelectStmt) and isinstance(parents.get(id(holder)), ast.InsertStmt):
            return "insert value"
    return None


#: Why a bare placeholder in RETURNING fails: the mutation builder analyses the RETURNING list
#: as a select list with no desired types, so Placeholder.TypeCheck sees none and raises 42P18.
_RETURNING = (
    "RETURNING list, which desires no type (pkg/sql/opt/optbuilder/mutation_builder.go "
    "buildReturning: analyzeReturningList(returning, nil /* desiredTypes */, …))"
)

#: Type families of the type names shardq casts to, as CockroachDB's types.T.Equivalent compares
#: them (pkg/sql/types/types.go: same Family, arrays by their contents).
_FAMILIES = {
    "int2": "INT",
    "int4": "INT",
    "int8": "INT",
    "float4": "FLOAT",
    "float8": "FLOAT",
    "numeric": "DECIMAL",
    "text": "STRING",
    "varchar": "STRING",
    "bpchar": "STRING",
    "name": "STRING",
    "bool": "BOOL",
    "uuid": "UUID",
    "timestamptz": "TIMESTAMPTZ",
    "timestamp": "TIMESTAMP",
    "date": "DATE",
    "interval": "INTERVAL",
    "bytea": "BYTES",
    "jsonb": "JSONB",
    "json": "JSONB",
}


def _family(cast: ast.TypeCast) -> str | None:
    base = _FAMILIES.get(cast.typeName.names[-1].sval)
    return base and base + "[]" * len(cast.typeName.arrayBounds or ())


def _desired_family(node: ast.ParamRef, context: str, parents: dict[int, ast.Node | None]) -> str | None:
    """The family a bare placeholder's context desires, where that needs no schema: LIMIT and
    OFFSET desire INT (optbuilder buildLimit), a boolean context BOOL (typeCheckAndRequire), and
    a comparison whose other side is an explicit cast that cast's type (typeCheckSameTypedExprs).
    None where only a column's type would tell (the rule does not read the schema)."""
    if context == "limit":
        return "INT"
    if context == "boolean":
        return "BOOL"
    parent = parents.get(id(node))
    if context == "compared" and isinstance(parent, ast.A_Expr) and parent.kind == A_Expr_Kind.AEXPR_OP:
        other = parent.rexpr if parent.lexpr is node else parent.lexpr
        return _family(other) if isinstance(other, ast.TypeCast) else None
    return None


def _placeholders_typed(sent: Sent) -> list[str]:
    names: list[str] = []
    for match in _PLACEHOLDER.finditer(sent.text):
        if match.group(1) not in names:
            names.append(match.group(1))

    def label(ref: ast.ParamRef) -> str:
        number = ref.number or 0  # a parsed $n always has its number
        return f"%({names[number - 1]})s" if 0 < number <= len(names) else f"${number}"

    problems = []
    for stmt in statements(sent):
        parents = {id(n): p for n, p in walk_with_parent(stmt)}
        casts: dict[int, set[str]] = defaultdict(set)
        desired: dict[int, set[str]] = defaultdict(set)
        for node in walk(stmt):
            if not isinstance(node, ast.ParamRef):
                continue
            parent = parents.get(id(node))
            if isinstance(parent, ast.TypeCast):
                casts[node.number].add(_type_name(parent))
            context = _placeholder_context(node, parents)
            if context is None:
                where = type(parent).__name__ if parent is not None else "top level"
                if isinstance(parent, ast.ResTarget) and isinstance(parents.get(id(parent)), ast.ReturningClause):
                    where = _RETURNING
                problems.append(
                    f"{label(node)} in a {where} has no type CockroachDB can infer "
                    "(42P18 could not determine data type of placeholder): cast it"
                )
            elif context != "cast" and (family := _desired_family(node, context, parents)):
                desired[node.number].add(family)
        problems += [
            f"{label(ast.ParamRef(number=n))} is cast to {sorted(types)}: one placeholder, two types"
            for n, types in casts.items()
            if len(types) > 1
        ]
        # The first context types the placeholder; a later one desiring another family overrides
        # it and SetType refuses (42804 'placeholder $n already has type …, cannot assign …').
        problems += [
            f"{label(ast.ParamRef(number=n))} is used uncast where {sorted(families)} are desired: "
            "42804 'placeholder … already has type …, cannot assign …' "
            "(pkg/sql/sem/tree/placeholders.go PlaceholderTypesInfo.SetType)"
            for n, families in desired.items()
            if len(families) > 1
        ]
    return problems


PLACEHOLDERS = Rule(
    "placeholder CockroachDB cannot type",
    "pkg/sql/sem/tree/type_check.go (Placeholder.TypeCheck, placeholderTypeAmbiguityError: 42P18 "
    "'could not determine data type of placeholder'); pkg/sql/pgwire TestPGPrepareFail; "
    "pkg/sql/opt/optbuilder/mutation_builder.go (RETURNING: nil desiredTypes); "
    "pkg/sql/sem/tree/placeholders.go (SetType: 42804 'already has type')",
    _placeholders_typed,
)

# -- one modification per table --------------------------------------------------------------------


def _modifications(sent: Sent) -> list[str]:
    """Every INSERT, UPDATE and DELETE of a statement (CTEs, subqueries and the main one): a table
    modified twice is refused unless every modification is an INSERT without ON CONFLICT."""
    problems = []
    for stmt in statements(sent):
        found: dict[str, list[str]] = defaultdict(list)
        for node in walk(stmt):
            if isinstance(node, ast.InsertStmt):
                found[node.relation.relname].append("INSERT" if node.onConflictClause is None else "INSERT ON CONFLICT")
            elif isinstance(node, (ast.UpdateStmt, ast.DeleteStmt)):
                found[node.relation.relname].append(type(node).__name__.removesuffix("Stmt").upper())
        for table, kinds in found.items():
            if len(kinds) > 1 and set(kinds) != {"INSERT"}:
                problems.append(
                    f"{table} is modified {len(kinds)} times in one statement ({', '.join(kinds)}): "
                    "'multiple modification subqueries of the same table … are not supported "
                    "unless they all use INSERT without ON CONFLICT' (0A000)"
                )
    return problems


MULTIPLE_MODIFICATIONS = Rule(
    "one statement modifying a table twice",
    "pkg/sql/opt/optbuilder/insert.go (buildInsert: checkMultipleMutations(tab, ins.OnConflict == nil)), "
    "delete.go (buildDelete: checkMultipleMutations(tab, generalMutation)), statement_tree.go; off by default: "
    "pkg/sql/vars.go enable_multiple_modifications_of_table (GlobalDefault false, cockroachdb#70731), cluster "
    "setting sql.multiple_modifications_of_table.enabled; pkg/sql/logictest/testdata/logic_test/with",
    _modifications,
)


# -- OFFSET in a LATERAL subquery -------------------------------------------------------------------


def _lateral_offsets(sent: Sent) -> list[str]:
    """An OFFSET inside a LATERAL subquery: shardq writes only OFFSET 0 there, PostgreSQL's fence
    that keeps a per-row index lookup from being flattened into a join that reads a whole table.
    CockroachDB's normalizer drops an OFFSET of the constant 0, so it plans the subquery as it
    would without one; any other OFFSET there is refused until checked against how CockroachDB
    decorrelates it (pkg/sql/opt/norm/rules/decorrelate.opt)."""
    problems = []
    for stmt in statements(sent):
        for node in walk(stmt):
            if not (isinstance(node, ast.RangeSubselect) and node.lateral):
                continue
            for inner in walk(node.subquery):
                offset = getattr(inner, "limitOffset", None) if isinstance(inner, ast.SelectStmt) else None
                if offset is None:
                    continue
                constant = offset.val if isinstance(offset, ast.A_Const) and not offset.isnull else None
                if not (isinstance(constant, ast.Integer) and not constant.ival):
                    problems.append("an OFFSET other than the constant 0 inside a LATERAL subquery")
    return problems


LATERAL_OFFSETS = Rule(
    "OFFSET in a LATERAL subquery",
    "pkg/sql/opt/norm/rules/limit.opt lines 16-20 at 02c1ad6d (EliminateOffset: (Offset $input:* (Const 0)) => $input)",
    _lateral_offsets,
)

__all__ = ["LATERAL_OFFSETS", "MULTIPLE_MODIFICATIONS", "PLACEHOLDERS"]
