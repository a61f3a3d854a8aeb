"""`make lint` runs mypy over the tests, benchmarks, tools and examples too ([tool.mypy] in
pyproject.toml), so a wrong type handed to shardq there fails lint. This holds that promise for the
case audit N10 found: an engine's *name* where :class:`shardq.sessions.dsn.Dsn` wants the
:class:`shardq.engine.Engine` itself (``Dsn(conninfo, "cockroachdb")``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mypy import api

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "pyproject.toml"


def test_pyproject_has_mypy_check_the_tests_benchmarks_tools_and_examples():
    import tomllib

    files = tomllib.loads(CONFIG.read_text())["tool"]["mypy"]["files"]
    assert {"src/shardq", "tests", "loadtest", "tools", "examples"} <= set(files)


def test_a_str_where_an_engine_is_wanted_is_an_arg_type_error(tmp_path, monkeypatch):
    checked = tmp_path / "wrong_engine.py"
    checked.write_text(
        textwrap.dedent("""\
        from shardq.sessions.dsn import Dsn
        from shardq.engine import COCKROACHDB

        Dsn("host=x", COCKROACHDB)
        Dsn("host=x", "cockroachdb")
    """)
    )
    monkeypatch.chdir(REPO)  # mypy_path = "src": this checkout's shardq, not an installed one
    out, err, status = api.run(
        [str(checked), "--config-file", str(CONFIG), "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache")]
    )
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1, out + err
    assert len(errors) == 1, out  # the Engine itself passes
    assert errors[0].startswith(f"{checked}:5:") and errors[0].endswith("[arg-type]"), out
    assert '"str"' in errors[0] and '"Engine | None"' in errors[0], out
