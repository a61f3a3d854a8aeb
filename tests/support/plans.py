"""Stepping a plan without a database: canned answers in, the requests it made out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shardq.sql.plan import Plan


def drive(plan: Plan[Any], answer: Callable[[Any], Any] = lambda request: []) -> tuple[Any, list[Any]]:
    """Run ``plan`` against ``answer`` (which may raise, as a session would); returns its result
    and the requests it yielded."""
    sent: list[Any] = []
    value: Any = None
    error: Exception | None = None
    while True:
        try:
            request = plan.send(value) if error is None else plan.throw(error)
        except StopIteration as stop:
            return stop.value, sent
        sent.append(request)
        value, error = None, None
        try:
            value = answer(request)
        except Exception as exc:  # noqa: BLE001 - thrown back into the plan, as the sessions do
            error = exc


def names(sent: list[Any]) -> list[str]:
    return [getattr(request, "name", type(request).__name__) for request in sent]
