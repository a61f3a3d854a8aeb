"""Direct SQL in tests belongs in tests/support/ (the rule in tests/support/factories.py's
docstring): a test module builds states and reads facts through named factories and probes, so a
schema change is one edit there, not a hunt through the suite. This reads every test module with
``ast`` and fails when one sends an SQL statement literal to a database outside the places
exempted below, each with its reason, so the rule cannot silently erode."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# Directories whose modules may send SQL: the factories themselves, and the conformance suite,
# which inspects statements.
EXEMPT_DIRS = ("support", "conformance")

# The calls that send a statement to a database (TestDatabase.sql, probe, Session.execute_raw,
# a psycopg connection's or cursor's execute).
SENDERS = frozenset({"sql", "probe", "execute", "execute_raw", "executemany"})

STATEMENT = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH|ALTER|CREATE|DROP|TRUNCATE)\s", re.IGNORECASE)

# Modules that may still send SQL of their own, relative to tests/, each with its reason.
EXEMPT: dict[str, str] = {
    "admin/test_doctor.py": "tests the doctor against a schema it breaks on purpose (a dropped index, a database of its own) and the server's statistics",
    "app/test_application.py": "tests an application's own table written in the same transaction as an enqueue",
    "conftest.py": "builds the server, the template database and the isolation level the fixtures share",
    "contrib/test_asgi_example.py": "reads the example application's own table (example_orders), which is no shardq table for the factories to know",
    "lifecycle/test_failures.py": "tests Session.transaction's retry with statements of its own inside the body (a REPEATABLE READ snapshot a concurrent writer invalidates)",
    "migrations/test_migrations.py": "tests the migrations: makes and drops databases and reads the schema they leave",
    "project/test_cockroach_fixtures.py": "tests the CockroachDB fixtures' sessions: a statement shows that a session opens on the engine it named, or that it refuses to",
    "project/test_readme.py": "runs the README's example, which writes an application's own table",
    "sessions/test_recorded_cockroach_retries.py": "tests the session's retries of raw statements against the recorded CockroachDB",
    "sessions/test_session.py": "tests the session's raw-statement API (execute_raw) and its reconnects",
}


def _leading_text(node: ast.expr) -> str | None:
    """The text a string argument starts with: a constant, an f-string's first literal part, or
    the left side of a ``+`` or ``%``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        first = node.values[0] if node.values else None
        return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return _leading_text(node.left)
    return None


def _is_spark_sql(func: ast.expr) -> bool:
    """``spark.sql(...)``: Spark SQL run on a DataFrame engine, not a statement sent to a database."""
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "spark"


def statements_sent(source: str) -> list[tuple[int, str]]:
    """(line, statement start) for each SQL statement literal passed to a sending call."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name not in SENDERS or _is_spark_sql(func):
            continue
        for argument in [*node.args, *(keyword.value for keyword in node.keywords)]:
            text = _leading_text(argument)
            if text is not None and STATEMENT.match(text):
                found.append((node.lineno, text.strip()[:60]))
    return found


def _modules() -> list[Path]:
    return sorted(path for path in TESTS.rglob("*.py") if path.relative_to(TESTS).parts[0] not in EXEMPT_DIRS)


def test_the_detector_sees_a_statement_sent_and_not_a_command_tag():
    assert statements_sent('db.sql("UPDATE shardq_tasks SET state = %(s)s", {})') == [
        (1, "UPDATE shardq_tasks SET state = %(s)s")
    ]
    assert statements_sent('session.execute_raw(f"SELECT {column} FROM shardq_dead")') == [(1, "SELECT")]
    assert statements_sent('probe(s, "select 1" + suffix)') == [(1, "select 1")]
    assert statements_sent('Command("UPDATE 1")') == []
    assert statements_sent('spark.sql("SELECT 1 AS one")') == []
    assert statements_sent("db.task_row(task.key.id)") == []


def test_no_test_module_sends_sql_outside_the_factories():
    offenders = {}
    for path in _modules():
        relative = path.relative_to(TESTS).as_posix()
        if relative in EXEMPT:
            continue
        sent = statements_sent(path.read_text())
        if sent:
            offenders[relative] = sent
    assert not offenders, (
        "these test modules send SQL of their own; move it into a named helper in tests/support/"
        f" (factories.py) or, for a test of a raw-SQL API, exempt the module with a reason: {offenders}"
    )


def test_every_exempt_module_exists_and_still_needs_its_exemption():
    stale = [
        relative
        for relative in EXEMPT
        if not (TESTS / relative).exists() or not statements_sent((TESTS / relative).read_text())
    ]
    assert not stale, f"these exemptions are no longer needed; drop them from EXEMPT: {stale}"
