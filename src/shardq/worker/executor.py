"""Running handlers under the worker's concurrency limit: threads for sync handlers, one event
loop for async ones.

Both executors take claimed tasks from the fetcher (:meth:`submit`), run at most ``slots`` of them
at once, record each outcome on its entry and hand it to the settler, waking the settler only when
a claim's last outcome is in. A task whose lease ran out while it waited, or that was still waiting
when a stop was asked, is handed back instead of being started.

* :class:`ThreadExecutor`: ``slots`` threads, each running one task at a time. For sync handlers
  (and apps whose tasks are all sync): the fastest hand-off (one ``SimpleQueue`` put and get per
  task).
* :class:`LoopExecutor`: ``slots`` coroutines on one asyncio event loop (the worker's own loop
  thread, or the caller's loop for ``await client.work(...)``). Async handlers overlap while they
  await; sync tasks of a mixed app run on a pool of ``slots`` threads, so ``concurrency`` bounds
  both together. A handler that blocks the loop for ``blocked_loop_seconds`` or longer is logged
  on ``shardq.worker`` at WARNING with its task id, once per block.

Where each part lives: :mod:`.thread_executor`, :mod:`.loop_executor`, and what both share
(:class:`Outbox`, :func:`record_failure`) in :mod:`.outcomes`; what a handler or resolver must
offer in :mod:`.contract`. This module gathers them under their historical import path.
"""

from __future__ import annotations

from .contract import Resolver
from .loop_executor import LoopExecutor
from .outcomes import Outbox, record_failure
from .thread_executor import Extend, ThreadExecutor

__all__ = ["Extend", "LoopExecutor", "Outbox", "Resolver", "ThreadExecutor", "record_failure"]
