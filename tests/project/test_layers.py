"""shardq's floor plan: the contract in pyproject.toml (``[tool.importlinter]``, which ``make lint``
runs with ``lint-imports``) names every package, leaves each forbidden import to the one package it
is for, and holds."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp")

ROOT = Path(__file__).resolve().parents[2]


def contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def floors() -> set[str]:
    (declared,) = [c for c in contracts() if c["type"] == "layers"]
    return {name.strip() for layer in declared["layers"] for name in layer.split("|")}


def test_every_package_and_module_sits_on_a_floor():
    children = {child.split(".")[1] for child in grimp.build_graph("shardq", cache_dir=None).find_children("shardq")}
    assert children <= floors(), f"on no floor of the contract: {sorted(children - floors())}"


def test_each_forbidden_contract_leaves_out_exactly_the_packages_it_is_for():
    allowed = {
        "driver": {"shardq.sessions"},
        "terminal": {"shardq.cli"},
        "web-framework": {"shardq.web", "shardq.contrib"},
    }
    every = {f"shardq.{name}" for name in floors()}
    for contract in contracts():
        if contract["type"] == "forbidden":
            assert every - set(contract["source_modules"]) == allowed[contract["id"]], contract["id"]


def test_the_import_contract_holds():
    command = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert command is not None, "import-linter is not installed (the dev extra)"
    result = subprocess.run([command, "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-4000:]
