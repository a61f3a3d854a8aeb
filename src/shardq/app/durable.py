"""Durable execution inside a task (docs/durable.md): what :class:`shardq.TaskContext`'s
``step``, ``sleep``, ``sleep_until`` and ``wait_for`` (and their ``_async`` twins for
``async def`` tasks) do, one :class:`DurableRun` per run of a ``pass_context=True`` task.

A run numbers its durable calls 0, 1, 2 … in the order the handler makes them. The first one
reads the task's recorded steps (one statement; a task that makes no durable call sends none).
A call whose index was recorded returns the recorded value without running (its name must be the
recorded one: else :class:`StepMismatch`); the others run and are recorded, each in a statement
fenced by the run's lease token (:class:`LeaseLost` when it has passed to another worker).

``sleep`` and ``wait_for`` end the run: the task is put back to scheduled in the database (its
attempt given back, no lease held) and :class:`shardq.errors.Parked` ends the handler; the worker
then settles nothing for it. The next run replays the recorded steps and goes on from there."""

from __future__ import annotations

import datetime as dt
import inspect
import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from shardq.errors import InvalidInput, Parked, SignalTimeout, StepMismatch
from shardq.models.leases import Fenced
from shardq.models.tasks import Task
from shardq.operations import durable as durable_operations
from shardq.operations.history import WAIT_STEP_PREFIX
from shardq.sql.plan import Plan

if TYPE_CHECKING:
    from shardq.client import Client
    from shardq.client_async import AsyncClient

SLEEP_STEP = durable_operations.RESERVED + "sleep"


def _when(value: dt.datetime) -> dt.datetime:
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise InvalidInput("sleep_until needs an aware datetime")
    return value.astimezone(dt.UTC)


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise InvalidInput(f"{what} must be a number of seconds, 0 or more")
    return float(value)


class DurableRun:
    """The durable state of one run of one task: its recorded steps (read on first use) and the
    index of the next durable call. Its methods are reached through :class:`shardq.TaskContext`."""

    def __init__(
        self,
        handle: Task,
        version: str | None,
        client: Callable[[], Client],
        async_client: Callable[[], Awaitable[AsyncClient]],
    ) -> None:
        self.handle = handle
        self.version = version
        self._client = client
        self._async_client = async_client
        self.fenced = Fenced(handle.claimed.key, handle.claimed.lease_token)
        self._steps: list[durable_operations.RecordedStep] | None = None
        self.next = 0
        # progress: when it was last written (monotonic; None: never)
        self._progress_at: float | None = None
        self._checked_at: float | None = None
        self._cancelled = False

    # -- running plans ---------------------------------------------------------------------
    def _run(self, plan: Plan[Any]) -> Any:
        return self._client().store.session.run(plan)

    async def _run_async(self, plan: Plan[Any]) -> Any:
        client = await self._async_client()
        return await client._run(plan)

    def _loaded(self, rows: list[durable_operations.RecordedStep]) -> Plan[None]:
        """Keep ``rows`` as the recorded steps, or forget them (fenced) when they were recorded
        under another version than the task declares now."""
        if (
            rows
            and (self.version is not None or any(r.version is not None for r in rows))
            and any(r.version != self.version for r in rows)
        ):
            yield from durable_operations.steps_clear(self.fenced)
            rows = []
        self._steps = rows

    def _load_plan(self) -> Plan[None]:
        rows = yield from durable_operations.steps_read(self.fenced.key.id)
        yield from self._loaded(rows)

    def _ensure(self) -> None:
        if self._steps is None:
            self._run(self._load_plan())

    async def _ensure_async(self) -> None:
        if self._steps is None:
            await self._run_async(self._load_plan())

    def _recorded(self, name: str) -> durable_operations.RecordedStep | None:
        """The recorded step at the next index (None: none), refusing one of another name."""
        assert self._steps is not None
        idx = self.next
        if idx >= len(self._steps):
            return None
        found = self._steps[idx]
        if found.name != name:
            raise StepMismatch(
                f"task {self.handle.id}: durable step {idx} is now {name!r} but was recorded as "
                f"{found.name!r} (declare a new version= to start such tasks afresh)"
            )
        return found

    # -- step ---------------------------------------------------------------------------------
    def _step_name(self, name: object) -> str:
        name = durable_operations.check_name(name, "step")
        if name.startswith(durable_operations.RESERVED):
            raise InvalidInput(f"step name {name!r}: names starting with {durable_operations.RESERVED!r} are shardq's")
        return name

    def _record_value(self, name: str, value: Any) -> Plan[Any]:
        idx = self.next
        text = durable_operations.encode_json(value, durable_operations.STEP_VALUE_MAX_BYTES, f"step {idx} ({name!r})")
        yield from durable_operations.step_record(self.fenced, idx, name, text, self.version)
        self._done(name, text)
        return json.loads(text)

    def _done(self, name: str, text: str | None) -> None:
        assert self._steps is not None
        if self.next < len(self._steps):
            self._steps[self.next] = durable_operations.RecordedStep(self.next, name, text, self.version, None, True)
        else:
            self._steps.append(durable_operations.RecordedStep(self.next, name, text, self.version, None, True))
        self.next += 1

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        name = self._step_name(name)
        self._ensure()
        found = self._recorded(name)
        if found is not None and found.value is not None:
            self.next += 1
            return json.loads(found.value)
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            raise InvalidInput(f"step {name!r}: the function returned an awaitable: use await ctx.step_async(...)")
        return self._run(self._record_value(name, value))

    async def step_async(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        name = self._step_name(name)
        await self._ensure_async()
        found = self._recorded(name)
        if found is not None and found.value is not None:
            self.next += 1
            return json.loads(found.value)
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        return await self._run_async(self._record_value(name, value))

    # -- sleep --------------------------------------------------------------------------------
    def _sleep(self, wake_at: dt.datetime | None) -> tuple[Plan[Any] | None, Parked | None]:
        """What a sleep does now: nothing (its time has passed: the step is done), or a plan to
        run and the :class:`Parked` to raise after it."""
        found = self._recorded(SLEEP_STEP)
        if found is not None:
            assert found.wake_at is not None
            if found.due:
                self.next += 1
                return None, None
            reason = f"sleeping until {found.wake_at.isoformat()}"
            return durable_operations.park_plan(self.fenced, found.wake_at, reason), Parked(found.wake_at, reason)
        assert wake_at is not None
        if wake_at <= dt.datetime.now(dt.UTC):
            return self._record_sleep(wake_at), None
        plan = durable_operations.sleep_plan(self.fenced, self.next, SLEEP_STEP, self.version, wake_at, record=True)
        return plan, Parked(wake_at, f"sleeping until {wake_at.isoformat()}")

    def _record_sleep(self, wake_at: dt.datetime) -> Plan[None]:
        value = durable_operations.sleep_value(wake_at)
        yield from durable_operations.step_record(self.fenced, self.next, SLEEP_STEP, value, self.version, wake_at)
        self._done(SLEEP_STEP, value)

    def sleep_until(self, when: dt.datetime) -> None:
        wake_at = _when(when)
        self._ensure()
        plan, parked = self._sleep(wake_at)
        if plan is not None:
            self._run(plan)
        if parked is not None:
            raise parked

    def sleep(self, seconds: float) -> None:
        self.sleep_until(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=_seconds(seconds, "sleep")))

    async def sleep_until_async(self, when: dt.datetime) -> None:
        wake_at = _when(when)
        await self._ensure_async()
        plan, parked = self._sleep(wake_at)
        if plan is not None:
            await self._run_async(plan)
        if parked is not None:
            raise parked

    async def sleep_async(self, seconds: float) -> None:
        await self.sleep_until_async(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=_seconds(seconds, "sleep")))

    # -- signals ------------------------------------------------------------------------------
    def _wait(self, signal: str, timeout: float | None) -> tuple[Any, Plan[durable_operations.WaitOutcome] | None]:
        """(the answer, None) when the wait was recorded, else (None, the plan to run)."""
        found = self._recorded(WAIT_STEP_PREFIX + signal)
        if found is not None and found.value is not None:
            self.next += 1
            return _answer(signal, found.value), None
        timeout_at = None
        if timeout is not None:
            timeout_at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=timeout)
        return None, durable_operations.wait_plan(self.fenced, self.next, signal, self.version, timeout_at)

    def _waited(self, signal: str, outcome: durable_operations.WaitOutcome) -> Any:
        name = WAIT_STEP_PREFIX + signal
        if outcome.timed_out:
            self._done(name, '{"timeout":true}')
            raise SignalTimeout(f"task {self.handle.id}: no signal {signal!r} before the wait's timeout")
        if outcome.value is None:
            raise Parked(None, f"waiting for signal {signal!r}")
        self._done(name, outcome.value)
        return _answer(signal, outcome.value)

    def _wait_args(self, name: object, timeout: object) -> tuple[str, float | None]:
        signal = durable_operations.check_name(name, "signal")
        return signal, None if timeout is None else _seconds(timeout, "wait_for timeout")

    def wait_for(self, name: str, timeout: float | None = None) -> Any:
        signal, seconds = self._wait_args(name, timeout)
        self._ensure()
        answer, plan = self._wait(signal, seconds)
        if plan is None:
            return answer
        return self._waited(signal, self._run(plan))

    async def wait_for_async(self, name: str, timeout: float | None = None) -> Any:
        signal, seconds = self._wait_args(name, timeout)
        await self._ensure_async()
        answer, plan = self._wait(signal, seconds)
        if plan is None:
            return answer
        return self._waited(signal, await self._run_async(plan))


def _answer(signal: str, value: str) -> Any:
    """A recorded wait's answer: the signal's payload, or :class:`SignalTimeout`."""
    decoded = json.loads(value)
    if isinstance(decoded, dict) and "payload" in decoded:
        return decoded["payload"]
    raise SignalTimeout(f"no signal {signal!r} before the wait's timeout")


#: progress is written at most this often (seconds), whatever the handler calls
PROGRESS_EVERY = 1.0
#: ``cancelled`` reads the database at most this often (seconds)
CANCEL_CHECK_EVERY = 1.0


def _progress_due(run: DurableRun, value: Any) -> str | None:
    """The JSON text to write now, or None (the last write was less than a second ago)."""
    text = durable_operations.encode_json(value, durable_operations.PROGRESS_MAX_BYTES, "progress")
    now = time.monotonic()
    if run._progress_at is not None and now - run._progress_at < PROGRESS_EVERY:
        return None
    run._progress_at = now
    return text


def progress(run: DurableRun, value: Any) -> None:
    text = _progress_due(run, value)
    if text is not None:
        run._run(durable_operations.progress_record(run.fenced, text))


async def progress_async(run: DurableRun, value: Any) -> None:
    text = _progress_due(run, value)
    if text is not None:
        await run._run_async(durable_operations.progress_record(run.fenced, text))


def _check_due(run: DurableRun) -> bool:
    if run._cancelled:
        return False
    now = time.monotonic()
    if run._checked_at is not None and now - run._checked_at < CANCEL_CHECK_EVERY:
        return False
    run._checked_at = now
    return True


def cancelled(run: DurableRun) -> bool:
    if _check_due(run):
        run._cancelled = not run._run(durable_operations.lease_held(run.fenced))
    return run._cancelled


async def cancelled_async(run: DurableRun) -> bool:
    if _check_due(run):
        run._cancelled = not await run._run_async(durable_operations.lease_held(run.fenced))
    return run._cancelled
