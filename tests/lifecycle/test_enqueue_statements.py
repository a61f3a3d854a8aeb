"""How deep the enqueue path is: ``AppTask.defer`` reaches its SQL statement in a few calls.

What is counted
    The shardq frames on the Python call stack at the moment the session is asked to send the
    insert statement (``Session._run`` entered with a ``task_insert…`` statement name), from the
    ``defer`` frame down to the outermost :class:`shardq.sessions.session.Session` frame, both included: the
    chain of calls an enqueue goes through to reach the session's statement method
    (``fetch_one``/``fetch_all``/``execute``, whichever the plan driver picked). Frames below that
    (the session's own ``_run``, psycopg) are the session's business, not the enqueue path's.
    Calls that returned before the statement (validation, encoding, property lookups) are not on
    the stack and not counted; plan generators suspended at their ``yield`` are not on the stack
    either (the driver's frame stands for them).
"""

from __future__ import annotations

import sys
from types import FrameType

MAX_FRAMES = 5


def _chain_to_insert(call) -> list[str]:
    """The shardq frames (qualified names) from ``defer`` down to the first Session frame when
    ``call()`` sends its insert statement."""
    seen: list[list[str]] = []

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event != "call" or seen or frame.f_code.co_qualname != "Session._run":
            return
        if not str(frame.f_locals.get("name", "")).startswith("task_insert"):
            return
        stack: list[FrameType] = []
        walk: FrameType | None = frame.f_back  # the session's _run itself is not counted
        while walk is not None:
            stack.append(walk)
            walk = walk.f_back
        names = [
            f"{f.f_globals.get('__name__')}:{f.f_code.co_qualname}"
            for f in reversed(stack)
            if str(f.f_globals.get("__name__", "")).startswith("shardq")
        ]
        start = next(i for i, n in enumerate(names) if n.endswith(".defer"))
        chain = names[start:]
        end = next(i for i, n in enumerate(chain) if n.startswith("shardq.sessions.session:Session."))
        seen.append(chain[: end + 1])

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    assert seen, "the insert statement was never sent"
    return seen[0]


def test_defer_reaches_the_insert_statement_in_at_most_five_calls(app):
    @app.task
    def resize_image(path: str, width: int) -> None: ...

    resize_image.defer(path="warm.png", width=1)  # connects and reads the layout first
    chain = _chain_to_insert(lambda: resize_image.defer(path="a.png", width=64))
    assert len(chain) <= MAX_FRAMES, "\n".join(chain)


def test_a_configured_defer_takes_the_same_short_path(app):
    @app.task
    def resize_image(path: str, width: int) -> None: ...

    deferral = resize_image.configure(priority=-3, dedupe_key="k")
    resize_image.defer(path="warm.png", width=1)
    chain = _chain_to_insert(lambda: deferral.defer(path="a.png", width=64))
    assert len(chain) <= MAX_FRAMES, "\n".join(chain)
