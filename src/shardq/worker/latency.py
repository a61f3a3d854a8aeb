"""The latency counters a worker adds to ``shardq_stats`` with its other counts (migration 0012),
from which the dashboard charts lead time and enqueue-to-start latency per queue.

For each task whose handler ran: a first attempt counts one ``first_starts`` and the seconds from
when it was due to its handler's start (``start_wait_seconds``); an ack counts one ``lead_acks``
and the seconds from its enqueue to its handler's end (``lead_seconds``).

Does not: correct for clock skew. Enqueue and due times are the database's clock, the handler's
start and end the worker's wall clock; with clocks kept by NTP the error is milliseconds. A task
enqueued with a delay is measured from when it was due, not from its enqueue (its wait was asked
for); its lead time is from its enqueue. A retried task's start wait is its first attempt's only.
"""

from __future__ import annotations

from ..stats_figures import Activity
from .inflight import ACK, InFlight


def count(counts: Activity, entry: InFlight) -> None:
    """Add ``entry``'s start wait (first attempts) and lead time (acks) to ``counts``; nothing for
    a task whose handler did not run."""
    if entry.seconds is None or entry.ended_at is None:
        return
    claimed = entry.claimed
    if claimed.attempt == 1:
        counts.first_starts += 1
        counts.start_wait_seconds += max(0.0, entry.ended_at - entry.seconds - claimed.key.exec_time.timestamp())
    if entry.kind == ACK:
        counts.lead_acks += 1
        counts.lead_seconds += max(0.0, entry.ended_at - claimed.created_at.timestamp())
