"""No test module imports another: what several test modules share lives in tests/support/ (or a
folder's conftest.py), so each test module can be read, moved and run on its own."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_test_module_imports_another():
    offenders = {}
    for path in TESTS.rglob("test_*.py"):
        others = sorted(
            m for m in _imported_modules(path) if m.startswith("tests.") and m.split(".")[-1].startswith("test_")
        )
        if others:
            offenders[str(path.relative_to(TESTS))] = others
    assert not offenders, f"test modules importing test modules (move the shared part to tests/support/): {offenders}"
