"""The counts a worker adds to ``shardq_stats`` for the tasks whose handler ran: how many, their
handler time, and the latency counters (migration 0012), from which the dashboard charts lead
time and enqueue-to-start latency per queue.

For each task whose handler ran: a first attempt counts one ``first_starts`` and the seconds from
when it was due to its handler's start (``start_wait_seconds``); an ack counts one ``lead_acks``
and the seconds from its enqueue to its handler's end (``lead_seconds``).

Does not: correct for clock skew. Enqueue and due times are the database's clock, the handler's
start and end the worker's wall clock; with clocks kept by NTP the error is milliseconds. A task
enqueued with a delay is measured from when it was due, not from its enqueue (its wait was asked
for); its lead time is from its enqueue. A retried task's start wait is its first attempt's only.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from shardq.models.stats import Activity
from shardq.worker.inflight import ACK, InFlight

#: Sums are kept as offsets from this instant: a timedelta sum per batch and one conversion,
#: not a conversion of each task's times to epoch seconds and a call per task, which made a
#: no-op task's worker cost measurably higher (docs/loadtest.md, "The latency counters' cost").
_ORIGIN = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
_ORIGIN_SECONDS = _ORIGIN.timestamp()
_ZERO = dt.timedelta()


def count(counts: Activity, outcomes: Iterable[InFlight]) -> None:
    """Add one queue's ``outcomes`` to ``counts``: ``handled`` and ``handler_seconds``, the start
    waits (first attempts) and the lead times (acks); nothing for a task whose handler did not
    run. Each batch's latency sum is clamped at zero (a clock behind the database's cannot make
    it negative), not each task's wait."""
    handled = starts = acks = 0
    handler_seconds = 0.0
    started = ended_acks = 0.0  # worker-clock seconds since _ORIGIN, summed
    due = enqueued = _ZERO  # database-clock offsets from _ORIGIN, summed
    for entry in outcomes:
        seconds, ended = entry.seconds, entry.ended_at
        if seconds is None:
            continue
        handled += 1
        handler_seconds += seconds
        if ended is None:
            continue
        claimed = entry.claimed
        if claimed.attempt == 1:
            starts += 1
            started += ended - seconds - _ORIGIN_SECONDS
            due += claimed.key.exec_time - _ORIGIN
        if entry.kind == ACK:
            acks += 1
            ended_acks += ended - _ORIGIN_SECONDS
            enqueued += claimed.created_at - _ORIGIN
    counts.handled += handled
    counts.handler_seconds += handler_seconds
    if starts:
        counts.first_starts += starts
        counts.start_wait_seconds += max(0.0, started - due.total_seconds())
    if acks:
        counts.lead_acks += acks
        counts.lead_seconds += max(0.0, ended_acks - enqueued.total_seconds())
