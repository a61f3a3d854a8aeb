"""The worker and Python's garbage collector: how often the youngest generation is collected
while a worker runs.

CPython collects its youngest generation once allocations of container objects exceed
deallocations by its first threshold (700 by default). A worker holds up to ``concurrency +
prefetch + ack_batch`` leased tasks, each as several such objects (its row, its ids, its claimed
task, its in-flight entry), and an ack of hundreds of workflow steps takes as many next steps at
once (:mod:`.taking`). At the default threshold every such batch sets off collections while
hundreds of tasks are in flight: they survive, are promoted, and the growing oldest generation
sets off full collections of the whole heap, which hold the GIL for tens of milliseconds. A
plain task's objects mostly die before the count reaches the threshold; a chain step's did not
(figures: docs/workflows.md, "Costs").

While at least one worker of the process runs (``gc_tuning``, on by default), the youngest
generation's threshold is at least :data:`YOUNG_PER_HELD_TASK` times the most tasks the worker
may hold, so a collection comes once the worker has turned its whole in-flight set over many
times, and what is in flight then is a small part of what it looks at.

Guarantees: the threshold is only ever raised, never lowered (a process that set a higher one,
or turned automatic collection off with ``gc.set_threshold(0)``, keeps its setting); the older
generations' thresholds are kept; when the last such worker of the process stops, the previous
threshold comes back, unless something else changed it meanwhile (then that is kept). Does not:
disable the collector, collect anything itself, or freeze objects.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

from shardq.worker.config import WorkerConfig

#: the youngest generation's threshold per task a worker may hold
YOUNG_PER_HELD_TASK = 100

_lock = threading.Lock()
_running = 0
_previous: int | None = None  # the threshold before the first worker raised it
_raised_to: int | None = None  # what the workers set it to (None: not raised)


def young_threshold(config: WorkerConfig) -> int:
    """The youngest generation's threshold a worker with ``config`` runs under, at least."""
    held = config.concurrency + config.effective_prefetch + config.ack_batch
    return YOUNG_PER_HELD_TASK * held


@contextlib.contextmanager
def paced(config: WorkerConfig) -> Iterator[None]:
    """Run the body with the youngest generation's threshold raised for ``config`` (see the
    module documentation); a no-op with ``config.gc_tuning`` off."""
    if not config.gc_tuning:
        yield
        return
    _enter(young_threshold(config))
    try:
        yield
    finally:
        _leave()


def _enter(wanted: int) -> None:
    global _running, _previous, _raised_to
    with _lock:
        young, *older = gc.get_threshold()
        if _running == 0:
            _previous, _raised_to = young, None
        _running += 1
        if young != 0 and young < wanted:
            gc.set_threshold(wanted, *older)
            _raised_to = wanted


def _leave() -> None:
    global _running, _previous, _raised_to
    with _lock:
        _running -= 1
        if _running > 0:
            return
        young, *older = gc.get_threshold()
        if _raised_to is not None and young == _raised_to and _previous is not None:
            gc.set_threshold(_previous, *older)
        _previous = _raised_to = None
