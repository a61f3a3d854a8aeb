"""The promotion backstop: due scheduled tasks become ready even in queues nobody polls.

Consumers promote the due scheduled tasks of the queues they claim from, as they claim (see
:mod:`shardq.lifecycle.claim`). A queue no consumer polls right now would keep its due tasks in the
scheduled range, where stats count them as ready but no claim sees them; the reaper's pass runs
this backstop so they become ready within one reaper interval.

Guarantees
    * Bounded work: at most ``max_batches`` statements of ``batch`` rows per (bucket, queue).
    * Safe beside consumers and other reapers promoting the same rows (each statement skips rows
      another holds).
"""

from __future__ import annotations

from collections.abc import Iterable

from shardq.maintenance.batches import until_short_batch
from shardq.sessions.store import TaskStore


def promote_due(
    store: TaskStore, buckets: Iterable[int], queues: Iterable[str], *, batch: int, max_batches: int
) -> int:
    """Make the due scheduled tasks of ``queues`` in ``buckets`` ready; returns how many."""
    names = list(queues)
    promoted = 0
    for bucket in buckets:
        for queue in names:

            def promote(limit: int, bucket: int = bucket, queue: str = queue) -> int:
                return store.task_promote_due(bucket, queue, limit)

            promoted += until_short_batch(promote, batch, max_batches=max_batches)
    return promoted
