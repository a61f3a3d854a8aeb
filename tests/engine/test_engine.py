"""The engine seam: detection, startup options, version checks, and that only the engine package
knows which database it talks to. No database needed except for the CLI's refusal."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shardq.engine import COCKROACHDB, ENGINES, POSTGRESQL, engine_for_server, engine_for_sqlalchemy
from shardq.engine.base import CAPABILITIES
from shardq.engine.cockroachdb import MIN_VERSION, parse_version
from shardq.engine.cockroachdb_ops import bucket_count_of
from shardq.errors import InvalidInput, UnsupportedServer
from shardq.sessions.dsn import Dsn

SRC = Path(__file__).resolve().parents[2] / "src" / "shardq"


def reported(**parameters: str):
    return lambda name: parameters.get(name)


def test_a_server_reporting_crdb_version_is_cockroachdb_and_any_other_is_postgresql():
    assert engine_for_server(reported(crdb_version="CockroachDB CCL v24.1.1 (x86_64)")) is COCKROACHDB
    assert engine_for_server(reported(server_version="18.1")) is POSTGRESQL


def test_a_cockroachdb_url_names_the_engine_and_a_postgresql_url_leaves_it_to_the_server():
    assert Dsn.parse("cockroachdb://root@h:26257/d").named_engine is COCKROACHDB
    assert Dsn.parse("cockroachdb+psycopg://root@h:26257/d").named_engine is COCKROACHDB
    assert Dsn.parse("postgresql://u@h/d").named_engine is None
    with pytest.raises(InvalidInput):
        Dsn.parse("mysql://u@h/d")


def test_cockroachdb_older_than_the_minimum_is_refused_naming_both_versions():
    with pytest.raises(UnsupportedServer) as refused:
        COCKROACHDB.check_version(reported(crdb_version="CockroachDB CCL v22.2.19 (x86_64-pc-linux-gnu)"))
    assert "v22.2.19" in str(refused.value) and f"v{MIN_VERSION[0]}.{MIN_VERSION[1]}" in str(refused.value)
    assert isinstance(refused.value, InvalidInput)  # the CLI's exit 2
    for fine in ("CockroachDB CCL v23.1.0 (x)", "CockroachDB OSS v24.1.1 (x)", "CockroachDB CCL v26.1.0-beta.1 (x)"):
        COCKROACHDB.check_version(reported(crdb_version=fine))


def test_postgresql_older_than_14_is_refused():
    with pytest.raises(UnsupportedServer, match=r"13\.4"):
        POSTGRESQL.check_version(reported(server_version="13.4 (Debian 13.4-1)"))
    POSTGRESQL.check_version(reported(server_version="18.1"))


def test_versions_are_read_from_what_cockroachdb_reports():
    assert parse_version("CockroachDB CCL v24.1.1 (x86_64-pc-linux-gnu, built 2024/06/10)") == (24, 1, 1)
    assert parse_version("CockroachDB CCL v23.2 (x)") == (23, 2, 0)
    assert parse_version(None) is None


def test_cockroachdb_connections_send_no_read_only_variable_and_internals_only_when_asked():
    plain = COCKROACHDB.startup_options(statement_timeout_ms=1500)
    assert plain == ["-c timezone=UTC", "-c statement_timeout=1500"]
    assert "-c allow_unsafe_internals=on" in COCKROACHDB.startup_options(internals=True)
    assert not any("results_buffer_size" in o for e in ENGINES for o in e.startup_options(internals=True))


def test_the_bucket_count_is_read_from_the_hash_sharded_index_definition():
    definition = (
        "CREATE UNIQUE INDEX shardq_tasks_pkey ON defaultdb.public.shardq_tasks USING btree "
        "(state ASC, queue ASC, rank ASC, exec_time ASC, id ASC) USING HASH WITH (bucket_count=16)"
    )
    assert bucket_count_of(definition) == 16
    assert bucket_count_of("CREATE UNIQUE INDEX shardq_tasks_id ON t USING btree (id ASC)") is None


def test_layout_discovery_reads_only_catalogs_outside_the_unsafe_internals_gate():
    # From 26.1 crdb_internal is refused without allow_unsafe_internals, and a nested
    # [SHOW INDEX] delegate reads crdb_internal.table_indexes (audit N4); workers discover the
    # layout every few seconds on sessions that do not opt in.
    text = COCKROACHDB.statements()["shard_layout_get"].text
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    assert "information_schema.statistics" in body and "pg_catalog.pg_indexes" in body
    assert "crdb_internal" not in body and "[SHOW" not in body.upper()
    assert "shard_layout_get" not in COCKROACHDB.statements_needing_internals


def test_every_engine_is_reachable_from_its_sqlalchemy_dialect():
    for engine in ENGINES:
        assert engine_for_sqlalchemy(engine.sqlalchemy_dialect) is engine


def test_only_the_engine_package_knows_which_database_it_talks_to():
    compares = re.compile(
        r"""(==|!=|\bin\b)\s*\(?\s*["'](postgresql|cockroachdb)["']|["'](postgresql|cockroachdb)["']\s*(==|!=)"""
    )
    offenders = []
    for path in SRC.rglob("*.py"):
        if "engine" in path.relative_to(SRC).parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if compares.search(line) or ".dialect ==" in line or ".dialect !=" in line:
                offenders.append(f"{path.relative_to(SRC)}:{number}: {line.strip()}")
    assert not offenders


def test_the_cli_refuses_an_unsupported_server_with_one_line_and_exit_2(pg_db):
    # The embedded PostgreSQL made "too old" by raising the minimum in the CLI's own process.
    script = (
        "import sys, shardq.engine.postgresql as p; p.MIN_SERVER_VERSION = 99;"
        "from shardq.cli.main import main; sys.argv = ['shardq', 'stats']; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SHARDQ_DSN": pg_db.dsn.conninfo},
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "older than 99, the oldest shardq supports" in lines[0]


def _yes_no_facts() -> set[str]:
    """Every public yes/no attribute an engine carries: what a caller could branch on."""
    return {
        name
        for engine in ENGINES
        for name in dir(engine)
        if not name.startswith("_") and isinstance(getattr(engine, name), bool)
    }


def test_an_engine_has_no_yes_no_fact_but_its_declared_capabilities():
    assert _yes_no_facts() <= set(CAPABILITIES), "a new flag: make it an operation of the engine"
    assert len(CAPABILITIES) <= 2


# The traits the engine seam used to be made of: no module outside the engine package may read
# one, nor any other yes/no fact of an engine except the declared capabilities.
_FORMER_TRAITS = {
    "hash_sharded_key",
    "transactional_ddl",
    "has_fillfactor",
    "claims_whole_rounds",
    "uses_lease_records",
    "counts_depth_in_one_statement",
    "historical_reads",
    "accepts_null_arrays",
    "sends_binary_arrays",
    "inlines_explain_values",
    "spark_stage_needs_index",
    "layout_plan",
}


def test_no_module_outside_the_engine_package_reads_an_engine_trait():
    forbidden = (_FORMER_TRAITS | _yes_no_facts()) - set(CAPABILITIES)
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.relative_to(SRC).parts[0] == "engine":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in forbidden:
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}: .{node.attr}")
    assert not offenders


# The floor of the database layer: the plan vocabulary, the engines, the sessions and what they
# share. Imports among these (TYPE_CHECKING ones included) must form no cycle.
_FLOOR = (
    "shardq.sql.plan",
    "shardq.sessions.dsn",
    "shardq.sessions.rules",
    "shardq.sessions.session",
    "shardq.sessions.session_async",
    "shardq.sessions.borrowed",
    "shardq.sql",
    "shardq.engine",
    "shardq.resize",
    "shardq.operations",
    "shardq.sessions.store",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports_of(path: Path, module: str) -> set[str]:
    """The shardq modules ``path`` imports (relative imports resolved; ``from . import x`` names
    the submodule x when there is one)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("shardq")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("shardq"):
                continue
            for alias in node.names:
                child = f"{base}.{alias.name}"
                as_module = SRC.parent / (child.replace(".", "/") + ".py")
                as_package = SRC.parent / child.replace(".", "/") / "__init__.py"
                found.add(child if as_module.exists() or as_package.exists() else base)
    return found


def _import_graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in SRC.rglob("*.py")}
    return {name: {m for m in _imports_of(path, name) if m in modules and m != name} for name, path in modules.items()}


def _cycles_among(graph: dict[str, set[str]], members: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module within ``members`` (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node] & members:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(members):
        if node not in index:
            visit(node)
    return found


def test_the_database_floor_has_no_import_cycle_and_the_engine_imports_no_session():
    graph = _import_graph()
    floor = {m for m in graph if m.startswith(_FLOOR)}
    assert _cycles_among(graph, floor) == []
    assert "shardq.sql.plan" in floor and not graph["shardq.sql.plan"], (
        "plans.py is vocabulary: it imports nothing of shardq"
    )
    sessions = {
        "shardq.sessions.session",
        "shardq.sessions.session_async",
        "shardq.sessions.rules",
        "shardq.sessions.borrowed",
        "shardq.resize",
    }
    engine_imports = {m for name in floor if name.startswith("shardq.engine") for m in graph[name]}
    assert not engine_imports & sessions


# The sessions and what they share: the only modules that send a named statement themselves.


def test_every_named_statement_reaches_the_database_as_a_plan_a_session_runs():
    sends = {"fetch_all", "fetch_one", "fetch_row", "execute", "execute_ddl", "copy_in"}
    offenders = []
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(SRC)
        if relative.parts[0] in ("sessions", "migrations"):  # the sessions themselves; Alembic's op.execute
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in sends:
                offenders.append(f"{relative}:{node.lineno}: .{node.func.attr}(…)")
    assert not offenders
