"""Running a benchmark cell in separate processes, the same way for every contender.

Each role (a worker, a producer) runs ``module:function(spec, ctl)`` in its own process (spawned:
nothing is inherited but what is passed). A role sets itself up (imports, connections, schema
checks), calls ``ctl.ready()`` and blocks until the parent releases every role at once; the
clock starts then, so process start-up is never timed. The parent stops the cell when every
role has exited (a drain), when ``duration`` has passed, or when ``cap`` is hit, by setting the
stop flag; a role that ignores it is killed after ``STOP_GRACE`` seconds.

A role reports one dict through the result queue. :class:`Recorder` is what handlers call: it
counts executions into a shared array the parent can read while the cell runs (for top-ups) and
keeps first/last execution times and enqueue→start latencies.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import queue as queue_module
import resource
import struct
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

STOP_GRACE = 15.0
READY_TIMEOUT = 120.0
_CTX = mp.get_context("spawn")

# A latency payload: the producer's wall clock at send (float64) and a sequence number.
_STAMP = struct.Struct("<dq")


def stamp(seq: int, at: float | None = None) -> bytes:
    return _STAMP.pack(time.time() if at is None else at, seq)


def unstamp(payload: bytes) -> tuple[float, int]:
    return _STAMP.unpack_from(payload)


class Control:
    """What a role process gets besides its spec."""

    def __init__(self, index: int, ready, go, stop, counters, results) -> None:
        self.index = index
        self._ready = ready
        self._go = go
        # A shared flag, not an Event: setting a multiprocessing Event waits for every process
        # that ever waited on it to wake, and one that exited (or was SIGKILLed) never does.
        self.stop_flag = stop
        self.counters = counters
        self._results = results
        self.cpu_at_start: float | None = None

    def ready(self) -> float:
        """Signal set-up done; block until the parent starts the cell. Returns the start time."""
        self._ready.release()
        self._go.wait()
        self.cpu_at_start = _cpu()
        return time.time()

    def stopping(self) -> bool:
        return bool(self.stop_flag.value)

    def report(self, result: dict) -> None:
        result.setdefault("index", self.index)
        self._results.put(result)


class Recorder:
    """Per-process execution record. ``hit`` is called once per task execution, at its start."""

    __slots__ = (
        "count",
        "counters",
        "created_latencies",
        "first",
        "index",
        "keep_latency",
        "last",
        "latencies",
        "starts",
    )

    def __init__(self, ctl: Control, *, latency: bool = False) -> None:
        self.counters = ctl.counters
        self.index = ctl.index
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.keep_latency = latency
        self.latencies: list[float] = []
        self.created_latencies: list[float] = []
        self.starts: list[float] = []

    def hit(self, sent: float | None = None, created_at: float | None = None) -> None:
        """One execution started now; ``sent`` is the producer's clock at enqueue and
        ``created_at`` the database's (both epoch seconds, same machine), for latency cells."""
        now = time.time()
        if not self.count:
            self.first = now
        self.count += 1
        self.last = now
        self.counters[self.index] += 1
        if self.keep_latency and sent is not None:
            self.starts.append(now)
            self.latencies.append(now - sent)
            if created_at is not None:
                self.created_latencies.append(now - created_at)

    def result(self, **extra) -> dict:
        out: dict[str, object] = {"count": self.count, "first": self.first, "last": self.last}
        if self.keep_latency:
            out["latencies"] = self.latencies
            out["created_latencies"] = self.created_latencies
            out["starts"] = self.starts
        out.update(extra)
        return out


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _entry(target: str, spec: dict, ctl: Control) -> None:
    module, _, name = target.partition(":")
    try:
        function = getattr(importlib.import_module(module), name)
        result = function(spec, ctl) or {}
        if ctl.cpu_at_start is not None:
            result["cpu_seconds"] = _cpu() - ctl.cpu_at_start
    except BaseException as exc:  # noqa: BLE001 - report it, never hang the parent
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        with contextlib.suppress(ValueError):
            ctl._ready.release()  # a role that died during set-up must not block the start
    ctl.report(result)


@dataclass
class CellResult:
    roles: list[dict]
    started: float  # wall clock at release
    ended: float  # wall clock when the parent saw the cell end
    capped: bool = False
    killed: list[int] = field(default_factory=list)
    samples: list[tuple[float, int]] = field(default_factory=list)  # (seconds since start, executions)
    server_cpu_seconds: float | None = None  # every PostgreSQL process, during the cell

    def cpu_per_task_ms(self) -> dict:
        """CPU milliseconds per executed task: the roles' own (client) and the database's. On a
        shared machine these move far less than rates do."""
        done = self.total()
        client = sum(r.get("cpu_seconds", 0.0) for r in self.roles)
        out: dict[str, float | None] = {"client": client * 1e3 / done if done else None}
        if self.server_cpu_seconds is not None and done:
            out["server"] = server = self.server_cpu_seconds * 1e3 / done
            out["total"] = client * 1e3 / done + server
        return out

    def errors(self) -> list[str]:
        return [r["error"] for r in self.roles if "error" in r]

    def total(self, key: str = "count") -> int:
        return sum(r.get(key, 0) for r in self.roles)

    def rate(self) -> float:
        """Executions per second from the release to the last execution seen by any role."""
        last = max((r.get("last", 0.0) for r in self.roles), default=0.0)
        done = self.total()
        if not done or last <= self.started:
            return 0.0
        return done / (last - self.started)

    def latencies(self, key: str = "latencies", *, after: float = 0.0) -> list[float]:
        """Latencies of executions that started ``after`` seconds or more past the release."""
        out: list[float] = []
        since = self.started + after
        for r in self.roles:
            values = r.get(key, ())
            starts = r.get("starts", ())
            if len(starts) == len(values):
                out.extend(v for v, s in zip(values, starts) if s >= since)
            else:
                out.extend(values)
        return out


def run_cell(
    roles: list[tuple[str, dict]],
    *,
    duration: float | None = None,
    cap: float = 60.0,
    wait_for: Callable[[list[int]], bool] | None = None,
    during: Callable[[float, list[int]], None] | None = None,
    tick: float = 0.02,
    sample_every: float = 0.25,
    server_cpu: Callable[[], float] | None = None,
) -> CellResult:
    """Run ``roles`` (``(module:function, spec)`` pairs) to completion.

    The cell ends when ``duration`` seconds passed (if given), or when ``wait_for(counters)``
    returns true (if given), or when every role exited, whichever comes first; ``cap`` bounds it
    in any case. ``during(elapsed, counters)`` is called every ``tick`` seconds while it runs
    (top-ups, kills). Index ``i`` of the counters belongs to role ``i``.
    """
    n = len(roles)
    ready = _CTX.Semaphore(0)
    go = _CTX.Event()
    stop = _CTX.RawValue("b", 0)
    counters = _CTX.Array("q", n, lock=False)
    results = _CTX.Queue()
    procs = []
    for index, (target, spec) in enumerate(roles):
        ctl = Control(index, ready, go, stop, counters, results)
        proc = _CTX.Process(target=_entry, args=(target, spec, ctl), daemon=True)
        proc.start()
        procs.append(proc)
    collected: list[dict] = []
    deadline = time.monotonic() + READY_TIMEOUT
    waiting = n
    while waiting:
        if ready.acquire(timeout=0.2):
            waiting -= 1
            continue
        dead = [p.exitcode for p in procs if p.exitcode is not None]
        if dead or time.monotonic() > deadline:
            stop.value = 1
            go.set()
            for p in procs:
                p.join(2)
                if p.is_alive():
                    p.kill()
            _drain(results, collected, wait=0.2)
            detail = "; ".join(r["error"] for r in collected if "error" in r)
            raise RuntimeError(f"a role died or hung during set-up (exit codes {dead}) {detail}")
    cpu_before = server_cpu() if server_cpu else None
    started = time.time()
    go.set()
    t0 = time.monotonic()
    capped = False
    samples: list[tuple[float, int]] = []
    next_sample = 0.0
    while True:
        elapsed = time.monotonic() - t0
        snapshot = list(counters)
        if elapsed >= next_sample:
            samples.append((elapsed, sum(snapshot)))
            next_sample += sample_every
        if during is not None:
            during(elapsed, snapshot)
        _drain(results, collected)
        if all(not p.is_alive() for p in procs):
            break
        if duration is not None and elapsed >= duration:
            break
        if wait_for is not None and wait_for(snapshot):
            break
        if elapsed >= cap:
            capped = True
            break
        time.sleep(tick)
    ended = time.time()
    samples.append((time.monotonic() - t0, sum(counters)))
    cpu_spent = server_cpu() - cpu_before if server_cpu and cpu_before is not None else None
    stop.value = 1
    grace_until = time.monotonic() + STOP_GRACE
    killed = []
    while any(p.is_alive() for p in procs) and time.monotonic() < grace_until:
        _drain(results, collected)
        time.sleep(0.05)
    for i, p in enumerate(procs):
        if p.is_alive():
            p.kill()
            killed.append(i)
    for p in procs:
        p.join(5)
    _drain(results, collected, wait=0.5)
    collected.sort(key=lambda r: r.get("index", 0))
    return CellResult(collected, started, ended, capped, killed, samples, cpu_spent)


def _drain(results, collected: list[dict], wait: float = 0.0) -> None:
    while True:
        try:
            collected.append(results.get(timeout=wait) if wait else results.get_nowait())
        except queue_module.Empty:
            return


def paced(spec: dict, ctl: Control, send: Callable[[list[bytes]], object]) -> dict:
    """Producer loop shared by every contender: every ``tick`` seconds (default 5 ms) send, in
    one call, the tasks due so far at ``rate`` tasks/s, each stamped with the send time."""
    rate, tick = spec["rate"], spec.get("tick", 0.005)
    t0 = ctl.ready()
    sent = calls = 0
    late = 0.0
    while not ctl.stopping():
        began = time.time()
        due = int((began - t0) * rate) - sent
        if due > 0:
            send([stamp(sent + i, began) for i in range(due)])
            sent += due
            calls += 1
            ctl.counters[ctl.index] = sent
        spent = time.time() - began
        if spent < tick:
            time.sleep(tick - spent)
        else:
            late += spent - tick
    return {"sent": sent, "calls": calls, "elapsed": time.time() - t0, "late_seconds": late}


def watch_stop(ctl: Control, action: Callable[[], object]) -> None:
    """Call ``action`` (from a daemon thread) once the parent asks the role to stop."""
    import threading

    def waiter() -> None:
        while not ctl.stopping():
            time.sleep(0.02)
        action()

    threading.Thread(target=waiter, name="loadtest-stop", daemon=True).start()
