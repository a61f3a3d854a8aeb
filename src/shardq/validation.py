"""Checks on caller input, shared by the library and the CLI (which only adds exit codes).

Everything here raises :class:`shardq.errors.InvalidInput` before any statement runs, so a
rejected call writes nothing.
"""

from __future__ import annotations

import datetime as dt
import math
import re

from shardq.errors import InvalidInput

# The range a priority may take: ranks beyond it keep scheduled and backlogged tasks out of a
# claim's span (see migration 0001 and shardq.models.tasks' RANK_*).
PRIORITY_MIN = -(2**62)
PRIORITY_MAX = 2**62

QUEUE_NAME_MAX = 128
# Names are shown in logs, metrics labels and CLI tables: keep them to a plain charset.
_QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]*")  # whole string: fullmatch, not match+$
PAYLOAD_MAX_BYTES = 1024 * 1024  # 1 MiB: a queue carries references, not blobs
DEDUPE_KEY_MAX = 512
DELAY_MAX_SECONDS = 10 * 365 * 24 * 3600.0
BUCKETS_MIN, BUCKETS_MAX = 2, 2048  # CockroachDB's own range for bucket_count
BATCH_MAX = 10_000
STATEMENT_TIMEOUT_MAX_SECONDS = 86_400.0  # PostgreSQL's own limit is ~24.8 days; a day is plenty
# A lease shorter than the hand-off from claim to handler plus the settler's ack linger
# (worker.ACK_LINGER_SECONDS), milliseconds each, runs out before the task is acked: every task
# would run again and again, a livelock rather than a faster queue. One second is a wide margin.
LEASE_MIN_SECONDS = 1.0


def queue_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidInput("queue name must be a non-empty string")
    if len(name) > QUEUE_NAME_MAX:
        raise InvalidInput(f"queue name longer than {QUEUE_NAME_MAX} characters")
    if not _QUEUE_NAME.fullmatch(name):
        raise InvalidInput(
            f"queue name {name!r} may hold only letters, digits and _ . : - (and must start with a letter or digit)"
        )
    return name


def payload(data: object, *, limit: int = PAYLOAD_MAX_BYTES) -> bytes:
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidInput("payload must be bytes or str")
    data = bytes(data)
    if len(data) > limit:
        raise InvalidInput(f"payload of {len(data)} bytes exceeds the {limit}-byte cap")
    return data


def delay(seconds: object) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidInput("delay must be a number of seconds")
    value = float(seconds)
    if not math.isfinite(value) or value < 0 or value > DELAY_MAX_SECONDS:
        raise InvalidInput(f"delay must be between 0 and {DELAY_MAX_SECONDS:.0f} seconds")
    return value


def run_at(when: object) -> dt.datetime:
    if not isinstance(when, dt.datetime):
        raise InvalidInput("run_at must be a datetime")
    if when.tzinfo is None or when.utcoffset() is None:
        raise InvalidInput("run_at must be timezone-aware")
    return when


def _task_key(key: object, what: str) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        raise InvalidInput(f"{what} must be a non-empty string")
    if len(key) > DEDUPE_KEY_MAX:
        raise InvalidInput(f"{what} longer than {DEDUPE_KEY_MAX} characters")
    if "\x00" in key:
        raise InvalidInput(f"{what} may not contain NUL")
    return key


def dedupe_key(key: object) -> str | None:
    return _task_key(key, "dedupe key")


def positive_int(value: object, what: str, *, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{what} must be a positive whole number")
    if maximum is not None and value > maximum:
        raise InvalidInput(f"{what} must be at most {maximum}")
    return value


#: The largest concurrency limit, rate and burst a queue takes (a slot is a row: 10,000 rows per queue
#: at most; a rate beyond this is no limit on any machine shardq runs on).
FLOW_LIMIT_MAX = 10_000


def flow_limit(value: object, what: str) -> int:
    """A concurrency limit or rate: a whole number from 0 (no limit) to ``FLOW_LIMIT_MAX``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{what} must be a whole number >= 0 (0 removes the limit)")
    if value > FLOW_LIMIT_MAX:
        raise InvalidInput(f"{what} must be at most {FLOW_LIMIT_MAX}")
    return value


def positive_seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{what} must be a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0 or seconds > DELAY_MAX_SECONDS:
        raise InvalidInput(f"{what} must be a positive number of seconds")
    return seconds


def lease_seconds(value: object, what: str = "lease") -> float:
    """A lease or lease extension: at least ``LEASE_MIN_SECONDS`` (1 s), at most ten years."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{what} must be a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds > DELAY_MAX_SECONDS:
        raise InvalidInput(f"{what} must be between {LEASE_MIN_SECONDS:g} and {DELAY_MAX_SECONDS:.0f} seconds")
    if seconds < LEASE_MIN_SECONDS:
        raise InvalidInput(
            f"{what} must be at least {LEASE_MIN_SECONDS:g} second: a shorter lease can run out before "
            "its task is acked, and the task would run again and again"
        )
    return seconds


def non_negative_seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{what} must be a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or seconds > DELAY_MAX_SECONDS:
        raise InvalidInput(f"{what} must be a number of seconds >= 0")
    return seconds


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}


def duration(text: str, what: str) -> float:
    """A duration as an operator types it: seconds (``90``, ``0``) or a number with one unit
    ``s``, ``m``, ``h``, ``d`` (``30m``, ``7d``). Returns seconds (>= 0)."""
    raw = text.strip().lower() if isinstance(text, str) else ""
    unit = _DURATION_UNITS.get(raw[-1:]) if raw else None
    number = raw[:-1] if unit is not None else raw
    try:
        value = float(number) * (unit or 1.0)
    except ValueError:
        raise InvalidInput(f"{what} must be a duration like 90, 30m, 12h or 7d, got {text!r}") from None
    return non_negative_seconds(value, what)


def flag(value: object, what: str) -> bool:
    """A real bool: ``"no"`` or ``0`` would otherwise switch a setting by truthiness."""
    if not isinstance(value, bool):
        raise InvalidInput(f"{what} must be True or False")
    return value


def bucket_count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput("bucket count must be a whole number")
    if not BUCKETS_MIN <= value <= BUCKETS_MAX:
        raise InvalidInput(f"bucket count must be between {BUCKETS_MIN} and {BUCKETS_MAX}")
    return value


def priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput("priority must be a whole number (lower runs first)")
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise InvalidInput(f"priority must be between {PRIORITY_MIN} and {PRIORITY_MAX}")
    return value


def exclusive_key(key: object) -> str | None:
    return _task_key(key, "exclusive key")


def fraction(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise InvalidInput(f"{what} must be between 0 and 1")
    return float(value)


def statement_timeout(value: object) -> float | None:
    """None (no limit) or a positive number of seconds, at most a day, at least 1 ms."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput("statement timeout must be a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or not 0.001 <= seconds <= STATEMENT_TIMEOUT_MAX_SECONDS:
        raise InvalidInput(f"statement timeout must be between 0.001 and {STATEMENT_TIMEOUT_MAX_SECONDS:.0f} seconds")
    return seconds


def milliseconds(seconds: float | None) -> int | None:
    """A validated timeout in whole milliseconds (None stays None)."""
    return None if seconds is None else max(1, round(seconds * 1000))
