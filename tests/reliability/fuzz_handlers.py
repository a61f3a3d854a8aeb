"""Handlers that misbehave on purpose, run by the handler fuzz suite inside real ``shardq work``
processes (``tests/reliability/test_fuzz_handlers.py``).

A task's payload names what its handler does: ``<behaviour>#<n>#<bytes>``. :data:`BEHAVIOURS`
maps each behaviour to the outcome shardq documents for it (``shardq.worker``'s docstring):

    ack          the handler returns (whatever it returns): the row is deleted
    dead         it raises ``shardq.Permanent``: dead-lettered at once
    exhaust      it raises anything else (any ``BaseException``): retried until ``max_attempts``,
                 then dead-lettered
    timeout      it hangs past the worker's ``--timeout``: that attempt fails, so as ``exhaust``
    retry        it raises ``shardq.Retry`` on its first run, returns after: runs again without
                 using an attempt, then acked
    exit         it ends its process (``os._exit(EXIT_CODE)``) on its first run, returns after: the
                 lease expires, the task runs again, then acked

Every execution is recorded like :mod:`.crash_handlers` does (``rec.<pid>`` under
``$SHARDQ_REL_OUT``): ``S`` when it starts, ``F`` when the handler returns, ``X`` when it raises
(recorded just before the exception leaves the handler). A run cut short by ``os._exit`` or a hang
has no end record. First runs are told apart by a marker file per task created with ``O_EXCL``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import threading

import shardq
from tests.reliability.crash_handlers import _record

#: the exit status of a worker whose handler ended the process
EXIT_CODE = 86

BEHAVIOURS: dict[str, str] = {
    "return_none": "ack",
    "return_object": "ack",
    "return_huge": "ack",
    "return_coroutine": "ack",
    "print_caught": "ack",
    "permanent_payload": "dead",
    "permanent_odd": "dead",
    "permanent_str_raises": "dead",
    "raise_nul": "exhaust",
    "raise_surrogate": "exhaust",
    "raise_surrogateescape": "exhaust",
    "raise_huge": "exhaust",
    "raise_str_raises": "exhaust",
    "raise_str_not_str": "exhaust",
    "raise_keyboard_interrupt": "exhaust",
    "raise_system_exit": "exhaust",
    "raise_base_exception": "exhaust",
    "print_closed": "exhaust",
    "print_broken_pipe": "exhaust",
    "hang": "timeout",
    "retry_odd": "retry",
    "exit_once": "exit",
}

#: bytes every payload carries after its header: a NUL, invalid UTF-8, a lone-surrogate encoding
ODD_BYTES = b"\x00\xff\xfe\xed\xa0\x80bin\x00ary"


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ of this exception raises")


class StrNotStr(Exception):
    def __str__(self):  # on purpose: str() of it raises TypeError
        return 42


class PermanentStrRaises(shardq.Permanent):
    def __str__(self) -> str:
        raise RuntimeError("__str__ of this exception raises")


class Boom(BaseException):
    """Neither an Exception nor a KeyboardInterrupt/SystemExit."""


def payload_for(behaviour: str, n: int, extra: bytes = b"") -> bytes:
    return f"{behaviour}#{n}#".encode() + ODD_BYTES + extra


def behaviour_of(payload: bytes) -> str:
    return payload.split(b"#", 1)[0].decode("ascii", "replace")


def _first_run(task) -> bool:
    """True the first time any process runs ``task`` (the marker file did not exist yet)."""
    path = os.path.join(os.environ["SHARDQ_REL_OUT"], f"once.{task.id}")
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return False
    return True


def _closed_stream() -> io.TextIOWrapper:
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    stream.close()
    return stream


def _print_to_broken_pipe(text: str) -> None:
    """What printing to a stdout whose reader went away does (SIGPIPE is ignored in Python)."""
    read, write = os.pipe()
    os.close(read)
    with open(write, "w", encoding="utf-8") as stream:
        print(text, file=stream, flush=True)


async def _never() -> None:
    return None


def act(task) -> object:
    """Do what the payload says (everything but hanging, which :func:`behave` and
    :func:`behave_async` each do their own way)."""
    name = behaviour_of(task.payload)
    text = task.payload.decode("utf-8", "replace")
    escaped = task.payload.decode("utf-8", "surrogateescape")
    if name == "return_none":
        return None
    if name == "return_object":
        return {"task": task, "self": object(), "text": escaped, "nested": [[[]]] * 3}
    if name == "return_huge":
        return b"\x00" * (8 * 1024 * 1024)
    if name == "return_coroutine":
        coroutine = _never()
        coroutine.close()  # returned un-awaited; closed so no warning is printed
        return coroutine
    if name == "print_caught":
        with contextlib.suppress(ValueError):
            print(text, file=_closed_stream())
        with contextlib.suppress(BrokenPipeError, UnicodeEncodeError):
            _print_to_broken_pipe(escaped)
        return None
    if name == "permanent_payload":
        raise shardq.Permanent(text)
    if name == "permanent_odd":
        raise shardq.Permanent("\x00\udcff" + escaped + "\x00" * 3 + "p" * (1024 * 1024))
    if name == "permanent_str_raises":
        raise PermanentStrRaises(text)
    if name == "raise_nul":
        raise ValueError("a NUL\x00byte " + text)
    if name == "raise_surrogate":
        raise ValueError("\udcff")
    if name == "raise_surrogateescape":
        raise ValueError(escaped)
    if name == "raise_huge":
        raise RuntimeError("h" * (1024 * 1024) + "\x00" + escaped)
    if name == "raise_str_raises":
        raise StrRaises(text)
    if name == "raise_str_not_str":
        raise StrNotStr(text)
    if name == "raise_keyboard_interrupt":
        raise KeyboardInterrupt(text)
    if name == "raise_system_exit":
        raise SystemExit(3)
    if name == "raise_base_exception":
        raise Boom(escaped)
    if name == "print_closed":
        print(text, file=_closed_stream())
        return None
    if name == "print_broken_pipe":
        _print_to_broken_pipe(text)
        return None
    if name == "retry_odd":
        if _first_run(task):
            raise shardq.Retry(0, reason="retry \x00\udcff " + escaped)
        return None
    if name == "exit_once":
        if _first_run(task):
            os._exit(EXIT_CODE)
        return None
    raise AssertionError(f"unknown behaviour {name!r}")


def behave(task) -> object:
    """The sync handler: record, act (or hang forever: a thread cannot be stopped), record."""
    _record("S", task)
    try:
        if behaviour_of(task.payload) == "hang":
            threading.Event().wait()
        result = act(task)
    except BaseException:
        _record("X", task)
        raise
    _record("F", task)
    return result


async def behave_async(task) -> object:
    """:func:`behave` as an ``async def`` handler (the worker's event-loop executor)."""
    _record("S", task)
    try:
        if behaviour_of(task.payload) == "hang":
            await asyncio.Event().wait()
        result = act(task)
    except BaseException:
        _record("X", task)
        raise
    _record("F", task)
    return result
