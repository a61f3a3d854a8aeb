"""shardq: a task queue stored in SQL tables, hash-sharded on CockroachDB, bucketed on PostgreSQL.

Start with :func:`connect` (asyncio: :func:`connect_async`); see the README for the guarantees and the command line.
"""

from .app import App, AppTask, TaskContext
from .client import Client, connect
from .client_async import AsyncClient, connect_async
from .consumer import Consumer, Task
from .errors import (
    AmbiguousResult,
    DatabaseError,
    DatabaseUnavailable,
    InvalidHandler,
    InvalidInput,
    LeaseLost,
    LockTimeout,
    NotMigrated,
    Permanent,
    QueuePaused,
    ResizeInProgress,
    Retry,
    SerializationConflict,
    ShardLayoutChanged,
    ShardqError,
    StatementTimeout,
    TaskNotFound,
)
from .models import EnqueueResult, NewTask, QueueSettings, ResizeResult, Stats
from .reaper import Reaper, ReaperConfig, ReapResult
from .worker import Worker, WorkerConfig, WorkerTotals

__version__ = "0.1.0"

__all__ = [
    "AmbiguousResult",
    "App",
    "AppTask",
    "AsyncClient",
    "Client",
    "Consumer",
    "DatabaseError",
    "DatabaseUnavailable",
    "EnqueueResult",
    "InvalidHandler",
    "InvalidInput",
    "LeaseLost",
    "LockTimeout",
    "NewTask",
    "NotMigrated",
    "Permanent",
    "QueuePaused",
    "QueueSettings",
    "ReapResult",
    "Reaper",
    "ReaperConfig",
    "ResizeInProgress",
    "ResizeResult",
    "Retry",
    "SerializationConflict",
    "ShardLayoutChanged",
    "ShardqError",
    "StatementTimeout",
    "Stats",
    "Task",
    "TaskContext",
    "TaskNotFound",
    "Worker",
    "WorkerConfig",
    "WorkerTotals",
    "connect",
    "connect_async",
]
