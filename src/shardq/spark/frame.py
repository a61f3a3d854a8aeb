"""From a user's DataFrame to the rows Spark writes into a staging table (a pure transform).

The mapping from DataFrame columns to task fields is :class:`TaskColumns`; each task field has one
:class:`Field` entry in :data:`FIELDS` (its staging column, the Spark types it accepts, the type
it is cast to, and the checks its values must pass). Adding a task field later (a priority, an
exclusive key) is one attribute on :class:`TaskColumns`, one :class:`Field`, one staging column in
``sql/*/spark.sql`` and one line in the merge statement; nothing else changes.

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

Value checks run inside the Spark job (``raise_error``), before anything reaches the queue: a
NULL payload, a payload over the size cap, an empty or over-long dedupe key, a negative delay, a
max_attempts outside 1…10000, a string that does not parse as its field's type. The write then
fails (so no chunk is merged and nothing of the run is enqueued), and :func:`count_bad_rows`
counts every failed check in one more pass: :class:`shardq.errors.InvalidTaskFrame` says, e.g.,
``payload is NULL (column 'body'): 2 of 50 rows; delay is not a number (column 'd'): 1 of 50 rows``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from dataclasses import fields as dc_fields

from .. import validation
from ..errors import InvalidTaskFrame
from ..models import PRIORITY_MAX, PRIORITY_MIN

SEPARATOR = "\x1f"
# Marks the messages of the checks below, so a failed Spark job can be told apart from others.
CHECK_MARKER = "shardq-invalid-task:"
#: Task fields whose rows the COPY writer cannot put straight into the tasks table (they need the
#: merge statements' rules: due times, live dedupe keys, exclusive-key backlogs).
MERGED_FIELDS = ("run_at", "delay", "dedupe_key", "exclusive_key")
#: How a run's rows are split into chunks (pinned per run, see :func:`stage_frame`).
CHUNK_BY_KEY = "key"
CHUNK_BY_ID = "id"


@dataclass(frozen=True)
class TaskColumns:
    """Which DataFrame column feeds which task field; ``None`` leaves the field unmapped.

    ``payload`` (binary, or string stored as UTF-8; required), ``run_at`` (timestamp with time
    zone, i.e. Spark's ``TimestampType``), ``delay`` (seconds from the moment the chunk is merged,
    any numeric type), ``dedupe_key`` (string; a live task of the queue with the same key makes
    the row a no-op, and rows sharing a key collapse into one task), ``max_attempts`` (integer;
    default: the queue's setting), ``priority`` (integer, lower runs first; default 0),
    ``exclusive_key`` (string; of the queue's live tasks sharing a key one runs at a time, the
    others wait in the key's backlog, which releases them in priority order: :mod:`shardq.exclusive`.
    A DataFrame has no row order, so among a run's rows sharing a key with equal priorities the
    order is not defined). ``run_at`` and ``delay`` are exclusive; with neither, tasks are
    due at once. A NULL ``run_at``/``delay``/``dedupe_key``/``max_attempts`` value means "not given".
    ``run_at``, ``delay``, ``max_attempts`` and ``priority`` may also be string columns (a CSV
    column holding a stray word is inferred as string): they are parsed (an ISO 8601 timestamp,
    in the session time zone when it has no offset; a number; a whole number), and values that
    do not parse fail the job with the column and the number of such rows.

    ``row_key`` (optional, not a task field) names a column that identifies each row of the input
    (an order id, a file offset): ids are then derived from it instead of from the row's content
    and its occurrence among identical rows, which saves the job a shuffle. Rows sharing a row
    key become one task. It must be stable across re-runs like the rest of the input.
    """

    payload: str = "payload"
    run_at: str | None = None
    delay: str | None = None
    dedupe_key: str | None = None
    max_attempts: str | None = None
    priority: str | None = None
    exclusive_key: str | None = None
    row_key: str | None = None

    def mapped(self) -> dict[str, str]:
        """Task field -> DataFrame column, for the mapped fields."""
        return {f.name: getattr(self, f.name) for f in dc_fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class Field:
    """One task field as it travels through staging."""

    name: str  # the task field and its staging column
    accepts: tuple[str, ...]  # Spark type names (DataType.typeName()) accepted in the input
    cast_to: str  # Spark SQL type it is cast to before the write
    #: (column) -> list of (bad-value condition, message) pairs checked on every row
    checks: Callable[[Column], list[tuple[Column, str]]]
    #: (column) -> string column feeding the content hash ('' for NULL)
    fingerprint: Callable[[Column], Column]


_INTEGERS = ("byte", "short", "integer", "long")
#: task fields that have a staging column (row_key only shapes the id)
STAGED = ("payload", "run_at", "delay", "dedupe_key", "max_attempts", "priority", "exclusive_key")
_NUMBERS = _INTEGERS + ("float", "double", "decimal")


def _fields(payload_limit: int) -> dict[str, Field]:
    from pyspark.sql import functions as F

    def empty_if_null(expr: Column) -> Column:
        return F.coalesce(expr, F.lit(""))

    def key_checks(c: Column, what: str) -> list[tuple[Column, str]]:
        """The rules shardq.validation applies to a dedupe or exclusive key."""
        return [
            (F.length(c) == 0, f"{what} is empty"),
            (F.length(c) > validation.DEDUPE_KEY_MAX, f"{what} longer than {validation.DEDUPE_KEY_MAX}"),
            (F.instr(c, "\x00") > 0, f"{what} contains NUL"),
        ]

    return {
        "payload": Field(
            "payload", ("binary", "string"), "binary",
            lambda c: [
                (c.isNull(), "payload is NULL"),
                (F.length(c) > payload_limit, f"payload longer than {payload_limit} bytes"),
            ],
            lambda c: empty_if_null(F.hex(c)),
        ),
        "run_at": Field(
            "run_at", ("timestamp", "string"), "timestamp",
            lambda c: [],
            lambda c: empty_if_null(F.unix_micros(c).cast("string")),
        ),
        "delay": Field(
            "delay", _NUMBERS + ("string",), "double",
            lambda c: [
                (c < 0, "delay is negative"),
                (c > validation.DELAY_MAX_SECONDS, f"delay over {validation.DELAY_MAX_SECONDS:.0f} seconds"),
                (F.isnan(c), "delay is NaN"),
            ],
            lambda c: empty_if_null(c.cast("string")),
        ),
        "dedupe_key": Field(
            "dedupe_key", ("string",), "string", lambda c: key_checks(c, "dedupe key"), lambda c: empty_if_null(c),
        ),
        "exclusive_key": Field(
            "exclusive_key", ("string",), "string", lambda c: key_checks(c, "exclusive key"),
            # hex: a key may contain the separator, and the fixed-format part must not
            lambda c: empty_if_null(F.hex(c)),
        ),
        "max_attempts": Field(
            "max_attempts", _INTEGERS + ("string",), "int",
            lambda c: [(c < 1, "max_attempts below 1"), (c > 10_000, "max_attempts above 10000")],
            lambda c: empty_if_null(c.cast("string")),
        ),
        "priority": Field(
            "priority", _INTEGERS + ("string",), "long",
            lambda c: [(c < PRIORITY_MIN, f"priority below {PRIORITY_MIN}"),
                       (c > PRIORITY_MAX, f"priority above {PRIORITY_MAX}")],
            lambda c: empty_if_null(c.cast("string")),
        ),
        "row_key": Field(
            "row_key", ("string",) + _INTEGERS, "string",
            lambda c: [(c.isNull(), "row key is NULL")],
            lambda c: c,
        ),
    }


def check_columns(schema: StructType, columns: TaskColumns) -> dict[str, str]:
    """Check that every mapped column exists with an accepted type; return field -> column.

    Raises :class:`InvalidTaskFrame` naming the column, its type and what is accepted."""
    if not isinstance(columns, TaskColumns):
        raise InvalidTaskFrame("columns must be a TaskColumns")
    mapped = columns.mapped()
    if "payload" not in mapped:
        raise InvalidTaskFrame("a payload column is required")
    if "run_at" in mapped and "delay" in mapped:
        raise InvalidTaskFrame("map either a run_at column or a delay column, not both")
    by_name = {f.name: f for f in schema.fields}
    spec = _fields(validation.PAYLOAD_MAX_BYTES)
    for field_name, column in mapped.items():
        if column not in by_name:
            available = ", ".join(sorted(by_name)) or "none"
            raise InvalidTaskFrame(f"{field_name} column {column!r} is not in the DataFrame (columns: {available})")
        kind = by_name[column].dataType.typeName()
        if kind == "timestamp_ntz" and field_name == "run_at":
            raise InvalidTaskFrame(
                f"run_at column {column!r} is TIMESTAMP_NTZ (no time zone): cast it to timestamp first"
            )
        if kind not in spec[field_name].accepts:
            raise InvalidTaskFrame(
                f"{field_name} column {column!r} has type {kind}; accepted: {', '.join(spec[field_name].accepts)}"
            )
    return mapped


def stage_frame(
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
    spec = _fields(payload_limit)
    kinds = {f.name: f.dataType.typeName() for f in df.schema.fields}
    values: dict[str, Column] = {}
    for name, column in mapped.items():
        value, checks = _checked(spec[name], column, kinds[column])
        guarded = value
        for bad, message in reversed(checks):
            text = f"{CHECK_MARKER} {message} (column {_label(name, mapped, labels)})"
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
        fixed = [spec[name].fingerprint(F.col(name)) if name in mapped else F.lit("")
                 for name in ("run_at", "delay", "max_attempts", "priority", "exclusive_key")]
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


#: fields that also take a string column, parsed (Spark's try_cast) as: (type, what it must be)
PARSED = {"run_at": ("timestamp", "a timestamp"), "delay": ("double", "a number"),
          "max_attempts": ("long", "a whole number"), "priority": ("long", "a whole number")}


def _checked(field: Field, column: str, kind: str) -> tuple[Column, list[tuple[Column, str]]]:
    """The column as its staging value, and its checks (bad-row condition, message). A string
    column of a :data:`PARSED` field is parsed first; a value that does not parse fails the
    check "is not a …" (so a CSV column with a few stray words is reported with its rows)."""
    from pyspark.sql import functions as F

    raw = F.col(f"`{column}`")
    checks: list[tuple[Column, str]] = []
    if kind == "string" and field.name in PARSED:
        parse_to, what = PARSED[field.name]
        parsed = raw.try_cast(parse_to)
        checks.append((raw.isNotNull() & parsed.isNull(), f"{field.name} is not {what}"))
        raw = parsed
    value = _value(field, raw)
    return value, checks + field.checks(value)


def _value(field: Field, value: Column) -> Column:
    """The value cast to its staging type. An integer is cast only within the range of its
    type (checks come after), so an out-of-range value fails its check, not the ANSI cast."""
    from pyspark.sql import functions as F

    if field.cast_to == "int":
        value = F.when(value.isNull() | value.between(-(1 << 31), (1 << 31) - 1), value).otherwise(
            F.when(value > 0, F.lit((1 << 31) - 1)).otherwise(F.lit(-(1 << 31))))
    return value.cast(field.cast_to)


def _label(name: str, mapped: Mapping[str, str], labels: Mapping[str, str] | None) -> str:
    return (labels or {}).get(name) or repr(mapped[name])


def value_checks(
    df: DataFrame,
    columns: TaskColumns,
    *,
    payload_limit: int = validation.PAYLOAD_MAX_BYTES,
    labels: Mapping[str, str] | None = None,
    skip: Iterable[str] = (),
) -> list[tuple[Column, str]]:
    """(bad-row condition over ``df``, message) for every value check of :func:`stage_frame`,
    evaluated without failing: :func:`count_bad_rows` counts them after a failed write."""
    mapped = check_columns(df.schema, columns)
    spec = _fields(payload_limit)
    kinds = {f.name: f.dataType.typeName() for f in df.schema.fields}
    skipped = set(skip)
    return [
        (bad, f"{message} (column {_label(name, mapped, labels)})")
        for name, column in mapped.items() if name not in skipped
        for bad, message in _checked(spec[name], column, kinds[column])[1]
    ]


def count_bad_rows(df: DataFrame, checks: list[tuple[Column, str]]) -> str | None:
    """One line naming each failed check with its number of rows (one pass over ``df``), or
    None when none fails or the count itself fails."""
    from pyspark.sql import functions as F

    if not checks:
        return None
    try:
        row = df.select(
            F.count(F.lit(1)).alias("rows"),
            *[F.sum(F.when(bad, 1).otherwise(0)).alias(f"c{i}") for i, (bad, _) in enumerate(checks)],
        ).first()
    except Exception:  # noqa: BLE001 - the write's own error is reported instead
        return None
    if row is None:
        return None
    total = int(row["rows"])
    found = [(message, int(row[f"c{i}"] or 0)) for i, (_, message) in enumerate(checks)]
    parts = [f"{message}: {n:,} of {total:,} row{'s' if total != 1 else ''}" for message, n in found if n]
    return "; ".join(parts) or None


def is_check_failure(exc: BaseException) -> str | None:
    """The message of a failed value check inside ``exc`` (a Spark job error), if it is one."""
    text = str(exc)
    start = text.find(CHECK_MARKER)
    if start < 0:
        return None
    line = text[start + len(CHECK_MARKER):].splitlines()[0]
    # Spark quotes the raise_error message; cut at the closing quote if there is one.
    return line.split("'", 1)[0].split('"', 1)[0].strip() if "(column" not in line else line[: line.index(")") + 1].strip()
