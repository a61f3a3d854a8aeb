"""The command line as the tests run it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.factories import TestDatabase

SHARDQ = str(Path(sys.executable).with_name("shardq"))


HANDLERS = textwrap.dedent(
    """
    import os
    import shardq

    def record(task):
        with open(os.environ["SHARDQ_TEST_OUT"] + f".{os.getpid()}", "a") as out:
            out.write(task.id + "\\n")

    def record_gc_threshold(task):
        import gc
        with open(os.environ["SHARDQ_TEST_OUT"] + ".gc", "a") as out:
            out.write(f"{gc.get_threshold()[0]}\\n")

    def fail_forever(task):
        raise shardq.Permanent("payload is poison: " + task.payload.decode())

    async def record_async(task):
        import asyncio
        await asyncio.sleep(0)
        record(task)

    class NotAFunction:
        def __init__(self, task): ...

    NOT_CALLABLE = 42
    """
)


@dataclass
class ShardqCli:
    """Runs ``shardq`` in ``tmp`` with ``env`` (``db``'s DSN in it)."""

    db: TestDatabase
    tmp: Path
    env: dict[str, str]

    def __call__(
        self, *args: str, stdin: str | None = None, check: bool = True, env_extra: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [SHARDQ, *args],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=self.tmp,
            env={**self.env, **(env_extra or {})},
            timeout=300,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"shardq {' '.join(args)} -> {result.returncode}: {result.stderr}")
        return result


@pytest.fixture
def shardq_cli(pg_db: TestDatabase, tmp_path: Path) -> ShardqCli:
    (tmp_path / "handlers_for_test.py").write_text(HANDLERS)
    env = {**os.environ, "SHARDQ_DSN": pg_db.dsn.conninfo, "SHARDQ_TEST_OUT": str(tmp_path / "seen")}
    return ShardqCli(pg_db, tmp_path, env)
