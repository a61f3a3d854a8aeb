"""The command line calls the library through shardq.Client (or one library function per
command), never through a client's store: what a command does is what a program calling the
client gets."""

from __future__ import annotations

from pathlib import Path

import shardq.cli


def test_no_command_module_reaches_into_a_store():
    modules = sorted(Path(shardq.cli.__file__).parent.glob("*.py"))
    assert len(modules) > 10  # the command modules themselves, not an empty glob
    offenders = [
        f"{path.name}:{number}"
        for path in modules
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if ".store" in line
    ]
    assert offenders == []
