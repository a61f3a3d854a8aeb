"""shardq: a task queue stored in SQL tables, hash-sharded on CockroachDB, bucketed on PostgreSQL.

Start with :func:`connect` (asyncio: :func:`connect_async`); see the README for the guarantees and the command line.
"""

from shardq.app.application import App, AppTask
from shardq.app.deferral import TaskContext, TaskHandle
from shardq.client import Client, connect
from shardq.client_async import AsyncClient, connect_async
from shardq.errors import (
    AmbiguousResult,
    DatabaseError,
    DatabaseUnavailable,
    InvalidHandler,
    InvalidInput,
    LeaseLost,
    LockTimeout,
    NotMigrated,
    OutcomeNotKept,
    Parked,
    Permanent,
    QueuePaused,
    ResizeInProgress,
    ResultNotStorable,
    Retry,
    SerializationConflict,
    ShardLayoutChanged,
    ShardqError,
    SignalTimeout,
    StatementTimeout,
    StepMismatch,
    StepNotStorable,
    TaskCancelled,
    TaskDead,
    TaskFailed,
    TaskNotFound,
    TaskNotLive,
    WaitTimeout,
)
from shardq.lifecycle.claim import Consumer
from shardq.maintenance.reaper import Reaper, ReaperConfig, ReapResult
from shardq.models.history import TaskStatus
from shardq.models.queues import QueueSettings
from shardq.models.stats import Stats
from shardq.models.tasks import EnqueueResult, NewTask, Task
from shardq.resize.results import ResizeResult
from shardq.worker.config import WorkerConfig, WorkerTotals
from shardq.worker.runtime import Worker

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
    "Parked",
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
    "SignalTimeout",
    "StatementTimeout",
    "Stats",
    "StepMismatch",
    "StepNotStorable",
    "Task",
    "TaskCancelled",
    "TaskContext",
    "TaskDead",
    "TaskFailed",
    "TaskHandle",
    "TaskNotFound",
    "TaskNotLive",
    "TaskStatus",
    "WaitTimeout",
    "Worker",
    "WorkerConfig",
    "WorkerTotals",
    "connect",
    "connect_async",
]
