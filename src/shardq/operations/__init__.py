"""Operations: every named statement shardq sends that both engines send the same way, written
once as a plan (:mod:`shardq.plans`) that the sync and the asyncio session run, by concern:

* :mod:`.tasks` — layout, enqueue, exclusive keys, cancel, settling by fenced key;
* :mod:`.queues` — queue settings, wake-ups, flow control's slots and token buckets;
* :mod:`.stats` — the snapshot's reads, the activity counters, :class:`EnqueueCounts`;
* :mod:`.records` — periodic slots and dead letters.

What differs per engine (claim, ack, reaping, depth, counts, layout discovery …) is an operation
of the session's :class:`~shardq.engine.Engine`, reached the same way. Plans are re-exported here,
so callers write ``operations.task_insert_many(…)``. Spark's ledger and writer and the resize
modules keep the plans of their own statements beside their logic.
"""

from __future__ import annotations

from .queues import (
    QUEUE_FIELDS,
    flow_slots_add,
    flow_slots_extend,
    flow_slots_hold,
    flow_slots_release,
    flow_slots_take,
    flow_slots_trim,
    flow_tokens_drop,
    flow_tokens_reset,
    flow_tokens_spend,
    flow_tokens_take,
    flow_usage,
    queue_ensure,
    queue_get,
    queue_list,
    queue_notify,
    queue_update,
)
from .records import (
    dead_get,
    dead_ids_page,
    dead_list,
    dead_list_after,
    dead_purge_batch,
    dead_requeue_ids,
    periodic_last_slots,
    periodic_slot_take,
    periodic_slots_prune,
)
from .stats import (
    ACTIVITY_ROWS_PER_MINUTE,
    ENQUEUE_COUNT_SECONDS,
    EnqueueCounts,
    stats_add_many,
    stats_dead_count,
    stats_depth,
    stats_now,
    stats_prune,
    stats_snapshot,
    stats_window,
)
from .tasks import (
    CancelledTask,
    exclusive_keys_lock,
    layout,
    sweep_turns_take,
    task_backlog_release,
    task_backlog_supersede,
    task_bury_many,
    task_cancel_many,
    task_exclusive_active,
    task_exclusive_keys_by_id,
    task_extend_many,
    task_get,
    task_insert_backlog_many,
    task_insert_many,
    task_release_many,
    task_retry_many,
)

__all__ = [
    "ACTIVITY_ROWS_PER_MINUTE",
    "ENQUEUE_COUNT_SECONDS",
    "QUEUE_FIELDS",
    "CancelledTask",
    "EnqueueCounts",
    "dead_get",
    "dead_ids_page",
    "dead_list",
    "dead_list_after",
    "dead_purge_batch",
    "dead_requeue_ids",
    "exclusive_keys_lock",
    "flow_slots_add",
    "flow_slots_extend",
    "flow_slots_hold",
    "flow_slots_release",
    "flow_slots_take",
    "flow_slots_trim",
    "flow_tokens_drop",
    "flow_tokens_reset",
    "flow_tokens_spend",
    "flow_tokens_take",
    "flow_usage",
    "layout",
    "periodic_last_slots",
    "periodic_slot_take",
    "periodic_slots_prune",
    "queue_ensure",
    "queue_get",
    "queue_list",
    "queue_notify",
    "queue_update",
    "stats_add_many",
    "stats_dead_count",
    "stats_depth",
    "stats_now",
    "stats_prune",
    "stats_snapshot",
    "stats_window",
    "sweep_turns_take",
    "task_backlog_release",
    "task_backlog_supersede",
    "task_bury_many",
    "task_cancel_many",
    "task_exclusive_active",
    "task_exclusive_keys_by_id",
    "task_extend_many",
    "task_get",
    "task_insert_backlog_many",
    "task_insert_many",
    "task_release_many",
    "task_retry_many",
]
