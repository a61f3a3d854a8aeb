"""Handlers for ``shardq work --handler loadtest.handlers:…`` in the chaos cell.

``record`` appends one line per execution start (task id, attempt, wall clock) to
``$LOADTEST_RECORD_DIR/<pid>.rec`` with a single ``os.write`` on an ``O_APPEND`` descriptor, so
lines from the handler threads never interleave and a SIGKILL loses at most the line being
written; the harness counts duplicates and recoveries from these files.
"""

from __future__ import annotations

import os
import time

_DIR = os.environ.get("LOADTEST_RECORD_DIR")
_FD = os.open(os.path.join(_DIR, f"{os.getpid()}.rec"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if _DIR else None


def record(task) -> None:
    if _FD is None:
        raise RuntimeError("LOADTEST_RECORD_DIR is not set")
    os.write(_FD, f"{task.id} {task.attempt} {time.time():.6f}\n".encode())


def noop(task) -> None:
    return None


def read_records(directory: str) -> list[tuple[str, int, float, str]]:
    """Every complete line of every record file: (task id, attempt, time, file name)."""
    out = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".rec"):
            continue
        with open(os.path.join(directory, name)) as handle:
            for line in handle:
                parts = line.split()
                if len(parts) != 3 or not line.endswith("\n"):
                    continue  # a line cut by SIGKILL
                out.append((parts[0], int(parts[1]), float(parts[2]), name))
    return out
