"""The wheel users install: built without a packaging warning, and carrying everything shardq reads
at run time (the SQL folders, the migrations, the CLI, the engine package, the web dashboard's
modules, templates and static files, the stack adapters, Spark's logging configuration, py.typed)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_builds_without_warnings_and_carries_every_runtime_file(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    # pip's own notes about this machine's package index locations are not packaging warnings.
    warnings = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if "warn" in line.lower() and "Location 'file:" not in line
    ]
    assert not warnings, "\n".join(warnings)
    names = set(zipfile.ZipFile(next(tmp_path.glob("shardq-*.whl"))).namelist())
    expected_sql = {f"shardq/sql/{p.parent.name}/{p.name}" for p in (ROOT / "src" / "shardq" / "sql").glob("*/*.sql")}
    assert expected_sql and expected_sql <= names
    assert {
        "shardq/py.typed",
        "shardq/engine/cockroachdb.py",
        "shardq/migrations/versions/0001_initial.py",
        "shardq/migrations/script.py.mako",
        "shardq/cli/main.py",
        "shardq/cli/web_commands.py",
    } <= names
    # the stack adapters (Django finds management commands as modules of the package) and the
    # Spark driver's logging configuration, read from the package at run time
    assert {
        "shardq/instrumentation.py",
        "shardq/contrib/otel.py",
        "shardq/contrib/django/apps.py",
        "shardq/contrib/django/management/commands/shardq_work.py",
        "shardq/spark/log4j2.properties",
    } <= names
    web = ROOT / "src" / "shardq" / "web"
    expected_web = {
        f"shardq/web/{p.relative_to(web)}" for p in web.rglob("*") if p.suffix in {".py", ".html", ".js", ".css"}
    }
    assert {"shardq/web/templates/base.html", "shardq/web/static/dashboard.js"} <= expected_web <= names


def test_the_editable_install_builds_without_warnings(tmp_path):
    # What `make setup` runs on a fresh clone: `pip install -e .` (setuptools' PEP 660 editable
    # build, in pip's build isolation). Folders mapped into the package from elsewhere made it
    # print a warning block every time.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(tmp_path / "v")],
        check=True,
        timeout=120,
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(tmp_path / "v" / "bin" / "python"),
            "install",
            "--no-deps",
            "-e",
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    warnings = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if "warn" in line.lower() and "Location 'file:" not in line
    ]
    assert not warnings, "\n".join(warnings)
