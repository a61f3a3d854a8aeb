"""A queue's activity charts over a time range, drawn on the server from the stored counters:
the last hour per minute (``shardq_stats``), the last 24 hours or 7 days per hour
(``shardq_stats_hourly``, migration 0009; the current and the previous hour summed from the
minutes themselves, whichever is larger). Series: enqueued, acked (throughput) and failed
(retried + expired + dead), each a fixed colour, every slot of the range present (0 when nothing
was counted), so a chart starts full width and does not depend on what the browser saw.

A second chart (``latency``): per slot, the mean lead time (enqueue to ack) and the mean
enqueue-to-start latency (due to the first attempt's start) of the tasks workers finished in it,
from the latency counters workers add (migration 0012, :mod:`shardq.worker.latency`); a slot
where none was measured has no point (``None``), and its line breaks there.

Does not: show latency for slots before migration 0012 or from workers older than it (none
measured). Hours before the dashboard's migration, or older than the hourly rows kept (8 days),
show as 0.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from shardq.errors import InvalidInput
from shardq.operations import charts
from shardq.sessions.store import TaskStore
from shardq.web.views import known_queue

#: range name -> (slot width, number of slots)
RANGES = {"1h": (dt.timedelta(minutes=1), 60), "24h": (dt.timedelta(hours=1), 24), "7d": (dt.timedelta(hours=1), 168)}
#: series -> colour (fixed: a series keeps its colour whatever else is drawn)
SERIES = {"enqueued": "#2463eb", "acked": "#10b981", "failed": "#dc2626"}
#: latency series -> (counter of seconds, counter of tasks, colour)
LATENCY = {
    "lead time": ("lead_seconds", "lead_acks", "#7c3aed"),
    "start latency": ("start_wait_seconds", "first_starts", "#f59e0b"),
}
COUNTERS = (*SERIES, "lead_seconds", "lead_acks", "start_wait_seconds", "first_starts")
MINUTE = dt.timedelta(minutes=1)
WIDTH, HEIGHT = 640, 140


def queue_charts(store: TaskStore, queue: str, range_name: str = "1h") -> dict[str, Any]:
    """The series of ``queue`` over ``range_name`` (1h, 24h, 7d): per slot counts and an SVG
    polyline per series scaled to the range's peak."""
    known_queue(store, queue)
    if range_name not in RANGES:
        raise InvalidInput(f"range must be one of {', '.join(RANGES)}")
    step, slots = RANGES[range_name]
    minutes = store.run(charts.stats_minutes_of_queue(queue, slots - 1 if step == MINUTE else 119))
    found: dict[dt.datetime, dict[str, float]] = {}
    if step == MINUTE:
        rows = minutes
        for row in rows:
            found[row["at"]] = {name: float(row[name]) for name in COUNTERS}
    else:
        rows = store.run(charts.stats_hours_of_queue(queue, slots - 1))
        for row in rows:
            found[row["at"]] = {name: float(row[name]) for name in COUNTERS}
        # The current and the previous hour from the minutes themselves: their hourly rows are only
        # as fresh as the last prune (about a minute; never, while no worker or reaper runs).
        recent: dict[dt.datetime, dict[str, float]] = {}
        for row in minutes:
            hour = recent.setdefault(_floor(row["at"], step), dict.fromkeys(COUNTERS, 0.0))
            for name in COUNTERS:
                hour[name] += float(row[name])
        for hour_at, sums in recent.items():
            kept = found.setdefault(hour_at, dict.fromkeys(COUNTERS, 0.0))
            for name in COUNTERS:
                kept[name] = max(kept[name], sums[name])
    source = rows or minutes
    now_at = _floor(source[0]["now_at"], step) if source else _floor(dt.datetime.now(dt.UTC), step)
    starts = [now_at - step * (slots - 1 - i) for i in range(slots)]
    values = {name: [int(found[s][name]) if s in found else 0 for s in starts] for name in SERIES}
    peak = max((max(v) for v in values.values()), default=0) or 1
    x_step = WIDTH / max(1, slots - 1)

    def points(series: list[int]) -> str:
        return " ".join(
            f"{round(i * x_step, 1)},{round(HEIGHT - 4 - v / peak * (HEIGHT - 8), 1)}" for i, v in enumerate(series)
        )

    return {
        "queue": queue,
        "range": range_name,
        "ranges": list(RANGES),
        "step_s": step.total_seconds(),
        "starts": [s.isoformat() for s in starts],
        "peak": peak if peak != 1 or any(any(v) for v in values.values()) else 0,
        "width": WIDTH,
        "height": HEIGHT,
        "series": [
            {
                "name": name,
                "colour": colour,
                "values": values[name],
                "total": sum(values[name]),
                "points": points(values[name]),
            }
            for name, colour in SERIES.items()
        ],
        "latency": _latency(found, starts, x_step),
    }


def _latency(found: dict[dt.datetime, dict[str, float]], starts: list[dt.datetime], x_step: float) -> dict[str, Any]:
    """Mean seconds per slot of each latency series (None: nothing measured in the slot), each
    drawn as polylines broken where a slot has no value, scaled to the peak mean."""
    means: dict[str, list[float | None]] = {}
    for name, (seconds, tasks, _colour) in LATENCY.items():
        means[name] = [found[s][seconds] / found[s][tasks] if s in found and found[s][tasks] else None for s in starts]
    peak = max((v for series in means.values() for v in series if v is not None), default=0.0)
    scale = peak or 1.0
    series = []
    for name, (seconds, tasks, colour) in LATENCY.items():
        runs: list[list[str]] = [[]]
        for i, v in enumerate(means[name]):
            if v is None:
                if runs[-1]:
                    runs.append([])
                continue
            runs[-1].append(f"{round(i * x_step, 1)},{round(HEIGHT - 4 - v / scale * (HEIGHT - 8), 1)}")
        counted = sum(found[s][tasks] for s in starts if s in found)
        series.append(
            {
                "name": name,
                "colour": colour,
                "values": means[name],
                # a lone point is a zero-length line: its round caps draw it as a dot
                "segments": [" ".join(run if len(run) > 1 else run * 2) for run in runs if run],
                "mean": sum(found[s][seconds] for s in starts if s in found) / counted if counted else None,
            }
        )
    return {"peak_s": peak, "series": series}


def _floor(moment: dt.datetime, step: dt.timedelta) -> dt.datetime:
    if step == MINUTE:
        return moment.replace(second=0, microsecond=0)
    return moment.replace(minute=0, second=0, microsecond=0)
