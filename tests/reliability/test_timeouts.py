"""Connection loss and statement timeouts on the hot path; a handler that hangs past its lease.

Promise under test: a worker or reaper whose statements are cancelled by the statement timeout,
or whose connection is cut, keeps going with backoff and loses nothing; a handler that outlives
its lease cannot ack (or otherwise settle) a task the reaper already handed to someone else.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time

import pytest

from shardq import Client, ReaperConfig
from tests.reliability.harness import Processes, wait_until
from tests.support.probes import terminate_sessions_named


class LogWatch(logging.Handler):
    """Collects shardq log messages so a test can wait for a logged event instead of sleeping."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def count(self, *needles: str) -> int:
        return sum(1 for m in list(self.messages) if all(n in m for n in needles))


@pytest.fixture
def logwatch():
    watch = LogWatch()
    logger = logging.getLogger("shardq")
    logger.addHandler(watch)
    old = logger.level
    logger.setLevel(logging.DEBUG)
    yield watch
    logger.removeHandler(watch)
    logger.setLevel(old)


class TableLock:
    """Holds ACCESS EXCLUSIVE on shardq_tasks from another session (what a long DDL or a
    pathological lock does): every statement on the table waits until ``release()``."""

    def __init__(self, db) -> None:
        self.session = db.client.new_session()
        self.held = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        def body(session):
            session.execute_raw("LOCK TABLE shardq_tasks IN ACCESS EXCLUSIVE MODE")
            self.held.set()
            self.done.wait(60)

        self.session.transaction(body)

    def __enter__(self) -> TableLock:
        self.thread.start()
        assert self.held.wait(30)
        return self

    def release(self) -> None:
        self.done.set()
        self.thread.join(30)

    def __exit__(self, *exc) -> None:
        self.release()
        self.session.close()


def test_worker_rides_out_claims_and_acks_cancelled_by_the_statement_timeout(pg_db, logwatch, figures):
    pg_db.client.enqueue_many("q", [b"x"] * 10)
    go = threading.Event()
    started = threading.Event()
    seen = []

    def handler(task):
        seen.append(task.id)
        started.set()
        go.wait(30)

    # prefetch beyond the task count: the fetcher keeps claiming while tasks are in flight
    worker = pg_db.client.worker(
        ["q"], handler, concurrency=2, batch=5, prefetch=50, lease_seconds=60, until_empty=True, statement_timeout=0.2
    )
    failure: list[BaseException] = []

    def run():
        try:
            worker.run(install_signal_handlers=False)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert started.wait(30)
        with TableLock(pg_db) as lock:
            go.set()  # the handlers finish while every ack and claim must wait for the lock
            wait_until(
                lambda: logwatch.count("settling", "statement timeout") >= 2 or failure,
                60,
                what="acks cancelled by the statement timeout",
            )
            wait_until(
                lambda: logwatch.count("claim failed", "statement timeout") >= 1 or failure,
                60,
                what="a claim cancelled by the statement timeout",
            )
            lock.release()
        thread.join(60)
    finally:
        worker.stop()
    stats = worker.totals
    timeouts = logwatch.count("statement timeout")
    figures.add(
        "timeouts",
        scenario="worker statements cancelled by a 0.2 s statement timeout while the table is locked",
        text=f"{timeouts} cancelled statements retried; {stats.acked} of 10 acked, lease_lost {stats.lease_lost}, "
        f"left in table {pg_db.count()}",
        lost=10 - stats.acked,
        stuck=pg_db.count(),
    )
    assert not failure, f"the worker died: {failure[0]!r}"
    assert stats.acked == 10 and stats.lease_lost == 0 and len(seen) == 10, pg_db.task_clock()
    assert pg_db.count() == 0


def test_reaper_process_rides_out_statement_timeouts_and_reaps_afterwards(pg_db, tmp_path, figures):
    expired = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)
    task = pg_db.make_task("q", state="leased", attempts=1, lease_expires_at=expired)
    procs = Processes(pg_db.dsn.conninfo, tmp_path / "out")
    with TableLock(pg_db):
        reaper = procs.start("reaper", ["reap", "--interval", "0.1", "--statement-timeout", "0.2"])
        wait_until(
            lambda: reaper.log.read_text().count("statement timeout") >= 2 or reaper.poll() is not None,
            60,
            what="reaper statements cancelled by the statement timeout",
        )
        alive_under_lock = reaper.poll() is None
    try:
        wait_until(
            lambda: (
                (pg_db.task_row(task.key.id) or {}).get("state") in ("ready", "scheduled") or reaper.poll() is not None
            ),
            60,
            what="the reaper process to reap once the lock is gone",
        )
    finally:
        procs.terminate_all()
    log = reaper.log.read_text()
    figures.add(
        "timeouts",
        scenario="`shardq reap --statement-timeout 0.2` while the table is locked",
        text=f"{log.count('statement timeout')} cancelled passes logged; alive: {alive_under_lock}; "
        f"exit code {reaper.popen.returncode}; expired lease reaped afterwards: "
        f"{pg_db.task_row(task.key.id)['state'] != 'leased'}",
    )
    assert alive_under_lock, log[-2000:]
    assert reaper.popen.returncode == 0, log[-2000:]
    assert pg_db.task_row(task.key.id)["state"] in ("ready", "scheduled")


def test_reaper_run_forever_keeps_running_through_cancelled_statements(pg_db, logwatch):
    expired = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)
    task = pg_db.make_task("q", state="leased", attempts=1, lease_expires_at=expired)
    reaper = pg_db.client.reaper(interval=0.05, statement_timeout=0.2)
    stop = threading.Event()
    failure: list[BaseException] = []

    def run():
        try:
            reaper.run_forever(stop)
        except BaseException as exc:  # noqa: BLE001
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    try:
        with TableLock(pg_db):
            thread.start()
            wait_until(
                lambda: logwatch.count("reaper run failed", "statement timeout") >= 2 or failure,
                60,
                what="failed reaper passes",
            )
        wait_until(lambda: pg_db.task_row(task.key.id)["state"] != "leased" or failure, 60, what="the reap")
    finally:
        stop.set()
        thread.join(30)
    reaper.store.session.close()
    assert not failure, repr(failure[0])


def test_statement_timeout_defaults_are_set_and_validated():
    from shardq import InvalidInput, WorkerConfig

    assert WorkerConfig(queues=("q",)).statement_timeout == 10.0
    assert ReaperConfig().statement_timeout == 30.0
    for bad in (0, -1, float("nan"), "1", True):
        with pytest.raises(InvalidInput):
            WorkerConfig(queues=("q",), statement_timeout=bad).validate()  # type: ignore[arg-type]  # "1" on purpose
        with pytest.raises(InvalidInput):
            ReaperConfig(statement_timeout=bad).validate()  # type: ignore[arg-type]  # "1" on purpose
    assert WorkerConfig(queues=("q",), statement_timeout=None).validate().statement_timeout is None


def test_worker_sessions_carry_the_statement_timeout(pg_db):
    seen = []

    def handler(task):
        seen.append(task.id)

    pg_db.client.enqueue("q", b"x")
    worker = pg_db.client.worker(["q"], handler, until_empty=True, statement_timeout=1.5)
    worker.run(install_signal_handlers=False)
    assert seen
    session = pg_db.client.new_session(statement_timeout_ms=1500)
    try:
        assert session.execute_raw("SHOW statement_timeout")[0]["statement_timeout"] == "1500ms"
    finally:
        session.close()
    reaper = pg_db.client.reaper(statement_timeout=2.5)
    assert reaper.store.session.execute_raw("SHOW statement_timeout")[0]["statement_timeout"] == "2500ms"
    reaper.store.session.close()


def test_connections_cut_under_a_draining_worker_lose_nothing(pg_db, logwatch, figures):
    """pg_terminate_backend on every shardq connection, repeatedly, while a worker drains."""
    ids = set(pg_db.client.enqueue_many("q", [b"x"] * 400).enqueued_ids)
    seen: list[str] = []
    lock = threading.Lock()

    def handler(task):
        with lock:
            seen.append(task.id)
        time.sleep(0.002)  # a slow handler, so the drain outlasts the cuts

    victim = Client(pg_db.dsn, application_name="shardq-cut-me")
    worker = victim.worker(["q"], handler, concurrency=2, batch=10, lease_seconds=30, until_empty=True)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
    thread.start()
    killer = pg_db.client.new_session()
    cuts = 0
    try:
        while thread.is_alive() and cuts < 8:
            wait_until(
                lambda cuts=cuts: len(seen) >= 40 * (cuts + 1) or not thread.is_alive(),
                60,
                what="progress between cuts",
            )
            killed = terminate_sessions_named(killer, "shardq-cut-me")
            cuts += 1 if killed else 0
    finally:
        thread.join(120)
        worker.stop()
        killer.close()
        victim.close()
    stats = worker.totals
    remaining = pg_db.count_tasks()
    figures.add(
        "timeouts",
        scenario="worker connections cut with pg_terminate_backend during a drain",
        text=f"{cuts} cuts; {len(set(seen))} of {len(ids)} processed, {len(seen) - len(set(seen))} "
        f"executed twice, lease_lost {stats.lease_lost}, left in table {remaining}",
        lost=len(ids - set(seen)),
        stuck=remaining,
    )
    assert not thread.is_alive()
    assert cuts >= 3
    assert set(seen) == ids and remaining == 0


def test_a_handler_that_hangs_past_its_lease_cannot_settle_the_task_someone_else_now_holds(pg_db, figures):
    task_id = pg_db.client.enqueue("q", b"x").enqueued_ids[0]
    pg_db.client.set_queue("q", backoff_base=0.001, backoff_cap=0.001)
    first_started, first_release = threading.Event(), threading.Event()
    second_started, second_release = threading.Event(), threading.Event()
    runs: list[tuple[str, int]] = []

    def hung(task):
        runs.append(("hung", task.attempt))
        first_started.set()
        first_release.wait(60)

    def healthy(task):
        runs.append(("healthy", task.attempt))
        second_started.set()
        second_release.wait(60)

    # prefetch 0: the hung worker claims nothing more while its only handler is stuck
    hung_worker = pg_db.client.worker(["q"], hung, concurrency=1, batch=1, prefetch=0, lease_seconds=1)
    healthy_worker = pg_db.client.worker(["q"], healthy, concurrency=1, batch=1, prefetch=0, lease_seconds=30)
    threads = [
        threading.Thread(target=w.run, kwargs={"install_signal_handlers": False}, daemon=True)
        for w in (hung_worker, healthy_worker)
    ]
    reaper = pg_db.client.reaper()
    try:
        threads[0].start()
        assert first_started.wait(30)

        def reaped() -> bool:  # by this reaper, or by a worker's lease sweeper (the hung one's too)
            if reaper.run_once().retried == 1:
                return True
            row = pg_db.task_row(task_id)
            return row is not None and row["state"] != "leased"

        wait_until(reaped, 30, interval=0.1, what="the expired lease to be reaped")
        threads[1].start()
        assert second_started.wait(30), "the reaped task was not handed to the healthy worker"
        first_release.set()  # the hung handler returns now: its ack must change nothing
        wait_until(lambda: hung_worker.totals.lease_lost == 1, 30, what="the stale ack to be refused")
        row = pg_db.task_row(task_id)
        held_by_other = row is not None and row["state"] == "leased" and row["attempts"] == 2
        second_release.set()
        wait_until(lambda: healthy_worker.totals.acked == 1, 30, what="the healthy worker's ack")
    finally:
        first_release.set()
        second_release.set()
        for worker in (hung_worker, healthy_worker):
            worker.stop()
        for thread in threads:
            if thread.is_alive() or thread.ident:
                thread.join(30)
        reaper.store.session.close()
    figures.add(
        "timeouts",
        scenario="handler hung past its 1 s lease; reaped; run by another worker",
        text=f"executions {runs}; hung worker acked {hung_worker.totals.acked}, lease_lost "
        f"{hung_worker.totals.lease_lost}; other worker acked {healthy_worker.totals.acked}; "
        f"row kept while the other held it: {held_by_other}",
    )
    assert runs == [("hung", 1), ("healthy", 2)]
    assert held_by_other, "the stale ack deleted a task another worker was running"
    assert hung_worker.totals.acked == 0 and hung_worker.totals.lease_lost == 1
    assert pg_db.task_row(task_id) is None and pg_db.count("shardq_dead") == 0
