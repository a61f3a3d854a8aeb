"""Kill hooks for crash tests: SIGKILL the current process at a chosen moment.

``SHARDQ_REL_KILL=<moment>:<n>`` picks the moment; ``n`` counts occurrences (1 = the first):

    handler:n        inside the n-th handler execution, after it recorded its start
    claim-during:n   a random 0-3 ms after the n-th claim statement was sent (it may or may not commit)
    claim-after:n    right after the n-th claim that leased tasks committed (none started)
    ack-before:n     right before the n-th ack of finished tasks is sent (handlers done, nothing acked)
    ack-during:n     a random 0-3 ms after the n-th ack was sent
    ack-after:n      right after the n-th ack committed
    take-before:n    right before the worker runs the steps its n-th ack took (shardq.worker.handoff):
                     the ack committed, the next steps of chains are leased to this process, none ran
    reap-during:n    (reaper) a random 0-3 ms after the n-th statement returning expired leases was sent
    reap-after:n     (reaper) right after the n-th such statement committed

``handler`` needs nothing but the handler in :mod:`crash_handlers`, so it works with the real
``shardq`` console script. The statement moments patch :class:`shardq.sessions.store.TaskStore` methods in
the process, so that process is started as ``python -m tests.reliability.chaos <shardq args>``,
which installs the patches and then runs the real ``shardq`` command line unchanged.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading

_counts: dict[str, int] = {}
_lock = threading.Lock()


def _spec() -> tuple[str, int] | None:
    text = os.environ.get("SHARDQ_REL_KILL")
    if not text:
        return None
    moment, _, n = text.partition(":")
    return moment, int(n or 1)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _due(moment: str) -> bool:
    """Count one occurrence of ``moment``; true when it is the one to die at."""
    spec = _spec()
    if spec is None or spec[0] != moment:
        return False
    with _lock:
        _counts[moment] = _counts.get(moment, 0) + 1
        return _counts[moment] == spec[1]


def _die_soon() -> None:
    timer = threading.Timer(random.uniform(0.0, 0.003), die)
    timer.daemon = True
    timer.start()


def on_handler() -> None:
    if _due("handler"):
        die()


def install() -> None:
    """Patch the statement wrappers the chosen moment needs."""
    spec = _spec()
    if spec is None:
        return
    from shardq.sessions.store import TaskStore

    moment = spec[0]
    family, _, when = moment.partition("-")
    # The store methods a worker and a reaper call for each family, on either engine: a worker's
    # claim is TaskStore.claim (one statement: a whole round on PostgreSQL, a bucket on
    # CockroachDB); acks are whole claims by range or keys one by one.
    methods = {"claim": ("claim",), "ack": ("task_ack_many", "task_ack_claims"), "reap": ("task_retry_many",)}.get(
        family, ()
    )
    for method in methods:
        setattr(TaskStore, method, _wrapped(getattr(TaskStore, method), moment, family, when))
    if family == "take":
        from shardq.worker.handoff import Handoff

        hand_over = Handoff.hand_over

        def dying_hand_over(self, store, settings, offer):
            if offer is not None and offer.tasks and _due(moment):
                die()
            return hand_over(self, store, settings, offer)

        Handoff.hand_over = dying_hand_over  # type: ignore[method-assign]


def _wrapped(original, moment: str, family: str, when: str):
    def wrapped(self, *args, **kwargs):
        items = args[0] if family in ("ack", "reap") and args else None
        counts = family == "claim" or bool(items)
        if counts and when == "before" and _due(moment):
            die()
        if counts and when == "during" and _due(moment):
            _die_soon()
        result = original(self, *args, **kwargs)
        if family == "claim" and when == "after" and result and _due(moment):
            die()
        if family != "claim" and counts and when == "after" and _due(moment):
            die()
        return result

    return wrapped


def main() -> None:
    install()
    from shardq.cli.main import main as shardq_main

    sys.argv[0] = "shardq"
    shardq_main()


if __name__ == "__main__":
    from tests.reliability import chaos  # the same module object crash_handlers imports

    chaos.main()
