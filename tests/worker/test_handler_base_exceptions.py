"""A handler that raises KeyboardInterrupt, SystemExit or another BaseException fails its own
attempt, like any other exception (``shardq.worker``: "any other exception retries it"): the
worker keeps running the rest, sync or async, with or without an execution timeout."""

from __future__ import annotations

import pytest

import shardq
from tests.support.outcomes import assert_good_acked, run_until_empty


class Boom(BaseException):
    pass


RAISED = [KeyboardInterrupt("ctrl-c in a handler"), SystemExit(3), Boom("boom")]


@pytest.mark.parametrize("timeout", [None, 5.0], ids=["no-timeout", "timeout"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("exception", RAISED, ids=["keyboard-interrupt", "system-exit", "base-exception"])
def test_a_base_exception_from_a_handler_fails_only_its_attempt(db, exception, is_async, timeout):
    ids = db.client.enqueue_many("q", [b"good"] * 9 + [b"bad"]).enqueued_ids
    bad = ids[-1]

    def run(task) -> None:
        if task.id == bad:
            raise exception

    if is_async:

        async def handler(task) -> None:
            run(task)
    else:
        handler = run  # type: ignore[assignment]

    run_until_empty(db.client, handler, concurrency=2, batch=10, timeout=timeout)
    assert_good_acked(db, set(ids[:-1]))
    row = db.task_row(bad)
    assert row is not None and row["state"] in ("ready", "scheduled") and row["attempts"] == 1
    assert type(exception).__name__ in row["last_error"]
    assert shardq  # the public package is what runs these handlers
