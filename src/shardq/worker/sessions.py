"""One database session per thread: how a worker's parts get theirs."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..db import Session
from ..store import TaskStore


class SessionPerThread:
    """Hands each thread its own :class:`TaskStore` over a session made by ``factory`` the first
    time that thread asks, and closes them all at the end. A session is never used by a thread
    other than the one it was made for: parts pass work to each other, never sessions."""

    def __init__(self, factory: Callable[[], Session]) -> None:
        self.factory = factory
        self._local = threading.local()
        self._lock = threading.Lock()
        self._sessions: list[Session] = []
        #: set once the layout is known, so stores made later point CockroachDB statements at
        #: the shard column from their first statement
        self.discover_layout = False

    def store(self) -> TaskStore:
        """This thread's store (made now on first use)."""
        store = getattr(self._local, "store", None)
        if store is None:
            session = self.factory()
            with self._lock:
                self._sessions.append(session)
            store = TaskStore(session)
            if self.discover_layout:
                store.layout()
            self._local.store = store
        return store

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
