"""The database side of a Spark bulk enqueue: run and chunk ledger, staging tables, chunked merge.

Only named statements (``sql/*/spark.sql``), sent as plans (:mod:`shardq.sql.plan`) that a
:class:`shardq.sessions.session.Session` runs; the staging table's name enters SQL only through the ``{stage}``
identifier slot.
"""

from __future__ import annotations

import hashlib
import logging
import queue as queue_module
import re
import secrets
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from shardq.errors import DatabaseError, DatabaseUnavailable, QueuePaused
from shardq.lifecycle import exclusive
from shardq.models.tasks import RANK_SCHEDULED, NewTask
from shardq.sessions.session import Session
from shardq.sessions.store import TaskStore
from shardq.sql.plan import Atomically, Call, Plan, SchemaChange, single

log = logging.getLogger("shardq.spark")

T = TypeVar("T")

STAGE_PREFIX = "shardq_stage_"
_STAGE_NAME = re.compile(r"^shardq_stage_[0-9a-f]{12}_[0-9a-f]{8}$")


def stage_name(run_id: str, nonce: str | None = None) -> str:
    """``shardq_stage_<sha256(run_id)[:12]>_<8 random hex>``: one table per attempt, so attempts
    that overlap never see each other's rows."""
    digest = hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:12]
    return f"{STAGE_PREFIX}{digest}_{nonce or secrets.token_hex(4)}"


#: ``Run.scheme``: how the run's rows are split into chunks (:func:`shardq.spark.frame.stage_frame`).
SCHEME_BY_ID = 0  # registered before schemes: the range of each row's own id (staging path only)
SCHEME_BY_KEY = 1  # the range of the row's first-occurrence id (both writers)


@dataclass(frozen=True)
class Run:
    run_id: str
    queue: str
    chunks: int
    scheme: int = SCHEME_BY_KEY
    #: the run's callback workflow (``then=``; :mod:`shardq.workflows.spark_callbacks`), written into each task
    workflow_id: uuid.UUID | None = None

    @property
    def chunking(self) -> str:
        from shardq.spark.frame import CHUNK_BY_ID, CHUNK_BY_KEY

        return CHUNK_BY_KEY if self.scheme == SCHEME_BY_KEY else CHUNK_BY_ID


@dataclass(frozen=True)
class Stage:
    """A staging table and when the server last started before it was created (PostgreSQL keeps
    it UNLOGGED: crash recovery would empty it)."""

    name: str
    server_started: object = None


@dataclass(frozen=True)
class MergeOutcome:
    """What one attempt's merge did: chunks it merged, chunks another attempt had merged, tasks
    inserted (rows whose dedupe key was live are not counted)."""

    merged_chunks: int
    skipped_chunks: int
    tasks: int


class SparkLedger:
    """The ledger's operations, each a plan of ``sql/*/spark.sql`` statements run on one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    # -- runs -------------------------------------------------------------------------------
    def run_register(self, run_id: str, queue: str, chunks: int) -> Run:
        """The run as first registered (a re-run keeps its queue, chunk count and chunking
        scheme). A new run and its scheme row commit together, so a run without one was
        registered by a shardq from before schemes and keeps the chunking it had."""

        def body() -> Plan[dict | None]:
            if (yield Call("spark_run_register", {"run_id": run_id, "queue": queue, "chunks": chunks}, rows="one")):
                yield Call("spark_run_mark", {"run_id": run_id, "scheme": SCHEME_BY_KEY}, rows="none")
            row: dict | None = yield Call("spark_run_get", {"run_id": run_id}, rows="one")
            return row

        row = self.session.run(in_transaction(body))
        if row is None:  # expired in between: register again
            return self.run_register(run_id, queue, chunks)
        return _run(row)

    def run_get(self, run_id: str) -> Run | None:
        row = self.session.run(single(Call("spark_run_get", {"run_id": run_id}, rows="one")))
        return _run(row) if row else None

    def run_progress(self, run_id: str) -> tuple[int, int]:
        """(chunks merged, tasks inserted) over every attempt of the run."""
        row = self.session.run(single(Call("spark_run_progress", {"run_id": run_id}, rows="one")))
        return (int(row["chunks"]), int(row["tasks"])) if row else (0, 0)

    def chunks_merged(self, run_id: str) -> set[int]:
        return set(self.chunks_done(run_id))

    def chunks_done(self, run_id: str) -> dict[int, int]:
        """Merged chunk -> tasks it inserted."""
        rows = self.session.run(single(Call("spark_chunks_merged", {"run_id": run_id})))
        return {int(r["chunk"]): int(r["rows_merged"]) for r in rows}

    def runs_expire(self, max_age_seconds: float, limit: int = 1000) -> int:
        rows = self.session.run(single(Call("spark_runs_expire", {"max_age_seconds": max_age_seconds, "limit": limit})))
        return len(rows)

    # -- staging tables ---------------------------------------------------------------------
    def stage_create(self, stage: str, run_id: str) -> Stage:
        """Register, then create, a staging table (registered first, so it can never be lost)."""

        def create() -> Plan[Stage]:
            yield Call("spark_stage_register", {"stage": stage, "run_id": run_id}, rows="none")
            started = yield from _server_started()
            yield SchemaChange("spark_stage_create", identifiers={"stage": stage})
            return Stage(stage, started)

        return self.session.run(create())

    def server_started(self) -> object:
        return self.session.run(_server_started())

    def stage_ready_for_merge(self, stage: str) -> None:
        """After the Spark write: what the engine's staging table needs before chunks merge from
        it (:meth:`shardq.engine.Engine.spark_stage_ready`: PostgreSQL indexes the chunk column;
        CockroachDB's staging key already leads with it)."""
        self.session.run(self.session.engine.spark_stage_ready(stage))

    def stage_rows(self, stage: str) -> int:
        row = self.session.run(single(Call("spark_stage_rows", identifiers={"stage": stage}, rows="one")))
        if row is None:
            raise DatabaseError("statement spark_stage_rows returned no row")
        return int(row["n"])

    def stage_drop(self, stage: str) -> None:
        if not _STAGE_NAME.match(stage):
            raise DatabaseError(f"refusing to drop {stage!r}: not a shardq staging table name")

        def drop() -> Plan[None]:
            yield SchemaChange("spark_stage_drop", identifiers={"stage": stage})
            yield Call("spark_stage_forget", {"stage": stage}, rows="none")

        self.session.run(drop())

    def stages_stale(self, max_age_seconds: float, limit: int = 1000) -> list[str]:
        rows = self.session.run(
            single(Call("spark_stages_stale", {"max_age_seconds": max_age_seconds, "limit": limit}))
        )
        return [r["stage"] for r in rows]

    # -- merge ------------------------------------------------------------------------------
    def chunk_merge(self, run: Run, stage: Stage, chunk: int, *, keyed: bool = False) -> int | None:
        """Merge one chunk in one transaction with its ledger row; ``None`` when the chunk was
        merged already (by this or another attempt). With ``keyed`` (the run maps an exclusive
        key), rows carrying a key go through :func:`shardq.lifecycle.exclusive.in_transaction_plan` in
        the same transaction. The body runs again after a 40001
        (CockroachDB), which is safe: the failed attempt left nothing behind. Raises
        :class:`DatabaseUnavailable` if the server restarted since the staging table was created
        (its rows may be gone; the chunk is not marked merged), :class:`QueuePaused` if the queue
        is paused for enqueue (likewise)."""

        def body() -> Plan[int | None]:
            if (yield from _server_started()) != stage.server_started:
                raise DatabaseUnavailable(
                    "the database restarted after the Spark write, which may have emptied the staging "
                    "table: run the job again (chunks merged so far stay merged)"
                )
            params = {"run_id": run.run_id, "chunk": chunk}
            if (yield Call("spark_chunk_take", params, rows="one")) is None:
                return None
            row = yield Call(
                "spark_chunk_merge",
                {"queue": run.queue, "chunk": chunk, "scheduled_rank": RANK_SCHEDULED, "workflow_id": run.workflow_id},
                rows="one",
                identifiers={"stage": stage.name},
            )
            if row and row["paused"]:
                # Raising rolls the claim back too: the chunk stays unmerged for the re-run.
                raise QueuePaused(f"queue {run.queue!r} is paused for enqueue (chunk {chunk} not merged)")
            merged = int(row["merged"]) if row else 0
            if keyed:
                merged += yield from merge_keyed_rows(run, stage, chunk)
            yield Call("spark_chunk_record", {**params, "merged": merged}, rows="none")
            return merged

        return self.session.run(in_transaction(body))


def _run(row: dict) -> Run:
    return Run(row["run_id"], row["queue"], int(row["chunks"]), int(row["scheme"]))


def in_transaction(body: Callable[[], Plan[T]]) -> Plan[T]:
    """``body()`` in one transaction (re-made for each attempt after a 40001)."""
    result: T = yield Atomically(body)
    return result


def _server_started() -> Plan[object]:
    row = yield Call("spark_server_started", rows="one")
    return row["started"] if row else None


def merge_keyed_rows(run: Run, stage: Stage, chunk: int) -> Plan[int]:
    """Enqueue the chunk's rows that carry an exclusive key as enqueue_many would, inside the
    caller's transaction; returns how many were inserted (active or backlogged)."""
    rows = yield Call("spark_chunk_keyed_rows", {"chunk": chunk}, identifiers={"stage": stage.name})
    if not rows:
        return 0
    # Per key, the first row inserted becomes active and the rest wait: let the lowest priority go first.
    rows.sort(key=lambda r: (r["priority"], r["id"]))
    tasks = [
        NewTask(
            payload=bytes(r["payload"]),
            delay=r["delay"],
            run_at=r["run_at"],
            dedupe_key=r["dedupe_key"],
            max_attempts=r["max_attempts"],
            priority=int(r["priority"]),
            exclusive_key=r["exclusive_key"],
        )
        for r in rows
    ]
    outcome = yield from exclusive.in_transaction_plan(run.queue, tasks, [r["id"] for r in rows])
    if outcome.paused:
        raise QueuePaused(f"queue {run.queue!r} is paused for enqueue (chunk {chunk} not merged)")
    return len(rows) - len(outcome.skipped)


def merge_chunks(
    run: Run,
    stage: Stage,
    chunks: Iterable[int],
    session_factory: Callable[[], Session],
    *,
    workers: int = 2,
    keyed: bool = False,
    on_chunk: Callable[[int, int | None], None] | None = None,
) -> MergeOutcome:
    """Merge ``chunks`` of ``stage`` with ``workers`` threads, each on its own session.

    ``keyed``: the run maps an exclusive key (see :meth:`SparkLedger.chunk_merge`).
    ``on_chunk(chunk, tasks or None)`` is called after each chunk's transaction committed (None:
    merged earlier); if it raises, the other workers stop after their current chunk and the
    exception propagates (the chunks committed so far stay merged)."""
    todo: queue_module.SimpleQueue[int] = queue_module.SimpleQueue()
    total = 0
    for chunk in chunks:
        todo.put(chunk)
        total += 1
    stop = threading.Event()
    lock = threading.Lock()
    counts = {"merged": 0, "skipped": 0, "tasks": 0}
    errors: list[BaseException] = []

    def work() -> None:
        with session_factory() as session:
            ledger = SparkLedger(session)
            counter = TaskStore(session)  # enqueue-rate counters (shardq stats), flushed in batches
            while not stop.is_set():
                try:
                    chunk = todo.get_nowait()
                except queue_module.Empty:
                    return
                try:
                    merged = ledger.chunk_merge(run, stage, chunk, keyed=keyed)
                    with lock:
                        if merged is None:
                            counts["skipped"] += 1
                        else:
                            counts["merged"] += 1
                            counts["tasks"] += merged
                        if on_chunk is not None:
                            on_chunk(chunk, merged)
                    if merged:
                        counter.count_enqueued(run.queue, merged)
                except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                    errors.append(exc)
                    stop.set()
                    return
            counter.flush_enqueue_counts()

    threads = [
        threading.Thread(target=work, name=f"shardq-merge-{i}", daemon=True) for i in range(max(1, min(workers, total)))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return MergeOutcome(counts["merged"], counts["skipped"], counts["tasks"])
