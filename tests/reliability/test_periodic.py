"""Periodic slots under worker crashes: 3 `shardq work --app` processes with an every=1 schedule,
killed with SIGKILL and restarted at random for 10 s. No slot may be enqueued twice, and no slot may
be missing while at least one worker was up."""

from __future__ import annotations

import random
import time

from tests.reliability.harness import Processes

APP = "tests.reliability.crash_handlers:periodic_app"
RUN_SECONDS = 10.0
# A started worker needs this long (imports, connect, first tick) before it takes slots.
WARM_UP_SECONDS = 3.0


def test_killed_and_restarted_schedulers_take_every_slot_once(pg_db, tmp_path, figures):
    out = tmp_path / "records"
    procs = Processes(pg_db.dsn.conninfo, out)
    rng = random.Random(7)
    up: list[list[float]] = []  # [started, ended] per worker process (wall clock)

    def start():
        proc = procs.start("worker", ["work", "--app", APP, "--lease", "2"])
        up.append([time.time(), float("inf")])
        return proc, len(up) - 1

    workers = [start() for _ in range(3)]
    began = time.monotonic()
    kills = 0
    while time.monotonic() - began < RUN_SECONDS:
        time.sleep(rng.uniform(0.3, 1.2))
        index = rng.randrange(len(workers))
        proc, record = workers[index]
        procs.kill(proc)
        up[record][1] = time.time()
        kills += 1
        workers[index] = start()
    procs.terminate_all()
    ended = time.time()
    for span in up:
        span[1] = min(span[1], ended)

    slots = {row["slot"].timestamp(): row["task_id"] for row in pg_db.periodic_slots()}
    # Every slot S whose whole second [S, S+1) some warmed-up worker lived through was taken.
    covered = set()
    for started, stopped in up:
        first = int(started + WARM_UP_SECONDS) + 1
        covered.update(range(first, int(stopped)))
    missing = sorted(s for s in covered if float(s) not in slots)
    assert covered and not missing, (sorted(covered), missing)
    # ... and enqueued once: one task per slot (a run cut short by SIGKILL may run again, under the
    # same task id).
    runs: dict[str, set[str]] = {}
    for path in out.glob("beats.*"):
        for line in path.read_text().splitlines():
            timestamp, task_id = line.split("\t")
            runs.setdefault(timestamp, set()).add(task_id)
    assert all(len(ids) == 1 for ids in runs.values()), {t: ids for t, ids in runs.items() if len(ids) > 1}
    assert all(str(slots[float(t)]) in ids for t, ids in runs.items())
    figures.add(
        "periodic",
        check="3 workers with every=1, SIGKILLed and restarted at random for 10 s",
        slots=len(slots),
        covered=len(covered),
        missing=len(missing),
        kills=kills,
    )
