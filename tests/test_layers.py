"""shardq's floor plan: layers that point down and no import cycle (the contract in pyproject.toml,
``[tool.importlinter]``, which ``make lint`` runs with ``lint-imports``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp")

ROOT = Path(__file__).resolve().parents[1]

#: Upward imports and import cycles allowed: none (the two cycles the review found are opened).
KNOWN_UPWARD: set[tuple[str, str]] = set()
KNOWN_CYCLES: list[set[str]] = []


def contract() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def layers() -> list:
    (declared,) = [c for c in contract()["contracts"] if c["type"] == "layers"]
    return [grimp.Layer(*(name.strip() for name in layer.split("|"))) for layer in declared["layers"]]


def graph():
    return grimp.build_graph("shardq", cache_dir=None)


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in edges.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in list(edges):
        if node not in index:
            visit(node)
    return found


def squashed_edges(g, depth: int) -> dict[str, set[str]]:
    """Imports between shardq's modules, each module named by its first ``depth`` parts below shardq."""
    def name(module: str) -> str:
        return ".".join(module.split(".")[: depth + 1])

    edges: dict[str, set[str]] = {}
    for module in g.modules:
        for imported in g.find_modules_directly_imported_by(module):
            a, b = name(module), name(imported)
            if a != b and "shardq" not in (a, b):
                edges.setdefault(a, set()).add(b)
    return edges


def test_no_upward_import_but_the_known_ones_of_the_two_cycles_being_opened():
    found = {
        (dependency.importer, dependency.imported)
        for dependency in graph().find_illegal_dependencies_for_layers(layers(), containers={"shardq"})
    }
    assert found <= KNOWN_UPWARD, f"new upward imports: {sorted(found - KNOWN_UPWARD)}"


def test_no_import_cycle_but_the_two_being_opened():
    g = graph()
    found = cycles(squashed_edges(g, 1)) + cycles(squashed_edges(g, 2))
    for cycle in found:
        assert any(cycle <= known for known in KNOWN_CYCLES), f"a new import cycle: {sorted(cycle)}"


def test_every_module_sits_on_a_floor():
    (declared,) = [c for c in contract()["contracts"] if c["type"] == "layers"]
    named = {name.strip() for layer in declared["layers"] for name in layer.split("|")}
    children = {child.split(".")[1] for child in graph().find_children("shardq")} - {"sql"}
    assert children <= named, f"modules on no floor of the contract: {sorted(children - named)}"


def test_the_import_contract_holds():
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports is not None, "import-linter is not installed (the dev extra)"
    result = subprocess.run([lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-4000:]
