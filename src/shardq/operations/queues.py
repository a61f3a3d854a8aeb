"""Plans of the queue statements: settings, wake-ups, and flow control's concurrency slots and
token buckets (:mod:`shardq.lifecycle.flow`; statements in ``sql/common/flow.sql``)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Sequence
from typing import TypeVar

from shardq.errors import DatabaseError
from shardq.models.queues import QueueSettings, RateTokens
from shardq.sql.plan import Atomically, Call, Plan

#: The settings :func:`queue_update` may change.
QUEUE_FIELDS = (
    "lease_seconds",
    "max_attempts",
    "backoff_base",
    "backoff_cap",
    "retry_jitter",
    "exclusive_latest_only",
    "paused_enqueue",
    "paused_dequeue",
    "timeout_seconds",
    "concurrency",
    "rate",
    "burst",
    "keep_finished_seconds",
    "keep_results",
)


def queue_ensure(queue: str) -> Plan[None]:
    yield Call("queue_ensure", {"queue": queue}, rows="none")


def queue_get(queue: str) -> Plan[QueueSettings | None]:
    row = yield Call("queue_get", {"queue": queue}, rows="one")
    return QueueSettings.from_row(row) if row else None


def queue_list() -> Plan[list[QueueSettings]]:
    rows = yield Call("queue_list")
    return [QueueSettings.from_row(row) for row in rows]


def queue_update(queue: str, changes: dict[str, object]) -> Plan[QueueSettings | None]:
    params: dict[str, object] = {name: changes.get(name) for name in QUEUE_FIELDS}
    params["timeout_clear"] = bool(changes.get("timeout_clear"))
    row = yield Call("queue_update", {"queue": queue, **params}, rows="one")
    return QueueSettings.from_row(row) if row else None


def queue_notify(queue: str) -> Plan[None]:
    """Wake workers listening for ``queue`` (PostgreSQL only; see :mod:`shardq.lifecycle.notify`)."""
    yield Call("queue_notify", {"queue": queue}, rows="none")


def notify_queue_full(exc: DatabaseError) -> bool:
    """PostgreSQL refused a NOTIFY at commit: "too many notifications in the NOTIFY queue"
    (SQLSTATE 54000, program_limit_exceeded). A wake-up is an optimisation: whoever sent it
    sends its statements again without it."""
    return getattr(exc.__cause__, "sqlstate", None) == "54000"


T = TypeVar("T")


def atomically_waking(body: Callable[[bool], Plan[T]]) -> Plan[T]:
    """``body(True)`` in one transaction, its statements sending their wake-ups; when the server
    refuses a wake-up at the commit (:func:`notify_queue_full`: the transaction rolled back whole),
    ``body(False)`` in a new one, without them. ``body`` runs again from the start."""
    try:
        result: T = yield Atomically(lambda: body(True))
    except DatabaseError as exc:
        if not notify_queue_full(exc):
            raise
        result = yield Atomically(lambda: body(False))
    return result


# -- flow control ------------------------------------------------------------------------------


def flow_usage() -> Plan[dict[str, tuple[int, int]]]:
    """(slots held now, slots in all) per queue with a concurrency limit (shardq.lifecycle.flow)."""
    rows = yield Call("flow_usage")
    return {row["queue"]: (row["in_use"], row["slots"]) for row in rows}


def flow_slots_take(queue: str, limit: int) -> Plan[list[tuple[int, dt.datetime]]]:
    """Lock up to ``limit`` free slots of ``queue``: (slot, free_at) each."""
    rows = yield Call("flow_slots_take", {"queue": queue, "limit": limit}, tuples=True)
    return [(row[0], row[1]) for row in rows]


def flow_slots_hold(
    queue: str, slots: Sequence[tuple[int, dt.datetime]], token: uuid.UUID, lease_seconds: float
) -> Plan[list[tuple[int, dt.datetime]]]:
    """Hold slots just taken ((slot, free_at) each) for ``token`` until now + ``lease_seconds``."""
    params = {
        "queue": queue,
        "slots": [s[0] for s in slots],
        "olds": [s[1] for s in slots],
        "token": token,
        "lease_seconds": lease_seconds,
    }
    rows = yield Call("flow_slots_hold", params, tuples=True)
    return [(row[0], row[1]) for row in rows]


def flow_slots_extend(
    queue: str, slots: Sequence[int], token: uuid.UUID, lease_seconds: float
) -> Plan[list[tuple[int, dt.datetime]]]:
    """Keep ``token``'s slots until now + ``lease_seconds``; returns those still its own."""
    params = {"queue": queue, "slots": list(slots), "token": token, "lease_seconds": lease_seconds}
    # Fenced by the holder's token: safe to re-send after 40003 (see shardq.sessions.rules).
    rows = yield Call("flow_slots_extend", params, resend_ambiguous=True, tuples=True)
    return [(row[0], row[1]) for row in rows]


def flow_slots_release(queue: str, slots: Sequence[int], token: uuid.UUID) -> Plan[int]:
    """Free ``token``'s slots at once; returns how many were still its own."""
    params = {"queue": queue, "slots": list(slots), "token": token}
    rows = yield Call("flow_slots_release", params, resend_ambiguous=True)
    return len(rows)


def flow_slots_add(queue: str, slots: int) -> Plan[None]:
    yield Call("flow_slots_add", {"queue": queue, "slots": slots}, rows="none")


def flow_slots_trim(queue: str, slots: int) -> Plan[None]:
    yield Call("flow_slots_trim", {"queue": queue, "slots": slots}, rows="none")


def flow_tokens_take(queue: str) -> Plan[RateTokens | None]:
    """Lock and read ``queue``'s token bucket, or None when it has none."""
    rows = yield Call("flow_tokens_take", {"queue": queue})
    return RateTokens(rows[0]["tokens"], rows[0]["refilled_at"], rows[0]["now"]) if rows else None


def flow_tokens_spend(queue: str, tokens: float, refilled_at: dt.datetime) -> Plan[None]:
    yield Call("flow_tokens_spend", {"queue": queue, "tokens": tokens, "refilled_at": refilled_at}, rows="none")


def flow_tokens_reset(queue: str, tokens: float) -> Plan[None]:
    yield Call("flow_tokens_reset", {"queue": queue, "tokens": tokens}, rows="none")


def flow_tokens_drop(queue: str) -> Plan[None]:
    yield Call("flow_tokens_drop", {"queue": queue}, rows="none")
