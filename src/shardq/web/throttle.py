"""How fast one client address may guess the token: :class:`Throttle`.

Guarantees:

* Each address gets :data:`FREE_FAILURES` wrong tokens (at ``/login`` or as a Bearer header)
  without delay; after that it must wait before its next attempt, 1 s after the next failure,
  then 2 s, 4 s, … up to :data:`DELAY_MAX_SECONDS`. While it waits, every token it presents
  (right or wrong) is refused with 429 and ``Retry-After`` without being compared, so guessing
  is held to about one attempt a minute after the first few (it was ~1,450 a second).
* A correct token resets the address's count; an address that stays away for
  :data:`FORGET_AFTER_SECONDS` after its last failure starts afresh.
* At most :data:`ADDRESSES_MAX` addresses are remembered (the least recently failing go first),
  so a flood of addresses costs bounded memory.

Does not:

* Tell addresses apart behind a reverse proxy (they all share the proxy's): there the limit is
  shared by everyone, which still bounds guessing.
* Count requests that present no token at all, or an unknown session cookie (a session id is
  random, 256 bits: not worth guessing).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

FREE_FAILURES = 5
DELAY_FIRST_SECONDS = 1.0
DELAY_MAX_SECONDS = 60.0
FORGET_AFTER_SECONDS = 15 * 60.0
ADDRESSES_MAX = 10_000


@dataclass
class _Record:
    failures: int
    last_failure: float
    blocked_until: float


class Throttle:
    """Failed token attempts per client address (thread-safe); see the module doc."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        free: int = FREE_FAILURES,
        first_delay: float = DELAY_FIRST_SECONDS,
        max_delay: float = DELAY_MAX_SECONDS,
        forget_after: float = FORGET_AFTER_SECONDS,
        limit: int = ADDRESSES_MAX,
    ) -> None:
        self._records: OrderedDict[str, _Record] = OrderedDict()
        self._lock = threading.Lock()
        self._clock = clock
        self._free = free
        self._first_delay = first_delay
        self._max_delay = max_delay
        self._forget_after = forget_after
        self._limit = limit

    def _live(self, address: str, now: float) -> _Record | None:
        record = self._records.get(address)
        if record is not None and now - record.last_failure > self._forget_after and now >= record.blocked_until:
            del self._records[address]
            return None
        return record

    def wait_seconds(self, address: str) -> int:
        """Whole seconds ``address`` must still wait before presenting a token (0: it may now)."""
        now = self._clock()
        with self._lock:
            record = self._live(address, now)
            if record is None or record.blocked_until <= now:
                return 0
            return max(1, math.ceil(record.blocked_until - now))

    def failed(self, address: str) -> None:
        """``address`` presented a wrong token."""
        now = self._clock()
        with self._lock:
            record = self._live(address, now) or _Record(0, now, now)
            record.failures += 1
            record.last_failure = now
            over = record.failures - self._free
            if over > 0:
                record.blocked_until = now + min(self._max_delay, self._first_delay * 2 ** min(over - 1, 32))
            self._records[address] = record
            self._records.move_to_end(address)
            while len(self._records) > self._limit:
                self._records.popitem(last=False)

    def succeeded(self, address: str) -> None:
        """``address`` presented the right token: its failures are forgotten."""
        with self._lock:
            self._records.pop(address, None)
