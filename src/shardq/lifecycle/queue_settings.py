"""Per-queue settings as one thread sees them: read through that thread's own store, cached.

Each part of a worker (fetcher, settler, lease keeper) and the reaper holds its own
:class:`QueueSettingsCache` over its own session, so no session is shared between threads. A
queue with no row in ``shardq_queues`` gets :class:`~shardq.models.queues.QueueSettings`' defaults,
which are the only place those defaults are written in Python."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from shardq import validation
from shardq.models.queues import QueueSettings
from shardq.sessions.store import TaskStore

#: How long settings read from the table are used before they are read again. A change made with
#: ``shardq queue set`` reaches running workers within this long (at once after an empty round).
SETTINGS_REFRESH_SECONDS = 30.0


class QueueSettingsCache:
    """Settings of ``queues`` (every queue asked about, when None) read through ``store``.

    ``lease_override`` (seconds) replaces every queue's lease (``shardq work --lease``). Not
    thread-safe: one cache per thread, like its store's session."""

    def __init__(
        self,
        store: TaskStore,
        queues: Iterable[str] | None = None,
        *,
        lease_override: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.queues = list(queues) if queues is not None else None
        self.lease_override = validation.lease_seconds(lease_override) if lease_override is not None else None
        self._clock = clock
        self._settings: dict[str, QueueSettings] = {}
        self._read_at = -SETTINGS_REFRESH_SECONDS

    def settings(self, queue: str) -> QueueSettings:
        """The queue's settings, read again once they are ``SETTINGS_REFRESH_SECONDS`` old."""
        now = self._clock()
        if now - self._read_at >= SETTINGS_REFRESH_SECONDS or queue not in self._settings:
            known = {s.name: s for s in self.store.queue_list()}
            wanted = set(self.queues or ()) | set(self._settings) | {queue}
            self._settings = {q: known.get(q, QueueSettings(q)) for q in wanted}
            self._read_at = now
        return self._settings[queue]

    def lease_for(self, queue: str) -> float:
        """Seconds a claim of ``queue`` leases its tasks for: the override, else the queue's
        setting, never under ``LEASE_MIN_SECONDS`` (the table itself only checks > 0, and a
        hand-written shorter lease would expire before its task could be acked)."""
        return self.lease_override or max(validation.LEASE_MIN_SECONDS, self.settings(queue).lease_seconds)

    def age(self) -> float:
        """Seconds since the settings were last read."""
        return self._clock() - self._read_at

    def expire(self) -> None:
        """Read the table again on the next call (after an empty round: a cheap moment)."""
        self._read_at = -SETTINGS_REFRESH_SECONDS
