"""Showing stats to people: the ``shardq stats`` table, its ``--watch`` loop, and ``shardq top``.

Everything here renders a :class:`shardq.models.Stats` snapshot with rich; nothing here reads the
database (the caller passes a function that returns a fresh snapshot), so frames can be rendered
and tested without a terminal (``Console(record=True)``).

Counts that are not exact are marked: ``≥1,234`` reached the per-bucket cap somewhere (the true
number is higher), ``~1,234`` was extrapolated from a sample of buckets."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from shardq.admin.formatting import count_text, duration_text, rate_text
from shardq.errors import DatabaseError
from shardq.models.stats import Accuracy, QueueStats, Stats

log = logging.getLogger("shardq.cli.terminal")


BARS = " ▁▂▃▄▅▆▇█"


BUCKET_TABLE_MAX = 32  # more buckets than this are drawn as one strip instead of a table


BAR_WIDTH = 30


#: Widest the queue column of ``shardq stats`` gets (longer names end in "…"; the web page shows them whole).
QUEUE_COLUMN_MAX = 32


PIPE_WIDTH = 160  # a pipe or file has no width; rich would assume 80 and truncate columns


def make_console() -> Console:
    """A console for the command line: the terminal's width, or a wide one when writing to a
    pipe or file (unless ``COLUMNS`` says otherwise)."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=PIPE_WIDTH)
    return console


def _lead(q: QueueStats, value: float | None) -> str:
    inexact = any(q.accuracy_of(c) is Accuracy.AT_LEAST for c in ("ready", "leased"))
    if value is None:
        return "∞" if q.due_depth else "-"
    return duration_text(value, at_least=inexact)


# -- renderables --------------------------------------------------------------------------------
def queues_table(stats: Stats, *, wide: bool = False, title: str | None = None) -> Table:
    """One row per queue: depth, lag, rates and lead time (``wide`` adds handler timings; a
    ``backlog`` column appears when some queue has tasks waiting for an exclusive key, a
    ``waiting`` one when some queue has workflow steps waiting for their parents, an
    ``expired`` one when some queue holds leases that ran out (not running: waiting for a sweep), and
    ``slots`` (held / limit) and ``throttled`` (refused claims in the window) when some queue
    has a flow limit)."""
    table = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True
    )
    backlogs = any(q.backlog for q in stats.queues.values())
    waiting = any(q.waiting for q in stats.queues.values())
    limited = any(q.concurrency_limit is not None or q.rate_limit is not None for q in stats.queues.values())
    expired = any(q.expired for q in stats.queues.values())
    columns = (
        ["queue", "ready", "sched", "leased"] + (["expired"] if expired else []) + (["backlog"] if backlogs else [])
    )
    columns += ["waiting"] if waiting else []
    columns += ["dead", "oldest", "in/s", "done/s", "fail/s", "lead time"]
    if limited:
        columns += ["slots", "throttled"]
    if wide:
        columns += ["lead (dur)", "handler", "threads", "util"]
    for column in columns:
        if column == "queue":  # a long name is cut with an ellipsis, not allowed to push the numbers off
            table.add_column(column, justify="left", no_wrap=True, overflow="ellipsis", max_width=QUEUE_COLUMN_MAX)
        else:
            table.add_column(column, justify="right", no_wrap=True)
    for name, q in sorted(stats.queues.items()):
        failing = q.failure_ratio is not None and q.failure_ratio > 0
        row = [
            name,
            count_text(q.ready, q.accuracy_of("ready")),
            count_text(q.scheduled, q.accuracy_of("scheduled")),
            count_text(q.leased, q.accuracy_of("leased")),
            *(
                [Text(count_text(q.expired, q.accuracy_of("expired")), style="yellow" if q.expired else "")]
                if expired
                else []
            ),
            *([count_text(q.backlog, q.accuracy_of("backlog"))] if backlogs else []),
            *([count_text(q.waiting, q.accuracy_of("waiting"))] if waiting else []),
            Text(count_text(q.dead, q.accuracy_of("dead")), style="red" if q.dead else ""),
            duration_text(q.oldest_ready_age_s),
            rate_text(q.enqueue_rate),
            rate_text(q.completion_rate),
            Text(
                rate_text(q.failure_rate) + (f" {q.failure_ratio:.0%}" if failing else ""),
                style="yellow" if failing else "",
            ),
            _lead(q, q.lead_time_s),
        ]
        if limited:
            row += [
                "-" if q.concurrency_limit is None else f"{q.slots_in_use}/{q.concurrency_limit}",
                str(q.activity.throttled) if q.concurrency_limit is not None or q.rate_limit is not None else "-",
            ]
        if wide:
            row += [
                _lead(q, q.lead_time_by_duration_s),
                duration_text(q.mean_handler_s),
                "-" if q.handler_threads is None else f"{q.handler_threads:.1f}",
                "-" if q.utilization is None else f"{q.utilization:.0%}",
            ]
        table.add_row(*(str(cell) if not isinstance(cell, str) else cell for cell in row))
    if not stats.queues:
        table.add_row("(no queues)", *[""] * (len(columns) - 1))
    return table


def bucket_totals(stats: Stats) -> dict[int, tuple[int, int, int]]:
    """(ready, scheduled, leased) per counted bucket, summed over queues."""
    totals: dict[int, list[int]] = {b: [0, 0, 0] for b in stats.buckets_counted}
    for q in stats.queues.values():
        for bucket, depth in q.per_bucket.items():
            t = totals.setdefault(bucket, [0, 0, 0])
            t[0] += depth.ready
            t[1] += depth.scheduled
            t[2] += depth.leased
    return {b: (t[0], t[1], t[2]) for b, t in sorted(totals.items())}


def buckets_view(stats: Stats) -> RenderableType:
    """Due depth (ready + leased) per bucket, all queues together, so skew shows: a table with
    bars for up to 32 buckets, else one strip of block characters (one per bucket)."""
    totals = bucket_totals(stats)
    depth = {b: r + line for b, (r, s, line) in totals.items()}
    peak = max(depth.values(), default=0)
    mean = sum(depth.values()) / len(depth) if depth else 0.0
    sampled = len(stats.buckets_counted) < stats.buckets
    summary = f"per-bucket due depth (ready + leased), {len(depth)} bucket(s)"
    if sampled:
        summary += f" sampled of {stats.buckets}"
    if peak and mean:
        worst = max(depth, key=lambda bucket: depth[bucket])
        summary += f"; skew max/mean {peak / mean:.2f} (bucket {worst})"
    capped = stats.bucket_cap is not None and any(max(r, s, line) >= stats.bucket_cap for r, s, line in totals.values())
    if capped:
        summary += f"; counts capped at {stats.bucket_cap:,} per bucket and queue"
    if len(totals) > BUCKET_TABLE_MAX:
        strip = "".join(
            BARS[0 if not peak else max(1 if v else 0, round(v / peak * (len(BARS) - 1)))] for v in depth.values()
        )
        return Group(Text(summary, style="bold"), Text(strip or "(none)"))
    table = Table(pad_edge=False, box=None)
    for column in ("bucket", "ready", "sched", "leased", ""):
        table.add_column(column, justify="right" if column else "left", no_wrap=True)
    for bucket, (ready, scheduled, leased) in totals.items():
        width = round(depth[bucket] / peak * BAR_WIDTH) if peak else 0
        table.add_row(str(bucket), f"{ready:,}", f"{scheduled:,}", f"{leased:,}", Text("█" * width, style="cyan"))
    return Group(Text(summary, style="bold"), table)


def _header(stats: Stats, extra: str = "") -> Text:
    when = stats.as_of.strftime("%H:%M:%S") if stats.as_of else "?"
    source = "follower read" if stats.follower_read else "current"
    text = f"shardq — {stats.dialect or '?'}, {stats.buckets} buckets, as of {when} ({source}), "
    text += f"rates over {stats.window_s / 60:.1f} min"
    return Text(text + (f" — {extra}" if extra else ""), style="bold")


def stats_view(stats: Stats) -> RenderableType:
    """The ``shardq stats`` table."""
    return Group(_header(stats), queues_table(stats))


def dashboard(stats: Stats, *, interval: float | None = None, error: str | None = None) -> RenderableType:
    """One ``shardq top`` frame: header, the wide queues table, and per-bucket depth."""
    extra = f"every {interval:g}s, q quits" if interval else ""
    parts: list[RenderableType] = [_header(stats, extra)]
    if error:
        parts.append(Text(f"last refresh failed: {error} (showing the previous snapshot)", style="red"))
    parts += [queues_table(stats, wide=True), Text(""), buckets_view(stats)]
    return Group(*parts)


# -- live loops ---------------------------------------------------------------------------------
class _Keys:
    """Single keypresses from a terminal (cbreak mode while in use); on anything else, waiting
    is just sleeping."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdin
        self._saved: list[Any] | None = None

    def __enter__(self) -> _Keys:
        try:
            if self.stream.isatty():
                import termios
                import tty

                fd = self.stream.fileno()
                self._saved = termios.tcgetattr(fd)
                tty.setcbreak(fd)
        except (OSError, ValueError, AttributeError):
            self._saved = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            import termios

            termios.tcsetattr(self.stream.fileno(), termios.TCSADRAIN, self._saved)

    def wait(self, seconds: float) -> str | None:
        """Wait up to ``seconds``; return a key pressed meanwhile, if any."""
        if self._saved is None:
            time.sleep(seconds)
            return None
        readable, _, _ = select.select([self.stream], [], [], seconds)
        if readable:
            return os.read(self.stream.fileno(), 1).decode(errors="ignore")
        return None


def _snapshots(fetch: Callable[[], Stats], last: Stats | None) -> tuple[Stats | None, str | None]:
    try:
        return fetch(), None
    except DatabaseError as exc:  # a hiccup must not end a dashboard; show it and retry
        return last, str(exc)


def run_live(
    fetch: Callable[[], Stats],
    render: Callable[[Stats, str | None], RenderableType],
    *,
    interval: float,
    iterations: int | None = None,
    console: Console | None = None,
    keys: bool = True,
) -> int:
    """Redraw ``render(fetch())`` every ``interval`` seconds until Ctrl-C, ``q`` (when ``keys``
    and stdin is a terminal) or ``iterations`` frames. Returns the number of frames drawn.

    On a terminal the frame is redrawn in place (rich ``Live``; with ``keys``, on the alternate
    screen, so the shell is left as it was); otherwise (a pipe, a file, a recording console)
    each frame is printed after the previous one."""
    from rich.live import Live

    console = console or make_console()
    frames = 0
    last: Stats | None = None
    with contextlib.ExitStack() as stack:
        key_reader = stack.enter_context(_Keys()) if keys else None
        live = None
        if console.is_terminal:
            live = stack.enter_context(Live(console=console, auto_refresh=False, screen=keys, transient=False))
        try:
            while iterations is None or frames < iterations:
                last, error = _snapshots(fetch, last)
                if last is not None:
                    frame = render(last, error)
                else:
                    frame = Text(f"waiting for the database: {error}", style="red")
                if live is not None:
                    live.update(frame, refresh=True)
                else:
                    console.print(frame)
                frames += 1
                if iterations is not None and frames >= iterations:
                    break
                if key_reader is not None:
                    pressed = key_reader.wait(interval)
                else:
                    time.sleep(interval)
                    pressed = None
                if pressed and pressed.lower() == "q":
                    break
        except KeyboardInterrupt:
            pass
    return frames


def iterate(fetch: Callable[[], Stats], *, interval: float, iterations: int | None = None) -> Iterator[Stats]:
    """Snapshots every ``interval`` seconds (for ``stats --watch --json``); stops on Ctrl-C or
    after ``iterations``. A failed fetch is skipped and logged as a warning."""
    count = 0
    try:
        while iterations is None or count < iterations:
            stats, error = _snapshots(fetch, None)
            if stats is not None:
                yield stats
            else:
                log.warning("stats snapshot failed: %s", error)
            count += 1
            if iterations is None or count < iterations:
                time.sleep(interval)
    except KeyboardInterrupt:
        return
