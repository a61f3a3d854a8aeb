"""Running one action per session at the same moment, for tests of concurrent acks."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from shardq.client import Client
from shardq.sessions.store import TaskStore


@contextmanager
def own_stores(client: Client, n: int) -> Iterator[list[TaskStore]]:
    """``n`` stores, each on a new session of its own with the layout read; the sessions are
    closed on leaving."""
    sessions = [client.new_session() for _ in range(n)]
    try:
        stores = [TaskStore(s) for s in sessions]
        for store in stores:
            store.layout()
        yield stores
    finally:
        for session in sessions:
            session.close()


def at_once(stores: Sequence[Any], items: Sequence[Any], act: Callable[[Any, Any], object]) -> list[BaseException]:
    """Run ``act(store, item)`` for each pair, each in its own thread, all let go together by a
    barrier; returns the errors raised (empty: none)."""
    barrier = threading.Barrier(len(items))
    errors: list[BaseException] = []

    def run(store: Any, item: Any) -> None:
        try:
            barrier.wait()
            act(store, item)
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=pair) for pair in zip(stores, items, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors
