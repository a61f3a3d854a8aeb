"""What the Workers and Audit pages show, as plain data: the worker registry
(:mod:`shardq.maintenance.worker_registry`) and the audit log of dashboard actions, both from
migration 0009's tables.

Guarantees:

* The worker list reads the whole registry (one row per worker, at most :data:`WORKERS_MAX`);
  a worker whose last beat is older than :data:`STALE_AFTER_S` is marked ``stale`` (likely gone;
  its row is pruned by the other workers).
* The audit log is read newest first in keyset pages (``before``: the previous page's ``next``).
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from shardq.errors import InvalidInput
from shardq.maintenance import worker_registry
from shardq.operations import registry
from shardq.sessions.store import TaskStore

WORKERS_MAX = 10_000
#: A worker silent for this long (three beats) is shown as stale.
STALE_AFTER_S = 3 * worker_registry.BEAT_SECONDS
AUDIT_LIMIT_DEFAULT = 100
AUDIT_LIMIT_MAX = 1000
_END = (dt.datetime(9999, 12, 30, tzinfo=dt.UTC), uuid.UUID(int=2**128 - 1))


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def workers(store: TaskStore) -> dict[str, Any]:
    """Every registered worker: host, pid, queues, concurrency, tasks in hand and running, start,
    last beat and its age (by the database's clock), stale or not."""
    rows = store.run(registry.worker_list(WORKERS_MAX))
    out = []
    for row in rows:
        age = max(0.0, (row["db_now"] - row["beat_at"]).total_seconds())
        out.append(
            {
                "id": str(row["id"]),
                "host": row["host"],
                "pid": row["pid"],
                "queues": list(row["queues"]),
                "concurrency": row["concurrency"],
                "in_hand": row["in_hand"],
                "running": row["running"],
                "started_at": _iso(row["started_at"]),
                "beat_at": _iso(row["beat_at"]),
                "beat_age_s": round(age, 1),
                "stale": age > STALE_AFTER_S,
            }
        )
    return {"workers": out, "beat_seconds": worker_registry.BEAT_SECONDS, "stale_after_s": STALE_AFTER_S}


def worker_of(store: TaskStore, lease_token: uuid.UUID | None) -> dict[str, Any] | None:
    """The registered worker holding the claim ``lease_token`` (a leased task's), or None."""
    if lease_token is None:
        return None
    row = store.run(registry.worker_by_token(lease_token))
    if row is None:
        return None
    return {"id": str(row["id"]), "host": row["host"], "pid": row["pid"], "beat_at": _iso(row["beat_at"])}


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _cursor(at: dt.datetime, entry_id: uuid.UUID) -> str:
    """``microseconds_id``: URL-safe (an ISO time's ``+`` would arrive as a space in a query)."""
    return f"{(at - _EPOCH) // dt.timedelta(microseconds=1)}_{entry_id}"


def _parse_before(cursor: str) -> tuple[dt.datetime, uuid.UUID]:
    micros, _, entry_id = cursor.partition("_")
    try:
        return _EPOCH + dt.timedelta(microseconds=int(micros)), uuid.UUID(entry_id)
    except (ValueError, OverflowError):
        raise InvalidInput(f"not a page cursor: {cursor!r}") from None


def audit(store: TaskStore, *, before: str | None = None, limit: int = AUDIT_LIMIT_DEFAULT) -> dict[str, Any]:
    """One page of the audit log, newest first: who, what, to what, when, and the outcome."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= AUDIT_LIMIT_MAX:
        raise InvalidInput(f"limit must be between 1 and {AUDIT_LIMIT_MAX}")
    position = _parse_before(before) if before else _END
    rows = list(store.run(registry.audit_list_before(position, limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if rows else None
    return {
        "before": before,
        "next": _cursor(last["at"], last["id"]) if more and last else None,
        "entries": [
            {
                "id": str(r["id"]),
                "at": _iso(r["at"]),
                "actor": r["actor"],
                "action": r["action"],
                "target": r["target"],
                "detail": r["detail"],
            }
            for r in rows
        ],
    }
