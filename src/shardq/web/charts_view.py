"""A queue's activity charts over a time range, drawn on the server from the stored counters:
the last hour per minute (``shardq_stats``), the last 24 hours or 7 days per hour
(``shardq_stats_hourly``, migration 0009; the current and the previous hour summed from the
minutes themselves, whichever is larger). Series: enqueued, acked (throughput) and failed
(retried + expired + dead), each a fixed colour, every slot of the range present (0 when nothing
was counted), so a chart starts full width and does not depend on what the browser saw.

Does not: chart lead time or enqueue-to-start latency (the counters hold neither; lead time is a
snapshot of depth over rate, see ``shardq stats``). Hours before the dashboard's migration, or
older than the hourly rows kept (8 days), show as 0.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..errors import InvalidInput
from ..operations import charts as plans
from ..store import TaskStore
from .views import known_queue

#: range name -> (slot width, number of slots)
RANGES = {"1h": (dt.timedelta(minutes=1), 60), "24h": (dt.timedelta(hours=1), 24), "7d": (dt.timedelta(hours=1), 168)}
#: series -> colour (fixed: a series keeps its colour whatever else is drawn)
SERIES = {"enqueued": "#2463eb", "acked": "#10b981", "failed": "#dc2626"}
MINUTE = dt.timedelta(minutes=1)
WIDTH, HEIGHT = 640, 140


def queue_charts(store: TaskStore, queue: str, range_name: str = "1h") -> dict[str, Any]:
    """The series of ``queue`` over ``range_name`` (1h, 24h, 7d): per slot counts and an SVG
    polyline per series scaled to the range's peak."""
    known_queue(store, queue)
    if range_name not in RANGES:
        raise InvalidInput(f"range must be one of {', '.join(RANGES)}")
    step, slots = RANGES[range_name]
    minutes = store.run(plans.stats_minutes_of_queue(queue, slots - 1 if step == MINUTE else 119))
    found: dict[dt.datetime, dict[str, int]] = {}
    if step == MINUTE:
        rows = minutes
        for row in rows:
            found[row["at"]] = {name: int(row[name]) for name in SERIES}
    else:
        rows = store.run(plans.stats_hours_of_queue(queue, slots - 1))
        for row in rows:
            found[row["at"]] = {name: int(row[name]) for name in SERIES}
        # The current and the previous hour from the minutes themselves: their hourly rows are only
        # as fresh as the last prune (about a minute; never, while no worker or reaper runs).
        recent: dict[dt.datetime, dict[str, int]] = {}
        for row in minutes:
            hour = recent.setdefault(_floor(row["at"], step), dict.fromkeys(SERIES, 0))
            for name in SERIES:
                hour[name] += int(row[name])
        for hour_at, sums in recent.items():
            kept = found.setdefault(hour_at, dict.fromkeys(SERIES, 0))
            for name in SERIES:
                kept[name] = max(kept[name], sums[name])
    source = rows or minutes
    now_at = _floor(source[0]["now_at"], step) if source else _floor(dt.datetime.now(dt.UTC), step)
    starts = [now_at - step * (slots - 1 - i) for i in range(slots)]
    values = {name: [found[s][name] if s in found else 0 for s in starts] for name in SERIES}
    peak = max((max(v) for v in values.values()), default=0) or 1
    x_step = WIDTH / max(1, slots - 1)

    def points(series: list[int]) -> str:
        return " ".join(f"{round(i * x_step, 1)},{round(HEIGHT - 4 - v / peak * (HEIGHT - 8), 1)}"
                        for i, v in enumerate(series))

    return {
        "queue": queue, "range": range_name, "ranges": list(RANGES), "step_s": step.total_seconds(),
        "starts": [s.isoformat() for s in starts], "peak": peak if peak != 1 or any(any(v) for v in values.values()) else 0,
        "width": WIDTH, "height": HEIGHT,
        "series": [{"name": name, "colour": colour, "values": values[name], "total": sum(values[name]),
                    "points": points(values[name])} for name, colour in SERIES.items()],
    }


def _floor(moment: dt.datetime, step: dt.timedelta) -> dt.datetime:
    if step == MINUTE:
        return moment.replace(second=0, microsecond=0)
    return moment.replace(minute=0, second=0, microsecond=0)
