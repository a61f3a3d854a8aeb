"""Periodic tasks: an app's tasks enqueued on a schedule by its workers, with no leader.

Declared on a task with ``@app.periodic(cron="*/5 * * * *")`` or ``@app.periodic(every=30)`` above
``@app.task``; optional ``args={...}`` (the task's arguments; ``timestamp``, if the function takes
it, is the slot's scheduled time in Unix seconds), ``tz`` (the cron's time zone, default UTC),
``name`` (the schedule's, default the task's) and ``catch_up`` (0).

Guarantees
    * Each slot (a time the schedule names) runs **exactly once**, however many workers schedule it
      and however they start and stop: a worker enqueues a slot's task only if its insert of
      (schedule, slot) into ``shardq_periodic`` is the one that succeeds, in the same statement as
      the task (``periodic_slot_take``). The row outlives the task, so a late worker cannot enqueue
      the slot again after the task was acked and deleted. Rows are pruned after a day, never a
      schedule's latest.
    * While at least one worker runs, every slot is taken within ``TICK_SECONDS_MAX`` of its time
      (sooner for short ``every``).
    * After downtime only the latest missed slot runs; ``catch_up=N`` also runs up to N missed
      slots before it (oldest first), never more.
    * Cost: a worker sends one statement per slot that falls due, none per tick in between, and
      one bounded prune statement a minute.
    * A worker's scheduler is a background service like the others: :meth:`Scheduler.run_once` is
      one pass (take what is due, prune once a minute), and :meth:`Scheduler.run` only schedules
      passes, every tick, on :func:`shardq.maintenance.loop.repeat`, so a failed pass (a lost
      connection, anything the database refused) is logged and retried with backoff up to
      ``RETRY_PAUSE_MAX`` seconds: a slot is taken late, not lost.

Does not
    * run a slot whose queue is paused for enqueue at its time: the slot is taken and skipped.
    * run slots of a schedule before the first worker that knows it starts: the latest slot at
      that start is its first."""

from __future__ import annotations

import datetime as dt
import inspect
import logging
import math
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from shardq.arguments import encode_call
from shardq.errors import InvalidInput
from shardq.maintenance.loop import repeat
from shardq.maintenance.pruning import prune_slots
from shardq.sessions.store import TaskStore

log = logging.getLogger("shardq.maintenance.periodic")


#: the longest a scheduler sleeps between looks at its schedules
TICK_SECONDS_MAX = 0.5


TICK_SECONDS_MIN = 0.05


#: how often a scheduler prunes old slot rows (:func:`shardq.maintenance.pruning.prune_slots`)
PRUNE_SECONDS = 60.0


#: the longest pause between failed passes of :meth:`Scheduler.run`
RETRY_PAUSE_MAX = 5.0


CATCH_UP_MAX = 100


#: the argument a periodic task may declare to receive its slot's time
TIMESTAMP_ARGUMENT = "timestamp"


UTC = dt.UTC


def takes_timestamp(function: Callable[..., Any], args: Mapping[str, Any]) -> bool:
    """Whether each slot passes its time to ``function``: it has a ``timestamp`` parameter that
    the schedule's ``args`` do not fill."""
    return TIMESTAMP_ARGUMENT in inspect.signature(function).parameters and TIMESTAMP_ARGUMENT not in args


@dataclass(frozen=True)
class Schedule:
    """One schedule of one task: ``cron`` (in ``tz``) or ``every`` seconds (slots at whole
    multiples of ``every`` since the Unix epoch), with fixed ``args``. It holds plain values taken
    from the task when it is declared (``task`` is the task's name; ``queue``, ``priority``,
    ``max_attempts`` its defaults; ``takes_timestamp``: see :func:`takes_timestamp`), so the
    scheduler needs nothing of the app."""

    name: str
    task: str
    queue: str
    cron: str | None = None
    every: float | None = None
    args: Mapping[str, Any] = field(default_factory=dict)
    tz: str = "UTC"
    catch_up: int = 0
    priority: int = 0
    max_attempts: int | None = None
    takes_timestamp: bool = False

    def validate(self, check: Callable[[Mapping[str, Any]], None] | None = None) -> Schedule:
        """Refuse (:class:`InvalidInput`) a schedule that cannot run: neither or both of cron and
        every, an unknown zone, a cron that does not parse, a bad ``every`` or ``catch_up``, args
        that ``check`` (the task's argument check) refuses or that cannot be stored."""
        if (self.cron is None) == (self.every is None):
            raise InvalidInput(f"periodic {self.name}: give exactly one of cron= and every=")
        try:
            zone = ZoneInfo(self.tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidInput(f"periodic {self.name}: unknown time zone {self.tz!r}") from None
        if self.cron is not None:
            try:
                CronSim(self.cron, dt.datetime.now(zone))
            except CronSimError as exc:
                raise InvalidInput(f"periodic {self.name}: cron {self.cron!r} does not parse: {exc}") from None
        if self.every is not None and (
            isinstance(self.every, bool)
            or not isinstance(self.every, (int, float))
            or not math.isfinite(self.every)
            or self.every <= 0
        ):
            raise InvalidInput(f"periodic {self.name}: every must be a positive number of seconds")
        if (
            isinstance(self.catch_up, bool)
            or not isinstance(self.catch_up, int)
            or not 0 <= self.catch_up <= CATCH_UP_MAX
        ):
            raise InvalidInput(f"periodic {self.name}: catch_up must be a whole number 0..{CATCH_UP_MAX}")
        arguments = dict(self.args)
        if self.takes_timestamp:
            arguments[TIMESTAMP_ARGUMENT] = 0
        if check is not None:
            try:
                check(arguments)
            except InvalidInput as exc:
                raise InvalidInput(f"periodic {self.name}: the schedule's args do not fit the task ({exc})") from None
        encode_call(self.task, arguments)  # refuses what cannot be stored, now rather than at a slot
        return self

    def latest_slot(self, now: dt.datetime) -> dt.datetime:
        """The last slot at or before ``now`` (aware)."""
        if self.every is not None:
            seconds = math.floor(now.timestamp() / self.every) * self.every
            return dt.datetime.fromtimestamp(seconds, UTC)
        assert self.cron is not None
        local = now.astimezone(ZoneInfo(self.tz)).replace(microsecond=0) + dt.timedelta(seconds=1)
        return next(CronSim(self.cron, local, reverse=True)).astimezone(UTC)

    def next_slot(self, now: dt.datetime) -> dt.datetime:
        """The first slot after ``now``."""
        if self.every is not None:
            seconds = (math.floor(now.timestamp() / self.every) + 1) * self.every
            return dt.datetime.fromtimestamp(seconds, UTC)
        assert self.cron is not None
        return next(CronSim(self.cron, now.astimezone(ZoneInfo(self.tz)))).astimezone(UTC)

    def slots_after(self, last: dt.datetime | None, now: dt.datetime) -> list[dt.datetime]:
        """The slots to try at ``now``, oldest first: the latest one, and with ``catch_up`` up to
        that many missed ones after ``last`` (the latest taken) before it."""
        latest = self.latest_slot(now)
        if last is not None and latest <= last:
            return []
        slots = [latest]
        probe = latest
        while len(slots) <= self.catch_up:
            probe = self._previous(probe)
            if last is None or probe <= last:
                break
            slots.append(probe)
        return sorted(slots)

    def _previous(self, slot: dt.datetime) -> dt.datetime:
        if self.every is not None:
            return slot - dt.timedelta(seconds=self.every)
        assert self.cron is not None
        return next(CronSim(self.cron, slot.astimezone(ZoneInfo(self.tz)), reverse=True)).astimezone(UTC)

    def payload(self, slot: dt.datetime) -> bytes:
        arguments = dict(self.args)
        if self.takes_timestamp:
            arguments[TIMESTAMP_ARGUMENT] = int(slot.timestamp())
        return encode_call(self.task, arguments)


def take_slot(store: TaskStore, schedule: Schedule, slot: dt.datetime) -> bool:
    """Take ``slot`` of ``schedule`` and enqueue its task (one statement); False when another
    worker (or an earlier run) took it already."""
    return store.periodic_slot_take(
        schedule.name,
        slot,
        schedule.queue,
        schedule.payload(slot),
        priority=schedule.priority,
        max_attempts=schedule.max_attempts,
    )


@dataclass(frozen=True)
class ScheduleView:
    """A schedule as ``shardq periodic list`` shows it."""

    name: str
    task: str
    queue: str
    when: str
    last_slot: dt.datetime | None
    next_slot: dt.datetime

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "task": self.task,
            "queue": self.queue,
            "when": self.when,
            "last_slot": self.last_slot.isoformat() if self.last_slot else None,
            "next_slot": self.next_slot.isoformat(),
        }


def describe(store: TaskStore, schedules: list[Schedule], now: dt.datetime | None = None) -> list[ScheduleView]:
    """Each schedule with its last taken slot and its next one."""
    now = now or dt.datetime.now(UTC)
    last = store.periodic_last_slots([s.name for s in schedules]) if schedules else {}
    return [
        ScheduleView(
            s.name,
            s.task,
            s.queue,
            f"cron {s.cron} ({s.tz})" if s.cron else f"every {s.every:g} s",
            last.get(s.name),
            s.next_slot(now),
        )
        for s in sorted(schedules, key=lambda s: s.name)
    ]


class Scheduler:
    """Takes due slots of ``schedules`` through its own store (one thread, one session) and prunes
    old slot rows: :meth:`run_once` is one pass, :meth:`run` only schedules passes on
    :attr:`thread` until :attr:`stop_event` is set. ``clock`` gives the time slots fall due and
    prunes are timed by."""

    def __init__(
        self,
        store_factory: Callable[[], TaskStore],
        schedules: list[Schedule],
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(UTC),
        rng: random.Random | None = None,
    ) -> None:
        self.store_factory = store_factory
        self.schedules = list(schedules)
        self.clock = clock
        self.rng = rng or random.Random()
        self._last: dict[str, dt.datetime] | None = None
        self._pruned_at: dt.datetime | None = None
        self._store: TaskStore | None = None
        self.taken = 0
        self.thread = threading.Thread(target=self._run_logged, name="shardq-scheduler", daemon=True)
        self.stop_event = threading.Event()
        shortest = min((s.every for s in schedules if s.every), default=None)
        self.tick = max(TICK_SECONDS_MIN, min(TICK_SECONDS_MAX, shortest / 4 if shortest else TICK_SECONDS_MAX))

    @property
    def store(self) -> TaskStore:
        if self._store is None:
            self._store = self.store_factory()
        return self._store

    def run_once(self) -> int:
        """One pass: take every slot due now that this scheduler has not seen taken, then prune
        old slot rows if the last prune was ``PRUNE_SECONDS`` ago (the first pass prunes); returns
        how many slots it took. The first call reads each schedule's latest taken slot (for
        ``catch_up``)."""
        now = self.clock()
        took = self._take_due(now)
        if self._pruned_at is None or not self._pruned_at <= now < self._pruned_at + dt.timedelta(
            seconds=PRUNE_SECONDS
        ):
            self._pruned_at = now  # a failed prune waits for the next minute, as a done one does
            prune_slots(self.store)
        return took

    def _take_due(self, now: dt.datetime) -> int:
        if self._last is None:
            self._last = self.store.periodic_last_slots([s.name for s in self.schedules])
        took = 0
        for schedule in self.schedules:
            for slot in schedule.slots_after(self._last.get(schedule.name), now):
                if take_slot(self.store, schedule, slot):
                    took += 1
                    log.info("periodic %s: enqueued the slot of %s", schedule.name, slot.isoformat())
                self._last[schedule.name] = slot  # taken, by this worker or another
        self.taken += took
        return took

    def run(self) -> None:
        """Call :meth:`run_once` every ``tick`` (±20 %) until :attr:`stop_event` is set. Only
        schedules (:func:`shardq.maintenance.loop.repeat`); a failed pass is logged and retried
        with backoff (see the module docstring)."""
        repeat(
            self.run_once,
            self.stop_event,
            every=self.tick,
            retry_max=RETRY_PAUSE_MAX,
            what="periodic scheduling",
            log=log,
            rng=self.rng,
        )

    def _run_logged(self) -> None:
        try:
            self.run()
        except Exception:  # a scheduling bug must not take the worker down silently
            log.exception("the periodic scheduler stopped")
