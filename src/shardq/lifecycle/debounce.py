"""Debounce and throttle by key.

Both name their key with ``dedupe_key``:

* ``debounce=seconds``: keep only the newest task for the key until the key has been quiet that
  long. An enqueue finds the key's task that has not started (ready or scheduled) and replaces its
  payload (the arguments) and pushes it ``seconds`` from now (``task_debounce_replace``: its id is in
  :attr:`EnqueueResult.debounced_ids`); if there is none it inserts a task due ``seconds`` from now
  (in ``enqueued_ids``). While the key's task runs, the enqueue inserts nothing and says so as a
  duplicate (``duplicate_keys``: the dedupe key's unique index admits one unfinished task per key).
  Two enqueues at once: the second's insert meets the first's row in the unique index, waits for it
  to commit, and then replaces its payload (it looks again), so the newest payload wins.
* ``throttle=seconds``: the first task of the key in a window of ``seconds`` is enqueued, the
  others until the window ends are dropped (their keys in ``throttled_keys``). The window is one
  row per (queue, key) in ``shardq_throttle_windows``, opened by an upsert that only takes a row
  whose window has ended (``throttle_windows_open``): exact across producers, one statement per
  batch. Within a batch the first task of a key counts; a live task of the key (a dedupe key)
  still makes the enqueue a duplicate.

Each batch's debounced and throttled tasks are one transaction; the batch's other tasks are
enqueued as usual. A queue that uses neither sends nothing new."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from shardq import operations
from shardq.engine.common import RANKS
from shardq.models.tasks import NewTask
from shardq.sql.plan import Atomically, Call, Plan


@dataclass
class Outcome:
    """What one batch's debounced and throttled tasks did (ids as strings, in the batch's order)."""

    enqueued: list[str] = field(default_factory=list)
    debounced: list[str] = field(default_factory=list)
    throttled: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    paused: bool = False


def wants(task: NewTask) -> bool:
    return task.debounce is not None or task.throttle is not None


def enqueue_plan(queue: str, tasks: Sequence[NewTask]) -> Plan[Outcome]:
    """Enqueue tasks that carry ``debounce`` or ``throttle`` (and a dedupe key), in one transaction."""
    result: Outcome = yield Atomically(lambda: _body(queue, tasks))
    return result


def _body(queue: str, tasks: Sequence[NewTask]) -> Plan[Outcome]:
    outcome = Outcome()
    throttled = [t for t in tasks if t.throttle is not None]
    opened: set[str] = set()
    if throttled:
        first: dict[str, float] = {}
        for task in throttled:
            first.setdefault(task.dedupe_key or "", float(task.throttle or 0))
        rows = yield Call(
            "throttle_windows_open", {"queue": queue, "keys": list(first), "seconds": list(first.values())}
        )
        opened = {row["key"] for row in rows}
    admitted: set[str] = set()
    for task in tasks:
        key = task.dedupe_key or ""
        if task.throttle is not None:
            if key not in opened or key in admitted:
                outcome.throttled.append(key)
                continue
            admitted.add(key)
            inserted = yield from _insert(queue, replace(task, throttle=None), outcome)
            if outcome.paused:
                return outcome
            if inserted is None:
                outcome.duplicates.append(key)
            continue
        # debounce: replace the key's waiting task, else insert one due after the quiet time
        seconds = float(task.debounce or 0)
        replaced = yield from _replace(queue, task, seconds)
        if replaced is not None:
            outcome.debounced.append(replaced)
            continue
        inserted = yield from _insert(queue, replace(task, debounce=None, delay=seconds), outcome)
        if outcome.paused:
            return outcome
        if inserted is not None:
            continue
        # Another enqueue's task of the key committed meanwhile (or the key's task runs): look again.
        replaced = yield from _replace(queue, task, seconds)
        if replaced is not None:
            outcome.debounced.append(replaced)
        else:
            outcome.duplicates.append(key)
    return outcome


def _replace(queue: str, task: NewTask, seconds: float) -> Plan[str | None]:
    payload = task.payload.encode("utf-8") if isinstance(task.payload, str) else task.payload
    rows = yield Call(
        "task_debounce_replace",
        {"queue": queue, "key": task.dedupe_key, "payload": payload, "seconds": seconds, **RANKS},
    )
    return str(rows[0]["id"]) if rows else None


def _insert(queue: str, task: NewTask, outcome: Outcome) -> Plan[str | None]:
    """Insert one task (its dedupe key may make it a duplicate: None)."""
    task_id = uuid.uuid4()
    skipped, paused = yield from operations.task_insert_many(queue, [task], [task_id])
    if paused:
        outcome.paused = True
        return None
    if task_id in skipped:
        return None
    outcome.enqueued.append(str(task_id))
    return str(task_id)
