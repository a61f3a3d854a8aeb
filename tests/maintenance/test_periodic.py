"""Periodic tasks: slots from cron and every, each slot taken exactly once across schedulers and
after its task is gone, only the latest missed slot after downtime (or a bounded catch-up), the
slot's timestamp as an argument, refusals at declaration, pruning, and the CLI."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shardq.errors import InvalidInput
from shardq.maintenance.periodic import Scheduler
from shardq.maintenance.pruning import prune_slots as prune

UTC = dt.UTC
SHARDQ = str(Path(sys.executable).with_name("shardq"))


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


class Clock:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


def scheduler(db, app, clock) -> Scheduler:
    return Scheduler(lambda: db.client.store, list(app.schedules.values()), clock=clock)


def test_slots_follow_cron_in_its_zone_and_every_on_whole_multiples(app):
    @app.periodic(cron="30 3 * * *", tz="Europe/Paris")
    @app.periodic(every=300, name="five-minutes")
    @app.task(name="job")
    def job() -> None: ...

    cron, every = app.schedules["job"], app.schedules["five-minutes"]
    now = at("2026-11-25T10:07:12")
    assert cron.latest_slot(now) == at("2026-11-25T02:30:00")  # 03:30 in Paris is 02:30 UTC in winter
    assert cron.next_slot(now) == at("2026-11-26T02:30:00")
    assert every.latest_slot(now) == at("2026-11-25T10:05:00")
    assert every.next_slot(now) == at("2026-11-25T10:10:00")


def test_each_slot_is_taken_once_by_one_of_many_schedulers_and_never_again_after_its_task_is_gone(db, app):
    runs = []

    @app.periodic(every=60)
    @app.task(name="tick")
    def tick(timestamp: int) -> None:
        runs.append(timestamp)

    clock = Clock(at("2026-11-25T10:00:30"))
    schedulers = [scheduler(db, app, clock) for _ in range(3)]
    assert sum(s.run_once() for s in schedulers) == 1
    assert app.work(until_empty=True).acked == 1  # the task ran and its row is deleted
    late = scheduler(db, app, clock)  # a worker that starts late, still within the slot
    assert late.run_once() == 0
    clock.now = at("2026-11-25T10:01:05")
    assert sum(s.run_once() for s in [late, *schedulers]) == 1
    app.work(until_empty=True)
    assert runs == [int(at("2026-11-25T10:00:00").timestamp()), int(at("2026-11-25T10:01:00").timestamp())]


def test_after_downtime_only_the_latest_missed_slot_runs_unless_catch_up_asks_for_more(db, app):
    @app.periodic(every=60, name="latest-only")
    @app.periodic(every=60, name="catching-up", catch_up=2)
    @app.task(name="job")
    def job(timestamp: int) -> None: ...

    clock = Clock(at("2026-11-25T10:00:10"))
    assert scheduler(db, app, clock).run_once() == 2  # each schedule's first slot
    clock.now = at("2026-11-25T10:10:10")  # nine slots missed while no worker ran
    assert scheduler(db, app, clock).run_once() == 1 + 3
    slots = db.periodic_slots()
    catching_up = [r["slot"] for r in slots if r["name"] == "catching-up"]
    assert catching_up[-3:] == [at("2026-11-25T10:08:00"), at("2026-11-25T10:09:00"), at("2026-11-25T10:10:00")]
    assert [r["slot"] for r in slots if r["name"] == "latest-only"] == [
        at("2026-11-25T10:00:00"),
        at("2026-11-25T10:10:00"),
    ]


def test_a_scheduler_sends_a_statement_only_when_a_slot_falls_due(db, app):
    @app.periodic(every=60)
    @app.task(name="job")
    def job() -> None: ...

    sent = []
    store = db.client.store
    store.session.before_statement = sent.append
    try:
        clock = Clock(at("2026-11-25T10:00:01"))
        s = scheduler(db, app, clock)
        s.run_once()
        first = len(sent)
        for second in range(2, 59):
            clock.now = at(f"2026-11-25T10:00:{second:02d}")
            s.run_once()
        assert len(sent) == first  # no statement between slots
        clock.now = at("2026-11-25T10:01:00")
        s.run_once()
        assert sent[first:] == ["periodic_slot_take"]
    finally:
        store.session.before_statement = None


def test_old_slot_rows_are_pruned_but_never_a_schedules_latest(db, app):
    @app.periodic(every=60)
    @app.task(name="job")
    def job() -> None: ...

    clock = Clock(at("2026-11-25T10:00:10"))
    s = scheduler(db, app, clock)
    for minute in range(3):
        clock.now = at(f"2026-11-25T10:0{minute}:10")
        s.run_once()
    assert prune(db.client.store, keep_seconds=0) == 2
    assert [r["slot"] for r in db.periodic_slots()] == [at("2026-11-25T10:02:00")]


def test_a_scheduler_pass_takes_due_slots_and_prunes_once_a_minute_on_the_calling_thread(db, app):
    @app.periodic(every=60)
    @app.task(name="job")
    def job() -> None: ...

    sent: list[str] = []
    store = db.client.store
    store.session.before_statement = sent.append
    try:
        clock = Clock(at("2026-11-25T10:00:10"))
        s = scheduler(db, app, clock)
        assert s.run_once() == 1
        assert sent == ["periodic_last_slots", "periodic_slot_take", "periodic_slots_prune"]  # the first pass prunes
        sent.clear()
        clock.now = at("2026-11-25T10:00:50")
        assert s.run_once() == 0 and sent == []  # nothing due, and the last prune is not a minute old
        db.age_periodic_slots(2 * 86400)
        clock.now = at("2026-11-25T10:01:10")
        assert s.run_once() == 1
        assert sent == ["periodic_slot_take", "periodic_slots_prune"]
    finally:
        store.session.before_statement = None
    assert [r["slot"] for r in db.periodic_slots()] == [at("2026-11-25T10:01:00")]
    assert s.taken == 2 and not s.thread.is_alive()  # every pass ran here, none on the thread


def test_the_scheduler_thread_runs_its_passes_on_the_maintenance_loop(monkeypatch):
    s = Scheduler(lambda: pytest.fail("a pass is replaced here: no store"), [])
    passes = []

    def one_pass() -> int:
        passes.append(s.stop_event.is_set())
        s.stop_event.set()  # repeat() returns once stop is set: no pause is waited out
        return 0

    monkeypatch.setattr(s, "run_once", one_pass)
    s.run()
    assert passes == [False]  # the first pass comes at once


@pytest.mark.parametrize(
    "declare,words",
    [
        (dict(cron="not a cron"), "does not parse"),
        (dict(every=0), "every must be a positive"),
        (dict(every=-5), "every must be a positive"),
        (dict(), "exactly one of cron= and every="),
        (dict(every=60, tz="Mars/Olympus"), "unknown time zone"),
        (dict(every=60, args={}), "do not fit the task"),
    ],
)
def test_a_schedule_that_cannot_run_is_refused_when_declared(app, declare, words):
    with pytest.raises(InvalidInput, match=words):

        @app.periodic(**declare)
        @app.task(name="needs-path")
        def needs_path(path: str) -> None: ...


def test_periodic_goes_above_a_task(app):
    with pytest.raises(InvalidInput, match=r"above @app\.task"):

        @app.periodic(every=60)
        def plain() -> None: ...


APP = textwrap.dedent(
    """
    import shardq
    app = shardq.App()

    @app.periodic(every=3600, args={"path": "/tmp"})
    @app.task(name="cleanup", queue="maintenance")
    def cleanup(path: str, timestamp: int) -> None: ...
    """
)


def test_the_cli_lists_schedules_and_refuses_a_bad_one_with_exit_2(pg_db, tmp_path):
    (tmp_path / "periodic_app.py").write_text(APP)
    (tmp_path / "bad_periodic_app.py").write_text(APP.replace("every=3600", "cron='61 * * * *'"))
    env = {**os.environ, "SHARDQ_DSN": pg_db.dsn.conninfo}

    def run(*args):
        return subprocess.run([SHARDQ, *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)

    listed = run("periodic", "list", "--app", "periodic_app:app", "--json")
    assert listed.returncode == 0, listed.stderr
    [view] = json.loads(listed.stdout)
    assert (view["name"], view["queue"], view["last_slot"]) == ("cleanup", "maintenance", None)
    bad = run("work", "--app", "bad_periodic_app:app", "--until-empty")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "does not parse" in bad.stderr
    worked = run("work", "--app", "periodic_app:app", "--until-empty", "--no-periodic")
    assert worked.returncode == 0 and len(pg_db.periodic_slots()) == 0
