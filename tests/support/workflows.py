"""Workflow test helpers shared by several modules."""

from __future__ import annotations

import time

from shardq.models.workflow_graph import StepSpec


def _until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the ack never queued on the lock"
        time.sleep(0.01)  # polling another backend's wait state: there is no event to wait on


def _spec(name: str, parents: tuple[str, ...] = ()) -> StepSpec:
    return StepSpec(name, "t", b"", "default", parents=parents)
