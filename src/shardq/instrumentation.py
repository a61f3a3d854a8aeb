"""Where tracing and error trackers plug in: :data:`active`, the one :class:`Instrument` installed
(:func:`install`), or None.

shardq calls an instrument at three places, and each checks :data:`active` once:

* a deferral sends (``defer``, ``defer_many`` and their async forms): :meth:`Instrument.sending`
  wraps the send and may return a carrier (string keys and values) stored in each task's envelope
  as ``"trace"``, beside ``"task"`` and ``"args"`` (raw ``bytes`` payloads are never touched);
* an app's task runs in a worker (:meth:`shardq.App.dispatch` / :meth:`~shardq.App.resolve`):
  :meth:`Instrument.running` may wrap the call, and receives the carrier stored at defer time;
* a worker is built: :meth:`Instrument.worker_events` may add a listener of the worker's events
  (:mod:`shardq.worker.events`) beside the ``on_event`` hook.

Guarantees
    * Nothing installed (the default): each place costs one module attribute read; no envelope
      key is written, no wrapper is made.
    * Several instruments (OpenTelemetry and an error tracker) compose: :func:`install` chains them
      in the order installed (the first one's ``running`` wrapper is the outermost).

Does not
    * change what a worker built before :func:`install` reports (it reads the instrument when it
      is made): install in the module that declares the app, before the worker starts.

The implementations live in :mod:`shardq.contrib.otel` and :mod:`shardq.contrib.errors`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

#: A worker's event listener: ``(event, claimed task or None, details)`` (see shardq.worker.events).
Listener = Callable[[str, Any, dict], None]
Carrier = Mapping[str, str]


class Instrument:
    """An instrument's three optional parts; the defaults do nothing. Subclass and override."""

    @contextlib.contextmanager
    def sending(self, task: str, queue: str, count: int) -> Iterator[Carrier | None]:
        """Around the send of ``count`` calls of ``task`` to ``queue``; yields the carrier to store
        with each (None: store nothing)."""
        yield None

    def running(
        self, call: Callable[[], Any], *, is_async: bool, task: str, handle: Any, carrier: Carrier | None
    ) -> Callable[[], Any]:
        """The call that runs ``handle`` (a :class:`shardq.Task`) for the app's ``task``, wrapped
        or as is. ``is_async``: ``call()`` returns a coroutine, and so must the wrapper's."""
        return call

    def worker_events(self) -> tuple[Listener, Collection[str] | None] | None:
        """A listener of a worker's events and the events it wants (None: all), or None."""
        return None


class _Chain(Instrument):
    def __init__(self, parts: list[Instrument]) -> None:
        self.parts = parts

    @contextlib.contextmanager
    def sending(self, task: str, queue: str, count: int) -> Iterator[Carrier | None]:
        with contextlib.ExitStack() as stack:
            carrier: dict[str, str] = {}
            for part in self.parts:
                part_carrier: Carrier | None = stack.enter_context(part.sending(task, queue, count))
                carrier.update(part_carrier or {})
            yield carrier or None

    def running(
        self, call: Callable[[], Any], *, is_async: bool, task: str, handle: Any, carrier: Carrier | None
    ) -> Callable[[], Any]:
        for part in reversed(self.parts):
            call = part.running(call, is_async=is_async, task=task, handle=handle, carrier=carrier)
        return call

    def worker_events(self) -> tuple[Listener, Collection[str] | None] | None:
        wanted = [w for w in (part.worker_events() for part in self.parts) if w is not None]
        if not wanted:
            return None
        if len(wanted) == 1:
            return wanted[0]
        return combine_listeners(wanted)


def combine_listeners(listeners: list[tuple[Listener, Collection[str] | None]]) -> tuple[Listener, frozenset | None]:
    """One listener calling each of ``listeners`` for the events it wants; the union of their
    events (None when any wants all)."""
    filters = [(listener, frozenset(events) if events is not None else None) for listener, events in listeners]

    def each(event: str, task: Any, details: dict) -> None:
        for listener, events in filters:
            if events is None or event in events:
                listener(event, task, details)

    union: frozenset | None = frozenset()
    for _listener, events in filters:
        union = None if events is None or union is None else union | events
    return each, union


#: The installed instrument, or None (the library checks this once at each place).
active: Instrument | None = None
_installed: list[Instrument] = []


def install(instrument: Instrument) -> None:
    """Add ``instrument`` (once: installing the same object again changes nothing)."""
    global active
    if any(part is instrument for part in _installed):
        return
    _installed.append(instrument)
    active = _installed[0] if len(_installed) == 1 else _Chain(list(_installed))


def uninstall(instrument: Instrument) -> None:
    """Remove ``instrument``; with none left, :data:`active` is None again."""
    global active
    _installed[:] = [part for part in _installed if part is not instrument]
    active = None if not _installed else _installed[0] if len(_installed) == 1 else _Chain(list(_installed))
