"""Task-API rows: a DataFrame column of arguments becomes the payload of a call of an app task.

``enqueue_dataframe(df, queue, task="myapp.tasks.resize", args_col="args")`` writes, for each row,
the payload :func:`shardq.arguments.encode_call` writes for ``resize.defer(**args)``, so
``shardq work --app`` runs Spark-written tasks like deferred ones. The payload is built with Spark
built-ins only (no Python on the executors), byte for byte as ``encode_call`` writes it:
compact separators, keys in the struct's field order (a map's in its entry order), strings
escaped as Python's ``json`` does with ``ensure_ascii`` (``\\"``, ``\\\\``, ``\\n``, ``\\r``,
``\\t``, ``\\b``, ``\\f``, every other character outside printable ASCII as lowercase
``\\uXXXX``, surrogate pairs above U+FFFF).

The arguments column is one of

* a **struct** (or a map with string keys): each field is an argument. Value types and what
  the task receives: string → ``str``; byte, short, int, long → ``int``; boolean → ``bool``;
  NULL → ``None``; decimal → ``Decimal`` (``str(Decimal)``'s text, exponent form included);
  date → ``date``; timestamp → an aware ``datetime`` in UTC; timestamp_ntz → a naive
  ``datetime``; arrays → ``list``; structs and string-keyed maps → ``dict``. Float and double are
  refused: Java and Python write a binary float's shortest text differently, so the payload could
  not be ``encode_call``'s; cast such a field to decimal (arrives as ``Decimal``) or string.
  Binary, intervals and other types are refused like ``encode_call`` refuses ``bytes``.
* a **string** holding a JSON object (``{"width": 64}``): checked to be one, then embedded as
  given. The task receives what ``json.loads`` (plus shardq's tagged types) makes of it; the
  payload equals ``encode_call``'s when the text is compact and ASCII-escaped, as
  ``json.dumps(args, separators=(",", ":"))`` writes it.

A NULL arguments value, a JSON text that is not an object and a map key ``$shardq`` (reserved
for shardq's tagged types) fail the job before anything is merged, with the number of bad rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from shardq import validation
from shardq.arguments import TAG
from shardq.errors import InvalidInput, InvalidTaskFrame
from shardq.spark.columns import TaskColumns

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType

#: the staging payload column built from the arguments (and the priority / max_attempts of an
#: AppTask, when no column maps them)
CALL_PAYLOAD = "__shardq_call_payload"
CALL_PRIORITY = "__shardq_call_priority"
CALL_MAX_ATTEMPTS = "__shardq_call_max_attempts"

_INTEGERS = ("byte", "short", "integer", "long")
# Python's json (ensure_ascii) writes these characters as short escapes.
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
# Strings made only of these (printable ASCII but " and \) need no escaping: the common case
# skips the per-character transform.
_PLAIN_TEXT = r"^[ !#-\[\]-~]*$"


@dataclass(frozen=True)
class CallTarget:
    """The task a DataFrame's rows call: its name and, for an :class:`shardq.app.AppTask`, the
    function's keyword parameters (checked against a struct's fields) and its defaults."""

    name: str
    priority: int | None = None
    max_attempts: int | None = None
    check_fields: Callable[[list[str]], None] | None = None


def call_target(task: Any) -> CallTarget:
    """A :class:`CallTarget` for a task name or an ``@app.task`` function."""
    from shardq.app.application import AppTask

    if isinstance(task, AppTask):
        declared = task

        def check_fields(names: list[str]) -> None:
            try:
                declared.check_arguments(dict.fromkeys(names))
            except InvalidInput as exc:  # worded by the signature
                raise InvalidTaskFrame(f"arguments do not fit {declared.name}: {exc}") from None

        return CallTarget(declared.name, declared.priority or None, declared.max_attempts, check_fields)
    if not isinstance(task, str) or not task or len(task) > validation.QUEUE_NAME_MAX:
        raise InvalidTaskFrame(f"task must be an @app.task or a name of 1..{validation.QUEUE_NAME_MAX} characters")
    return CallTarget(task)


def with_call_payload(
    df: DataFrame,
    task: Any,
    args_col: str,
    columns: TaskColumns,
    *,
    payload_limit: int = validation.PAYLOAD_MAX_BYTES,
) -> tuple[DataFrame, TaskColumns, dict[str, str], list[tuple[Column, str]]]:
    """``df`` with the call payload (and an AppTask's default priority / max_attempts) as
    columns, the mapping that stages them, the labels that name the user's column in messages
    about them, and the arguments' value checks (bad-row condition, message) for counting bad
    rows after a failed write (they never fail themselves)."""
    from pyspark.sql import functions as F

    target = call_target(task)
    if columns.payload != TaskColumns().payload:
        raise InvalidTaskFrame("map either a payload column or a task with its arguments column, not both")
    fields = {f.name: f for f in df.schema.fields}
    if args_col not in fields:
        available = ", ".join(sorted(fields)) or "none"
        raise InvalidTaskFrame(f"arguments column {args_col!r} is not in the DataFrame (columns: {available})")
    kind = fields[args_col].dataType
    if kind.typeName() not in ("string", "struct", "map"):
        raise InvalidTaskFrame(
            f"arguments column {args_col!r} has type {kind.typeName()}; accepted: struct, map, string (a JSON object)"
        )
    if kind.typeName() == "struct" and target.check_fields is not None:
        target.check_fields([f.name for f in kind.fields])  # type: ignore[attr-defined]
    column = F.col(f"`{args_col}`")
    label = f"{args_col!r} as a call of {target.name}"
    out = df.withColumn(CALL_PAYLOAD, _payload(column, kind, args_col, target.name, _fail))
    mapping = replace(columns, payload=CALL_PAYLOAD)
    if target.priority is not None and columns.priority is None:
        out = out.withColumn(CALL_PRIORITY, F.lit(target.priority))
        mapping = replace(mapping, priority=CALL_PRIORITY)
    if target.max_attempts is not None and columns.max_attempts is None:
        out = out.withColumn(CALL_MAX_ATTEMPTS, F.lit(target.max_attempts))
        mapping = replace(mapping, max_attempts=CALL_MAX_ATTEMPTS)

    # The same payload with every failure as NULL instead of an error, to count bad rows.
    # (NUL never appears in an encoded call: every control character is escaped.)
    lenient = _payload(column, kind, args_col, target.name, lambda message: F.lit(_BAD))
    checks = [(column.isNull(), f"arguments are NULL (column {args_col!r})")]
    if kind.typeName() == "string":
        checks.append(
            (column.isNotNull() & ~_is_json_object(column), f"arguments are not a JSON object (column {args_col!r})")
        )
    else:
        checks.append(
            (
                column.isNotNull() & (F.instr(lenient.cast("string"), _BAD) > 0),
                f"arguments hold the map key {TAG!r}, which is shardq's own (column {args_col!r})",
            )
        )
    checks.append(
        (
            F.coalesce(
                (F.length(lenient) > payload_limit) & (F.instr(lenient.cast("string"), _BAD) == 0), F.lit(False)
            ),
            f"payload longer than {payload_limit} bytes (column {label})",
        )
    )
    return out, mapping, {"payload": label}, checks


Fail = Callable[[str], "Column"]
_BAD = "\x00"  # what a failed value becomes in the payload built only to count bad rows


def _payload(column: Column, kind: DataType, args_col: str, task: str, fail: Fail) -> Column:
    from pyspark.sql import functions as F

    if kind.typeName() == "string":
        args_json = F.when(_is_json_object(column), F.trim(column)).otherwise(
            fail(f"arguments are not a JSON object (column {args_col!r})")
        )
    else:
        args_json = _json(column, kind, args_col, fail)
    args_json = F.when(column.isNull(), fail(f"arguments are NULL (column {args_col!r})")).otherwise(args_json)
    head = '{"task":' + json.dumps(task) + ',"args":'
    return F.concat(F.lit(head), args_json, F.lit("}")).cast("binary")


def _fail(message: str) -> Column:
    from pyspark.sql import functions as F

    from shardq.spark.checks import CHECK_MARKER

    return F.raise_error(F.lit(f"{CHECK_MARKER} {message}")).cast("string")


def _is_json_object(c: Column) -> Column:
    from pyspark.sql import functions as F

    parsed = F.from_json(c, "map<string,string>")
    return F.coalesce(F.ltrim(c).startswith("{") & parsed.isNotNull(), F.lit(False))


def json_string(c: Column) -> Column:
    """``c`` (a string) as Python's ``json`` writes it with ``ensure_ascii``, quotes included."""
    from pyspark.sql import functions as F

    def escape(ch: Column) -> Column:
        cp = F.ascii(ch)
        expr = F.when(cp <= 126, ch)  # printable ASCII (controls are taken first below)
        expr = F.when(
            cp >= 65536,
            F.format_string(
                "\\u%04x\\u%04x",
                F.lit(0xD800) + F.shiftright(cp - 65536, 10),
                F.lit(0xDC00) + ((cp - 65536).bitwiseAND(0x3FF)),
            ),
        ).otherwise(F.when(cp >= 127, F.format_string("\\u%04x", cp)).otherwise(expr))
        expr = F.when(cp < 32, F.format_string("\\u%04x", cp)).otherwise(expr)
        for char, escaped in _SHORT_ESCAPES.items():
            expr = F.when(ch == char, F.lit(escaped)).otherwise(expr)
        return expr

    slow = F.array_join(F.transform(F.regexp_extract_all(c, F.lit("(?s)."), 0), escape), "")
    body = F.when(c.rlike(_PLAIN_TEXT), c).otherwise(slow)
    return F.concat(F.lit('"'), body, F.lit('"'))


def _tagged(kind: str, text: Column) -> Column:
    from pyspark.sql import functions as F

    return F.concat(F.lit('{"' + TAG + '":"' + kind + '","v":"'), text, F.lit('"}'))


def _decimal_text(c: Column) -> Column:
    """``str(Decimal)`` of a Spark decimal: plain unless the adjusted exponent is below -6, then
    ``d.dddE-n`` (the General Decimal Arithmetic rule Python follows; Spark's scale is >= 0)."""
    from pyspark.sql import functions as F

    plain = c.cast("string")
    sign = F.when(plain.startswith("-"), F.lit("-")).otherwise(F.lit(""))
    scale = F.coalesce(F.length(F.regexp_extract(plain, r"\.(\d*)$", 1)), F.lit(0))
    digits = F.regexp_replace(F.regexp_replace(plain, r"[-.]", ""), "^0+(?=.)", "")
    adjusted = F.length(digits) - 1 - scale
    rest = F.substring(digits, 2, 1 << 20)
    mantissa = F.when(F.length(digits) > 1, F.concat(F.substring(digits, 1, 1), F.lit("."), rest)).otherwise(digits)
    exponent = F.concat(sign, mantissa, F.lit("E"), adjusted.cast("string"))
    return F.when(adjusted >= -6, plain).otherwise(exponent)


def _two(n: Column) -> Column:
    from pyspark.sql import functions as F

    return F.lpad(n.cast("string"), 2, "0")


def _iso_from_micros(micros: Column) -> Column:
    """``YYYY-MM-DDTHH:MM:SS[.ffffff]`` of a count of microseconds since 1970-01-01 00:00
    (``datetime.isoformat``: the fraction only when it is not zero), without time zones."""
    from pyspark.sql import functions as F

    day = F.lit(86_400_000_000)
    of_day = F.pmod(micros, day)
    # decimal division: exact, where a double would round micros beyond 2^53 (after 2255)
    date = F.date_from_unix_date(((micros - of_day).cast("decimal(38,0)") / day).cast("int"))
    seconds = (of_day / 1_000_000).cast("long")
    fraction = F.pmod(of_day, F.lit(1_000_000))
    clock = F.concat_ws(
        ":",
        _two((seconds / 3600).cast("long")),
        _two((F.pmod(seconds, F.lit(3600)) / 60).cast("long")),
        _two(F.pmod(seconds, F.lit(60))),
    )
    tail = F.when(fraction == 0, F.lit("")).otherwise(F.concat(F.lit("."), F.lpad(fraction.cast("string"), 6, "0")))
    return F.concat(date.cast("string"), F.lit("T"), clock, tail)


def _json(c: Column, kind: DataType, where: str, fail: Fail) -> Column:  # noqa: C901 - one case per Spark type a call argument can have
    """``c``'s value as ``encode_call`` writes it ('null' for NULL); refuses types it cannot."""
    from pyspark.sql import functions as F

    name = kind.typeName()
    if name == "string":
        text = json_string(c)
    elif name in _INTEGERS:
        text = c.cast("string")
    elif name == "boolean":
        text = F.when(c, F.lit("true")).otherwise(F.lit("false"))
    elif name == "void":
        return F.lit("null")
    elif name == "decimal":
        text = _tagged("decimal", _decimal_text(c))
    elif name == "date":
        text = _tagged("date", c.cast("string"))
    elif name == "timestamp":
        text = _tagged("datetime", F.concat(_iso_from_micros(F.unix_micros(c)), F.lit("+00:00")))
    elif name == "timestamp_ntz":
        epoch = F.lit("1970-01-01 00:00:00").cast("timestamp_ntz")
        text = _tagged("datetime", _iso_from_micros(F.timestamp_diff("MICROSECOND", epoch, c)))
    elif name == "array":
        element = kind.elementType  # type: ignore[attr-defined]
        items = F.transform(c, lambda x: _json(x, element, f"{where}[]", fail))
        text = F.concat(F.lit("["), F.array_join(items, ","), F.lit("]"))
    elif name == "struct":
        parts = []
        for field in kind.fields:  # type: ignore[attr-defined]
            if field.name == TAG:
                raise InvalidTaskFrame(f"argument {where}.{field.name}: the key {TAG!r} is shardq's own")
            parts.append(
                F.concat(
                    F.lit(json.dumps(field.name) + ":"),
                    _json(c[field.name], field.dataType, f"{where}.{field.name}", fail),
                )
            )
        text = F.concat(F.lit("{"), F.concat_ws(",", *parts), F.lit("}")) if parts else F.lit("{}")
    elif name == "map":
        if kind.keyType.typeName() != "string":  # type: ignore[attr-defined]
            raise InvalidTaskFrame(f"argument {where}: map keys must be strings, not {kind.keyType.typeName()}")  # type: ignore[attr-defined]
        value_type = kind.valueType  # type: ignore[attr-defined]
        entries = F.transform(
            F.map_entries(c),
            lambda e: F.concat(json_string(e["key"]), F.lit(":"), _json(e["value"], value_type, f"{where}{{}}", fail)),
        )
        root = re.split(r"[.\[{]", where, maxsplit=1)[0]
        text = F.when(
            F.array_contains(F.map_keys(c), TAG),
            fail(f"arguments hold the map key {TAG!r}, which is shardq's own, in {where} (column {root!r})"),
        ).otherwise(F.concat(F.lit("{"), F.array_join(entries, ","), F.lit("}")))
    elif name in ("float", "double"):
        raise InvalidTaskFrame(
            f"argument {where} is {name}: Spark and Python write a binary float's text differently, so the "
            "payload could not be encode_call's; cast it to decimal (the task gets a Decimal) or string"
        )
    else:
        raise InvalidTaskFrame(
            f"argument {where} has type {name}, which cannot be a task argument "
            "(strings, integers, booleans, decimals, dates, timestamps, arrays, structs and string-keyed maps can)"
        )
    return F.when(c.isNull(), F.lit("null")).otherwise(text)
