"""shardq's vocabulary: values every floor may name, no I/O (the public :mod:`shardq.models.tasks`).

:mod:`.tasks` (task states, keys, claimed tasks, options, dead tasks), :mod:`.queues` (queue
settings, rate tokens), :mod:`.layout` (the shard layout, schema-change jobs), :mod:`.leases`
(fenced keys, whole claims, expired leases), :mod:`.history` (what a finished or failed attempt
writes and what a caller reads back), :mod:`.stats` (what ``shardq stats`` reports) and
:mod:`.workflow_graph` (a workflow's graph, checked without a database).
"""

from __future__ import annotations

from shardq.models.layout import SchemaJob, ShardLayout
from shardq.models.queues import QueueSettings, RateTokens
from shardq.models.stats import COUNTS, Accuracy, Activity, BucketDepth, QueueStats, Stats
from shardq.models.tasks import (
    MAX_ATTEMPTS_DEFAULT,
    RANK_BACKLOG,
    RANK_SCHEDULED,
    ClaimedTask,
    DeadTask,
    EnqueueResult,
    NewTask,
    Task,
    TaskInfo,
    TaskKey,
    TaskOptions,
    TaskState,
)
from shardq.validation import PRIORITY_MAX, PRIORITY_MIN

__all__ = [
    "COUNTS",
    "MAX_ATTEMPTS_DEFAULT",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "RANK_BACKLOG",
    "RANK_SCHEDULED",
    "Accuracy",
    "Activity",
    "BucketDepth",
    "ClaimedTask",
    "DeadTask",
    "EnqueueResult",
    "NewTask",
    "QueueSettings",
    "QueueStats",
    "RateTokens",
    "SchemaJob",
    "ShardLayout",
    "Stats",
    "Task",
    "TaskInfo",
    "TaskKey",
    "TaskOptions",
    "TaskState",
]
