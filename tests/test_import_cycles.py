"""The application floor imports without a cycle: app → deferral/periodic → client(s) → worker, and
nothing of these imports back up.

The graph is read from the source with ``ast`` (no import runs): every ``import`` and
``from … import`` of a shardq module anywhere in a file counts, those under ``TYPE_CHECKING`` and
inside functions included, so a cycle cannot hide behind a lazy import. Importing ``a.b.c`` runs
``a.b`` first, so it counts as importing each parent package too (except the top ``shardq``
package, whose ``__init__`` only gathers the public names, and a module's own packages, which are
being imported already when it runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

import shardq

ROOT = Path(shardq.__file__).parent
#: the modules of the cycle the application floor had (app ↔ client/client_async/deferral/periodic/worker)
APPLICATION_FLOOR = ("shardq.app", "shardq.client", "shardq.client_async", "shardq.deferral", "shardq.periodic",
                     "shardq.worker", "shardq.worker.runtime", "shardq.producer", "shardq.models")


def _module_name(path: Path) -> str:
    parts = ["shardq", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1]) if parts[-1] == "__init__" else ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """Each shardq module and the shardq modules it imports."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                # "from pkg import name": name may be a submodule
                targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in modules else origin for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]  # an attribute of a module: the module
                while target and target != "shardq":
                    if target != name and not name.startswith(target + "."):  # not its own package
                        graph[name].add(target)
                    target = target.rpartition(".")[0]
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_application_floor_is_in_no_import_cycle():
    graph = import_graph()
    tangled = [sorted(c) for c in cycles(graph) if c & set(APPLICATION_FLOOR)]
    assert tangled == [], tangled


def test_the_graph_reader_sees_a_cycle_where_there_is_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    graph = import_graph()
    assert "shardq.periodic" in graph["shardq.worker.runtime"]  # the reader follows relative imports
    assert "shardq.worker" in graph["shardq.client"]
