"""A workflow's graph, declared and checked without a database.

A :class:`Graph` holds steps: each names its task, carries its encoded call and its task's
options (queue, priority, attempts), and lists its parents by step name. :func:`check` refuses a
graph that could not run as declared — a cycle, a parent that is no step, an empty or oversized
graph, an on-failure step without a parent — with :class:`~shardq.errors.InvalidInput` naming the
step, before anything is written; it returns the steps in an order where every parent comes
before its children.

Shapes, all built from one rule (a step runs once every parent succeeded):

* chain: each step has the previous one as its only parent;
* group: steps without parents between them, run in parallel;
* fan-in: a step whose parents are every member of a group;
* general graph: a step with several parents, from anywhere in the graph.

An *on-failure* step runs only if one of its parents died (and then once), and is cancelled
when they all succeed; a plain step is cancelled when any parent dies or is cancelled."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from shardq.errors import InvalidInput

#: Steps one workflow may have: its enqueue is one transaction, and its release reads edges by parent.
MAX_STEPS = 100_000


STEP_NAME_MAX = 200


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One step: ``name`` (unique in its workflow), ``task`` (the declared task's name), ``payload``
    (the encoded call), ``queue``, ``priority``, ``max_attempts`` (None: the queue's), ``parents``
    (step names) and ``on_failure``."""

    name: str
    task: str
    payload: bytes
    queue: str
    priority: int = 0
    max_attempts: int | None = None
    parents: tuple[str, ...] = ()
    on_failure: bool = False


@dataclass(frozen=True, slots=True)
class StepCall:
    """A task's call made a step (``deferral.step(**arguments)``), not yet placed in a graph: the
    task's ``task`` name, the encoded ``payload`` and its options."""

    task: str
    payload: bytes
    queue: str
    priority: int = 0
    max_attempts: int | None = None


@dataclass
class Graph:
    """Steps in declaration order; see :func:`check`."""

    name: str
    steps: list[StepSpec] = field(default_factory=list)

    def add(self, step: StepSpec) -> StepSpec:
        self.steps.append(step)
        return step


def check(graph: Graph) -> list[StepSpec]:
    """The steps of ``graph`` with every parent before its children (ties in declaration order),
    or :class:`InvalidInput` naming the first step at fault. Pure: reads nothing, writes nothing."""
    steps = graph.steps
    if not steps:
        raise InvalidInput(f"workflow {graph.name!r}: no steps")
    if len(steps) > MAX_STEPS:
        raise InvalidInput(f"workflow {graph.name!r}: {len(steps)} steps, over the limit of {MAX_STEPS}")
    by_name: dict[str, StepSpec] = {}
    for step in steps:
        if not step.name or len(step.name) > STEP_NAME_MAX:
            raise InvalidInput(f"workflow {graph.name!r}: a step name must have 1 to {STEP_NAME_MAX} characters")
        if step.name in by_name:
            raise InvalidInput(f"step {step.name!r}: declared twice")
        by_name[step.name] = step
    children: dict[str, list[str]] = {name: [] for name in by_name}
    waiting: dict[str, int] = {}
    for step in steps:
        if len(set(step.parents)) != len(step.parents):
            raise InvalidInput(f"step {step.name!r}: a parent is named twice")
        for parent in step.parents:
            if parent not in by_name:
                raise InvalidInput(f"step {step.name!r}: parent {parent!r} is no step of this workflow")
            children[parent].append(step.name)
        if step.on_failure and not step.parents:
            raise InvalidInput(f"step {step.name!r}: an on-failure step needs a parent")
        waiting[step.name] = len(step.parents)
    # Kahn's order; whatever is left never reaches zero parents: it is on a cycle or behind one.
    order: list[StepSpec] = []
    ready = deque(s.name for s in steps if not s.parents)  # popped from the left: a list shifts N each time
    while ready:
        name = ready.popleft()
        order.append(by_name[name])
        for child in children[name]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if len(order) != len(steps):
        stuck = next(s.name for s in steps if waiting[s.name] > 0)
        raise InvalidInput(f"step {stuck!r}: its parents form a cycle")
    return order
