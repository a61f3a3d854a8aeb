"""What the worker accepts to run: a handler of one task, or a resolver that picks the function per
task, and the larger contract an application (:class:`shardq.App`) offers on top. Declared here
once; the worker asks ``isinstance`` of these, never ``getattr`` of single names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from shardq.models.tasks import Task

if TYPE_CHECKING:
    from shardq.maintenance.periodic import Schedule

#: A function of one task, sync or ``async def``.
Handler = Callable[[Task], Any]


@runtime_checkable
class Resolver(Protocol):
    """A handler that picks the function per task (an app dispatching by task name):
    ``resolve(task)`` returns a zero-argument callable, whether it returns an awaitable, and the
    task's own execution timeout (None: the queue's or the worker's applies). ``has_async`` says
    whether any of its functions is async (then the loop executor runs it)."""

    @property
    def has_async(self) -> bool: ...

    def resolve(self, task: Task) -> tuple[Callable[[], Any], bool, float | None]: ...


@runtime_checkable
class Application(Resolver, Protocol):
    """A resolver that is a whole application (:class:`shardq.App`): besides ``resolve`` and
    ``has_async``, its periodic ``schedules`` (by name; every worker running it takes their due
    slots), whether any of its tasks declares its own timeout (``has_timeouts``; else the thread
    executor skips the per-task resolve), and ``dispatch(task)``, which runs a sync task's
    function directly (the thread executor's fast path)."""

    @property
    def schedules(self) -> Mapping[str, Schedule]: ...

    @property
    def has_timeouts(self) -> bool: ...

    def dispatch(self, task: Task) -> object: ...
