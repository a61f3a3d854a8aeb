"""One database session per thread: how a worker's parts, and a :class:`shardq.Client`'s callers,
get theirs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from shardq.errors import DatabaseError
from shardq.sessions.session import Session
from shardq.sessions.store import TaskStore

log = logging.getLogger("shardq.client")


class SessionPerThread:
    """Hands each thread its own :class:`TaskStore` over a session made by ``factory`` the first
    time that thread asks, and closes them all at the end. A session is never used by a thread
    other than the one it was made for: parts pass work to each other, never sessions."""

    def __init__(self, factory: Callable[[], Session]) -> None:
        self.factory = factory
        self._local = threading.local()
        self._lock = threading.Lock()
        self._stores: list[TaskStore] = []
        #: set once the layout is known, so stores made later point CockroachDB statements at
        #: the shard column from their first statement
        self.discover_layout = False

    def store(self) -> TaskStore:
        """This thread's store (made now on first use)."""
        store = getattr(self._local, "store", None)
        if store is None:
            store = TaskStore(self.factory())
            with self._lock:
                self._stores.append(store)
            if self.discover_layout:
                store.layout()
            self._local.store = store
        return store

    def close(self) -> None:
        """Write the enqueue counts the stores still hold (see :meth:`TaskStore.count_enqueued`;
        failures only logged), then close every session. No thread may use a store meanwhile."""
        with self._lock:
            stores, self._stores = self._stores, []
        for store in stores:
            try:
                store.flush_enqueue_counts()
            except DatabaseError as exc:  # counters only; closing must not fail on them
                log.debug("could not record enqueue counts at close: %s", exc)
        for store in stores:
            store.session.close()
