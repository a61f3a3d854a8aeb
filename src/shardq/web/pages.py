"""The HTML pages (Jinja2, autoescaped) and the form posts behind their buttons.

``/`` (overview), ``/queues/{queue}``, ``/queues/{queue}/dead``, ``/tasks/{id}`` (and
``/tasks?id=`` from the search box); actions are POST forms carrying the session's CSRF token,
answered with a 303 back to a page. Unknown queues and tasks get a 404 page; everything the pages
show comes from :mod:`shardq.web.views`.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import urllib.parse
from collections.abc import Callable
from importlib import resources
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from shardq.admin import formatting as fmt
from shardq.models.stats import Accuracy
from shardq.web import charts_view, views
from shardq.web.context import Dashboard, Failure, read_body, run_action, run_view
from shardq.web.mount import redirect, root

FORM_MAX = 64 * 1024
STATIC = {"dashboard.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
BAR_AREA = (640, 160)


def _read_static(name: str) -> str:
    return resources.files("shardq.web").joinpath("static", name).read_text(encoding="utf-8")


CSS = _read_static("style.css")
#: The inline stylesheet's hash, for the Content-Security-Policy (no other inline style or script runs).
CSS_HASH = "sha256-" + base64.b64encode(hashlib.sha256(CSS.encode()).digest()).decode()
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; script-src 'self'; style-src '{CSS_HASH}'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

templates = jinja2.Environment(
    loader=jinja2.PackageLoader("shardq.web", "templates"),
    autoescape=True,  # every value is escaped; only the stylesheet (package data) is marked safe
    undefined=jinja2.StrictUndefined,
)


def when(value: str | None) -> str:
    """An ISO timestamp from a view as people read it: to the second, with its zone (UTC)."""
    if not value:
        return "-"
    moment = dt.datetime.fromisoformat(value)
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + (" UTC" if moment.tzinfo is not None else "")


templates.filters["when"] = when
templates.filters["hexdump"] = lambda text: views.hex_dump(text.encode("utf-8"))
# New links are written ``{{ root }}/path`` (the mount prefix); a page rendered with a ``root``
# in its context uses that, every other renders the path as it is.
templates.globals.setdefault("root", "")
templates.filters["duration"] = fmt.duration_text

#: What a pause form may pause or resume: dequeue (the workers), enqueue (the producers), or both.
PAUSE_TARGETS = {
    "dequeue": {"enqueue": False, "dequeue": True},
    "enqueue": {"enqueue": True, "dequeue": False},
    "both": {"enqueue": True, "dequeue": True},
}

FLASH = {
    "paused-dequeue": "Paused dequeue: workers take no new tasks of this queue; producers can still enqueue.",
    "paused-enqueue": "Paused enqueue: producers are refused; workers keep taking what is queued.",
    "paused-both": "Paused enqueue and dequeue.",
    "resumed-dequeue": "Resumed dequeue.",
    "resumed-enqueue": "Resumed enqueue.",
    "resumed-both": "Resumed enqueue and dequeue.",
    "requeued": "Requeued {n} dead task(s).",
    "purged": "Purged {n} dead task(s).",
    "cancelled": "Cancelled the task.",
    "settings": "Saved the queue's settings.",
    "tasks-cancel": "Cancelled {n} task(s); {m} left alone (gone, or not of this queue).",
    "tasks-run_now": "{n} task(s) will run now; {m} left alone (not scheduled any more, or gone).",
    "tasks-requeue": "Requeued {n} expired task(s); {m} left alone (lease renewed, settled or gone).",
    "tasks-set_priority": "Changed the priority of {n} task(s); {m} left alone (running, or gone).",
}


def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    identity = request.scope.get("state", {}).get("identity")
    flash = None
    code = request.query_params.get("done")
    if code in FLASH:
        count, left = request.query_params.get("n", ""), request.query_params.get("m", "")
        flash = FLASH[code].format(n=int(count) if count.isdigit() else "?", m=int(left) if left.isdigit() else "?")
    context.pop("script", None)  # every page runs the script: it asks before acting (data-confirm)
    # root: the mount prefix ("" at the top); every link a template writes is {{ root }}/path
    page = templates.get_template(name).render(
        css=CSS,
        script=True,
        root=root(request.scope),
        header=context.pop("header", None),
        signed_in=identity is not None,
        identity=identity,
        read_only=bool(identity and identity.read_only),
        csrf=(identity.csrf if identity else "") or "",
        flash=flash,
        **context,
    )
    return HTMLResponse(page, status_code=status, headers=page_headers())


def page_headers() -> dict[str, str]:
    return {
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }


def error_page(request: Request, status: int, message: str) -> HTMLResponse:
    titles = {
        400: "Bad request",
        403: "Forbidden",
        404: "Not found",
        405: "Method not allowed",
        503: "Database unavailable",
    }
    return render(request, "error.html", status, code=status, title=titles.get(status, "Error"), message=message)


def login_page(request: Request, status: int = 200, problem: str | None = None, next_path: str = "/") -> HTMLResponse:
    return render(request, "login.html", status, problem=problem, next=local_path(next_path))


def throttled_text(seconds: int) -> str:
    return f"too many wrong tokens from your address: try again in {seconds} s"


def throttled_login_page(request: Request, seconds: int) -> HTMLResponse:
    """The 429 for an address that must wait before presenting a token again."""
    response = login_page(request, 429, throttled_text(seconds).capitalize() + ".")
    response.headers["Retry-After"] = str(seconds)
    return response


def local_path(path: str) -> str:
    """Only a path on this server (no scheme, no host, no ``//``) may be a redirect target; it is
    a path inside the dashboard (:func:`~shardq.web.mount.redirect` adds the mount prefix)."""
    if not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path


# -- formatting ---------------------------------------------------------------------------------
def _count(q: dict[str, Any], name: str) -> str:
    return fmt.count_text(q[name], Accuracy(q["accuracy"][name]))


def formatted(q: dict[str, Any]) -> dict[str, Any]:
    """A view's queue dict with a ``fmt`` dict of display strings, as ``shardq stats`` shows
    them (≥N at the cap, ~N sampled)."""
    lead = q["lead_time_s"]
    paused = [what for what in ("enqueue", "dequeue") if q[f"paused_{what}"]]
    return {
        **q,
        "fmt": {
            **{name: _count(q, name) for name in ("ready", "scheduled", "leased", "expired", "backlog", "dead")},
            "oldest": fmt.duration_text(q["oldest_ready_age_s"]),
            "enqueue_rate": fmt.rate_text(q["enqueue_rate"]),
            "ack_rate": fmt.rate_text(q["ack_rate"]),
            "failure_rate": fmt.rate_text(q["failure_rate"]),
            "lead_time": ("∞" if q["ready"] + q["leased"] + q["expired"] else "-")
            if lead is None
            else fmt.duration_text(lead),
            "state": "paused: " + " and ".join(paused) if paused else "open",
        },
    }


def bucket_bars(per_bucket: list[dict[str, Any]]) -> dict[str, Any]:
    """Stacked bars (ready below, running above) of due depth per bucket, scaled to the peak."""
    width, height = BAR_AREA
    n = max(1, len(per_bucket))
    slot = width / n
    bar_width = max(1.0, slot * 0.8)
    peak = max((b["ready"] + b["leased"] for b in per_bucket), default=0) or 1
    items = []
    for i, b in enumerate(per_bucket):
        ready_h = b["ready"] / peak * (height - 4)
        leased_h = b["leased"] / peak * (height - 4)
        items.append(
            {
                **b,
                "x": round(i * slot + (slot - bar_width) / 2, 2),
                "ready_h": round(ready_h, 2),
                "ready_y": round(height - ready_h, 2),
                "leased_h": round(leased_h, 2),
                "leased_y": round(height - ready_h - leased_h, 2),
            }
        )
    return {
        "width": width,
        "height": height,
        "bar_width": round(bar_width, 2),
        "bars": items,
        "label_every": max(1, n // 16),
    }


def _seconds(value: float) -> str:
    return f"{value:g} s" if value < 60 else f"{value / 60:.1f} min"


# -- pages --------------------------------------------------------------------------------------
async def _page(request: Request, view: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await run_view(request, view, *args, **kwargs)


async def overview(request: Request) -> Response:
    dashboard = Dashboard.of(request)
    try:
        data = await _page(request, views.overview, dashboard.stats_options)
    except Failure as failure:
        return error_page(request, failure.status, failure.message)
    return render(
        request,
        "overview.html",
        script=True,
        header=data,
        queues=[formatted(q) for q in data["queues"]],
        refresh_ms=int(dashboard.refresh_seconds * 1000),
        refresh_label=_seconds(dashboard.refresh_seconds),
        history_points=dashboard.history_points,
        window_label=_seconds(round(data["window_s"])),
        rate_label=rate_label(dashboard),
    )


def rate_label(dashboard: Dashboard) -> str:
    """What the rate columns average over (the stats window: full minutes plus the current one)."""
    return f"{dashboard.stats_options.window_minutes}-min avg"


async def queue(request: Request) -> Response:
    dashboard = Dashboard.of(request)
    try:
        data = await _page(request, views.queue_detail, request.path_params["queue"], dashboard.stats_options)
        chart = await _page(
            request, charts_view.queue_charts, request.path_params["queue"], request.query_params.get("range") or "1h"
        )
    except Failure as failure:
        return error_page(request, failure.status, failure.message)
    return render(
        request,
        "queue.html",
        header=data,
        chart=chart,
        q=formatted(data["queue"]),
        settings=data["settings"],
        per_bucket=data["per_bucket"],
        bars=bucket_bars(data["per_bucket"]),
        skew=data["skew"],
        rate_label=rate_label(dashboard),
    )


async def dead(request: Request) -> Response:
    try:
        data = await _page(
            request, views.dead_detail, request.path_params["queue"], after=request.query_params.get("after") or None
        )
    except Failure as failure:
        return error_page(request, failure.status, failure.message)
    count = fmt.count_text(data["dead"], Accuracy(data["accuracy"]))
    return render(
        request,
        "dead.html",
        queue=data["queue"],
        count=count,
        dead=data["dead"],
        tasks=data["tasks"],
        limit=data["limit"],
        after=data["after"],
        next=data["next"],
    )


async def task(request: Request) -> Response:
    try:
        data = await _page(request, views.task_detail, request.path_params["task_id"])
    except Failure as failure:
        return error_page(request, failure.status, failure.message)
    return render(request, "task.html", t=data, payload_max=views.PAYLOAD_SHOWN_MAX)


async def task_lookup(request: Request) -> Response:
    wanted = request.query_params.get("id", "").strip()
    if not wanted:
        return redirect(request, "/")
    return redirect(request, "/tasks/" + urllib.parse.quote(wanted, safe=""))


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        return error_page(request, 404, "no such file")
    return Response(
        _read_static(name),
        media_type=STATIC[name],
        headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"},
    )


# -- forms --------------------------------------------------------------------------------------
async def read_form(request: Request) -> dict[str, list[str]]:
    raw = await read_body(request, FORM_MAX)
    try:
        return urllib.parse.parse_qs(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise Failure(400, "the form is not UTF-8") from None


def form_value(form: dict[str, list[str]], name: str) -> str | None:
    values = form.get(name)
    return values[0] if values else None


async def submit_form(request: Request, act: Callable[[dict[str, list[str]]], Any]) -> Response:
    """Parse the form, check its CSRF token, run ``act`` (which returns the redirect target, a
    path inside the dashboard: the mount prefix is added here)."""
    try:
        form = await read_form(request)
        if not Dashboard.of(request).csrf_ok(request, form_value(form, "csrf")):
            raise Failure(403, "missing or wrong CSRF token: reload the page and try again")
        target = await act(form)
    except Failure as failure:
        return error_page(request, failure.status, failure.message)
    return redirect(request, target)


def queue_path(queue: str, suffix: str = "") -> str:
    return "/queues/" + urllib.parse.quote(queue, safe="") + suffix


def _pause_form(paused: bool) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        name = request.path_params["queue"]

        async def act(form: dict[str, list[str]]) -> str:
            # A pause says what it stops (the page offers dequeue and enqueue apart, each after
            # a confirmation); a resume without a target resumes both.
            what = form_value(form, "what") or (None if paused else "both")
            if what not in PAUSE_TARGETS:
                raise Failure(400, "say what to pause: dequeue (workers), enqueue (producers) or both")
            await run_action(
                request,
                "pause" if paused else "resume",
                f"queue {name}",
                views.set_paused,
                name,
                paused,
                **PAUSE_TARGETS[what],
            )
            return queue_path(name, "?done=" + ("paused-" if paused else "resumed-") + what)

        return await submit_form(request, act)

    return endpoint


async def requeue_form(request: Request) -> Response:
    name = request.path_params["queue"]

    async def act(form: dict[str, list[str]]) -> str:
        ids = form.get("id", [])
        every = form_value(form, "all") == "1"
        if every == bool(ids):
            raise Failure(400, "choose tasks to requeue, or requeue all")
        result = await run_action(
            request, "requeue dead", f"queue {name}", views.dead_requeue, name, ids or None, all_tasks=every
        )
        return queue_path(name, f"/dead?done=requeued&n={result['requeued']}")

    return await submit_form(request, act)


async def purge_form(request: Request) -> Response:
    name = request.path_params["queue"]

    async def act(form: dict[str, list[str]]) -> str:
        if form_value(form, "confirm") != "1":
            raise Failure(400, "tick the box to confirm the purge")
        result = await run_action(request, "purge dead", f"queue {name}", views.dead_purge, name)
        return queue_path(name, f"/dead?done=purged&n={result['purged']}")

    return await submit_form(request, act)


def _cancel_and_locate(store: Any, task_id: str) -> str:
    queue = views.task_detail(store, task_id)["queue"]
    views.cancel(store, task_id)
    return queue


async def cancel_form(request: Request) -> Response:
    task_id = request.path_params["task_id"]

    async def act(form: dict[str, list[str]]) -> str:
        queue_name = await run_action(request, "cancel", f"task {task_id}", _cancel_and_locate, task_id)
        return queue_path(queue_name, "?done=cancelled")

    return await submit_form(request, act)


def routes() -> list[Route]:
    return [
        Route("/", overview, methods=["GET"]),
        Route("/static/{name}", static, methods=["GET"]),
        Route("/queues/{queue}", queue, methods=["GET"]),
        Route("/queues/{queue}/dead", dead, methods=["GET"]),
        Route("/queues/{queue}/pause", _pause_form(True), methods=["POST"]),
        Route("/queues/{queue}/resume", _pause_form(False), methods=["POST"]),
        Route("/queues/{queue}/dead/requeue", requeue_form, methods=["POST"]),
        Route("/queues/{queue}/dead/purge", purge_form, methods=["POST"]),
        Route("/tasks", task_lookup, methods=["GET"]),
        Route("/tasks/{task_id}", task, methods=["GET"]),
        Route("/tasks/{task_id}/cancel", cancel_form, methods=["POST"]),
    ]
