"""What the settler records for queues that keep finished tasks (:mod:`shardq.history`): the
history row of an acked task, and the split of a step's items into the queues that keep and those
that do not. A queue that keeps nothing is settled with exactly the statements it had before:
no extra statement, no extra parameter, no payload decoded."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from ..arguments import task_name_of
from ..history_records import Finished
from .inflight import InFlight

T = TypeVar("T")


def split_kept(items: Sequence[T], queue_of: Callable[[T], str], keeps: Callable[[str], bool]) -> tuple[list[T], list[T]]:
    """(items of queues that keep nothing, items of queues that keep finished tasks); asks
    ``keeps`` once per queue."""
    answers: dict[str, bool] = {}
    plain: list[T] = []
    kept: list[T] = []
    for item in items:
        queue = queue_of(item)
        keep = answers.get(queue)
        if keep is None:
            keep = answers[queue] = keeps(queue)
        (kept if keep else plain).append(item)
    return plain, kept


def succeeded(o: InFlight) -> Finished:
    """The history row of a task whose handler returned (``o.result``: its encoded return value,
    for a task that keeps one)."""
    c = o.claimed
    return Finished(c.key.id, c.key.queue, "succeeded", task_name_of(c.payload), c.created_at, c.attempt,
                    o.seconds, None, o.result)
