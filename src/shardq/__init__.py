"""shardq: a task queue stored in SQL tables, hash-sharded on CockroachDB, bucketed on PostgreSQL.

Start with :func:`connect` (asyncio: :func:`connect_async`); see the README for the guarantees and the command line.
"""

from .app import App, AppTask, TaskContext
from .client import Client, connect
from .client_async import AsyncClient, connect_async
from .consumer import Consumer, Task
from .deferral import TaskHandle
from .errors import (
    AmbiguousResult,
    DatabaseError,
    DatabaseUnavailable,
    InvalidHandler,
    InvalidInput,
    LeaseLost,
    LockTimeout,
    NotMigrated,
    OutcomeNotKept,
    Permanent,
    QueuePaused,
    ResizeInProgress,
    ResultNotStorable,
    Retry,
    SerializationConflict,
    ShardLayoutChanged,
    ShardqError,
    StatementTimeout,
    TaskCancelled,
    TaskDead,
    TaskFailed,
    TaskNotFound,
    WaitTimeout,
)
from .history_records import TaskStatus
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
    "OutcomeNotKept",
    "Permanent",
    "QueuePaused",
    "QueueSettings",
    "ReapResult",
    "Reaper",
    "ReaperConfig",
    "ResizeInProgress",
    "ResizeResult",
    "ResultNotStorable",
    "Retry",
    "SerializationConflict",
    "ShardLayoutChanged",
    "ShardqError",
    "StatementTimeout",
    "Stats",
    "Task",
    "TaskCancelled",
    "TaskContext",
    "TaskDead",
    "TaskFailed",
    "TaskHandle",
    "TaskNotFound",
    "TaskStatus",
    "WaitTimeout",
    "Worker",
    "WorkerConfig",
    "WorkerTotals",
    "connect",
    "connect_async",
]
