"""Declaring a workflow in Python: :class:`Workflow`, made by :meth:`shardq.App.workflow`.

>>> wf = app.workflow("nightly")
>>> fetched = wf.group(fetch.step(url=a), fetch.step(url=b))      # run in parallel
>>> merged = wf.add(merge.step(), after=fetched)                  # fan-in: after both succeeded
>>> wf.chain(index.step(), publish.step(), after=[merged])        # then one after the other
>>> wf.add(alert.step(), after=[merged], on_failure=True)         # only if merge died
>>> handle = wf.enqueue()                                         # one transaction
>>> handle.status().state
'running'

From asyncio code the same declaration is enqueued with ``await wf.enqueue_async()`` (through
the app's :class:`~shardq.AsyncClient`; ``connection=`` an asyncio connection writes inside the
caller's transaction), and read with ``await handle.status_async()``: the same checks, plan and
statements as the sync calls, only awaited.

Each method returns the names of the steps it added, which later steps name in ``after`` (a
general graph: any step may have several parents). A name defaults to the task's, then
``task-2``, ``task-3``…; give ``name=`` to choose it, and name a step declared later in
``after`` when a graph is easier to write that way. Nothing is checked against the database
until :meth:`Workflow.enqueue`, which refuses a cycle, an unknown parent, a task this app does
not declare or an oversized graph (:class:`~shardq.errors.InvalidInput`, naming the step) before
anything is written. See :mod:`shardq.workflows.steps` for what happens after."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from shardq import validation
from shardq.errors import InvalidInput
from shardq.models.workflow_graph import Graph, StepCall, StepSpec, check

if TYPE_CHECKING:
    from shardq.client import Client
    from shardq.client_async import AsyncClient
    from shardq.workflows.steps import WorkflowStatus


#: what hands a workflow its asyncio client (the app's, one per event loop)
AsyncClientSource = Callable[[], Awaitable["AsyncClient"]]


class WorkflowHandle(str):
    """A workflow's id — a ``str`` — with :meth:`status`, :meth:`cancel` (and their asyncio twins
    :meth:`status_async`, :meth:`cancel_async`) and ``task_ids`` (each step's task id by step
    name)."""

    task_ids: dict[str, str]
    _client: Callable[[], Client]
    _async_client: AsyncClientSource | None

    def __new__(
        cls,
        workflow_id: str,
        task_ids: dict[str, str],
        client: Callable[[], Client],
        async_client: AsyncClientSource | None = None,
    ) -> WorkflowHandle:
        handle = super().__new__(cls, workflow_id)
        handle.task_ids = task_ids
        handle._client = client
        handle._async_client = async_client
        return handle

    def status(self) -> WorkflowStatus:
        return self._client().workflow_status(str(self))

    def cancel(self) -> int:
        """Cancel every step not finished yet; returns how many."""
        return self._client().cancel_workflow(str(self))

    async def status_async(self) -> WorkflowStatus:
        """:meth:`status` from asyncio code, through the app's asyncio client."""
        return await (await self._asyncio()).workflow_status(str(self))

    async def cancel_async(self) -> int:
        """:meth:`cancel` from asyncio code, through the app's asyncio client."""
        return await (await self._asyncio()).cancel_workflow(str(self))

    async def _asyncio(self) -> AsyncClient:
        if self._async_client is None:
            raise InvalidInput("this workflow handle has no asyncio client (make the workflow with App.workflow)")
        return await self._async_client()


class Workflow:
    """A workflow being declared; see the module documentation."""

    def __init__(
        self,
        name: str,
        client: Callable[[], Client],
        declared: Callable[[str], bool],
        async_client: AsyncClientSource | None = None,
    ) -> None:
        if not isinstance(name, str) or not name or len(name) > validation.QUEUE_NAME_MAX:
            raise InvalidInput(f"a workflow name must have 1 to {validation.QUEUE_NAME_MAX} characters")
        self.graph = Graph(name)
        self._client = client
        self._async_client = async_client
        self._declared = declared
        self._names: set[str] = set()
        self._next_suffix: dict[str, int] = {}  # per task: the first ``-N`` not tried yet

    def add(
        self, call: StepCall, *, after: Iterable[str] | str = (), name: str | None = None, on_failure: bool = False
    ) -> str:
        """Add one step (a task's ``.step(**arguments)``) after the steps named in ``after``;
        ``on_failure=True``: it runs only if one of them died. Returns its name."""
        if not isinstance(call, StepCall):
            raise InvalidInput("a workflow step is a task's .step(**arguments)")
        parents = (after,) if isinstance(after, str) else tuple(after)
        step_name = name if name is not None else self._free_name(call.task)
        self._names.add(step_name)
        self.graph.add(
            StepSpec(
                step_name,
                call.task,
                call.payload,
                call.queue,
                call.priority,
                call.max_attempts,
                parents,
                validation.flag(on_failure, "on_failure"),
            )
        )
        return step_name

    def chain(self, *calls: StepCall, after: Iterable[str] | str = ()) -> list[str]:
        """Add steps that run one after the other, the first after ``after``; returns their names."""
        names: list[str] = []
        previous: Iterable[str] | str = after
        for call in calls:
            names.append(self.add(call, after=previous))
            previous = names[-1]
        return names

    def group(self, *calls: StepCall, after: Iterable[str] | str = ()) -> list[str]:
        """Add steps that run in parallel, each after ``after``; returns their names (a later
        step with ``after=`` those names is their fan-in)."""
        return [self.add(call, after=after) for call in calls]

    def check(self) -> list[StepSpec]:
        """The checks :meth:`enqueue` makes, without a database; returns the steps parents first."""
        for step in self.graph.steps:
            if not self._declared(step.task):
                raise InvalidInput(f"step {step.name!r}: task {step.task!r} is not declared in this app")
        return check(self.graph)

    def enqueue(self, *, connection: object | None = None) -> WorkflowHandle:
        """Write the whole workflow in one transaction (with ``connection``: inside the caller's,
        never committed here); returns its :class:`WorkflowHandle`."""
        self.check()
        client = self._client()
        written = client.enqueue_workflow(self.graph, connection=connection)
        return WorkflowHandle(written.id, written.task_ids, self._client, self._async_client)

    async def enqueue_async(self, *, connection: object | None = None) -> WorkflowHandle:
        """:meth:`enqueue` from asyncio code, through the app's :class:`~shardq.AsyncClient`: the
        same checks (nothing is sent when one fails) and the same statements in one transaction.
        ``connection``: a psycopg ``AsyncConnection`` or a SQLAlchemy ``AsyncSession`` /
        ``AsyncConnection``, written inside that transaction and never committed here."""
        self.check()
        if self._async_client is None:
            raise InvalidInput("this workflow has no asyncio client (make it with App.workflow)")
        client = await self._async_client()
        written = await client.enqueue_workflow(self.graph, connection=connection)
        return WorkflowHandle(written.id, written.task_ids, self._client, self._async_client)

    def _free_name(self, task: str) -> str:
        if task not in self._names:
            return task
        # Resume after the last suffix handed out for this task: starting again from 2 tried every
        # earlier name, so a group of N calls of one task took N²/2 lookups (a 20,000-step fan-out
        # spent more than a minute here).
        n = self._next_suffix.get(task, 2)
        while f"{task}-{n}" in self._names:
            n += 1
        self._next_suffix[task] = n + 1
        return f"{task}-{n}"
