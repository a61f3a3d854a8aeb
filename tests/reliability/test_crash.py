"""Crash suite: real ``shardq work`` and ``shardq reap`` processes SIGKILLed at chosen and random
moments, over many rounds, against the real (embedded) PostgreSQL.

Promise under test: at-least-once, nothing lost, nothing stuck, nothing dead-lettered without
cause, and a task runs more than once only when a lease genuinely expired. The no-reaper variant
runs only ``shardq work`` processes, killed at the same moments: the workers alone must recover
what a killed worker held (the README's "survives crashes without anyone's help").
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter

import pytest

from shardq import NewTask
from tests.reliability.harness import (
    ASYNC_HANDLER,
    HANDLER,
    Processes,
    account,
    lease_lost_reports,
    read_executions,
    wait_until,
)

# Worker kill moments, cycled over the rounds so every one of them is hit.
MOMENTS = ["handler", "claim-during", "claim-after", "ack-before", "ack-during", "ack-after", "random"]
REAPER_MOMENTS = ["reap-during", "reap-after"]
LEASE_SECONDS = 1.0
ROUND_DEADLINE = 120.0
# With workers only, a killed worker's tasks must run again within their lease plus a few seconds:
# a round that is not done after this long has tasks nobody recovers.
NO_REAPER_ROUND_DEADLINE = 30.0


def _hook(moment: str, rng: random.Random) -> str | None:
    if moment == "random":
        return None  # killed by the test at a random instant once it is working
    n = {"handler": rng.randint(1, 12), "claim-during": rng.randint(1, 3), "claim-after": rng.randint(1, 3)}.get(
        moment, rng.randint(1, 4)
    )
    return f"{moment}:{n}"


def _worker_args(queue: str, rng: random.Random) -> list[str]:
    handler = rng.choice([HANDLER, ASYNC_HANDLER])  # both executors: threads and the event loop
    return [
        "work",
        queue,
        "--handler",
        handler,
        "--concurrency",
        str(rng.randint(2, 3)),
        "--batch",
        str(rng.randint(3, 8)),
        "--lease",
        str(LEASE_SECONDS),
    ]


def run_round(
    db, tmp_path, number: int, rng: random.Random, *, tasks: int, reaper: bool = True, deadline: float = ROUND_DEADLINE
) -> dict:
    """One round; ``reaper=False``: no ``shardq reap`` process and no reaping by the test, only
    workers."""
    queue = f"crash-{number}" if reaper else f"crash-alone-{number}"
    out = tmp_path / (f"round{number}" if reaper else f"alone{number}")
    db.client.set_queue(queue, backoff_base=0.05, backoff_cap=0.25)
    payloads = [b"poison" if rng.random() < 0.05 else b"ok" for _ in range(tasks)]
    result = db.client.enqueue_many(queue, [NewTask(p) for p in payloads])
    enqueued = {task_id: p == b"poison" for task_id, p in zip(result.enqueued_ids, payloads)}

    procs = Processes(db.dsn.conninfo, out)
    plan = [MOMENTS[(2 * number + i) % len(MOMENTS)] for i in range(2)]
    random_kill_at: dict[int, float] = {}
    live = []
    for moment in plan:
        proc = procs.start("worker", _worker_args(queue, rng), kill_hook=_hook(moment, rng))
        proc.moment = moment
        live.append(proc)
    test_reaper = None
    if reaper:
        reaper_moment = REAPER_MOMENTS[number % len(REAPER_MOMENTS)]
        reaper_proc = procs.start("reaper", ["reap", "--interval", "0.1"], kill_hook=f"{reaper_moment}:1")
        reaper_proc.moment = reaper_moment
        test_reaper = db.client.reaper()
    started = time.monotonic()
    next_reap = started
    while True:
        now = time.monotonic()
        remaining = db.count_tasks(queue=queue)
        if remaining == 0 or now - started > deadline:
            break
        if test_reaper is not None and now >= next_reap:  # the test's own reaper; the reaper process races it
            test_reaper.run_once()
            next_reap = now + 0.5
        for proc in list(live):
            if proc.poll() is not None:
                live.remove(proc)
            elif proc.moment == "random":
                if proc.pid not in random_kill_at and (out / f"rec.{proc.pid}").exists():
                    random_kill_at[proc.pid] = now + rng.uniform(0.0, 0.5)
                if now >= random_kill_at.get(proc.pid, float("inf")):
                    procs.kill(proc)
                    live.remove(proc)
        while len(live) < 2:  # replacements carry no kill hook
            proc = procs.start("worker", _worker_args(queue, rng))
            proc.moment = None
            live.append(proc)
        time.sleep(0.05)
    seconds = time.monotonic() - started
    procs.terminate_all()
    if test_reaper is not None:
        test_reaper.store.session.close()

    states = db.task_states_by_id(queue)
    leased = sum(1 for state in states.values() if state == "leased")
    dead = db.dead_ids(queue)
    killed = procs.killed_pids()
    lost_logged = lease_lost_reports(procs.logs())
    accounting = account(
        enqueued,
        read_executions(out),
        remaining=set(states),
        dead=dead,
        killed_pids=killed,
        lease_lost=lost_logged,
    )
    exit_codes = Counter(p.popen.returncode for p in procs.all)
    # A replacement process that the end-of-round SIGTERM reaches while Python is still starting
    # (before shardq has installed any handler) dies of the signal having done nothing: not unclean.
    unclean = [
        (p.role, p.popen.returncode, p.log.read_text(errors="replace")[-400:])
        for p in procs.all
        if p.popen.returncode not in (0, -9)
        and not (p.popen.returncode == -15 and not p.log.read_text(errors="replace").strip())
    ]
    moments = [p.moment or "?" for p in procs.all if p.died_of_sigkill]
    return {
        "round": number,
        "moments": moments,
        "kills": len(killed),
        "tasks": accounting.tasks,
        "processed": accounting.processed,
        "lost": len(accounting.lost),
        "stuck": len(accounting.stuck),
        "stuck_leased": leased,
        "dead_expected": accounting.dead_expected,
        "dead_unexpected": len(accounting.dead_unexpected),
        "duplicates": len(accounting.duplicates),
        "unexplained": len(accounting.unexplained),
        "duplicate_list": [{"explanation": d.explanation, "text": d.describe()} for d in accounting.duplicates],
        "lease_lost": len(lost_logged),
        "exit_codes": dict(exit_codes),
        "seconds": seconds,
        "_problems": ([f"{leased} tasks still leased after {seconds:.0f} s"] if leased else [])
        + accounting.problems()
        + ([f"unclean exits: {unclean}"] if unclean else []),
    }


def drain_lease_records(db) -> int:
    """Reap until every lease record of the dead workers has expired and been swept; returns how
    many records are left (0 expected)."""
    reaper = db.client.reaper()

    def swept():
        reaper.run_once()
        return db.count("shardq_leases") == 0

    try:
        wait_until(swept, timeout=30, interval=0.2, what="lease records to be swept")
    except AssertionError:
        pass
    finally:
        reaper.store.session.close()
    return db.count("shardq_leases")


@pytest.mark.parametrize(
    "rounds,tasks",
    [pytest.param(4, 40, id="fast"), pytest.param(35, 150, id="full", marks=pytest.mark.slow)],
)
def test_killed_workers_and_reapers_lose_nothing_and_duplicate_only_after_expired_leases(
    pg_db, tmp_path, figures, rounds, tasks
):
    seed = uuid.uuid4().int % 10_000
    rng = random.Random(seed)
    problems = []
    records = []
    for number in range(rounds):
        record = run_round(pg_db, tmp_path, number, rng, tasks=tasks)
        problems += [f"round {number} (seed {seed}): {p}" for p in record.pop("_problems")]
        records.append(record)
    stale = drain_lease_records(pg_db)
    for record in records:
        record["stale_leases"] = stale
        record["seed"] = seed
        record["variant"] = "full" if rounds > 4 else "fast"
        figures.add("crash", **record)
    assert not problems, "\n".join(problems)
    assert stale == 0
    total_kills = sum(r["kills"] for r in records)
    assert total_kills >= rounds, "the kill hooks did not fire: the suite tested nothing"


@pytest.mark.parametrize(
    "tasks,kills",
    [pytest.param(400, 2, id="fast"), pytest.param(2000, 12, id="full", marks=pytest.mark.slow)],
)
def test_reapers_killed_mid_statement_leave_every_expired_lease_reapable_exactly_once(
    pg_db, tmp_path, figures, tasks, kills
):
    queue = "reap-crash"
    pg_db.client.set_queue(queue, backoff_base=0.05, backoff_cap=0.25)
    ids = set(pg_db.client.enqueue_many(queue, [b"ok"] * tasks).enqueued_ids)
    out = tmp_path / "records"
    gates = tmp_path / "gates"
    gates.mkdir()
    procs = Processes(pg_db.dsn.conninfo, out, extra_env={"SHARDQ_REL_HOLD": str(gates), "SHARDQ_REL_SLEEP_MS": "0"})

    def count(state: str) -> int:
        return pg_db.count_tasks(state=state)

    # A real worker leases everything (its one handler blocks), then dies: every lease will expire.
    holder = procs.start(
        "worker",
        [
            "work",
            queue,
            "--handler",
            "tests.reliability.crash_handlers:hold",
            "--concurrency",
            "1",
            "--batch",
            str(tasks),
            "--lease",
            "1",
        ],
    )
    wait_until(lambda: count("leased") == tasks, 120, what="the worker to lease every task")
    procs.kill(holder)
    killed = 0
    double = both = 0
    for number in range(kills):
        if count("leased") == 0:
            break
        moment = REAPER_MOMENTS[number % len(REAPER_MOMENTS)]
        reaper = procs.start("reaper", ["reap", "--interval", "0.05"], kill_hook=f"{moment}:1")
        reaper.moment = moment
        wait_until(
            lambda reaper=reaper: reaper.poll() is not None or count("leased") == 0,
            60,
            what="the reaper to die mid-reap",
        )
        if reaper.poll() is None:
            procs.kill(reaper)
        killed += reaper.died_of_sigkill and not reaper.killed_by_test
        # After every kill: each task is in exactly one place, and none was charged twice.
        rows = pg_db.tasks("state", "attempts", queue=queue)
        both += pg_db.count_both_tasks_and_dead()
        double += sum(1 for r in rows if r["attempts"] != 1)
        assert len(rows) == tasks
    reaper = pg_db.client.reaper()
    wait_until(
        lambda: reaper.run_once() is not None and count("leased") == 0,
        30,
        interval=0.1,
        what="the test's reaper to return the rest",
    )
    reaper.store.session.close()
    procs.start(
        "worker", ["work", queue, "--handler", HANDLER, "--concurrency", "4", "--batch", "200", "--until-empty"]
    ).popen.wait(300)
    # The drain worker settled every claim it made, the reaper swept the dead worker's: nothing may
    # be left in the lease records (a leftover costs the reaper a sweep per lease period).
    stale = pg_db.count("shardq_leases")
    remaining = set(pg_db.task_ids(queue))
    runs = read_executions(out)
    accounting = account(
        dict.fromkeys(ids, False),
        runs,
        remaining=remaining,
        dead=set(),
        killed_pids=procs.killed_pids(),
        lease_lost=lease_lost_reports(procs.logs()),
    )
    figures.add(
        "reaper-crash",
        scenario=f"{tasks} expired leases, reapers SIGKILLed mid-reap",
        kills=killed,
        leases=tasks,
        lost=len(accounting.lost),
        stuck=len(accounting.stuck),
        double=double,
        both=both,
        stale=stale,
        duplicates=len(accounting.duplicates),
        unexplained=len(accounting.unexplained),
    )
    assert killed >= 1, "no reaper died mid-reap: the hooks did not fire"
    assert both == 0 and double == 0
    assert not accounting.problems(), accounting.problems()
    assert accounting.processed == tasks and stale == 0


@pytest.mark.parametrize(
    "rounds,tasks",
    [pytest.param(3, 40, id="fast"), pytest.param(21, 150, id="full", marks=pytest.mark.slow)],
)
def test_killed_workers_alone_with_no_reaper_recover_every_task(pg_db, tmp_path, figures, rounds, tasks):
    """The same kills with no ``shardq reap`` process at all: the surviving and replacement
    workers must run every task a killed worker held, losing nothing and leaving nothing leased."""
    seed = uuid.uuid4().int % 10_000
    rng = random.Random(seed)
    problems = []
    records = []
    for number in range(rounds):
        record = run_round(pg_db, tmp_path, number, rng, tasks=tasks, reaper=False, deadline=NO_REAPER_ROUND_DEADLINE)
        found = [f"round {number} (seed {seed}): {p}" for p in record.pop("_problems")]
        record["seed"] = seed
        record["variant"] = "full" if rounds > 3 else "fast"
        records.append(record)
        figures.add("crash-no-reaper", **record)
        problems += found
        if found:
            break  # a round that failed waited out its deadline: the next would only wait as long
    assert not problems, "\n".join(problems)
    assert sum(r["kills"] for r in records) >= len(records), "the kill hooks did not fire: the suite tested nothing"
