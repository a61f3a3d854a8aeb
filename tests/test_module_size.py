"""Small files with one responsibility: no library module grows past 400 lines (a module that
does is doing two jobs; split it by responsibility, not by line count)."""

from __future__ import annotations

from pathlib import Path

import shardq

MODULE_LINES_MAX = 400


def test_no_library_module_is_over_400_lines():
    root = Path(shardq.__file__).parent
    long = {
        str(path.relative_to(root)): n
        for path in sorted(root.rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MODULE_LINES_MAX
    }
    assert long == {}, f"modules over {MODULE_LINES_MAX} lines: {long}"
