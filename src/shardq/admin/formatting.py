"""Counts, durations and rates written for people: the terminal and the web dashboard share them."""

from __future__ import annotations

from shardq.models.stats import Accuracy


# -- formatting ---------------------------------------------------------------------------------
def count_text(value: int, accuracy: Accuracy = Accuracy.EXACT) -> str:
    mark = {Accuracy.EXACT: "", Accuracy.AT_LEAST: "≥", Accuracy.ESTIMATE: "~"}[accuracy]
    return f"{mark}{value:,}"


def duration_text(seconds: float | None, *, at_least: bool = False) -> str:
    """``-`` for unknown; otherwise a short human duration (``850ms``, ``12.3s``, ``4m05s``,
    ``3h12m``, ``2d03h``)."""
    if seconds is None:
        return "-"
    if seconds == 0:
        return "0s"
    prefix = "≥" if at_least else ""
    if seconds < 0.001:
        return f"{prefix}{seconds * 1e6:.0f}µs"
    if seconds < 1:
        return f"{prefix}{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{prefix}{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{prefix}{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{prefix}{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{prefix}{days}d{hours:02d}h"


def rate_text(per_second: float) -> str:
    if per_second == 0:
        return "0"
    if per_second >= 10_000:
        return f"{per_second / 1000:.0f}k/s"
    if per_second >= 1000:
        return f"{per_second / 1000:.1f}k/s"
    if per_second >= 10:
        return f"{per_second:.0f}/s"
    return f"{per_second:.2f}/s"
