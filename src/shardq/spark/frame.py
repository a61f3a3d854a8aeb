"""From a user's DataFrame to the rows Spark writes into a staging table (a pure transform).

The mapping from DataFrame columns to task fields (:class:`TaskColumns`) and each field's cast
and checks are in :mod:`.columns`; the value checks' report in :mod:`.checks`. Their names are
importable from here too.

Ids are derived only from the row's content and the run (Spark built-ins, so no Python runs on the
executors, and a retried or speculative task recomputes exactly the same ids):

* ``content = md5(unix_micros(run_at) ␟ delay ␟ max_attempts ␟ priority ␟ hex(exclusive_key) ␟ payload bytes)`` — every field
  that ends up in the task, rendered independently of the session time zone (the numbers never
  contain the separator and the payload comes last, so the encoding is unambiguous);
* ``row_key = "k:" || dedupe_key`` when the row has one, else ``"r:" || row_key column`` when
  :attr:`TaskColumns.row_key` is mapped, else ``"c:" || hex(content) || "#" || n`` where ``n``
  numbers identical rows 1…k (``row_number`` over ``content``, the job's one shuffle; which of
  k identical rows gets which number does not matter, they are equal);
* ``id = md5(run_id ␟ queue ␟ row_key)`` as a UUID and ``chunk = ⌊id's first 32 bits · chunks / 2³²⌋``
  (chunks are id ranges, so each chunk's merge touches one narrow range of the id index).

MD5 is used as a fast 128-bit hash, not for secrecy: ids only have to be distinct within a run
and queue (2^-128 per pair).

So the same input under the same ``run_id`` always yields the same set of (id, chunk, task)
rows, whatever Spark's partitioning. ``uuid()``, ``rand()`` and ``monotonically_increasing_id()``
are never used: a recomputed partition would change them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from shardq import validation
from shardq.spark.checks import CHECK_MARKER, count_bad_rows, is_check_failure, value_checks
from shardq.spark.columns import PARSED, STAGED, Field, TaskColumns, check_columns, checked, field_specs, label

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = [
    "CHECK_MARKER",
    "CHUNK_BY_ID",
    "CHUNK_BY_KEY",
    "MERGED_FIELDS",
    "PARSED",
    "SEPARATOR",
    "STAGED",
    "Field",
    "TaskColumns",
    "check_columns",
    "count_bad_rows",
    "is_check_failure",
    "spark_int_hash",
    "spread_keys",
    "stage_frame",
    "value_checks",
]

SEPARATOR = "\x1f"
#: Task fields whose rows the COPY writer cannot put straight into the tasks table (they need the
#: merge statements' rules: due times, live dedupe keys, exclusive-key backlogs).
MERGED_FIELDS = ("run_at", "delay", "dedupe_key", "exclusive_key")
#: How a run's rows are split into chunks (pinned per run, see :func:`stage_frame`).
CHUNK_BY_KEY = "key"
CHUNK_BY_ID = "id"


def stage_frame(  # noqa: C901 - one case per optional task column of the frame
    df: DataFrame,
    *,
    queue: str,
    run_id: str,
    chunks: int,
    columns: TaskColumns,
    skip_chunks: frozenset[int] = frozenset(),
    payload_limit: int = validation.PAYLOAD_MAX_BYTES,
    labels: Mapping[str, str] | None = None,
    chunking: str = CHUNK_BY_KEY,
    cluster: int | None = None,
) -> DataFrame:
    """The staging rows for ``df``: ``chunk``, ``id`` and one column per mapped task field, cast
    to the staging types and checked. Rows of ``skip_chunks`` (merged by an earlier attempt) are
    left out. ``labels`` names a field's source in messages (default: its column). Lazy: nothing
    runs until the frame is written.

    ``chunking``: :data:`CHUNK_BY_KEY` (runs registered since the COPY writer: the range of the
    row's *first-occurrence* id, known before identical rows are numbered) or :data:`CHUNK_BY_ID`
    (runs registered before it: the range of the row's own id). The two differ only for the 2nd,
    3rd… copy of an identical row. ``cluster`` (COPY writer, :data:`CHUNK_BY_KEY` only):
    hash-partition the rows by chunk into that many partitions, each sorted by chunk, so one Spark
    task holds whole chunks; ``id`` is then the id of the row's *first* occurrence (its 16 bytes
    when no :data:`MERGED_FIELDS` field is mapped, else the hex text) and, for content-derived ids
    with a merged field mapped, ``content`` (binary; NULL where the id does not depend on the
    number: a dedupe key) lets the writer number identical rows
    (:func:`shardq.spark.writer.number_rows`, same ids). That shuffle is the job's
    only one, and it makes every value check run (in its map stage) before any chunk is written."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    mapped = check_columns(df.schema, columns)
    spec = field_specs(payload_limit)
    kinds = {f.name: f.dataType.typeName() for f in df.schema.fields}
    values: dict[str, Column] = {}
    for name, column in mapped.items():
        value, checks = checked(spec[name], column, kinds[column])
        guarded = value
        for bad, message in reversed(checks):
            text = f"{CHECK_MARKER} {message} (column {label(name, mapped, labels)})"
            guarded = F.when(bad, F.raise_error(F.lit(text))).otherwise(guarded)
        values[name] = guarded
    frame = df.select(*[value.alias(name) for name, value in values.items()])

    if chunking not in (CHUNK_BY_KEY, CHUNK_BY_ID):
        raise ValueError(f"unknown chunking {chunking!r}")

    def keyed(key: Column) -> Column:
        if "dedupe_key" not in mapped:
            return key
        return F.when(F.col("dedupe_key").isNotNull(), F.concat(F.lit("k:"), F.col("dedupe_key"))).otherwise(key)

    def task_id(key: Column) -> Column:
        return F.md5(F.concat_ws(SEPARATOR, F.lit(run_id), F.lit(queue), key))

    def id_range(hex_id: Column) -> Column:
        # Chunks are id ranges (the id's first 32 bits scaled to 0..chunks-1), not hashes: a
        # chunk's rows then go into one narrow range of the id index instead of all over it.
        return (F.conv(F.substring(hex_id, 1, 8), 16, 10).cast("long") * F.lit(chunks) / F.lit(1 << 32)).cast("int")

    if "row_key" in mapped:
        base_key = F.concat(F.lit("r:"), F.col("row_key"))
    else:
        # Only the fixed-format fields go into the text part (they never contain the separator);
        # the payload comes last, as bytes, so the encoding is unambiguous.
        fixed = [
            spec[name].fingerprint(F.col(name)) if name in mapped else F.lit("")
            for name in ("run_at", "delay", "max_attempts", "priority", "exclusive_key")
        ]
        content = F.unhex(F.md5(F.concat(F.concat_ws(SEPARATOR, *fixed, F.lit("")).cast("binary"), F.col("payload"))))
        frame = frame.withColumn("_content", content)
        base_key = F.concat(F.lit("c:"), F.hex("_content"), F.lit("#"))
    staged = [name for name in mapped if name in STAGED]
    if chunking == CHUNK_BY_KEY:
        # The chunk of the row's first occurrence (for a row key or a dedupe key: of the row's own
        # id), so it is known before identical rows are numbered and all copies share a chunk.
        first = F.concat(base_key, F.lit("1")) if "row_key" not in mapped else base_key
        frame = frame.withColumn("_first", task_id(keyed(first)))
        frame = frame.withColumn("chunk", id_range(F.col("_first")))
        if skip_chunks:
            frame = frame.where(~F.col("chunk").isin(sorted(skip_chunks)))
        if cluster is not None:
            # The COPY writer numbers identical rows itself (shardq.spark.writer.number_rows):
            # Spark only sorts each partition by the chunk (an INT4 key), not by content. Plain
            # rows (see MERGED_FIELDS) travel lighter: the id as its 16 bytes, and no content
            # (the writer hashes it again for the rare 2nd, 3rd… copy of a row).
            plain = not (set(MERGED_FIELDS) & set(mapped))
            extra: list[Column] = []
            if "row_key" not in mapped and not plain:
                content = F.col("_content")
                if "dedupe_key" in mapped:
                    content = F.when(F.col("dedupe_key").isNull(), content)
                extra.append(content.alias("content"))
            first_id = F.unhex(F.col("_first")) if plain else F.col("_first")
            frame = frame.select("chunk", first_id.alias("_first"), *extra, *staged)
            # Chunk c goes to partition c mod cluster, so every write task gets the same number
            # of chunks (hashing the chunk itself gave 11, 21, 16 and 16 of 64 chunks to 4 tasks).
            keys = F.array(*[F.lit(k) for k in spread_keys(cluster)])
            target = F.element_at(keys, F.pmod(F.col("chunk"), F.lit(cluster)) + 1)
            frame = frame.repartition(cluster, target).sortWithinPartitions("chunk")
            return frame.select("chunk", F.col("_first").alias("id"), *(["content"] if extra else []), *staged)
    if "row_key" in mapped:
        row_key = base_key
    else:
        # Identical rows are distinct tasks: number them 1..k (which one gets which number does
        # not matter, they are equal). This window is the one shuffle of the job.
        # Rows with a dedupe key take their id from it, not from their number: they are numbered
        # apart, so they cannot take numbers from the identical rows that have none.
        groups: list[Column] = [F.col("_content")]
        if "dedupe_key" in mapped:
            groups.append(F.col("dedupe_key").isNull())
        occurrence = F.row_number().over(Window.partitionBy(*groups).orderBy("_content"))
        row_key = F.concat(base_key, occurrence.cast("string"))
    frame = frame.withColumn("id", task_id(keyed(row_key)))
    if chunking == CHUNK_BY_ID:
        frame = frame.withColumn("chunk", id_range(F.col("id")))
        if skip_chunks:
            frame = frame.where(~F.col("chunk").isin(sorted(skip_chunks)))
    return frame.select("chunk", "id", *staged)


def spark_int_hash(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of an INT value (Murmur3_x86_32.hashInt, seed 42), which its hash
    partitioning takes ``pmod`` of."""
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    k1 = (value & mask) * 0xCC9E2D51 & mask
    k1 = rotl(k1, 15) * 0x1B873593 & mask
    h1 = seed ^ k1
    h1 = (rotl(h1, 13) * 5 + 0xE6546B64) & mask
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & mask
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & mask
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def spread_keys(partitions: int) -> list[int]:
    """For each partition p, the smallest INT that Spark's hash partitioning into ``partitions``
    sends to p: repartitioning by ``keys[chunk mod partitions]`` puts chunk c in partition
    c mod partitions."""
    keys: dict[int, int] = {}
    candidate = 0
    while len(keys) < partitions:
        keys.setdefault(spark_int_hash(candidate) % partitions, candidate)
        candidate += 1
    return [keys[p] for p in range(partitions)]
