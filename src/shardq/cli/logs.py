"""Logging set-up for the command line: plain lines, or one JSON object per line.

Events carry their context (task id, queue, bucket, attempt) as ``extra`` fields, which the JSON
format includes. Library users configure logging themselves; shardq only logs.

Levels: per-task events of workers (claimed, handled, acked, released) and of the reaper are
DEBUG; retries and dead letters INFO; lost leases WARNING. The command line logs WARNING and up
unless ``--log-level`` (or ``--debug``) says otherwise."""

from __future__ import annotations

import json
import logging
import sys

_CONTEXT_FIELDS = ("event", "task_id", "queue", "bucket", "attempt", "outcome", "seconds", "last_error")


LEVELS = ("debug", "info", "warning", "error")


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _CONTEXT_FIELDS:
            if hasattr(record, name):
                data[name] = getattr(record, name)
        if record.exc_info:
            data["error"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def configure_logging(*, debug: bool = False, json_lines: bool = False, level: str | None = None) -> None:
    """Send the ``shardq`` loggers to stderr at ``level`` (one of :data:`LEVELS`; default warning,
    debug with ``debug``), as plain lines or JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonLines() if json_lines else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger("shardq")
    root.handlers[:] = [handler]
    chosen = "debug" if debug else (level or "warning")
    root.setLevel(getattr(logging, chosen.upper()))
    root.propagate = False
