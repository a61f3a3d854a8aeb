"""From DataFrame columns to task fields: the mapping (:class:`TaskColumns`), each field's staging
type and checks (:class:`Field`), and the values cast and checked (pure column expressions).

Each task field has one :class:`Field` entry (its staging column, the Spark types it accepts, the
type it is cast to, and the checks its values must pass). Adding a task field later (a priority,
an exclusive key) is one attribute on :class:`TaskColumns`, one :class:`Field`, one staging
column in ``sql/*/spark.sql`` and one line in the merge statement; nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import fields as dc_fields
from typing import TYPE_CHECKING

from shardq import validation
from shardq.errors import InvalidTaskFrame
from shardq.validation import PRIORITY_MAX, PRIORITY_MIN

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import StructType


@dataclass(frozen=True)
class TaskColumns:
    """Which DataFrame column feeds which task field; ``None`` leaves the field unmapped.

    ``payload`` (binary, or string stored as UTF-8; required), ``run_at`` (timestamp with time
    zone, i.e. Spark's ``TimestampType``), ``delay`` (seconds from the moment the chunk is merged,
    any numeric type), ``dedupe_key`` (string; a live task of the queue with the same key makes
    the row a no-op, and rows sharing a key collapse into one task), ``max_attempts`` (integer;
    default: the queue's setting), ``priority`` (integer, lower runs first; default 0),
    ``exclusive_key`` (string; of the queue's live tasks sharing a key one runs at a time, the
    others wait in the key's backlog, which releases them in priority order: :mod:`shardq.lifecycle.exclusive`.
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


def field_specs(payload_limit: int) -> dict[str, Field]:
    """Every task field's :class:`Field`, the payload capped at ``payload_limit`` bytes."""
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
            "payload",
            ("binary", "string"),
            "binary",
            lambda c: [
                (c.isNull(), "payload is NULL"),
                (F.length(c) > payload_limit, f"payload longer than {payload_limit} bytes"),
            ],
            lambda c: empty_if_null(F.hex(c)),
        ),
        "run_at": Field(
            "run_at",
            ("timestamp", "string"),
            "timestamp",
            lambda c: [],
            lambda c: empty_if_null(F.unix_micros(c).cast("string")),
        ),
        "delay": Field(
            "delay",
            _NUMBERS + ("string",),
            "double",
            lambda c: [
                (c < 0, "delay is negative"),
                (c > validation.DELAY_MAX_SECONDS, f"delay over {validation.DELAY_MAX_SECONDS:.0f} seconds"),
                (F.isnan(c), "delay is NaN"),
            ],
            lambda c: empty_if_null(c.cast("string")),
        ),
        "dedupe_key": Field(
            "dedupe_key",
            ("string",),
            "string",
            lambda c: key_checks(c, "dedupe key"),
            lambda c: empty_if_null(c),
        ),
        "exclusive_key": Field(
            "exclusive_key",
            ("string",),
            "string",
            lambda c: key_checks(c, "exclusive key"),
            # hex: a key may contain the separator, and the fixed-format part must not
            lambda c: empty_if_null(F.hex(c)),
        ),
        "max_attempts": Field(
            "max_attempts",
            _INTEGERS + ("string",),
            "int",
            lambda c: [(c < 1, "max_attempts below 1"), (c > 10_000, "max_attempts above 10000")],
            lambda c: empty_if_null(c.cast("string")),
        ),
        "priority": Field(
            "priority",
            _INTEGERS + ("string",),
            "long",
            lambda c: [
                (c < PRIORITY_MIN, f"priority below {PRIORITY_MIN}"),
                (c > PRIORITY_MAX, f"priority above {PRIORITY_MAX}"),
            ],
            lambda c: empty_if_null(c.cast("string")),
        ),
        "row_key": Field(
            "row_key",
            ("string",) + _INTEGERS,
            "string",
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
    spec = field_specs(validation.PAYLOAD_MAX_BYTES)
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


#: fields that also take a string column, parsed (Spark's try_cast) as: (type, what it must be)
PARSED = {
    "run_at": ("timestamp", "a timestamp"),
    "delay": ("double", "a number"),
    "max_attempts": ("long", "a whole number"),
    "priority": ("long", "a whole number"),
}


def checked(field: Field, column: str, kind: str) -> tuple[Column, list[tuple[Column, str]]]:
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
            F.when(value > 0, F.lit((1 << 31) - 1)).otherwise(F.lit(-(1 << 31)))
        )
    return value.cast(field.cast_to)


def label(name: str, mapped: Mapping[str, str], labels: Mapping[str, str] | None) -> str:
    """How messages name a field's source: its label, else its column."""
    return (labels or {}).get(name) or repr(mapped[name])
