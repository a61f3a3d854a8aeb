"""The task API (public): tasks declared as Python functions, called with arguments, run by name.

:mod:`.application` (:class:`App`), :mod:`.deferral` (a call's options, the task handle and
context), :mod:`.workflow` (workflows built from app tasks) and :mod:`.loading` (``module:attr``
specs). See :mod:`shardq.app.application` for the guarantees.
"""

from __future__ import annotations

from shardq.app.application import DEFAULT_QUEUE, App, AppTask, load_app
from shardq.app.deferral import CALL_OPTIONS, Deferral, TaskContext

__all__ = ["CALL_OPTIONS", "DEFAULT_QUEUE", "App", "AppTask", "Deferral", "TaskContext", "load_app"]
