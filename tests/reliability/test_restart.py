"""Database restart: the embedded PostgreSQL is stopped and started again while ``shardq work``
and ``shardq reap`` processes drain a queue and a producer keeps enqueueing.

Promise under test: workers, reapers and producers reconnect with backoff and finish; an enqueue
that returned is there; an enqueue that raised was applied completely or not at all (each batch is
one statement); nothing is lost or stuck, and duplicates come only from leases that expired.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from shardq import Client, DatabaseError, NewTask, backoff
from shardq.sessions.dsn import Dsn
from tests.reliability.harness import ASYNC_HANDLER, HANDLER, Processes, lease_lost_reports, read_executions, wait_until
from tests.support.factories import TestDatabase
from tests.support.probes import count_dead_in, count_tasks_in, task_states_in

QUEUE = "restart"
BATCH = 20


class ProducerThread(threading.Thread):
    """Enqueues batches of BATCH tasks, each task's payload its dedupe key ``b<n>-<i>``; a batch
    that raised is not resent (a new batch number follows), so each batch is judged on its own."""

    def __init__(self, client: Client) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.ok: list[list[str]] = []
        self.raised: list[tuple[list[str], str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        number = failures = 0
        while not self.stop.is_set():
            keys = [f"b{number}-{i}" for i in range(BATCH)]
            number += 1
            try:
                self.client.enqueue_many(QUEUE, [NewTask(k.encode(), dedupe_key=k) for k in keys])
                self.ok.append(keys)
                failures = 0
                self.stop.wait(0.02)
            except DatabaseError as exc:
                self.raised.append((keys, f"{type(exc).__name__}: {exc}"))
                failures += 1
                self.stop.wait(backoff.idle_sleep(failures, minimum=0.05, maximum=1.0))
        self.client.close()


def finished_count(out) -> int:
    return sum(1 for runs in read_executions(out).values() for r in runs if r.finished is not None)


@pytest.mark.parametrize(
    "restarts,downtime",
    [
        pytest.param(1, 0.0, id="one-quick-restart"),
        pytest.param(3, 3.0, id="three-restarts-outage-longer-than-lease", marks=pytest.mark.slow),
    ],
)
def test_workers_reapers_and_producers_survive_a_database_restart(own_server, tmp_path, figures, restarts, downtime):
    server, url = own_server
    out = tmp_path / "records"
    procs = Processes(url, out)
    for handler in (HANDLER, ASYNC_HANDLER):  # one worker of each executor
        procs.start(
            "worker", ["work", QUEUE, "--handler", handler, "--concurrency", "3", "--batch", "10", "--lease", "2"]
        )
    reaper = procs.start("reaper", ["reap", "--interval", "0.2"])
    producer = ProducerThread(Client(url, application_name="producer"))
    producer.start()
    try:
        for _ in range(restarts):
            before = finished_count(out)
            wait_until(lambda before=before: finished_count(out) >= before + 40, 120, what="workers to make progress")
            raised_before = len(producer.raised)
            server.stop()
            wait_until(
                lambda raised_before=raised_before: len(producer.raised) > raised_before,
                30,
                what="the producer to notice the outage",
            )
            if downtime:
                time.sleep(downtime)  # a deliberate outage, longer than the 2 s lease
            server.start()
            after = finished_count(out)
            wait_until(
                lambda after=after: finished_count(out) >= after + 40, 120, what="workers to resume after the restart"
            )
        ok_before = len(producer.ok)
        wait_until(lambda: len(producer.ok) >= ok_before + 3, 60, what="the producer to resume")
    finally:
        producer.stop.set()
        producer.join(30)

    client = Client(url, application_name="restart-test")
    try:

        def drained():
            return count_tasks_in(client.store.session) == 0

        wait_until(drained, 120, interval=0.2, what="the queue to drain (workers and the reaper process)")
        alive = [p.role for p in procs.all if p.poll() is not None]
        procs.terminate_all()
        dead = count_dead_in(client.store.session)
        remaining = count_tasks_in(client.store.session)
    finally:
        client.close()

    runs = read_executions(out)
    done_keys = Counter(r.payload for task_runs in runs.values() for r in task_runs if r.finished is not None)
    lost = [k for keys in producer.ok for k in keys if k not in done_keys]
    committed = absent = half = 0
    for keys, _error in producer.raised:
        present = sum(1 for k in keys if k in done_keys)
        if present == len(keys):
            committed += 1
        elif present == 0:
            absent += 1
        else:
            half += 1
    lease_lost = lease_lost_reports(procs.logs())
    duplicates = [r for task_runs in runs.values() if len(task_runs) > 1 for r in task_runs[:-1]]
    unexplained = [
        r
        for r in duplicates
        if (r.task_id, r.attempt) not in lease_lost and not (r.finished is not None and r.finished > r.lease_expires)
    ]
    exit_codes = Counter(p.popen.returncode for p in procs.all)
    figures.add(
        "restart",
        scenario=f"{restarts} restart(s), outage {downtime:g}s",
        restarts=restarts,
        batches_ok=len(producer.ok),
        batches_raised=len(producer.raised),
        raised_committed=committed,
        raised_absent=absent,
        half_applied=half,
        tasks=sum(len(k) for k in producer.ok) + committed * BATCH,
        lost=len(lost),
        stuck=remaining,
        duplicates=len(duplicates),
        unexplained=len(unexplained),
        exit_codes=dict(exit_codes),
    )
    assert not alive, f"processes that exited before the end: {alive}\n{procs.logs()[-3000:]}"
    assert set(exit_codes) == {0}, procs.logs()[-3000:]
    assert producer.raised, "the outage was never seen by the producer"
    assert half == 0 and not lost and remaining == 0 and dead == 0
    assert not unexplained, [(r.task_id, r.attempt, r.pid) for r in unexplained]
    assert reaper.popen.returncode == 0


def test_an_ack_retried_through_an_outage_keeps_the_lease_of_tasks_still_running(own_server, tmp_path, figures):
    """One claim leases a, b, b, b. a finishes while the database is down, so its ack is retried
    several times; the worker then dies holding the b's. Their lease record must survive the
    retried ack, or the reaper (which finds expired leases through those records) never returns
    them: they would stay leased forever."""
    server, url = own_server
    factory = TestDatabase(Dsn.parse(url), "postgresql")
    client = factory.client
    # All four in one bucket, so one claim statement leases them under one token, a first.
    factory.make_task("q", payload=b"a", bucket=0, priority=-1)
    for _ in range(3):
        factory.make_task("q", payload=b"b", bucket=0)
    gates = tmp_path / "gates"
    gates.mkdir()
    out = tmp_path / "records"
    procs = Processes(url, out, extra_env={"SHARDQ_REL_HOLD": str(gates)})
    worker = procs.start(
        "worker",
        [
            "work",
            "q",
            "--handler",
            "tests.reliability.crash_handlers:hold",
            "--concurrency",
            "2",
            "--batch",
            "4",
            "--lease",
            "6",
        ],
    )
    try:
        wait_until(lambda: len(read_executions(out)) == 2, 60, what="a and one b to start")
        server.stop()
        (gates / "a").touch()
        wait_until(
            lambda: worker.log.read_text().count("settling 1 outcomes failed") >= 3,
            60,
            what="the ack of a to fail three times",
        )
        server.start()
        session = client.store.session

        def a_acked():
            try:
                return count_tasks_in(session, payload="a") == 0
            except DatabaseError:
                return False  # the first statement after the restart finds its connection gone

        wait_until(a_acked, 60, what="the ack of a to go through after the restart")
        procs.kill(worker)  # dies holding the three b's
        reaper = client.reaper()

        def returned():
            reaper.run_once()
            states = task_states_in(session)
            return len(states) == 3 and all(s in ("ready", "scheduled") for s in states)

        stuck = False
        try:
            wait_until(returned, 30, interval=0.2, what="the reaper to return the dead worker's tasks")
        except AssertionError:
            stuck = True
        figures.add(
            "restart",
            scenario="ack retried through an outage, then the worker is killed",
            restarts=1,
            batches_ok=2,
            batches_raised=0,
            raised_committed=0,
            raised_absent=0,
            half_applied=0,
            tasks=4,
            lost=0,
            stuck=3 if stuck else 0,
            exit_codes={worker.popen.returncode: 1},
        )
        assert not stuck, "the tasks of the dead worker stayed leased: their lease record was dropped early"
    finally:
        procs.terminate_all()
        factory.close()
