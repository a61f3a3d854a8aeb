"""Cleaning up after Spark bulk enqueues: staging tables left by killed attempts, old run
ledgers (``shardq spark-gc``), and a run's progress."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from shardq.errors import InvalidInput
from shardq.maintenance.batches import until_short_batch
from shardq.sessions.dsn import Dsn, resolve_dsn
from shardq.sessions.session import Session
from shardq.spark.ledger import SparkLedger
from shardq.spark.options import STAGE_TTL_SECONDS_DEFAULT, check_run_id

log = logging.getLogger("shardq.spark")

#: ledger rows forgotten per statement
RUNS_EXPIRE_BATCH = 1000


def drop_quietly(ledger: SparkLedger, stage: str) -> None:
    """Drop ``stage``; a failure is only logged (``shardq spark-gc`` drops it later)."""
    try:
        ledger.stage_drop(stage)
    except Exception as exc:  # noqa: BLE001 - the failure that got us here matters more; gc drops it later
        log.warning("could not drop staging table %s (shardq spark-gc will): %s", stage, exc)


def collect_stale_stages(ledger: SparkLedger, max_age_seconds: float) -> int:
    """Drop staging tables older than ``max_age_seconds`` (attempts that crashed or were killed)."""
    dropped = 0
    for stage in ledger.stages_stale(max_age_seconds):
        ledger.stage_drop(stage)
        dropped += 1
    if dropped:
        log.info("dropped %d stale staging table(s)", dropped)
    return dropped


@dataclass(frozen=True)
class GcResult:
    stages_dropped: int
    runs_forgotten: int


def gc(
    dsn: str | Dsn | None = None,
    *,
    stage_max_age_seconds: float = STAGE_TTL_SECONDS_DEFAULT,
    ledger_max_age_seconds: float | None = None,
) -> GcResult:
    """Drop staging tables older than ``stage_max_age_seconds``; with ``ledger_max_age_seconds``,
    also forget runs older than that (a forgotten run, run again, enqueues its tasks again: keep
    ledger rows as long as re-runs are possible; 30 days is a sensible floor)."""
    if stage_max_age_seconds < 0 or (ledger_max_age_seconds is not None and ledger_max_age_seconds < 0):
        raise InvalidInput("ages must be >= 0 seconds")
    with Session(resolve_dsn(dsn), application_name="shardq-spark-gc") as session:
        ledger = SparkLedger(session)
        stages = collect_stale_stages(ledger, stage_max_age_seconds)
        runs = 0
        if ledger_max_age_seconds is not None:
            age = ledger_max_age_seconds
            runs = until_short_batch(lambda n: ledger.runs_expire(age, n), RUNS_EXPIRE_BATCH)
    return GcResult(stages, runs)


def run_progress(run_id: str, dsn: str | Dsn | None = None) -> tuple[int, int]:
    """(chunks merged, tasks enqueued) of a run so far, over all its attempts."""
    with Session(resolve_dsn(dsn), application_name="shardq-spark") as session:
        return SparkLedger(session).run_progress(check_run_id(run_id))
