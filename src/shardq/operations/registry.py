"""Plans of the worker registry and the dashboard's audit log (migration 0009; statements in
sql/common/workers.sql and sql/common/audit.sql)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

from shardq.sql.plan import Call, Plan


def worker_beat(row: dict[str, Any]) -> Plan[None]:
    """Create or refresh a worker's registry row (id, host, pid, queues, concurrency, in_hand,
    running, tokens, started_at)."""
    yield Call("worker_beat", row, rows="none")


def worker_leave(worker_id: uuid.UUID) -> Plan[None]:
    yield Call("worker_leave", {"id": worker_id}, rows="none")


def worker_prune(older_than: float) -> Plan[int]:
    """Remove rows whose last beat is more than ``older_than`` seconds old; returns how many."""
    rows = yield Call("worker_prune", {"older_than": older_than})
    return len(rows)


def worker_list(limit: int) -> Plan[list[dict[str, Any]]]:
    rows = yield Call("worker_list", {"limit": limit})
    return list(rows)


def worker_by_token(token: uuid.UUID) -> Plan[dict[str, Any] | None]:
    row = yield Call("worker_by_token", {"token": token}, rows="one")
    return row


def audit_add(actor: str, action: str, target: str, detail: str | None) -> Plan[None]:
    yield Call(
        "audit_add",
        {"id": uuid.uuid4(), "actor": actor, "action": action, "target": target, "detail": detail},
        rows="none",
    )


def audit_list_before(before: tuple[dt.datetime, uuid.UUID], limit: int) -> Plan[Sequence[dict[str, Any]]]:
    rows = yield Call("audit_list_before", {"before_at": before[0], "before_id": before[1], "limit": limit})
    return list(rows)


def audit_prune(keep_seconds: float, limit: int) -> Plan[int]:
    """Delete up to ``limit`` audit entries older than ``keep_seconds``, oldest first."""
    rows = yield Call("audit_prune", {"keep_seconds": keep_seconds, "limit": limit})
    return len(rows)
