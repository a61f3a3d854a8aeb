"""The one way shardq changes many rows: in bounded batches until a batch comes back short.

Every prune and purge (old counter rows, old periodic slots, a queue's dead letters) and the
promotion backstop is a statement that changes at most ``limit`` rows and says how many it
changed; :func:`until_short_batch` repeats it.

Guarantees
    * Each statement touches at most ``batch`` rows, so no batch holds locks or builds a
      transaction the size of the table, and many processes may run the same loop at once.
    * Stops at the first short batch (fewer than ``batch`` rows): nothing was left at that moment.

Does not
    * promise that nothing is left when it returns: rows that became old meanwhile, or, with
      ``max_batches``, the rest beyond that many batches, wait for the next call.
"""

from __future__ import annotations

from collections.abc import Callable


def until_short_batch(statement: Callable[[int], int], batch: int, *, max_batches: int | None = None) -> int:
    """Call ``statement(batch)`` (which changes at most ``batch`` rows and returns how many it
    did) until it returns fewer than ``batch``, or ``max_batches`` times (default: no bound).
    Returns the total changed."""
    total = 0
    done = 0
    while max_batches is None or done < max_batches:
        changed = statement(batch)
        total += changed
        done += 1
        if changed < batch:
            break
    return total
