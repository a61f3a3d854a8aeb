"""Online bucket resizing on PostgreSQL (CockroachDB resizing is in test_cockroach.py)."""

from __future__ import annotations

import datetime as dt
import json
import re
import threading

import psycopg
import pytest
from click.testing import CliRunner

from shardq.cli.main import cli
from shardq.errors import InvalidInput, ResizeInProgress
from shardq.lifecycle import exclusive
from shardq.lifecycle.claim import Consumer
from shardq.lifecycle.enqueue import Producer
from shardq.maintenance.reaper import Reaper
from shardq.models import NewTask
from shardq.resize import resize_buckets
from shardq.resize.postgresql import PostgresResize
from shardq.sessions.store import TaskStore
from tests.support.factories import fenced, utcnow
from tests.support.probes import lock_task

WAIT = 60  # seconds an Event/Condition may wait before the test fails (never a sleep)


def bucket_default(db) -> str:
    return db.bucket_column_default()


def buckets_row(db) -> tuple[int, int | None]:
    row = db.buckets_row()
    return row["bucket_count"], row["resizing_from"]


def rows_by_bucket(db) -> dict[int, int]:
    return db.count_tasks_by_bucket()


def bucket_of(db, task) -> int:
    return db.task_row(task.id)["bucket"]


@pytest.mark.parametrize("count", [1, 0, -4, 2049, 10_000])
def test_resize_rejects_counts_outside_2_to_2048_before_changing_anything(pg_db, count):
    default = bucket_default(pg_db)
    with pytest.raises(InvalidInput, match="between 2 and 2048"):
        resize_buckets(pg_db.client.new_session, count)
    assert bucket_default(pg_db) == default
    assert buckets_row(pg_db) == (4, None)


def test_resize_to_the_current_count_is_a_noop_that_says_so(pg_db):
    result = pg_db.client.resize_buckets(4)
    assert not result.changed and result.complete
    assert "already 4 buckets" in result.message
    assert buckets_row(pg_db) == (4, None)


def test_grow_spreads_new_rows_over_the_new_count_and_moves_nothing(pg_db):
    old = [pg_db.make_task(bucket=b) for b in range(4)]
    result = resize_buckets(pg_db.client.new_session, 16)
    assert (result.before, result.after, result.changed) == (4, 16, True)
    assert buckets_row(pg_db) == (16, None)
    assert "16" in bucket_default(pg_db)
    assert [bucket_of(pg_db, t) for t in old] == [0, 1, 2, 3]
    pg_db.client.enqueue_many("q", [b"x"] * 400)
    buckets = rows_by_bucket(pg_db)
    assert max(buckets) >= 4 and max(buckets) <= 15
    assert pg_db.store.layout().visit_count == 16


def test_shrink_moves_ready_rows_at_once_and_leased_rows_only_after_they_are_settled(pg_db):
    resize_buckets(pg_db.client.new_session, 8)
    ready = [pg_db.make_task(bucket=b) for b in (5, 6, 7, 7)]
    scheduled = pg_db.make_task(bucket=6, exec_time=utcnow() + dt.timedelta(hours=1))
    leased = pg_db.make_task(bucket=6, state="leased")
    stays = pg_db.make_task(bucket=1)

    with pg_db.client.new_session() as session:
        shrink = PostgresResize(session, 4, batch=2)
        shrink.extent = shrink.switch()
        assert buckets_row(pg_db) == (4, 8)
        assert pg_db.store.layout().visit_count == 8  # consumers still visit the dropped buckets
        assert not shrink.drain_pass()
        assert shrink.moved == 5
        assert all(bucket_of(pg_db, t) < 4 for t in ready + [scheduled])
        assert bucket_of(pg_db, leased) == 6 and bucket_of(pg_db, stays) == 1
        assert buckets_row(pg_db) == (4, 8)

        assert pg_db.store.task_ack_many([fenced(leased)], [leased.lease_token]) == {leased.key.id}
        assert shrink.drain_pass()
    assert buckets_row(pg_db) == (4, None)
    assert pg_db.store.layout().visit_count == 4
    assert max(rows_by_bucket(pg_db)) < 4
    assert pg_db.count() == 6


def test_shrink_moves_scheduled_and_backlogged_tasks_too(pg_db):
    resize_buckets(pg_db.client.new_session, 8)
    scheduled = pg_db.make_task(bucket=6, state="scheduled", exec_time=utcnow() + dt.timedelta(hours=1))
    active = pg_db.make_task(bucket=1, state="leased", exclusive_key="k")
    waiting = pg_db.make_task(bucket=7, state="backlog", exclusive_key="k")
    with pg_db.client.new_session() as session:
        shrink = PostgresResize(session, 4)
        shrink.extent = shrink.switch()
        assert shrink.drain_pass()
    assert bucket_of(pg_db, scheduled) < 4 and bucket_of(pg_db, waiting) < 4
    assert pg_db.task_row(waiting.id)["state"] == "backlog"
    # The moved backlog entry is still found when its key is released.
    removed, promoted = exclusive.remove_and_release(
        pg_db.store, [("q", "k")], lambda: pg_db.store.task_ack_many([fenced(active)]), {active.key.id: ("q", "k")}
    )
    assert removed == {active.key.id} and promoted == {waiting.key.id}
    assert pg_db.task_row(waiting.id)["state"] == "ready"


def test_a_backlog_entry_moves_only_while_nobody_holds_its_key(pg_db):
    resize_buckets(pg_db.client.new_session, 8)
    pg_db.make_task(bucket=1, state="leased", exclusive_key="k")
    waiting = pg_db.make_task(bucket=5, state="backlog", exclusive_key="k")
    free = pg_db.make_task(bucket=5, state="backlog", exclusive_key="other")
    with pg_db.client.new_session() as session, pg_db.client.new_session() as holder:
        shrink = PostgresResize(session, 4)
        shrink.extent = shrink.switch()

        def while_key_is_held(s):
            TaskStore(s).exclusive_keys_lock([("q", "k")])  # what an ack releasing "k" holds
            assert not shrink.drain_pass()
            return bucket_of(pg_db, waiting), bucket_of(pg_db, free)

        assert holder.transaction(while_key_is_held)[0] == 5
        assert bucket_of(pg_db, free) < 4
        assert shrink.drain_pass()
    assert bucket_of(pg_db, waiting) < 4


def test_a_task_retried_into_a_dropped_bucket_is_moved_on_the_next_pass(pg_db):
    resize_buckets(pg_db.client.new_session, 8)
    leased = pg_db.make_task(bucket=7, state="leased")
    with pg_db.client.new_session() as session:
        shrink = PostgresResize(session, 4)
        shrink.extent = shrink.switch()
        assert not shrink.drain_pass()
        assert pg_db.store.task_retry_many([fenced(leased)], [0.0], ["boom"], require_expired=False) == {leased.key.id}
        assert bucket_of(pg_db, leased) == 7  # a retry keeps the row where it is ...
        assert shrink.drain_pass()  # ... and the next pass moves it
    assert bucket_of(pg_db, leased) < 4
    assert pg_db.task_row(leased.id)["state"] == "ready"


def test_the_reaper_still_visits_dropped_buckets_during_a_shrink(pg_db):
    resize_buckets(pg_db.client.new_session, 8)
    expired = pg_db.make_task(bucket=6, state="leased", lease_expires_at=utcnow() - dt.timedelta(seconds=5), attempts=1)
    with pg_db.client.new_session() as session:
        shrink = PostgresResize(session, 4)
        shrink.extent = shrink.switch()
        assert not shrink.drain_pass()
        reaped = Reaper(pg_db.store).run_once()
        assert reaped.retried == 1 and reaped.buckets == 8
        assert shrink.drain_pass()
    assert bucket_of(pg_db, expired) < 4
    assert pg_db.count("shardq_leases") == 0


def test_lease_records_of_dropped_buckets_are_removed_when_the_shrink_finishes(pg_db):
    resize_buckets(pg_db.client.new_session, 8)
    pg_db.client.enqueue_many("q", [b"x"] * 200)
    claimed = []
    consumer = Consumer(pg_db.store, ["q"], batch=10, lease_seconds=300, offset=0)
    while (found := consumer.claim()).tasks:
        claimed += found.tasks
    assert pg_db.count("shardq_leases") > 0
    with pg_db.client.new_session() as session:
        shrink = PostgresResize(session, 2)
        shrink.extent = shrink.switch()
        assert not shrink.drain_pass()
        # Settle every task but keep the lease records (as a worker that crashed before closing them).
        assert len(pg_db.store.task_ack_many([fenced(t) for t in claimed])) == 200
        assert shrink.drain_pass()
    assert pg_db.count_lease_records_from_bucket(2) == 0


def test_rows_a_claim_holds_locked_are_skipped_and_moved_later(pg_db):
    resize_buckets(pg_db.client.new_session, 8)
    task = pg_db.make_task(bucket=5)
    with psycopg.connect(pg_db.dsn.conninfo) as other, pg_db.client.new_session() as session:
        shrink = PostgresResize(session, 4)
        shrink.extent = shrink.switch()
        lock_task(other, task.key.id)
        assert not shrink.drain_pass()  # the locked row is skipped, not waited for
        assert bucket_of(pg_db, task) == 5
        other.rollback()
        assert shrink.drain_pass()
    assert bucket_of(pg_db, task) < 4


def test_a_second_resize_is_refused_while_one_holds_the_lock(pg_db):
    with pg_db.client.new_session() as holder:
        assert holder.fetch_one("resize_lock_try")["locked"]
        with pytest.raises(ResizeInProgress):
            resize_buckets(pg_db.client.new_session, 8)
        holder.fetch_one("resize_lock_release")
    assert resize_buckets(pg_db.client.new_session, 8).after == 8


def test_a_stopped_shrink_is_safe_and_running_resize_again_finishes_it(pg_db):
    resize_buckets(pg_db.client.new_session, 8)
    leased = pg_db.make_task(bucket=7, state="leased")
    stop = threading.Event()
    stop.set()
    first = resize_buckets(pg_db.client.new_session, 4, stop=stop)
    assert first.changed and not first.complete
    assert buckets_row(pg_db) == (4, 8)
    assert "run the resize again" in first.message

    pg_db.store.task_ack_many([fenced(leased)], [leased.lease_token])
    second = resize_buckets(pg_db.client.new_session, 4)
    assert second.complete and buckets_row(pg_db) == (4, None)


def test_growing_during_an_unfinished_shrink_keeps_every_row_reachable(pg_db):
    resize_buckets(pg_db.client.new_session, 16)
    leased = pg_db.make_task(bucket=12, state="leased")
    stop = threading.Event()
    stop.set()
    assert not resize_buckets(pg_db.client.new_session, 4, stop=stop).complete
    assert buckets_row(pg_db) == (4, 16)
    resize_buckets(pg_db.client.new_session, 8, stop=stop)
    assert buckets_row(pg_db) == (8, 16)  # bucket 12 is still visited
    assert pg_db.store.layout().visit_count == 16
    pg_db.store.task_ack_many([fenced(leased)], [leased.lease_token])
    assert resize_buckets(pg_db.client.new_session, 32).complete
    assert buckets_row(pg_db) == (32, None)


def test_a_consumer_walks_new_buckets_after_a_grow_before_calling_a_round_empty(pg_db):
    consumer = Consumer(TaskStore(pg_db.client.new_session()), ["q"], offset=0)
    assert consumer.layout().visit_count == 4
    resize_buckets(pg_db.client.new_session, 16)
    task = pg_db.make_task(bucket=13)
    first = consumer.claim()
    assert first.tasks == [] and not first.round_empty  # the layout changed under this round
    second = consumer.claim()
    assert [t.id for t in second.tasks] == [task.id]


def test_consumers_keep_claiming_from_dropped_buckets_until_the_shrink_is_done(pg_db):
    resize_buckets(pg_db.client.new_session, 8)
    leased = pg_db.make_task(bucket=6, state="leased")
    with pg_db.client.new_session() as session:
        shrink = PostgresResize(session, 4)
        shrink.extent = shrink.switch()
        # A task retried into bucket 6 after the mover's pass is still claimable there.
        pg_db.store.task_retry_many([fenced(leased)], [0.0], [None], require_expired=False)
        consumer = Consumer(pg_db.store, ["q"], offset=0)
        assert [t.id for t in consumer.claim().tasks] == [leased.id]


def test_resize_16_to_32_to_8_under_load_processes_every_task_once(pg_db):
    """Three workers, a producer and a reaper run throughout, over ready, scheduled and
    exclusive-key (backlogged) tasks; every enqueued task is handled exactly once (leases are long,
    so no lease expires) and claims go on during the shrink."""
    client = pg_db.client
    assert resize_buckets(client.new_session, 16).after == 16

    cond = threading.Condition()
    enqueued: set[str] = set()
    processed: list[str] = []
    preload = [NewTask(f"pre-{i}".encode()) for i in range(1300)]
    preload += [NewTask(f"key-{i}".encode(), exclusive_key=f"k{i % 20}") for i in range(200)]  # 180 wait in backlogs
    preload += [NewTask(f"later-{i}".encode(), delay=0.5) for i in range(100)]  # scheduled, promoted meanwhile
    enqueued.update(client.enqueue_many("live", preload).enqueued_ids)
    assert len(enqueued) == 1600

    def handler(task) -> None:
        with cond:
            processed.append(task.id)
            cond.notify_all()

    switched = threading.Event()
    claimed_during_shrink = threading.Event()

    def on_event(event, task, details) -> None:
        if event == "claimed" and switched.is_set():
            claimed_during_shrink.set()

    stop_producer = threading.Event()

    def produce() -> None:
        producer = Producer(TaskStore(client.new_session()))
        for batch in range(200):
            with cond:  # flow control: keep the backlog bounded so the test ends in bounded time
                cond.wait_for(lambda: stop_producer.is_set() or len(enqueued) - len(processed) < 2000, WAIT)
            if stop_producer.is_set():
                return
            ids = producer.enqueue_many("live", [f"p{batch}-{i}".encode() for i in range(50)]).enqueued_ids
            with cond:
                enqueued.update(ids)

    workers = [
        client.worker(["live"], handler, concurrency=2, batch=25, lease_seconds=600, idle_max=0.05, on_event=on_event)
        for _ in range(3)
    ]
    reaper = client.reaper(interval=0.2)
    reaper_stop = threading.Event()
    threads = [threading.Thread(target=w.run, kwargs={"install_signal_handlers": False}) for w in workers]
    threads += [threading.Thread(target=reaper.run_forever, args=(reaper_stop,)), threading.Thread(target=produce)]
    for thread in threads:
        thread.start()
    try:
        with cond:
            assert cond.wait_for(lambda: len(processed) >= 300, WAIT)
        grown = resize_buckets(client.new_session, 32)
        assert (grown.before, grown.after) == (16, 32)
        with cond:
            assert cond.wait_for(lambda: len(processed) >= 900, WAIT)

        # A task this test holds in a dropped bucket keeps the shrink open until the test has seen
        # a worker claim while the shrink was in progress.
        held = pg_db.make_task("live", bucket=30, state="leased", lease_expires_at=utcnow() + dt.timedelta(hours=1))

        def progress(report) -> None:
            if report.phase in ("moving", "waiting") and not switched.is_set():
                switched.set()
                assert claimed_during_shrink.wait(WAIT), "no claim while the shrink was in progress"
                assert pg_db.store.task_ack_many([fenced(held)], [held.lease_token]) == {held.key.id}

        shrunk = resize_buckets(client.new_session, 8, on_progress=progress, batch=100)
        assert (shrunk.before, shrunk.after, shrunk.complete) == (32, 8, True)
        assert claimed_during_shrink.is_set()
        assert buckets_row(pg_db) == (8, None)
        assert pg_db.count_tasks_from_bucket(8) == 0

        with cond:
            stop_producer.set()
            cond.notify_all()
        threads[-1].join(WAIT)
        with cond:
            assert cond.wait_for(lambda: enqueued <= set(processed), WAIT), (
                f"{len(enqueued - set(processed))} tasks never processed"
            )
    finally:
        with cond:
            stop_producer.set()
            cond.notify_all()
        for worker in workers:
            worker.stop()
        reaper_stop.set()
        for thread in threads:
            thread.join(WAIT)
    assert set(processed) == enqueued
    assert len(processed) == len(set(processed)), "a task ran twice although no lease expired"
    assert sum(w.stats.lease_lost for w in workers) == 0
    assert pg_db.count() == 0


def run_cli(db, *args):
    return CliRunner().invoke(cli, ["--dsn", db.dsn.conninfo, *args], catch_exceptions=False)


def test_cli_resize_reports_what_it_did_and_show_reflects_it(pg_db):
    pg_db.client.enqueue_many("q", [b"x"] * 50)
    result = run_cli(pg_db, "buckets", "resize", "2")
    assert result.exit_code == 0, result.output
    assert "resized from 4 to 2 buckets" in result.output
    report = json.loads(run_cli(pg_db, "buckets", "show", "--json").output)
    assert report["bucket_count"] == 2 and report["resizing"] is False
    assert sum(report["rows_per_bucket"].values()) == 50
    assert set(report["rows_per_bucket"]) <= {"0", "1"}


def test_cli_resize_rejects_a_bad_count_with_exit_code_2_and_a_same_count_says_nothing_to_do(pg_db):
    bad = run_cli(pg_db, "buckets", "resize", "4096")
    assert bad.exit_code == 2
    assert "between 2 and 2048" in bad.output
    same = run_cli(pg_db, "buckets", "resize", "4")
    assert same.exit_code == 0 and "nothing to do" in same.output


def test_cli_show_reports_a_shrink_in_progress(pg_db):
    resize_buckets(pg_db.client.new_session, 8)
    pg_db.make_task(bucket=7, state="leased")
    stop = threading.Event()
    stop.set()
    resize_buckets(pg_db.client.new_session, 4, stop=stop)
    shown = run_cli(pg_db, "buckets", "show")
    assert "4 buckets, resizing from 8" in shown.output
    assert "bucket    7: 1 rows" in shown.output
    report = json.loads(run_cli(pg_db, "buckets", "show", "--json").output)
    assert report["resizing"] is True and report["resizing_from"] == 8


def test_cockroach_resize_ddl_keeps_the_migrations_key_and_takes_a_literal_count(pg_db):
    # Rendered with the same psycopg.sql pieces Session.execute_ddl uses (no CockroachDB needed).
    # ALTER PRIMARY KEY must name exactly the key columns the migration created, or the resize
    # would change the key (and keep a copy of the old one as a secondary index).
    from pathlib import Path

    from psycopg import sql

    from shardq import sql as queries

    migration = (
        Path(__file__).resolve().parents[2] / "src" / "shardq" / "migrations" / "versions" / "0001_initial.py"
    ).read_text()
    created = re.search(r"PRIMARY KEY \(([^)]*)\) USING HASH", migration).group(1)
    statements = queries.statements_for("cockroachdb")
    with psycopg.connect(pg_db.dsn.conninfo) as conn:
        alter = sql.SQL(statements["table_primary_key_alter"].text).format(bucket_count=sql.Literal(32))
        drop = sql.SQL(statements["shard_column_drop"].text).format(column=sql.Identifier("crdb_internal_x_shard_16"))
        assert f"USING COLUMNS ({created})" in alter.as_string(conn)
        assert "USING HASH WITH (bucket_count = 32)" in alter.as_string(conn)
        assert drop.as_string(conn).endswith('DROP COLUMN "crdb_internal_x_shard_16"')


def test_ddl_literals_must_be_whole_numbers(pg_db):
    with pytest.raises(InvalidInput):
        pg_db.session.execute_ddl("bucket_default_set", literals={"bucket_count": "4; DROP TABLE shardq_tasks"})
    assert "4" in bucket_default(pg_db)
