"""Key slots: the names behind limits per key (see :mod:`shardq.lifecycle.key_limits`), and the
release that fills a key's free slots from its waiting backlog. Apart from key_limits so that
:mod:`shardq.lifecycle.exclusive`, whose releases call it, need not import that module."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from shardq import operations, validation
from shardq.engine.common import RANKS
from shardq.sql.plan import Call, Plan

#: between a concurrency key and its slot number (or "*", the waiting key); refused in keys
SEPARATOR = "\x1f"
WAITING = "*"
#: the highest limit per key (a limited key's enqueue names every slot of it in one statement)
KEY_LIMIT_MAX = 1000
#: patterns per queue
KEY_LIMITS_MAX = 1000
#: a concurrency key leaves room for the separator and a slot number within the key length cap
KEY_MAX = validation.DEDUPE_KEY_MAX - 1 - len(str(KEY_LIMIT_MAX))


@dataclass(frozen=True)
class KeyLimit:
    pattern: str
    max_running: int


def slot_key(key: str, slot: int) -> str:
    return f"{key}{SEPARATOR}{slot}"


def waiting_key(key: str) -> str:
    return f"{key}{SEPARATOR}{WAITING}"


def key_of(exclusive_key: str | None) -> str | None:
    """The concurrency key of a task's exclusive key when that is a key slot or waiting key."""
    if exclusive_key is None or SEPARATOR not in exclusive_key:
        return None
    key, _, tail = exclusive_key.rpartition(SEPARATOR)
    return key if tail == WAITING or tail.isdigit() else None


def lock_key(exclusive_key: str) -> str:
    """The key a transaction locks for ``exclusive_key``: a key slot's waiting key (so that
    every slot of a key and its backlog share one lock), any other key itself."""
    key = key_of(exclusive_key)
    return exclusive_key if key is None else waiting_key(key)


def resolve(limits: Sequence[KeyLimit], key: str) -> int | None:
    """The limit for ``key``: its exact pattern, else the longest matching prefix (None: none)."""
    best: tuple[int, int] | None = None
    for limit in limits:
        if limit.pattern == key:
            return limit.max_running
        if (
            limit.pattern.endswith("*")
            and key.startswith(limit.pattern[:-1])
            and (best is None or len(limit.pattern) > best[0])
        ):
            best = (len(limit.pattern), limit.max_running)
    return None if best is None else best[1]


# -- plans --------------------------------------------------------------------------------------
def limits_plan(queue: str) -> Plan[list[KeyLimit]]:
    rows = yield Call("key_limits_of_queue", {"queue": queue})
    return [KeyLimit(row["pattern"], row["max_running"]) for row in rows]


def release_plan(released: Sequence[tuple[str, str]]) -> Plan[set[uuid.UUID]]:
    """Inside a release under the keys' locks: for every (queue, exclusive key) just released that
    is a key slot, fill the key's free slots below its current limit from its waiting backlog.
    Returns the ids promoted."""
    by_queue: dict[str, set[str]] = {}
    for queue, exclusive_key in released:
        key = key_of(exclusive_key)
        if key is not None:
            by_queue.setdefault(queue, set()).add(key)
    promoted: set[uuid.UUID] = set()
    for queue, keys in sorted(by_queue.items()):
        limits = yield from limits_plan(queue)
        for key in sorted(keys):
            # A limit removed meanwhile: the waiting tasks may all run (each still takes a slot).
            limit = resolve(limits, key) or KEY_LIMIT_MAX
            held = yield from operations.task_exclusive_active(queue, [slot_key(key, i) for i in range(limit)])
            for i in range(limit):
                if slot_key(key, i) in held:
                    continue
                rows = yield Call(
                    "key_limit_promote",
                    {"queue": queue, "waiting": waiting_key(key), "slot": slot_key(key, i), **RANKS},
                )
                if not rows:
                    break  # nobody waits for the key
                promoted |= {row["id"] for row in rows}
    return promoted
