"""The workflow page: ``/workflows/{id}`` draws a workflow's graph with each step's state
(:mod:`shardq.web.workflow_view`); a task's page links to it when its task is a step."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from shardq.web import workflow_view
from shardq.web.context import Failure, run_view
from shardq.web.pages import error_page, render


async def workflow(request: Request) -> Response:
    try:
        data = await run_view(request, workflow_view.workflow_page, request.path_params["workflow_id"])
    except Failure as failure:
        return error_page(request, failure.status, failure.message)
    return render(request, "workflow.html", w=data)


def routes() -> list[Route]:
    return [Route("/workflows/{workflow_id}", workflow, methods=["GET"])]
