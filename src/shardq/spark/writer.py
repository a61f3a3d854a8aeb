"""The COPY writer: Spark's write tasks put each chunk into ``shardq_tasks`` themselves, in one
transaction with the chunk's ledger row (PostgreSQL; ``pyarrow`` on the executors).

How
    :func:`shardq.spark.frame.stage_frame` (``cluster=partitions``) hash-partitions the rows by
    chunk (the numbering of identical rows rides on that one shuffle), so each Spark task holds
    whole chunks, sorted by chunk. :func:`copy_frame` renders each row as CSV with Spark
    built-ins; ``mapInArrow`` hands the task's rows to :func:`write_partition` as Arrow batches,
    which, per chunk, opens a transaction, takes the chunk's ledger row (``spark_chunk_take``;
    taken: skip the chunk), then

    * **plain rows** (the run maps no run_at, delay, dedupe key or exclusive key): reads the
      queue's settings and ``now()`` (``spark_chunk_open``) and ``COPY``s the chunk, sorted by id,
      straight into ``shardq_tasks`` (``spark_chunk_copy_tasks``): state ready, rank = priority,
      due at the transaction's ``now()``, as ``spark_chunk_merge`` would insert them;
    * **other rows**: ``COPY``s the chunk into the connection's ``TEMP`` table and runs the very
      statements of the staging path on it (``spark_chunk_merge``: due times, scheduled rows,
      live dedupe keys; exclusive keys through :mod:`shardq.lifecycle.exclusive`);

    records the count (``spark_chunk_record``) and commits. Rows cross the network once and are
    written once; nothing else is written but the ledger row.

Guarantees (as the staging path's)
    * Every value check runs in the shuffle's map stage, which Spark finishes before any write
      task starts: a bad row fails the job before any chunk is written.
    * A chunk's tasks and its ledger row commit together, so a retried or speculative Spark task,
      a re-run after any failure, or consumers acking tasks in between never enqueue a chunk
      twice; a second writer of the same chunk waits on its ledger row, then skips it.
    * The chunk of a row depends only on the run and the row (never on Spark's partitioning), so
      a re-run puts every row in the chunk it had.

Does not
    * run without ``pyarrow`` and ``shardq`` importable on the executors (``WriteOptions(writer=
      "jdbc")`` then), nor on CockroachDB (the staging path; see docs/spark.md);
    * call ``on_chunk`` while the job runs: the executors commit the chunks, and the driver
      reports them from the ledger once the write has finished.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardq.errors import DatabaseError, DatabaseUnavailable, QueuePaused, SerializationConflict, StatementTimeout
from shardq.models.tasks import RANK_SCHEDULED
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from shardq.spark.copy_binary import buffer_of, plain_rows
from shardq.spark.frame import MERGED_FIELDS, SEPARATOR
from shardq.spark.ledger import Run, Stage, in_transaction, merge_keyed_rows
from shardq.sql.plan import Call, CopyIn, Plan, SchemaChange, single

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

#: The connection's TEMP table for one chunk's rows (spark_chunk_table_create).
CHUNK_TABLE = "shardq_chunk_in"
#: Marks a write task's failure in Spark's error text, with the shardq error's class name.
WRITER_MARKER = "shardq-copy-writer:"
_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls for cls in (QueuePaused, DatabaseUnavailable, SerializationConflict, StatementTimeout)
}


def available() -> bool:
    """Whether the driver can run the COPY writer (the executors need the same)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class WriterSpec:
    """What a write task needs, pickled to the executors with :func:`write_partition`."""

    dsn: Dsn
    run_id: str
    queue: str
    chunks: int
    plain: bool  # rows go straight into shardq_tasks (see module docstring)
    keyed: bool  # the run maps an exclusive key
    max_attempts_mapped: bool
    numbered: bool = True  # ids from content and occurrence (no row key)
    workflow_id: uuid.UUID | None = None  # the run's callback workflow (then=), written into each task


def _csv_text(column: Any) -> Any:
    """A string column as one CSV field: quoted (quotes doubled), NULL as an empty unquoted field."""
    from pyspark.sql import functions as F

    return F.coalesce(F.concat(F.lit('"'), F.regexp_replace(column, '"', '""'), F.lit('"')), F.lit(""))


def copy_frame(rows: DataFrame, mapped: set[str]) -> tuple[DataFrame, bool]:
    """``rows`` (from ``stage_frame(cluster=…)``) as ``chunk``, ``id`` (of the first occurrence),
    ``content`` (when present), ``tail`` (the rest of the row's CSV line after the id, see the COPY
    statements) and, for plain rows with a max_attempts column, ``max_attempts``; and whether the
    rows are plain. Built with Spark built-ins only: the executors' Python numbers identical rows
    and concatenates."""
    from pyspark.sql import functions as F

    plain = not (set(MERGED_FIELDS) & mapped)
    keep = [c for c in ("chunk", "id", "content") if c in rows.columns]
    if plain:
        # COPY's binary format, assembled by shardq.spark.copy_binary.plain_rows from the values themselves
        return rows.select(*keep, *(c for c in ("payload", "priority", "max_attempts") if c in mapped)), True
    payload = F.concat(F.lit("\\x"), F.hex("payload"))

    def number(name: str) -> Any:
        return F.coalesce(F.col(name).cast("string"), F.lit("")) if name in mapped else F.lit("")

    run_at = (
        F.coalesce(F.date_format("run_at", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"), F.lit(""))
        if "run_at" in mapped
        else F.lit("")
    )
    fields = [
        F.lit(""),
        F.col("chunk").cast("string"),
        payload,
        run_at,
        number("delay"),
        _csv_text(F.col("dedupe_key")) if "dedupe_key" in mapped else F.lit(""),
        number("max_attempts"),
        number("priority"),
        _csv_text(F.col("exclusive_key")) if "exclusive_key" in mapped else F.lit(""),
    ]
    # id | ,chunk,payload,run_at,delay,dedupe_key,max_attempts,priority,exclusive_key\n
    tail = F.concat(F.concat_ws(",", *fields), F.lit("\n"))
    return rows.select(*keep, tail.alias("tail")), False


#: what each write task reports per chunk (seconds: on the executor, summed per phase)
REPORT_SCHEMA = (
    "chunk INT, tasks LONG, rows LONG, assemble_seconds DOUBLE, copy_seconds DOUBLE, "
    "statement_seconds DOUBLE, commit_seconds DOUBLE"
)


def run_writer(frame: DataFrame, spec: WriterSpec) -> list[dict]:
    """Run the write tasks; per chunk, as the successful task attempts reported it: ``tasks``
    inserted (-1: another writer had it), ``rows`` received, and the seconds spent numbering and
    assembling rows, in COPY, in the other statements and in BEGIN/COMMIT."""
    fn = functools.partial(write_partition, spec=spec)
    return [row.asDict() for row in frame.mapInArrow(fn, REPORT_SCHEMA).collect()]


def writer_failure(exc: BaseException) -> Exception | None:
    """The shardq error a failed write task raised, from Spark's error text, if it is one."""
    text = str(exc)
    start = text.find(WRITER_MARKER)
    if start < 0:
        return None
    line = text[start + len(WRITER_MARKER) :].splitlines()[0].strip()
    kind, _, message = line.partition(" ")
    return _ERRORS.get(kind, DatabaseError)(message or line)


# -- executor side ---------------------------------------------------------------------------
def write_partition(batches: Iterator[pa.RecordBatch], *, spec: WriterSpec) -> Iterator[pa.RecordBatch]:
    """One Spark task: write each chunk of its rows (arriving sorted by chunk) in its own
    transaction; yield one (chunk, tasks) row per chunk (tasks -1: written before)."""
    import numpy as np
    import pyarrow as pa

    run = Run(spec.run_id, spec.queue, spec.chunks, workflow_id=spec.workflow_id)
    seen: set[int] = set()
    current: int | None = None
    pending: list[pa.RecordBatch] = []
    with Session(spec.dsn, application_name="shardq-spark") as session:
        if not spec.plain:
            session.run(single(SchemaChange("spark_chunk_table_create", identifiers={"stage": CHUNK_TABLE})))

        def flush() -> pa.RecordBatch:
            assert current is not None
            seen.add(current)
            table = pa.Table.from_batches(pending)
            clock: dict[str, float] = {}
            tasks = _guarded(write_chunk, session, spec, run, current, table, clock)
            report = {
                "chunk": pa.array([current], pa.int32()),
                "tasks": pa.array([-1 if tasks is None else tasks], pa.int64()),
                "rows": pa.array([table.num_rows], pa.int64()),
            }
            for name in ("assemble", "copy", "statement", "commit"):
                report[f"{name}_seconds"] = pa.array([clock.get(name, 0.0)], pa.float64())
            return pa.RecordBatch.from_pydict(report)

        for batch in batches:
            if batch.num_rows == 0:
                continue
            chunks = batch.column(0).to_numpy(zero_copy_only=False)
            starts = np.concatenate(([0], np.flatnonzero(np.diff(chunks)) + 1))
            ends = np.append(starts[1:], len(chunks))
            for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
                chunk = int(chunks[start])
                if chunk != current:
                    if current is not None:
                        yield flush()
                    if chunk in seen:  # the frame is sorted by chunk; anything else is a bug
                        raise RuntimeError(f"{WRITER_MARKER} DatabaseError rows of chunk {chunk} arrived apart")
                    current, pending = chunk, []
                pending.append(batch.slice(start, end - start))
        if current is not None:
            yield flush()


def _guarded(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except (QueuePaused, DatabaseError) as exc:
        # Spark hands the driver only the text of an executor's error: mark it with its class.
        raise RuntimeError(f"{WRITER_MARKER} {type(exc).__name__} {exc}") from exc


def number_rows(table: pa.Table, spec: WriterSpec) -> pa.Table:
    """One chunk's rows sorted by id, with identical rows numbered as
    :func:`shardq.spark.frame.stage_frame` numbers them (the k-th copy of a row whose first
    occurrence has id ``md5(run ␟ queue ␟ "c:" ‖ HEX(content) ‖ "#1")`` gets ``… "#k"``), and
    rows sharing an id that is not numbered (a row key, a dedupe key) kept once. ``id`` is the
    16 bytes (plain rows) or the hex text; a plain row's content is hashed again here, as
    ``stage_frame`` hashes it, for the copies only."""
    import hashlib

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    table = table.sort_by("id")
    n = table.num_rows
    if n < 2:
        return table
    ids = table.column("id").combine_chunks()
    same = pc.equal(ids.slice(1), ids.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    if not same.any():
        return table
    repeat = np.concatenate(([False], same))
    # position of each row in its run of equal ids: 0 for the first
    starts = np.flatnonzero(~repeat)
    position = np.arange(n) - starts[np.cumsum(~repeat) - 1]
    keep = ~repeat
    binary = pa.types.is_binary(ids.type) or pa.types.is_large_binary(ids.type)
    new_ids = ids.to_pylist()
    if spec.numbered:
        prefix = f"{spec.run_id}{SEPARATOR}{spec.queue}{SEPARATOR}c:"
        for row in np.flatnonzero(repeat).tolist():
            content = _content(table, row)
            if content is None:
                continue  # a dedupe key: one task per key
            key = f"{prefix}{content.hex().upper()}#{int(position[row]) + 1}"
            digest = hashlib.md5(key.encode("utf-8"))  # an id, as Spark's md5()
            new_ids[row] = digest.digest() if binary else digest.hexdigest()
            keep[row] = True
    table = table.set_column(table.column_names.index("id"), "id", pa.array(new_ids, ids.type))
    return table.filter(pa.array(keep)).sort_by("id")


def _content(table: pa.Table, row: int) -> bytes | None:
    """The content hash of one row (stage_frame's ``_content``): the ``content`` column, or, for
    plain rows, md5 over the fixed-format fields (only max_attempts and priority can be mapped)
    and the payload, as stage_frame renders them."""
    import hashlib

    if "content" in table.column_names:
        return table.column("content")[row].as_py()
    fields = ["", ""]  # run_at, delay
    for name in ("max_attempts", "priority"):
        value = table.column(name)[row].as_py() if name in table.column_names else None
        fields.append("" if value is None else str(value))
    fields += ["", ""]  # exclusive_key, then the trailing separator
    payload = table.column("payload")[row].as_py()
    return hashlib.md5(SEPARATOR.join(fields).encode("utf-8") + payload).digest()


def write_chunk(
    session: Session, spec: WriterSpec, run: Run, chunk: int, table: pa.Table, clock: dict[str, float] | None = None
) -> int | None:
    """One chunk in one transaction with its ledger row; None when it was written before.
    ``clock`` gets the seconds of each phase (see :func:`run_writer`)."""
    import pyarrow.compute as pc

    clock = {} if clock is None else clock
    started = time.perf_counter()
    table = number_rows(table, spec)
    clock["assemble"] = time.perf_counter() - started
    params = {"run_id": run.run_id, "chunk": chunk}

    def body() -> Plan[int | None]:
        for phase in ("copy", "statement", "rows"):  # a retried body starts again
            clock[phase] = 0.0
        mark = time.perf_counter()
        if (yield Call("spark_chunk_take", params, rows="one")) is None:
            return None
        if spec.plain:
            opened = yield Call("spark_chunk_open", {"queue": spec.queue}, rows="one")
            if opened is None:
                raise DatabaseError("statement spark_chunk_open returned no row")
            if opened["paused"]:
                raise QueuePaused(f"queue {spec.queue!r} is paused for enqueue (chunk {chunk} not written)")
            mark = _lap(clock, "statement", mark)
            data = plain_rows(table, spec.queue, opened, spec.workflow_id)
            mark = _lap(clock, "rows", mark)
            if spec.workflow_id is None:
                yield CopyIn("spark_chunk_copy_tasks", data)
            else:
                yield CopyIn("spark_chunk_copy_run_tasks", data)
            mark = _lap(clock, "copy", mark)
            merged = table.num_rows
        else:
            stage = Stage(CHUNK_TABLE)
            lines = pc.binary_join_element_wise(table.column("id"), table.column("tail"), "")
            yield CopyIn("spark_chunk_copy_rows", buffer_of(lines), {"stage": CHUNK_TABLE})
            mark = _lap(clock, "copy", mark)
            row = yield Call(
                "spark_chunk_merge",
                {"queue": run.queue, "chunk": chunk, "scheduled_rank": RANK_SCHEDULED, "workflow_id": run.workflow_id},
                rows="one",
                identifiers={"stage": CHUNK_TABLE},
            )
            if row and row["paused"]:
                raise QueuePaused(f"queue {run.queue!r} is paused for enqueue (chunk {chunk} not written)")
            merged = int(row["merged"]) if row else 0
            if spec.keyed:
                merged += yield from merge_keyed_rows(run, stage, chunk)
        yield Call("spark_chunk_record", {**params, "merged": merged}, rows="none")
        _lap(clock, "statement", mark)
        return merged

    started = time.perf_counter()
    merged = session.run(in_transaction(body))
    inside = sum(clock.get(phase, 0.0) for phase in ("copy", "statement", "rows"))
    clock["commit"] = time.perf_counter() - started - inside  # BEGIN, COMMIT (its WAL flush), the rest
    clock["assemble"] += clock.pop("rows", 0.0)
    return merged


def _lap(clock: dict[str, float], phase: str, since: float) -> float:
    now = time.perf_counter()
    clock[phase] = clock.get(phase, 0.0) + now - since
    return now
