"""Per-queue shares of a worker's handlers: ``--share emails=8 --share reports=2``.

A worker serving several queues runs one pool of handlers; without shares, whichever queue has the
larger backlog fills every handler and every place in the prefetch buffer, and the other queues'
tasks wait behind it. A *share* gives a queue a fixed number of the worker's handlers of its own: a
**lane**, with its own hand-off queue, its own handlers and its own room for claims. The queues
without a share form one more lane with the rest of the handlers (``concurrency`` minus the
shares). A flood in one lane then takes only that lane's handlers and buffer; the fetcher asks for
each queue only as much as its lane has room for, so the other lanes' tasks are claimed and start
as before.

The split is exact and fixed: a lane never runs more than its handlers, and never lends them to
another lane (an idle share stays idle while another queue floods). That is the simple, predictable
rule; borrowing idle handlers would let a flood take them back for the length of its tasks.

A worker without shares has one lane of every handler and behaves exactly as before (nothing here
runs for it). Nothing here touches the database."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from shardq import validation
from shardq.errors import InvalidInput

#: the most handlers one share may name (the worker's concurrency cap)
SHARE_MAX = 1024


def normalise(shares: Mapping[str, int] | Iterable[tuple[str, int]] | None) -> dict[str, int]:
    """Shares as a dict (from a mapping or (queue, handlers) pairs), each checked: a queue name and
    a whole number of handlers from 1; a queue named twice is refused."""
    if shares is None:
        return {}
    pairs = list(shares.items()) if isinstance(shares, Mapping) else list(shares)
    found: dict[str, int] = {}
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise InvalidInput("a share is a (queue, handlers) pair")
        queue, handlers = pair
        validation.queue_name(queue)
        if queue in found:
            raise InvalidInput(f"queue {queue!r} has two shares")
        found[queue] = validation.positive_int(handlers, f"the share of queue {queue!r}", maximum=SHARE_MAX)
    return found


def parse(text: str) -> tuple[str, int]:
    """``emails=8`` as ``("emails", 8)`` (the CLI's ``--share``)."""
    queue, sep, count = text.partition("=")
    if not sep or not queue.strip() or not count.strip().isdigit():
        raise InvalidInput(f"a share is QUEUE=HANDLERS, e.g. emails=8, not {text!r}")
    return queue.strip(), int(count)


@dataclass(frozen=True)
class Lanes:
    """How a worker's handlers are split: ``sizes[i]`` handlers for the queues of lane ``i``; the
    handler slots ``0 .. total - 1`` are numbered lane after lane."""

    sizes: tuple[int, ...]
    #: the lane of each queue the worker serves
    of_queue: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.sizes)

    def lane_of_slot(self, slot: int) -> int:
        for lane, start in enumerate(self.starts()):
            if slot < start + self.sizes[lane]:
                return lane
        raise IndexError(slot)

    def starts(self) -> list[int]:
        starts, at = [], 0
        for size in self.sizes:
            starts.append(at)
            at += size
        return starts

    def prefetch(self, lane: int, prefetch: int) -> int:
        """A lane's part of the worker's prefetch buffer: in proportion to its handlers."""
        return math.ceil(prefetch * self.sizes[lane] / self.total)


def plan(queues: Iterable[str], concurrency: int, shares: Mapping[str, int]) -> Lanes | None:
    """The lanes for ``shares`` (None: no shares, one pool as before). The shares may name only
    queues the worker serves and add up to at most ``concurrency``; the queues without a share get
    the rest, which must then be at least one handler. When every queue has a share the worker runs
    exactly the shares' handlers."""
    if not shares:
        return None
    served = list(dict.fromkeys(queues))
    unknown = sorted(set(shares) - set(served))
    if unknown:
        raise InvalidInput(f"a share names a queue this worker does not serve: {', '.join(unknown)}")
    total = sum(shares.values())
    if total > concurrency:
        raise InvalidInput(f"the shares add up to {total} handlers, more than the worker's concurrency {concurrency}")
    rest = [q for q in served if q not in shares]
    shared = [q for q in served if q in shares]
    if rest and total >= concurrency:
        raise InvalidInput(
            f"the shares take all {concurrency} handlers and leave none for "
            f"{', '.join(rest)} (raise the concurrency or give them a share)"
        )
    of_queue = {q: i for i, q in enumerate(shared)}
    sizes = [shares[q] for q in shared]
    if rest:
        of_queue.update({q: len(sizes) for q in rest})
        sizes.append(concurrency - total)
    return Lanes(tuple(sizes), of_queue)
