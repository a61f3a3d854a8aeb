"""The loop every background service runs under: it only schedules.

A service's work is its ``run_once`` (a pass tests call directly); :func:`repeat` calls it every
``every`` seconds, jittered ±20 % so a fleet's services do not run in lockstep, until ``stop`` is
set.

Guarantees
    * Never dies of a database error: a failed pass (lost connection, cancelled statement, a
      resize that dropped the shard column, anything the database refused) is logged, at WARNING
      when the error is transient and ERROR otherwise, and retried with exponential backoff from
      ``every`` up to ``retry_max`` seconds (jittered), until a pass succeeds.
    * Returns soon after ``stop`` is set: every pause is a wait on ``stop``.

Does not
    * catch anything but :class:`shardq.errors.DatabaseError`: a bug in a pass ends the loop.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

from shardq import backoff
from shardq.errors import DatabaseError

JITTER = 0.2


def repeat(
    run_once: Callable[[], object],
    stop: threading.Event,
    *,
    every: float,
    retry_max: float,
    what: str,
    log: logging.Logger,
    rng: random.Random | None = None,
    first_wait: float = 0.0,
) -> None:
    """Call ``run_once`` after ``first_wait`` seconds, then every ``every`` seconds (±20 %), until
    ``stop`` is set; a failed pass is logged as "``what`` failed (error); retrying in N s" and
    retried with backoff (see the module docstring)."""
    rng = rng or random.Random()
    failures = 0
    wait = first_wait
    while not stop.wait(wait):
        try:
            run_once()
        except DatabaseError as exc:
            failures += 1
            wait = backoff.idle_sleep(failures, minimum=every, maximum=max(every, retry_max), rng=rng)
            log.log(
                logging.WARNING if exc.transient else logging.ERROR,
                "%s failed (%s); retrying in %.1fs",
                what,
                exc,
                wait,
            )
            continue
        failures = 0
        wait = every * rng.uniform(1.0 - JITTER, 1.0 + JITTER)
