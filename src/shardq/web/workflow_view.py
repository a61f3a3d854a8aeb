"""A workflow's page as plain data (``/workflows/{id}``): its status
(:func:`shardq.web.views.workflow_status`, the same read as ``/api/workflows/{id}``) and the
graph laid out on the server, for an SVG the template draws.

Layout: a step's level is its depth (the longest chain of parents above it: roots are level 0);
each level is a column of boxes, in step-name order, left to right by level; every edge is a line
from the right edge of the parent's box to the left edge of the child's. Each box carries the
step's state, which picks its colour (:data:`STATE_COLOURS`, fixed), and links to the step's task.

Guarantees:

* Pure: no read beyond the status's two (the workflow's row and its steps with their edges).
* A graph of more than :data:`DRAW_MAX` steps is not drawn (``drawn`` is false): the page lists
  the counts by state and the first :data:`DRAW_MAX` steps instead, so a 100,000-step fan-out
  does not become a page of megabytes.

Does not: minimise edge crossings (steps keep name order within a level).
"""

from __future__ import annotations

from typing import Any

from shardq.sessions.store import TaskStore
from shardq.web.views import NotFound, workflow_status

#: step state -> box colour (a state keeps its colour on every page)
STATE_COLOURS = {
    "waiting": "#9ca3af",
    "ready": "#2463eb",
    "running": "#0ea5e9",
    "succeeded": "#10b981",
    "dead": "#dc2626",
    "cancelled": "#f59e0b",
}
#: steps drawn at most; a larger workflow is listed, not drawn
DRAW_MAX = 300
BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN = 168, 44, 64, 16, 8


def levels(steps: list[dict[str, Any]]) -> dict[str, int]:
    """Each step's depth: 0 for a step without parents, else one more than its deepest parent
    (a parent not among the steps counts as a root)."""
    parents = {s["name"]: [p for p in s["parents"] if p != s["name"]] for s in steps}
    depth: dict[str, int] = {}
    for start in parents:
        # Iterative depth-first walk: a long chain must not hit Python's recursion limit.
        stack = [start]
        while stack:
            name = stack[-1]
            if name in depth:
                stack.pop()
                continue
            pending = [p for p in parents.get(name, []) if p in parents and p not in depth]
            if pending:
                stack.extend(pending)
                continue
            depth[name] = 1 + max((depth[p] for p in parents.get(name, []) if p in depth), default=-1)
            stack.pop()
    return depth


def layout(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Boxes (x, y, colour) and edge lines for ``steps`` (the status's step dicts)."""
    depth = levels(steps)
    columns: dict[int, list[dict[str, Any]]] = {}
    for step in sorted(steps, key=lambda s: (depth[s["name"]], s["name"])):
        columns.setdefault(depth[step["name"]], []).append(step)
    boxes: dict[str, dict[str, Any]] = {}
    for level, column in columns.items():
        for row, step in enumerate(column):
            boxes[step["name"]] = {
                **step,
                "level": level,
                "x": MARGIN + level * (BOX_W + GAP_X),
                "y": MARGIN + row * (BOX_H + GAP_Y),
                "colour": STATE_COLOURS.get(step["state"], "#6b7280"),
            }
    edges = []
    for child in boxes.values():
        for parent_name in child["parents"]:
            parent = boxes.get(parent_name)
            if parent is not None:
                edges.append(
                    {
                        "parent": parent_name,
                        "child": child["name"],
                        "x1": parent["x"] + BOX_W,
                        "y1": parent["y"] + BOX_H / 2,
                        "x2": child["x"],
                        "y2": child["y"] + BOX_H / 2,
                    }
                )
    tallest = max((len(c) for c in columns.values()), default=0)
    return {
        "boxes": list(boxes.values()),
        "edges": edges,
        "box_w": BOX_W,
        "box_h": BOX_H,
        "width": 2 * MARGIN + max(1, len(columns)) * (BOX_W + GAP_X) - GAP_X,
        "height": 2 * MARGIN + max(1, tallest) * (BOX_H + GAP_Y) - GAP_Y,
    }


def workflow_page(store: TaskStore, workflow_id: str) -> dict[str, Any]:
    """The workflow's status, counts by state, and its drawn graph (``graph``: None when not
    drawn). :class:`NotFound` for an unknown id; InvalidInput for a malformed one."""
    status = workflow_status(store, workflow_id)
    if status["state"] == "unknown":
        raise NotFound(f"no workflow {workflow_id!r}")
    steps = status["steps"]
    counts = {state: sum(1 for s in steps if s["state"] == state) for state in STATE_COLOURS}
    drawn = len(steps) <= DRAW_MAX
    return {
        **status,
        "counts": counts,
        "colours": STATE_COLOURS,
        "drawn": drawn,
        "draw_max": DRAW_MAX,
        "graph": layout(steps) if drawn else None,
        "listed": steps[:DRAW_MAX],
    }
