"""Plans of durable execution (docs/durable.md): a task's recorded steps, parking it for a sleep
or a wait, and signals. Every write a running task makes is fenced by its lease token in the
statement itself (``sql/*/durable.sql``); a signal's transaction and a wait's parking both lock the
task row first, so one runs wholly before the other."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

from shardq.engine.base import Engine
from shardq.engine.common import key_arrays
from shardq.error_text import storable
from shardq.errors import InvalidInput, LeaseLost, StepNotStorable, TaskNotLive
from shardq.models.leases import Fenced
from shardq.operations.history import WAIT_STEP_PREFIX
from shardq.sql.plan import ENGINE, Atomically, Call, Plan

#: a step's JSON value, at most this many bytes (as a kept result)
STEP_VALUE_MAX_BYTES = 256 * 1024
#: a signal's JSON payload, at most this many bytes
SIGNAL_PAYLOAD_MAX_BYTES = 64 * 1024
#: a step's or a signal's name, at most this many characters
NAME_MAX = 200
#: names of the steps shardq records itself (user steps may not start with it)
RESERVED = "shardq:"

_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def check_name(name: object, what: str) -> str:
    """A step's or a signal's name: a non-empty string of at most :data:`NAME_MAX` characters
    without NUL; :class:`InvalidInput` otherwise."""
    if not isinstance(name, str) or not name or len(name) > NAME_MAX or "\x00" in name:
        shown = repr(name)[:60]
        raise InvalidInput(
            f"{what} name {shown} must be a non-empty string of at most {NAME_MAX} characters without NUL"
        )
    return name


def encode_json(value: Any, limit: int, what: str) -> str:
    """``value`` as compact JSON text, or :class:`StepNotStorable` naming ``what`` and the type or
    the size."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError):
        raise StepNotStorable(f"{what}: a {type(value).__name__} is not JSON-encodable") from None
    size = len(text.encode())
    if size > limit:
        raise StepNotStorable(f"{what}: {size:,} bytes of JSON, over the limit of {limit:,}")
    return text


def encode_signal(name: object, payload: Any) -> tuple[str, str]:
    """A signal's checked name and JSON payload (refused before anything is written)."""
    name = check_name(name, "signal")
    try:
        return name, encode_json(payload, SIGNAL_PAYLOAD_MAX_BYTES, f"signal {name!r} payload")
    except StepNotStorable as exc:
        raise InvalidInput(str(exc)) from None


def signal_id(key: str | None) -> uuid.UUID:
    """The id of a signal: derived from the sender's idempotency ``key`` (the same key, the same
    signal: a retry is a no-op), else fresh."""
    if key is None:
        return uuid.uuid4()
    if not isinstance(key, str) or not key:
        raise InvalidInput("a signal's key must be a non-empty string")
    return uuid.uuid5(uuid.NAMESPACE_URL, "shardq-signal:" + key)


#: A wait without a timeout is scheduled this far ahead (a signal makes it due at once).
FAR_FUTURE = dt.timedelta(days=3650)


@dataclass(frozen=True, slots=True)
class RecordedStep:
    """One row of ``shardq_task_steps``: ``value`` is JSON text, None for a wait not answered yet;
    ``due``: its wake time (a sleep's, a wait's timeout) has passed on the server's clock."""

    idx: int
    name: str
    value: str | None
    version: str | None
    wake_at: dt.datetime | None
    due: bool


def _fence(fenced: Fenced) -> dict[str, Any]:
    return {**key_arrays([fenced]), "task_id": fenced.key.id}


def steps_read(task_id: uuid.UUID) -> Plan[list[RecordedStep]]:
    rows = yield Call("task_steps_read", {"task_id": task_id})
    return [RecordedStep(r["idx"], r["name"], r["value"], r["version"], r["wake_at"], r["due"]) for r in rows]


def _lost(fenced: Fenced, what: str) -> LeaseLost:
    return LeaseLost(f"task {fenced.key.id}: lease lost before {what} could be recorded")


def step_record(
    fenced: Fenced, idx: int, name: str, value: str | None, version: str | None, wake_at: dt.datetime | None = None
) -> Plan[None]:
    """Record a completed step; :class:`LeaseLost` when this run no longer holds the lease."""
    params = {**_fence(fenced), "idx": idx, "name": name, "value": value, "version": version, "wake_at": wake_at}
    row = yield Call("task_step_record", params, rows="one")
    if row is None:
        raise _lost(fenced, f"step {idx} ({name})")


#: the index of a task's progress row in shardq_task_steps (not a step: steps are 0, 1, 2 …)
PROGRESS_IDX = -1
PROGRESS_STEP = RESERVED + "progress"
#: a progress value, at most this many bytes of JSON
PROGRESS_MAX_BYTES = 4096


def progress_record(fenced: Fenced, value: str) -> Plan[None]:
    """Write the task's progress (JSON text), fenced like a step."""
    yield from step_record(fenced, PROGRESS_IDX, PROGRESS_STEP, value, None)


def lease_held(fenced: Fenced) -> Plan[bool]:
    """Whether the task's row is still there under this run's lease token."""
    row = yield Call("task_lease_held", {"task_id": fenced.key.id, "token": fenced.token}, rows="one")
    return bool(row and row["held"])


def steps_clear(fenced: Fenced) -> Plan[int]:
    """Forget the task's recorded steps (its version changed), fenced; how many went."""
    rows = yield Call("task_steps_clear", _fence(fenced))
    return len(rows)


def _park(fenced: Fenced, wake_at: dt.datetime, reason: str) -> Plan[None]:
    params = {**key_arrays([fenced]), "wake_at": wake_at, "reason": storable(reason)}
    rows = yield Call("task_park", params)
    if not rows:
        raise _lost(fenced, "its sleep")


def sleep_value(wake_at: dt.datetime) -> str:
    """A sleep step's value: its wake time as a JSON string (every step value is JSON text)."""
    return json.dumps(wake_at.isoformat())


def sleep_plan(
    fenced: Fenced, idx: int, name: str, version: str | None, wake_at: dt.datetime, *, record: bool
) -> Plan[None]:
    """Record a sleep's step (unless already recorded) and park the task until ``wake_at``, in
    one transaction."""

    def body() -> Plan[None]:
        if record:
            yield from step_record(fenced, idx, name, sleep_value(wake_at), version, wake_at)
        yield from _park(fenced, wake_at, f"sleeping until {wake_at.isoformat()}")

    yield Atomically(body)


@dataclass(frozen=True, slots=True)
class WaitOutcome:
    """What a wait found: ``value`` (the step's JSON text, ``{"payload": …}``) when a signal was
    consumed; ``timed_out`` when its timeout had passed with none; else it was parked."""

    value: str | None = None
    timed_out: bool = False


def wait_plan(
    fenced: Fenced, idx: int, signal: str, version: str | None, timeout_at: dt.datetime | None
) -> Plan[WaitOutcome]:
    """One transaction: write (or keep) the wait's pending step, fenced, which locks the task row;
    consume the oldest signal of that name if one is there; else record the timeout if it has
    passed; else park the task until the timeout (or far ahead), ready at once if a signal came
    in meanwhile (one cannot: the lock; checked again all the same)."""
    name = WAIT_STEP_PREFIX + signal

    def body() -> Plan[WaitOutcome]:
        fence = _fence(fenced)
        begun = yield Call(
            "task_wait_begin",
            {**fence, "idx": idx, "name": name, "version": version, "wake_at": timeout_at},
            rows="one",
        )
        if begun is None:
            raise _lost(fenced, f"wait {idx} ({name})")
        if begun["value"] is not None:  # answered already (a replay racing its own record)
            return WaitOutcome(begun["value"])
        taken = yield Call(
            "task_signal_consume", {**fence, "idx": idx, "name": name, "signal": signal, "version": version}, rows="one"
        )
        if taken is not None:
            return WaitOutcome(taken["value"])
        if begun["due"]:
            yield from step_record(fenced, idx, name, '{"timeout": true}', version, begun["wake_at"])
            return WaitOutcome(timed_out=True)
        pending = yield Call("task_signal_pending", {"task_id": fenced.key.id, "name": signal}, rows="one")
        wake = begun["wake_at"] or (dt.datetime.now(dt.UTC) + FAR_FUTURE)
        if pending and pending["pending"]:
            wake = dt.datetime.fromtimestamp(0, dt.UTC)  # due now
        yield from _park(fenced, wake, f"waiting for signal {signal!r}")
        return WaitOutcome()

    outcome: WaitOutcome = yield Atomically(body)
    return outcome


def park_plan(fenced: Fenced, wake_at: dt.datetime, reason: str) -> Plan[None]:
    """Park the task until ``wake_at`` (a sleep resumed before its time)."""
    yield from _park(fenced, wake_at, reason)


def signal_plan(task_id: uuid.UUID, name: str, payload: str, signal_id: uuid.UUID) -> Plan[bool]:
    """Store a signal for a live task and, if it is parked waiting for ``name``, make it due now
    (and wake the queue's workers where the engine has wake-ups), in one transaction. Returns
    whether the signal is new (False: this id was sent before). :class:`TaskNotLive` when no live
    task has this id, and nothing is written."""
    engine: Engine = yield ENGINE

    def body() -> Plan[bool]:
        task = yield Call("task_signal_lock", {"task_id": task_id}, rows="one")
        if task is None:
            raise TaskNotLive(f"task {task_id} is not live (unknown id, or finished): no signal sent")
        inserted = yield Call(
            "task_signal_insert", {"task_id": task_id, "name": name, "id": signal_id, "payload": payload}, rows="one"
        )
        if inserted is None:
            return False  # sent before (a retry of the same key): nothing more to do
        woke = yield Call("task_signal_wake", {"task_id": task_id, "wait_step": WAIT_STEP_PREFIX + name}, rows="one")
        if woke is not None and engine.supports_wakeups:
            yield Call("queue_notify", {"queue": woke["queue"]}, rows="one")
        return True

    sent: bool = yield Atomically(body)
    return sent


def send_signal(task_id: uuid.UUID, name: object, payload: Any, key: str | None = None) -> Plan[bool]:
    """:func:`signal_plan` for a caller's values: the name and payload are checked (and a payload
    too large refused, :class:`InvalidInput`) before anything is sent."""
    checked, text = encode_signal(name, payload)
    return signal_plan(task_id, checked, text, signal_id(key))


def steps_prune(limit: int) -> Plan[int]:
    """Delete a batch of the recorded steps of tasks that are neither live nor dead."""
    rows = yield Call("task_steps_prune", {"limit": limit})
    return len(rows)


def signals_prune(limit: int) -> Plan[int]:
    """Delete a batch of the signals of tasks that are neither live nor dead."""
    rows = yield Call("task_signals_prune", {"limit": limit})
    return len(rows)
