"""The pages of task browsing, workers and the audit log, and the bulk-action form.

``/queues/{queue}/tasks?state=…`` (the list, with filters, order, paging and bulk actions),
``POST /queues/{queue}/tasks/act`` (form: ``id`` per task chosen, ``action``, ``priority``),
``/tasks/{id}/payload`` (download), ``/workers``, ``/audit``. Everything shown comes from
:mod:`shardq.web.task_list` and :mod:`shardq.web.registry_views`.
"""

from __future__ import annotations

import urllib.parse

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from shardq.admin import browse
from shardq.models.tasks import BROWSE_STATES
from shardq.web import api_tasks, finished_list, registry_views, task_list
from shardq.web.context import Failure, run_action, run_view
from shardq.web.pages import error_page, form_value, queue_path, render, submit_form

#: How each state is named on its tab, and what it means.
STATE_TABS = {
    "ready": "ready: due, waiting for a worker",
    "scheduled": "scheduled: waiting for their time (retries waiting for their backoff included)",
    "running": "running: leased by a worker",
    "expired": "expired: leased, the lease ran out; the worker is likely gone and a sweep puts them back",
    "backlog": "backlog: waiting for their exclusive key",
}
#: The tab of finished tasks, shown for a queue that keeps them (shardq.lifecycle.history).
FINISHED_TAB = {"finished": "finished: succeeded, dead or cancelled, kept for the queue's retention"}


def _tabs(keeps_finished: bool) -> dict[str, str]:
    return {**STATE_TABS, **FINISHED_TAB} if keeps_finished else STATE_TABS


async def tasks(request: Request) -> Response:
    name = request.path_params["queue"]
    query = dict(request.query_params)
    state = query.pop("state", "ready") or "ready"
    if state == "finished":
        return await finished(request, name, query)
    if state not in BROWSE_STATES:
        return error_page(request, 400, f"state must be one of {', '.join(BROWSE_STATES)}")
    try:
        data = await run_view(request, task_list.task_page, name, state, query)
    except Failure as failure:
        return error_page(request, failure.status, failure.message)
    kept = {k: v for k, v in data["filters"].items() if v}
    if data["order"] != "asc":
        kept["order"] = data["order"]
    if data["limit"] != browse.LIMIT_DEFAULT:  # the next page keeps the page size
        kept["limit"] = str(data["limit"])
    base = queue_path(name, "/tasks?") + urllib.parse.urlencode({"state": state, **kept})
    return render(
        request,
        "tasks.html",
        queue=name,
        data=data,
        tabs=_tabs(data["keeps_finished"]),
        base=base,
        first_page=base,
        next_page=(base + "&after=" + urllib.parse.quote(data["next"], safe="")) if data["next"] else None,
        action_labels=task_list.ACTIONS,
    )


async def finished(request: Request, name: str, query: dict[str, str]) -> Response:
    """The finished tab: a queue's history, newest first (:mod:`shardq.web.finished_list`)."""
    try:
        data = await run_view(request, finished_list.finished_page, name, query)
    except Failure as failure:
        return error_page(request, failure.status, failure.message)
    kept = {k: v for k, v in data["filters"].items() if v}
    if data["limit"] != browse.LIMIT_DEFAULT:
        kept["limit"] = str(data["limit"])
    base = queue_path(name, "/tasks?") + urllib.parse.urlencode({"state": "finished", **kept})
    return render(
        request,
        "finished.html",
        queue=name,
        data=data,
        tabs=_tabs(True),
        base=base,
        next_page=(base + "&after=" + urllib.parse.quote(data["next"], safe="")) if data["next"] else None,
    )


async def tasks_act(request: Request) -> Response:
    name = request.path_params["queue"]

    async def act(form: dict[str, list[str]]) -> str:
        action = form_value(form, "action") or ""
        back = form_value(form, "back") or queue_path(name, "/tasks")
        if not back.startswith(queue_path(name, "/tasks")):
            back = queue_path(name, "/tasks")
        result = await run_action(
            request,
            action.replace("_", " "),
            f"queue {name}",
            task_list.act,
            name,
            action,
            form.get("id", []),
            form_value(form, "priority"),
        )
        sep = "&" if "?" in back else "?"
        return f"{back}{sep}done=tasks-{action}&n={len(result['changed'])}&m={len(result['unchanged'])}"

    return await submit_form(request, act)


async def payload(request: Request) -> Response:
    response = await api_tasks.payload(request)
    if response.status_code != 200:
        return error_page(request, response.status_code, "no such task (finished, cancelled or never there)")
    return response


async def workers(request: Request) -> Response:
    try:
        data = await run_view(request, registry_views.workers)
    except Failure as failure:
        return error_page(request, failure.status, failure.message)
    return render(request, "workers.html", data=data)


async def audit(request: Request) -> Response:
    try:
        data = await run_view(request, registry_views.audit, before=request.query_params.get("before") or None)
    except Failure as failure:
        return error_page(request, failure.status, failure.message)
    return render(request, "audit.html", data=data)


def routes() -> list[Route]:
    return [
        Route("/queues/{queue}/tasks", tasks, methods=["GET"]),
        Route("/queues/{queue}/tasks/act", tasks_act, methods=["POST"]),
        Route("/tasks/{task_id}/payload", payload, methods=["GET"]),
        Route("/workers", workers, methods=["GET"]),
        Route("/audit", audit, methods=["GET"]),
    ]
