"""Value checks of a staged DataFrame, and the report of a failed one.

Value checks run inside the Spark job (``raise_error``), before anything reaches the queue: a
NULL payload, a payload over the size cap, an empty or over-long dedupe key, a negative delay, a
max_attempts outside 1…10000, a string that does not parse as its field's type. The write then
fails (so no chunk is merged and nothing of the run is enqueued), and :func:`count_bad_rows`
counts every failed check in one more pass: :class:`shardq.errors.InvalidTaskFrame` says, e.g.,
``payload is NULL (column 'body'): 2 of 50 rows; delay is not a number (column 'd'): 1 of 50 rows``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from shardq import validation
from shardq.spark.columns import TaskColumns, check_columns, checked, field_specs, label

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Marks the messages of the checks, so a failed Spark job can be told apart from others.
CHECK_MARKER = "shardq-invalid-task:"


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
    spec = field_specs(payload_limit)
    kinds = {f.name: f.dataType.typeName() for f in df.schema.fields}
    skipped = set(skip)
    return [
        (bad, f"{message} (column {label(name, mapped, labels)})")
        for name, column in mapped.items()
        if name not in skipped
        for bad, message in checked(spec[name], column, kinds[column])[1]
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
    line = text[start + len(CHECK_MARKER) :].splitlines()[0]
    # Spark quotes the raise_error message; cut at the closing quote if there is one.
    return (
        line.split("'", 1)[0].split('"', 1)[0].strip() if "(column" not in line else line[: line.index(")") + 1].strip()
    )
