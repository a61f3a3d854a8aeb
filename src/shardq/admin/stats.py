"""Queue introspection: depth, lag, rates and lead time, at a cost that does not grow with the table.

Counting tasks by state with ``GROUP BY`` over the whole tasks table is itself a known load
problem for SQL queues (River #746: slow at ~5M rows; hexpm #1773: the queue-length count was the
database's largest consumer). :func:`collect_plan` never does that. It reads, in one read-only
snapshot (on CockroachDB a follower read, ``AS OF SYSTEM TIME follower_read_timestamp()``, about
4.8 s old, which never blocks or restarts the claimers):

Depth, per (queue, bucket), from the tasks table itself
    Ready, scheduled, leased and backlog tasks are each counted with a ``LIMIT`` of
    ``bucket_cap`` (default 10,000) inside one bucket's key range, so one call reads at most
    ``bucket_cap`` rows per (queue, bucket, count) however big the table is. As in the full
    count this replaces, a scheduled task that is already due but not promoted yet counts as
    ready (a consumer or the reaper promotes it on its next pass). The ranks of the key keep the
    kinds apart: ready and leased tasks rank by priority, scheduled ones at ``RANK_SCHEDULED``
    (then by exec_time, so due and not-yet-due are two ranges), backlog entries at
    ``RANK_BACKLOG``, and so are workflow steps waiting for their parents, counted apart as
    ``waiting`` (on PostgreSQL with a state filter over that one span, whose heap rows it visits). On CockroachDB the state leads the key, so each count is one span of one
    shard. On PostgreSQL, where the state is not in the key, the ready count is an index-only
    count of the active range (ready or leased) minus the leased tasks (but those leased at the
    backlog rank: a workflow's next step taken by the worker that released it, which the backlog
    span holds instead, shardq.worker.handoff), which are found through
    the lease records (one per claimed batch, sized by what is in flight): a state filter would
    turn every counted entry into a heap visit. Dead letters are counted per queue through their (queue, died_at)
    index, capped at ``bucket_cap`` x buckets. With more than ``max_buckets`` (64) buckets, a
    random sample of ``max_buckets`` buckets is counted and the sums scaled up.

    The oldest due task (lag) is the earliest of the first ready task of each priority in use
    (one index descent per priority, at most 32 per bucket) and the first due scheduled task.

    What is exact: every count below its cap, in every counted bucket, when all buckets were
    counted — then the numbers are the true state of the snapshot. A count that reached its cap
    in any bucket is reported as :attr:`Accuracy.AT_LEAST` (the true number is higher); a sampled
    count as :attr:`Accuracy.ESTIMATE`. The oldest due task's age is exact when all buckets were
    counted (it reads the first row of each bucket's due range), a lower bound when sampled.

Rates, from ``shardq_stats`` (per-minute counters, migration 0003)
    The producer adds its enqueues from memory (at once for a queue it has not counted yet, then
    at most once a second, one small statement); workers add acks, retries, dead
    letters, handler time and offered handler capacity from memory every ``stats_interval``
    seconds (2 s), one statement per flush; the reaper adds expired leases once per run. Rates are
    averages over the window: the current minute plus ``window_minutes`` (5) full minutes before
    it, idle time included. They are approximate: a worker that dies loses what it gathered since
    its last flush, counts land in the minute of the flush, and rows written by other means (plain
    SQL, a merge that bypasses the producer) are not counted.

Lead time (see :class:`shardq.models.QueueStats`)
    ``lead_time_s`` = (due ready + leased) / completion rate; ``lead_time_by_duration_s`` = the
    same backlog x mean handler duration / handler threads serving the queue. Both are ``None``
    when the window has no completions / no timings, and lower bounds when the backlog is.

What it costs against the full ``GROUP BY queue`` it replaces, measured at 10,000,000 tasks:
docs/introspection.md, "Why it is cheap, and what is exact"."""

from __future__ import annotations

import datetime as dt
import logging
import random
from dataclasses import dataclass
from typing import Any

from shardq import operations, validation
from shardq.engine.base import Engine
from shardq.errors import NotMigrated, ShardLayoutChanged
from shardq.models.stats import Accuracy, Activity, BucketDepth, QueueStats, Stats
from shardq.operations.activity import RETENTION_SECONDS
from shardq.sql.plan import ENGINE, Atomically, Plan

log = logging.getLogger("shardq.admin.stats")


BUCKET_CAP_DEFAULT = 10_000


# Above this many buckets a sample is counted: CockroachDB allows 2048, and one statement per
# (queue, bucket) there would make a stats call cost thousands of round trips.
MAX_BUCKETS_DEFAULT = 64


WINDOW_MINUTES_DEFAULT = 5


@dataclass(frozen=True)
class StatsOptions:
    """How :func:`collect_plan` reads.

    ``bucket_cap`` rows counted at most per (queue, bucket, state) (10,000); ``window_minutes``
    full minutes of counters before the current one for rates (5, at most 59);
    ``follower_read`` (CockroachDB) reads ~4.8 s in the past so claimers are never disturbed
    (True; False reads the current state, as tests need); ``max_buckets`` counted before
    sampling (64).
    """

    bucket_cap: int = BUCKET_CAP_DEFAULT
    window_minutes: int = WINDOW_MINUTES_DEFAULT
    follower_read: bool = True
    max_buckets: int = MAX_BUCKETS_DEFAULT

    def validate(self) -> StatsOptions:
        validation.positive_int(self.bucket_cap, "bucket cap", maximum=10_000_000)
        validation.positive_int(self.window_minutes, "window (minutes)", maximum=int(RETENTION_SECONDS // 60) - 1)
        validation.positive_int(self.max_buckets, "max buckets", maximum=validation.BUCKETS_MAX)
        return self


def _choose_buckets(visit_count: int, max_buckets: int, rng: random.Random) -> tuple[int, ...]:
    if visit_count <= max_buckets:
        return tuple(range(visit_count))
    return tuple(sorted(rng.sample(range(visit_count), max_buckets)))


def collect_plan(options: StatsOptions, *, rng: random.Random | None = None) -> Plan[Stats]:  # noqa: C901 - one snapshot, read queue by queue in one plan
    """A :class:`~shardq.models.Stats` snapshot of every queue in ``shardq_queues`` (and any
    queue with recorded activity), empty ones included, as a plan (:mod:`shardq.sql.plan`) for
    either session; ``options`` validated already (:meth:`StatsOptions.validate`). See the module
    documentation for what is exact and what is estimated."""
    engine: Engine = yield ENGINE  # its name, for the report
    layout = yield from operations.layout()  # before the snapshot: it points CockroachDB statements at the shard column
    buckets = _choose_buckets(layout.visit_count, options.max_buckets, rng or random.Random())
    cap = options.bucket_cap
    # Whether the snapshot read is historical: the engine answers (only some have such reads).
    historical = False

    def read(wanted: bool) -> Plan[tuple[Any, Any, Any, Any, Any]]:
        nonlocal historical
        historical = yield from operations.stats_snapshot(historical=wanted)
        clock = yield from operations.stats_now()
        window = yield from operations.stats_window(options.window_minutes)
        settings = {q.name: q for q in (yield from operations.queue_list())}
        names = sorted(set(settings) | set(window))
        depth = yield from operations.stats_depth(names, buckets, cap)
        dead = {}
        for name in names:
            dead[name] = yield from operations.stats_dead_count(name, cap * len(buckets))
        usage = (yield from operations.flow_usage()) if any(q.limited for q in settings.values()) else {}
        return clock, window, names, depth, (dead, settings, usage)

    try:
        clock, window, names, depth, (dead, settings, usage) = yield Atomically(lambda: read(options.follower_read))
    except (NotMigrated, ShardLayoutChanged):
        if not historical:
            raise
        # A table, a column a migration added (42703, NotMigrated too) or, after a resize, a shard
        # column younger than the follower-read staleness does not exist at that time: read the
        # present instead.
        clock, window, names, depth, (dead, settings, usage) = yield Atomically(lambda: read(False))
        historical = False

    as_of: dt.datetime = clock["as_of"]
    window_s = options.window_minutes * 60.0 + (as_of - clock["minute"]).total_seconds()
    scale = layout.visit_count / len(buckets) if buckets else 1.0
    sampled = len(buckets) < layout.visit_count

    per_queue: dict[str, dict[int, BucketDepth]] = {name: {} for name in names}
    capped: dict[str, set[str]] = {name: set() for name in names}
    oldest: dict[str, dt.datetime] = {}
    for row in depth:
        name, bucket = row["queue"], int(row["bucket"])
        per_queue[name][bucket] = BucketDepth(
            row["ready"], row["scheduled"], row["leased"], row["backlog"], row["expired"], row["waiting"]
        )
        for count in ("ready", "scheduled", "leased", "expired", "backlog", "waiting"):
            if row[f"{count}_capped"]:
                capped[name].add(count)
        if row["oldest_ready"] is not None and (name not in oldest or row["oldest_ready"] < oldest[name]):
            oldest[name] = row["oldest_ready"]

    queues: dict[str, QueueStats] = {}
    for name in names:
        buckets_of = per_queue[name].values()
        totals = {
            count: sum(getattr(d, count) for d in buckets_of)
            for count in ("ready", "scheduled", "leased", "expired", "backlog", "waiting")
        }
        accuracy: dict[str, Accuracy] = {}
        for count in totals:
            if sampled:
                totals[count] = round(totals[count] * scale)
            if count in capped[name]:
                accuracy[count] = Accuracy.AT_LEAST
            elif sampled:
                accuracy[count] = Accuracy.ESTIMATE
        if dead[name] >= cap * len(buckets):
            accuracy["dead"] = Accuracy.AT_LEAST
        age = None
        if name in oldest:
            age = max(0.0, (as_of - oldest[name]).total_seconds())
        queues[name] = QueueStats(
            ready=totals["ready"],
            scheduled=totals["scheduled"],
            leased=totals["leased"],
            expired=totals["expired"],
            dead=dead[name],
            oldest_ready_age_s=age,
            backlog=totals["backlog"],
            waiting=totals["waiting"],
            accuracy=accuracy,
            activity=window.get(name, Activity()),
            window_s=window_s,
            per_bucket=dict(sorted(per_queue[name].items())),
            concurrency_limit=settings[name].concurrency_limit if name in settings else None,
            slots_in_use=usage.get(name, (0, 0))[0] if name in settings and settings[name].concurrency_limit else None,
            rate_limit=settings[name].rate_limit if name in settings else None,
        )
    return Stats(
        buckets=layout.bucket_count,
        queues=queues,
        as_of=as_of,
        dialect=engine.name,
        follower_read=historical,
        bucket_cap=cap,
        buckets_counted=buckets,
        window_s=window_s,
    )
