"""`shardq stats` / `shardq top`: numbers against tasks in exact states, bounded counting, rates,
the JSON contract, and rendered frames."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
import threading
from collections import Counter

import pytest
from click.testing import CliRunner
from rich.console import Console

from shardq import Permanent
from shardq.admin import formatting
from shardq.admin.stats import StatsOptions, collect_plan
from shardq.cli import terminal as dashboard
from shardq.cli.main import cli
from shardq.errors import DatabaseUnavailable
from shardq.lifecycle.enqueue import Producer
from shardq.maintenance.pruning import prune_counters as prune
from shardq.maintenance.reaper import Reaper
from shardq.models import Accuracy, Activity, QueueStats, Stats
from tests.support.factories import fenced, utcnow

CURRENT = StatsOptions(follower_read=False)


def snapshot(db, **options) -> Stats:
    return db.store.run(collect_plan(StatsOptions(**{"follower_read": False, **options}).validate()))


def bury(db, task, error="boom"):
    assert db.store.task_bury_many([fenced(task)], [error], require_expired=False) == {task.key.id}


# -- depth --------------------------------------------------------------------------------------
def test_each_state_is_counted_exactly_per_queue(db):
    now = utcnow()
    for _ in range(3):
        db.make_task("a", exec_time=now - dt.timedelta(seconds=5))
    db.make_task("a", exec_time=now - dt.timedelta(seconds=120))
    db.make_task("a", state="scheduled", exec_time=now + dt.timedelta(hours=1))
    db.make_task("a", state="scheduled", exec_time=now + dt.timedelta(days=2))
    db.make_task("a", state="leased")
    bury(db, db.make_task("a", state="leased"))
    db.make_task("b", state="leased", lease_expires_at=now - dt.timedelta(seconds=10))  # expired: still leased
    stats = snapshot(db)
    a, b = stats.queues["a"], stats.queues["b"]
    assert (a.ready, a.scheduled, a.leased, a.dead) == (4, 2, 1, 1)
    assert (a.expired, b.ready, b.scheduled, b.leased, b.expired, b.dead) == (0, 0, 0, 0, 1, 0)
    assert all(a.accuracy_of(c) is Accuracy.EXACT for c in ("ready", "scheduled", "leased", "dead"))
    assert a.oldest_ready_age_s is not None and 119 <= a.oldest_ready_age_s <= 180
    assert b.oldest_ready_age_s is None


def test_a_due_scheduled_task_not_promoted_yet_counts_as_ready_and_for_the_lag(db):
    now = utcnow()
    db.make_task("q", state="scheduled", exec_time=now - dt.timedelta(seconds=300))
    db.make_task("q", state="scheduled", exec_time=now + dt.timedelta(seconds=300))
    db.make_task("q", exec_time=now - dt.timedelta(seconds=10))
    q = snapshot(db).queues["q"]
    assert (q.ready, q.scheduled) == (2, 1)
    assert q.oldest_ready_age_s is not None and 299 <= q.oldest_ready_age_s <= 360


def test_backlog_entries_are_counted_apart_and_do_not_count_as_ready(db):
    db.make_task("q", exclusive_key="k")
    for _ in range(3):
        db.make_task("q", state="backlog", exclusive_key="k")
    q = snapshot(db).queues["q"]
    assert (q.ready, q.backlog) == (1, 3)
    assert q.due_depth == 1
    assert sum(d.backlog for d in q.per_bucket.values()) == 3


def test_the_oldest_ready_task_is_found_behind_other_priorities(db):
    now = utcnow()
    bucket = 1 if db.dialect == "postgresql" else None
    for priority in (-5, 0, 3):
        db.make_task("q", priority=priority, exec_time=now - dt.timedelta(seconds=5), bucket=bucket)
    db.make_task("q", priority=7, exec_time=now - dt.timedelta(seconds=900), bucket=bucket)
    db.make_task("q", priority=-9, state="leased", exec_time=now - dt.timedelta(seconds=5000), bucket=bucket)
    q = snapshot(db).queues["q"]
    assert (q.ready, q.leased) == (4, 1)
    assert q.oldest_ready_age_s is not None and 899 <= q.oldest_ready_age_s <= 960  # the leased one is not waiting


def test_a_known_queue_without_tasks_is_listed_with_zeros(db):
    db.client.store.queue_ensure("idle")
    idle = snapshot(db).queues["idle"]
    assert (idle.ready, idle.scheduled, idle.leased, idle.dead, idle.oldest_ready_age_s) == (0, 0, 0, 0, None)
    assert idle.lead_time_s == 0.0


def test_per_bucket_depth_matches_where_the_tasks_are(db):
    made = [db.make_task("q") for _ in range(12)] + [db.make_task("q", state="leased") for _ in range(3)]
    made_later = [db.make_task("q", state="scheduled", exec_time=utcnow() + dt.timedelta(hours=1)) for _ in range(2)]
    stats = snapshot(db)
    q = stats.queues["q"]
    ready = Counter(t.key.bucket for t in made[:12])
    leased = Counter(t.key.bucket for t in made[12:])
    scheduled = Counter(t.key.bucket for t in made_later)
    assert set(q.per_bucket) == set(range(db.layout.bucket_count))
    for bucket, depth in q.per_bucket.items():
        assert (depth.ready, depth.scheduled, depth.leased) == (ready[bucket], scheduled[bucket], leased[bucket])
    assert stats.buckets_counted == tuple(range(db.layout.bucket_count))
    totals = dashboard.bucket_totals(stats)
    assert sum(r for r, _, _ in totals.values()) == 12


def test_a_count_that_reaches_the_bucket_cap_is_reported_as_at_least(db):
    tasks = [db.make_task("q") for _ in range(20)]
    db.make_task("q", state="scheduled", exec_time=utcnow() + dt.timedelta(hours=1))
    per_bucket = Counter(t.key.bucket for t in tasks)
    assert max(per_bucket.values()) >= 3  # 20 tasks over 4 buckets
    q = snapshot(db, bucket_cap=3).queues["q"]
    assert q.ready == sum(min(n, 3) for n in per_bucket.values())
    assert q.accuracy_of("ready") is Accuracy.AT_LEAST
    assert q.accuracy_of("scheduled") is Accuracy.EXACT and q.scheduled == 1


def test_dead_letters_are_counted_up_to_the_cap(db):
    for _ in range(10):
        bury(db, db.make_task("q", state="leased"))
    assert snapshot(db).queues["q"].dead == 10
    capped = snapshot(db, bucket_cap=2).queues["q"]  # cap x 4 buckets = 8
    assert capped.dead == 8 and capped.accuracy_of("dead") is Accuracy.AT_LEAST


def test_with_more_buckets_than_max_buckets_a_sample_is_scaled_up(db):
    tasks = [db.make_task("q") for _ in range(40)]
    per_bucket = Counter(t.key.bucket for t in tasks)
    stats = db.store.run(
        collect_plan(StatsOptions(follower_read=False, max_buckets=2).validate(), rng=random.Random(7))
    )
    assert len(stats.buckets_counted) == 2
    q = stats.queues["q"]
    assert q.ready == round(sum(per_bucket[b] for b in stats.buckets_counted) * db.layout.bucket_count / 2)
    assert q.accuracy_of("ready") is Accuracy.ESTIMATE
    assert set(q.per_bucket) == set(stats.buckets_counted)


def test_options_are_validated():
    with pytest.raises(ValueError):
        StatsOptions(bucket_cap=0).validate()
    with pytest.raises(ValueError):
        StatsOptions(window_minutes=60).validate()


# -- rates and activity -------------------------------------------------------------------------
def test_enqueues_are_counted_per_queue(db):
    db.client.enqueue_many("q", [b"x"] * 7, batch_size=3)
    db.client.enqueue("q", b"keyed", dedupe_key="k")
    db.client.enqueue("q", b"keyed again", dedupe_key="k")  # a duplicate inserts nothing, counts nothing
    # A queue's first enqueue is counted at once, the next ones at most once a second (or when the
    # client closes); flush_enqueue_counts is what close does.
    assert snapshot(db).queues["q"].activity.enqueued == 3
    db.client.store.flush_enqueue_counts()
    db.client.enqueue("other", b"y")
    stats = snapshot(db)
    assert stats.queues["q"].activity.enqueued == 8
    assert stats.queues["other"].activity.enqueued == 1
    assert stats.queues["q"].enqueue_rate == pytest.approx(8 / stats.window_s)


def test_a_statement_a_second_later_carries_the_held_enqueue_counts(db):
    from shardq.operations.stats import ENQUEUE_COUNT_SECONDS
    from shardq.sessions.store import TaskStore

    now = [100.0]
    store = TaskStore(db.client.new_session(), clock=lambda: now[0])
    producer = Producer(store)
    producer.enqueue_many("q", [b"x"] * 2)
    producer.enqueue_many("q", [b"x"] * 3)
    assert snapshot(db).queues["q"].activity.enqueued == 2
    now[0] += ENQUEUE_COUNT_SECONDS
    producer.enqueue_many("q", [b"x"] * 4)
    assert snapshot(db).queues["q"].activity.enqueued == 9


def test_closing_the_client_writes_the_held_enqueue_counts(db):
    from shardq.client import Client

    with Client(db.dsn) as client:
        for _ in range(5):
            client.enqueue("q", b"x")
    assert snapshot(db).queues["q"].activity.enqueued == 5


def test_a_worker_records_acks_retries_dead_letters_and_handler_time(db):
    db.client.enqueue_many("q", [b"ok"] * 6 + [b"flaky"] * 2 + [b"poison"])
    attempts: Counter = Counter()
    lock = threading.Lock()

    def handler(task):
        with lock:
            attempts[task.id] += 1
            first = attempts[task.id] == 1
        if task.payload == b"poison":
            raise Permanent("no")
        if task.payload == b"flaky" and first:
            raise RuntimeError("once")

    def work():
        worker = db.client.worker(["q"], handler, until_empty=True, concurrency=2)
        return worker.run(install_signal_handlers=False)

    first = work()
    assert (first.acked, first.retried, first.dead) == (6, 2, 1)
    # The retried tasks wait out their backoff; make them due rather than sleep.
    db.make_queue_due("q")
    assert work().acked == 2
    activity = snapshot(db).queues["q"].activity
    assert (activity.enqueued, activity.acked, activity.retried, activity.dead) == (9, 8, 2, 1)
    assert activity.handled == 11
    assert activity.handler_seconds > 0 and activity.capacity_seconds > 0
    q = snapshot(db).queues["q"]
    assert q.failure_ratio == pytest.approx(3 / 11)
    assert q.completion_rate == pytest.approx(9 / q.window_s)


def test_the_reaper_records_expired_leases_and_the_dead_letters_they_cause(db):
    past = utcnow() - dt.timedelta(seconds=1)
    db.make_task("q", state="leased", lease_expires_at=past, attempts=1)
    db.make_task("q", state="leased", lease_expires_at=past, attempts=5, max_attempts=5)
    result = Reaper(db.store).run_once()
    assert (result.retried, result.dead) == (1, 1)
    activity = snapshot(db).queues["q"].activity
    assert (activity.expired, activity.dead, activity.retried) == (1, 1, 0)


def test_old_activity_rows_are_pruned_and_recent_ones_kept(db):
    db.client.enqueue("q", b"x")
    db.add_stats_at(7200, slot=0, acked=5)
    assert prune(db.store) == 1
    assert db.count_stats_rows() == 1


def test_counts_older_than_the_window_do_not_count(db):
    db.client.store.queue_ensure("q")
    db.add_stats_minute(10, slot=0, acked=5)
    db.add_stats_minute(2, slot=1, acked=7)
    assert snapshot(db, window_minutes=5).queues["q"].activity.acked == 7
    assert snapshot(db, window_minutes=15).queues["q"].activity.acked == 12


# -- lead time (pure) ----------------------------------------------------------------------------
def test_lead_time_is_backlog_over_completion_rate():
    q = QueueStats(ready=90, leased=10, activity=Activity(acked=550, dead=50), window_s=300)
    assert q.completion_rate == pytest.approx(2.0)
    assert q.lead_time_s == pytest.approx(50.0)


def test_lead_time_by_duration_spreads_backlog_work_over_handler_threads():
    # 100 handler runs of 0.5 s on average; 4 threads offered for the whole 300 s window
    q = QueueStats(
        ready=200, activity=Activity(handled=100, handler_seconds=50.0, capacity_seconds=1200.0), window_s=300
    )
    assert q.mean_handler_s == pytest.approx(0.5)
    assert q.handler_threads == pytest.approx(4.0)
    assert q.lead_time_by_duration_s == pytest.approx(200 * 0.5 / 4)
    assert q.utilization == pytest.approx(50 / 1200)


def test_lead_time_is_unknown_without_completions_and_zero_without_backlog():
    assert QueueStats(ready=5, window_s=300).lead_time_s is None
    assert QueueStats(ready=5, window_s=300).lead_time_by_duration_s is None
    assert QueueStats(window_s=300).lead_time_s == 0.0


# -- JSON contract and command line --------------------------------------------------------------
def cli_run(db, *args):
    result = CliRunner().invoke(cli, ["--dsn", db.dsn.conninfo, *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_stats_json_keeps_the_contract_keys_and_adds_more_beside_them(db):
    db.make_task("q")
    db.make_task("q", state="scheduled", exec_time=utcnow() + dt.timedelta(hours=1))
    data = json.loads(cli_run(db, "stats", "--json", "--current"))
    assert data["buckets"] == 4
    q = data["queues"]["q"]
    assert {"ready", "scheduled", "leased", "dead", "oldest_ready_age_s"} <= set(q)
    assert (q["ready"], q["scheduled"], q["leased"], q["dead"]) == (1, 1, 0, 0)
    assert isinstance(q["oldest_ready_age_s"], float)
    for extra in (
        "enqueue_rate",
        "completion_rate",
        "failure_rate",
        "lead_time_s",
        "lead_time_by_duration_s",
        "mean_handler_s",
        "accuracy",
    ):
        assert extra in q
    assert q["accuracy"] == {
        "ready": "exact",
        "scheduled": "exact",
        "leased": "exact",
        "expired": "exact",
        "backlog": "exact",
        "waiting": "exact",
        "dead": "exact",
    }
    assert q["backlog"] == 0
    assert "per_bucket" not in q
    assert {"as_of", "bucket_cap", "buckets_counted", "window_s"} <= set(data)


def test_stats_json_per_bucket_lists_every_bucket(db):
    task = db.make_task("q")
    data = json.loads(cli_run(db, "stats", "--json", "--per-bucket", "--current"))
    per_bucket = data["queues"]["q"]["per_bucket"]
    assert set(per_bucket) == {"0", "1", "2", "3"}
    assert per_bucket[str(task.key.bucket)]["ready"] == 1


def test_stats_watch_json_prints_one_object_per_snapshot(db):
    db.make_task("q")
    lines = cli_run(
        db, "stats", "--json", "--watch", "--iterations", "2", "--interval", "0.1", "--current"
    ).splitlines()
    assert len(lines) == 2 and all(json.loads(line)["queues"]["q"]["ready"] == 1 for line in lines)


def test_stats_table_marks_capped_counts(db):
    buckets = {db.make_task("q").key.bucket for _ in range(12)}
    out = cli_run(db, "stats", "--bucket-cap", "1", "--current")
    assert f"≥{len(buckets)}" in out and "shardq —" in out


def test_top_renders_one_frame_with_queues_and_per_bucket_depth(db):
    for _ in range(8):
        db.make_task("q")
    out = cli_run(db, "top", "--iterations", "1", "--current")
    assert "lead time" in out and "per-bucket due depth" in out
    for bucket in range(4):
        assert any(line.split()[:1] == [str(bucket)] for line in out.splitlines())


def test_bad_stats_options_exit_2(db):
    result = CliRunner().invoke(cli, ["--dsn", db.dsn.conninfo, "stats", "--bucket-cap", "0"])
    assert result.exit_code == 2


# -- rendering (no database) --------------------------------------------------------------------
def frame_text(renderable, width=150) -> str:
    console = Console(record=True, width=width)
    console.print(renderable)
    return console.export_text()


def fake_stats(**queue) -> Stats:
    from shardq.models import BucketDepth

    per_bucket = {
        0: BucketDepth(ready=10),
        1: BucketDepth(ready=30, leased=2),
        2: BucketDepth(),
        3: BucketDepth(ready=4),
    }
    q = QueueStats(
        ready=44,
        leased=2,
        dead=3,
        oldest_ready_age_s=75.0,
        per_bucket=per_bucket,
        activity=Activity(
            enqueued=600, acked=300, retried=30, handled=330, handler_seconds=33.0, capacity_seconds=600.0
        ),
        window_s=300.0,
        **queue,
    )
    return Stats(
        buckets=4,
        queues={"emails": q},
        as_of=dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC),
        dialect="postgresql",
        bucket_cap=10_000,
        buckets_counted=(0, 1, 2, 3),
        window_s=300.0,
    )


def test_a_dashboard_frame_shows_rates_lead_time_and_bucket_skew():
    text = frame_text(dashboard.dashboard(fake_stats(), interval=2))
    assert "emails" in text and "1m15s" in text  # oldest due task
    assert "2.00/s" in text and "1.00/s" in text  # in/s, done/s
    assert "46.0s" in text  # lead time: 46 / (300 / 300 s)
    assert "skew max/mean 2.78 (bucket 1)" in text  # due depths 10, 32, 0, 4: max 32 over mean 11.5
    bucket_lines = [line for line in text.splitlines() if line.strip().startswith(("0 ", "1 ", "2 ", "3 "))]
    assert len(bucket_lines) == 4
    assert bucket_lines[1].count("█") == dashboard.BAR_WIDTH  # the deepest bucket has the full bar
    assert bucket_lines[2].count("█") == 0


def test_many_buckets_are_drawn_as_one_strip():
    from shardq.models import BucketDepth

    per_bucket = {b: BucketDepth(ready=b) for b in range(64)}
    stats = Stats(
        buckets=64, queues={"q": QueueStats(ready=2016, per_bucket=per_bucket)}, buckets_counted=tuple(range(64))
    )
    text = frame_text(dashboard.buckets_view(stats))
    strip = text.splitlines()[1]
    assert len(strip.rstrip()) == 64 and strip[0] == " " and strip[63] == "█"


def test_inexact_counts_are_marked_in_the_table():
    stats = fake_stats(accuracy={"ready": Accuracy.AT_LEAST, "dead": Accuracy.ESTIMATE})
    text = frame_text(dashboard.queues_table(stats))
    assert "≥44" in text and "~3" in text


def test_the_live_loop_draws_frames_and_survives_a_failed_refresh():
    calls = {"n": 0}

    def fetch():
        calls["n"] += 1
        if calls["n"] == 2:
            raise DatabaseUnavailable("connection refused")
        return fake_stats()

    console = Console(record=True, width=150)
    frames = dashboard.run_live(
        fetch,
        lambda s, error: dashboard.dashboard(s, error=error),
        interval=0.01,
        iterations=3,
        console=console,
        keys=False,
    )
    assert frames == 3 and calls["n"] == 3
    text = console.export_text()
    assert text.count("shardq — postgresql") == 3
    assert "last refresh failed: connection refused" in text


def test_durations_and_rates_read_well():
    assert [formatting.duration_text(s) for s in (None, 0, 0.0004, 0.25, 12.34, 245, 3 * 3600 + 120, 3 * 86400)] == [
        "-",
        "0s",
        "400µs",
        "250ms",
        "12.3s",
        "4m05s",
        "3h02m",
        "3d00h",
    ]
    assert [formatting.rate_text(r) for r in (0, 0.5, 42, 4200, 42000)] == ["0", "0.50/s", "42/s", "4.2k/s", "42k/s"]


# -- bounded work (PostgreSQL plans) ------------------------------------------------------------
def _plan_nodes(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


def test_depth_reads_at_most_the_cap_per_bucket_through_the_primary_key(pg_db):
    from shardq.sql import statements_for

    pg_db.client.enqueue_many("q", [b"x"] * 8000, batch_size=4000)
    pg_db.sql("ANALYZE shardq_tasks")
    text = statements_for("postgresql")["stats_depth_many"].text
    from shardq.models import RANK_BACKLOG, RANK_SCHEDULED

    params = {
        "queues": ["q", "absent"],
        "buckets": [0, 1, 2, 3],
        "cap": 100,
        "rank_cap": 32,
        "scheduled_rank": RANK_SCHEDULED,
        "backlog_rank": RANK_BACKLOG,
    }
    rows = pg_db.sql("EXPLAIN (ANALYZE, FORMAT JSON) " + text, params)
    data = rows[0]["QUERY PLAN"]
    tree = (json.loads(data) if isinstance(data, str) else data)[0]["Plan"]
    scans = [n for n in _plan_nodes(tree) if n.get("Relation Name") == "shardq_tasks"]
    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans)
    assert all(n.get("Index Name") == "shardq_tasks_pkey" and "bucket =" in n.get("Index Cond", "") for n in scans)
    # the counts need no state filter, so they can be answered from the index alone
    assert [n for n in scans if "Filter" not in n] and all(
        n["Node Type"] == "Index Only Scan" for n in scans if "Filter" not in n
    )
    rows_read = sum(n["Actual Rows"] * n["Actual Loops"] for n in scans)
    # 2 queues x 4 buckets x (100 active + 1 head of the one priority in use) at most, of 8000 rows
    assert rows_read <= 2 * 4 * 101
    depth = pg_db.sql(text, params)
    assert sum(r["active"] for r in depth if r["queue"] == "q") == 400


# -- follower reads (CockroachDB), driven without a server ----------------------------------------
def _drive_on_cockroachdb(plan, answer):
    """Run ``plan`` as a CockroachDB session would, answering each named statement with
    ``answer(name, params, in_historical_read)``; a psycopg error it raises is translated exactly
    as the sessions translate a failed named statement."""
    import psycopg

    from shardq.engine import COCKROACHDB
    from shardq.errors import ShardqError
    from shardq.sessions.dsn import Dsn
    from shardq.sessions.rules import statement_error
    from shardq.sql.plan import ENGINE, Atomically, Call, UseShardColumn

    dsn = Dsn.parse("cockroachdb://root@localhost:26257/defaultdb")

    @dataclasses.dataclass
    class State:
        historical: bool = False
        shard_column: str | None = None

    state = State()

    def step(plan):
        value, error = None, None
        while True:
            try:
                request = plan.send(value) if error is None else plan.throw(error)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            try:
                if request is ENGINE:
                    value = COCKROACHDB
                elif isinstance(request, UseShardColumn):
                    state.shard_column = request.column
                elif isinstance(request, Atomically):
                    state.historical = False
                    value = step(request.body())
                elif isinstance(request, Call):
                    if request.name == "stats_snapshot_historical":
                        state.historical = True
                    try:
                        value = answer(request.name, request.params, state.historical)
                    except psycopg.Error as exc:
                        raise statement_error(exc, dsn, COCKROACHDB, request.name, state.shard_column) from exc
            except ShardqError as exc:
                error = exc

    return step(plan)


def test_stats_read_the_present_when_the_follower_read_predates_a_migrated_column():
    # For a few seconds after `migrate` adds a column (0005, 0006), a read AS OF SYSTEM TIME
    # follower_read_timestamp() sees the older descriptor: 42703 on the new column (audit N3).
    from psycopg import errors as pgerrors

    from shardq.admin.stats import collect_plan

    now = utcnow()
    sent = []

    def answer(name, params, historical):
        sent.append(name)
        if name == "shard_layout_get":
            return [
                {
                    "index_name": "shardq_tasks_pkey",
                    "shard_column": "crdb_internal_x_shard_4",
                    "index_definition": "CREATE UNIQUE INDEX … USING HASH WITH (bucket_count=4)",
                }
            ]
        if name == "stats_now":
            return {"as_of": now, "minute": now}
        if name == "queue_list" and historical:
            raise pgerrors.UndefinedColumn('column "rate_limit" does not exist')
        return [] if name != "stats_snapshot_historical" else None

    stats = _drive_on_cockroachdb(collect_plan(StatsOptions(follower_read=True)), answer)
    assert stats.follower_read is False
    assert sent.count("queue_list") == 2
    assert sent.index("stats_snapshot_historical") < sent.index("stats_snapshot_begin")


def test_a_missing_column_of_a_current_read_still_says_to_migrate():
    from psycopg import errors as pgerrors

    from shardq.admin.stats import collect_plan
    from shardq.errors import NotMigrated

    def answer(name, params, historical):
        if name == "shard_layout_get":
            return [
                {
                    "index_name": "shardq_tasks_pkey",
                    "shard_column": "crdb_internal_x_shard_4",
                    "index_definition": "USING HASH WITH (bucket_count=4)",
                }
            ]
        if name == "queue_list":
            raise pgerrors.UndefinedColumn('column "rate_limit" does not exist')
        return {"as_of": utcnow(), "minute": utcnow()} if name == "stats_now" else []

    with pytest.raises(NotMigrated, match=r"shardq migrate.*queue_list"):
        _drive_on_cockroachdb(collect_plan(StatsOptions(follower_read=True)), answer)
