"""``python -m loadtest.wake_floor [--samples 30] [--rounds 2]``: how soon a listening session
hears of a send that follows a pause, for three senders on one embedded PostgreSQL.

* ``notify``: a bare ``SELECT pg_notify(...)`` (no row, so no WAL flush at its commit): the floor
  of the wake-up itself on this machine;
* ``statement``: shardq's enqueue statement (``task_insert_many_fresh`` with its wake-up) sent
  through plain psycopg, prepared: the durable insert and its commit, without shardq's Python;
* ``shardq``: :meth:`shardq.lifecycle.enqueue.Producer.enqueue`, as an application sends a task.

Each send follows a pause of 0.3–0.5 s (an idle producer), and is timed from just before the send
to the moment another process, waiting on LISTEN, receives the notification (one machine, one
clock). The senders run in turn, ``rounds`` times. Prints p50 / p90 / max in ms per sender. The
idle cell's "wake-up arrives" stage (``loadtest.idle_stages``) is the ``shardq`` row plus nothing:
what this leaves for the workers is the rest of the idle start.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import statistics
import sys
import time
import uuid

import psycopg

CHANNEL = "shardq_wake"  # shardq's wake-up channel (sql/postgresql/enqueue.sql)
QUEUE = "wake-floor"
SENDERS = ("notify", "statement", "shardq")


def _listen(url: str, arrivals, ready, samples: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"LISTEN {CHANNEL}")
        ready.set()
        for heard, _ in enumerate(conn.notifies(), start=1):
            arrivals.put(time.time())
            if heard >= samples:
                return


def run(url: str, samples: int, rounds: int, seed: int = 7) -> dict[str, list[float]]:
    import shardq
    from shardq.lifecycle.enqueue import Producer
    from shardq.models import NewTask

    client = shardq.connect(url)
    client.migrate()
    producer = Producer(client.store, notifier=client.notifier)
    producer.enqueue(QUEUE, b"warm")
    plain = psycopg.connect(url, autocommit=True)
    # What shardq's engine sends: its named statement and its parameters, bound the same way.
    engine = client.store.engine
    statement = engine.statements()["task_insert_many_fresh"].text

    def send(sender: str) -> None:
        if sender == "notify":
            plain.execute(f"SELECT pg_notify('{CHANNEL}', %s)", (QUEUE,), prepare=True)
        elif sender == "statement":
            params = {**engine.task_arrays([NewTask(b"x")], [uuid.uuid4()]), "queue": QUEUE, "wake": True}
            plain.execute(statement, params, prepare=True).fetchall()
        else:
            producer.enqueue(QUEUE, b"x")

    pauses = random.Random(seed)
    context = multiprocessing.get_context("spawn")
    out: dict[str, list[float]] = {sender: [] for sender in SENDERS}
    try:
        for _ in range(rounds):
            for sender in SENDERS:
                arrivals, ready = context.Queue(), context.Event()
                listener = context.Process(target=_listen, args=(url, arrivals, ready, samples))
                listener.start()
                ready.wait(30)
                for _ in range(samples):
                    time.sleep(pauses.uniform(0.3, 0.5))
                    sent = time.time()
                    send(sender)
                    out[sender].append((arrivals.get(timeout=10) - sent) * 1e3)
                listener.join(30)
    finally:
        plain.close()
        client.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.wake_floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)

    from loadtest.env import Bench

    bench = Bench.start()
    try:
        url = bench.shardq_database("wake_floor")
        times = run(url, args.samples, args.rounds)
    finally:
        bench.close()
    print(f"{'sender':10} {'p50 / p90 / max ms':>22}")
    for sender, values in times.items():
        values.sort()
        print(f"{sender:10} {statistics.median(values):8.2f} / {values[int(len(values) * 0.9)]:.2f} / {values[-1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
