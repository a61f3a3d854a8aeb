"""Real processes for the reliability suites: start ``shardq`` subprocesses, read what their
handlers recorded, and account for every task (processed, lost, stuck, duplicated and why)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARDQ = str(Path(sys.executable).with_name("shardq"))
HANDLER = "tests.reliability.crash_handlers:record"
#: the same handler as ``async def``: rounds alternate between the two executors
ASYNC_HANDLER = "tests.reliability.crash_handlers:record_async"
STATEMENT_MOMENTS = (
    "claim-during",
    "claim-after",
    "ack-before",
    "ack-during",
    "ack-after",
    "reap-during",
    "reap-after",
    "take-before",
)

# shardq.worker's warning: "task <id> (queue <q>[, bucket <b>], attempt <n>): lease lost before <outcome>"
_LEASE_LOST = re.compile(r"task ([0-9a-f-]{36}) \(queue [^,]+,(?: bucket [^,]+,)? attempt (\d+)\): lease lost before")


@dataclass
class Execution:
    """One run of a handler: from its start record to its finish record (None: cut short)."""

    task_id: str
    attempt: int
    pid: int
    started: float
    lease_expires: float
    payload: str = ""
    finished: float | None = None


@dataclass
class Proc:
    popen: subprocess.Popen
    role: str
    kill_hook: str | None
    log: Path
    killed_by_test: bool = False
    #: the crash scenario's label: the moment its kill hook fires at ("random", …), None for none
    moment: str | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    @property
    def died_of_sigkill(self) -> bool:
        return self.popen.returncode == -signal.SIGKILL


class Processes:
    """Starts ``shardq`` subprocesses for one scenario and remembers every one of them."""

    def __init__(self, dsn: str, out: Path, *, extra_env: dict[str, str] | None = None) -> None:
        self.dsn = dsn
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.extra_env = extra_env or {}
        self.all: list[Proc] = []

    def start(self, role: str, args: list[str], *, kill_hook: str | None = None, env: dict | None = None) -> Proc:
        """Start ``shardq ARGS``. A statement kill hook runs it through the chaos shim (which then
        runs the same command line); ``handler`` hooks and no hook use the real console script."""
        moment = kill_hook.split(":")[0] if kill_hook else None
        if moment in STATEMENT_MOMENTS:
            command = [sys.executable, "-m", "tests.reliability.chaos", *args]
        else:
            command = [SHARDQ, *args]
        full_env = {
            **os.environ,
            "SHARDQ_DSN": self.dsn,
            "SHARDQ_REL_OUT": str(self.out),
            "PYTHONPATH": str(REPO),
            **self.extra_env,
            **(env or {}),
        }
        full_env.pop("SHARDQ_REL_KILL", None)
        if kill_hook:
            full_env["SHARDQ_REL_KILL"] = kill_hook
        log = self.out / f"{role}.{len(self.all)}.log"
        with open(log, "wb") as sink:
            popen = subprocess.Popen(command, cwd=REPO, env=full_env, stdout=sink, stderr=subprocess.STDOUT)
        proc = Proc(popen, role, kill_hook, log)
        self.all.append(proc)
        return proc

    def kill(self, proc: Proc) -> None:
        if proc.poll() is None:
            proc.killed_by_test = True
            proc.popen.send_signal(signal.SIGKILL)
            proc.popen.wait()

    def terminate_all(self, timeout: float = 60.0) -> None:
        for proc in self.all:
            if proc.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.all:
            try:
                proc.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(proc)

    def killed_pids(self) -> set[int]:
        return {p.pid for p in self.all if p.died_of_sigkill}

    def logs(self) -> str:
        return "\n".join(p.log.read_text(errors="replace") for p in self.all if p.log.exists())


def record_lines(path: Path) -> list[str]:
    """The complete lines of a handler's record file (crash_handlers._record writes one line per
    os.write). Split on "\n" only: a payload's \r, \x1c, \x85 ... would split a line for
    splitlines() (and read_text() turns \r into \n). A last line without its "\n" is one being
    written while this reads (the tests poll the files while workers run): left for the next read."""
    return path.read_bytes().decode("utf-8", "replace").split("\n")[:-1]


def read_executions(out: Path) -> dict[str, list[Execution]]:
    """Every handler execution recorded under ``out``, per task id, in start order."""
    open_runs: dict[tuple[str, int, int], Execution] = {}
    runs: dict[str, list[Execution]] = defaultdict(list)
    for path in sorted(out.glob("rec.*")):
        for line in record_lines(path):
            kind, task_id, attempt, pid, at, expires, payload = line.split("\t", 6)
            key = (task_id, int(attempt), int(pid))
            if kind == "S":
                run = Execution(task_id, int(attempt), int(pid), float(at), float(expires), payload)
                open_runs[key] = run
                runs[task_id].append(run)
            elif key in open_runs:
                open_runs[key].finished = float(at)
    for task_runs in runs.values():
        task_runs.sort(key=lambda r: (r.attempt, r.started))
    return runs


def lease_lost_reports(text: str) -> set[tuple[str, int]]:
    """(task id, attempt) pairs whose outcome a worker logged as refused (lease lost)."""
    return {(m.group(1), int(m.group(2))) for m in _LEASE_LOST.finditer(text)}


@dataclass
class Duplicate:
    task_id: str
    attempt: int
    pid: int
    explanation: str | None  # None: unexplained

    def describe(self) -> str:
        return f"{self.task_id} attempt {self.attempt} (pid {self.pid}): {self.explanation or 'UNEXPLAINED'}"


@dataclass
class Accounting:
    tasks: int = 0
    processed: int = 0
    lost: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    dead_expected: int = 0
    dead_unexpected: list[str] = field(default_factory=list)
    not_dead_but_should: list[str] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)

    @property
    def unexplained(self) -> list[Duplicate]:
        return [d for d in self.duplicates if d.explanation is None]

    def problems(self) -> list[str]:
        out = []
        if self.lost:
            out.append(f"lost: {self.lost[:5]}")
        if self.stuck:
            out.append(f"stuck: {self.stuck[:5]}")
        if self.dead_unexpected:
            out.append(f"dead-lettered without cause: {self.dead_unexpected[:5]}")
        if self.not_dead_but_should:
            out.append(f"poison tasks not dead-lettered: {self.not_dead_but_should[:5]}")
        if self.unexplained:
            out.append("unexplained duplicates: " + "; ".join(d.describe() for d in self.unexplained[:5]))
        return out


def account(
    enqueued: dict[str, bool],
    runs: dict[str, list[Execution]],
    *,
    remaining: set[str],
    dead: set[str],
    killed_pids: set[int],
    lease_lost: set[tuple[str, int]],
) -> Accounting:
    """Check every enqueued task (id -> is poison) against what happened to it.

    * processed: it has a finished execution and is gone from the tasks table;
    * lost: gone from the table (or never seen) with no finished execution;
    * stuck: still in the table at the end;
    * duplicates: every execution but the last attempt's; each must be explained by an expired
      lease — its process was SIGKILLed, or its worker logged the outcome as refused (lease_lost),
      or its handler finished after the lease expiry it was given.
    """
    result = Accounting(tasks=len(enqueued))
    for task_id, poison in enqueued.items():
        task_runs = runs.get(task_id, [])
        finished = [r for r in task_runs if r.finished is not None]
        if task_id in remaining:
            result.stuck.append(task_id)
        elif not finished:
            result.lost.append(task_id)
        else:
            result.processed += 1
        if poison:
            if task_id in dead:
                result.dead_expected += 1
            elif task_id not in remaining:
                result.not_dead_but_should.append(task_id)
        elif task_id in dead:
            result.dead_unexpected.append(task_id)
        if len(task_runs) > 1:
            last = max(r.attempt for r in task_runs)
            earlier = [r for r in task_runs if r.attempt < last] + [r for r in task_runs if r.attempt == last][:-1]
            for run in earlier:
                result.duplicates.append(
                    Duplicate(run.task_id, run.attempt, run.pid, _explain(run, killed_pids, lease_lost))
                )
    return result


def _explain(run: Execution, killed_pids: set[int], lease_lost: set[tuple[str, int]]) -> str | None:
    if run.pid in killed_pids:
        where = "mid-handler" if run.finished is None else "after the handler returned, before its ack"
        return f"its worker was SIGKILLed {where}; the lease expired and the task was handed on"
    if (run.task_id, run.attempt) in lease_lost:
        return "its lease expired before the ack (worker logged lease_lost; the ack changed nothing)"
    if run.finished is not None and run.finished > run.lease_expires:
        return "the handler finished after its lease expired"
    return None


def wait_until(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
