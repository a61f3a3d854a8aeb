"""The reaper's public path: :mod:`shardq.maintenance.reaper` holds it, beside the other
background services."""

from __future__ import annotations

from .maintenance.reaper import (
    MAX_BATCHES_PER_BUCKET,
    REAP_BATCH_DEFAULT,
    REAP_INTERVAL_DEFAULT,
    REAP_STATEMENT_TIMEOUT_DEFAULT,
    RETRY_PAUSE_MAX,
    Reaper,
    ReaperConfig,
    ReapResult,
)

__all__ = [
    "MAX_BATCHES_PER_BUCKET",
    "REAP_BATCH_DEFAULT",
    "REAP_INTERVAL_DEFAULT",
    "REAP_STATEMENT_TIMEOUT_DEFAULT",
    "RETRY_PAUSE_MAX",
    "ReapResult",
    "Reaper",
    "ReaperConfig",
]
