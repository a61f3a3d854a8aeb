"""Background chores: the services that keep the tables healthy, one module each.

Each service's work is a ``run_once`` (one pass, what tests call); the loop around it only
schedules (:func:`shardq.maintenance.loop.repeat`). Bounded bulk changes go through one loop,
:func:`shardq.maintenance.batches.until_short_batch`.

=====================  ==========================================  ===================================
chore                  module                                      started by
=====================  ==========================================  ===================================
reap expired leases    :mod:`~shardq.maintenance.reaper`           ``shardq reap`` / ``client.reaper()``
sweep expired leases   :mod:`~shardq.maintenance.lease_sweeper`    every worker (``sweep=True``)
take periodic slots    :mod:`~shardq.maintenance.periodic`         every worker of an app with schedules
promotion backstop     :mod:`~shardq.maintenance.promotion`        each reaper pass
prune counter rows     :mod:`~shardq.maintenance.pruning`          each reaper pass; the worker's settler
prune periodic slots   :mod:`~shardq.maintenance.pruning`          each periodic scheduler pass
prune task history     :mod:`~shardq.maintenance.pruning`          each reaper pass; the worker's settler
=====================  ==========================================  ===================================

Chores that stay on a worker's own threads because they ride on its hot path: the settler flushes
the activity counters it gathers while settling (:mod:`shardq.worker.settler`), the fetcher
renews concurrency slots and consumers promote due tasks as they claim (:mod:`shardq.lifecycle.claim`).
"""

from __future__ import annotations

from shardq.maintenance.lease_sweeper import LeaseSweeper
from shardq.maintenance.reaper import Reaper, ReaperConfig, ReapResult

__all__ = ["LeaseSweeper", "ReapResult", "Reaper", "ReaperConfig"]
