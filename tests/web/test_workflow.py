"""The dashboard's workflow page (/workflows/{id}), in-process against a real database: the graph
drawn on the server (steps as boxes by depth, edges as lines) with each step's state and colour,
each step linking to its task, and the link from a step's task page."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from shardq.lifecycle.claim import Consumer
from shardq.web import workflow_view
from shardq.web.app import create_app
from shardq.workflows import steps as workflows
from tests.support.factories import TestDatabase, fenced
from tests.support.web import BEARER, CURRENT, TOKEN, DashboardClient


@pytest.fixture
def web(db: TestDatabase) -> Iterator[DashboardClient]:
    with DashboardClient(create_app(db.client, TOKEN, stats_options=CURRENT), db, follow_redirects=False) as client:
        yield client


def diamond(app, db):
    """a, then b and c, then d after both; a acked (succeeded), b and c ready, d waiting."""

    @app.task(name="t")
    def t(x: int) -> None: ...

    wf = app.workflow("diamond")
    a = wf.add(t.step(x=1), name="a")
    b = wf.add(t.step(x=2), name="b", after=a)
    c = wf.add(t.step(x=3), name="c", after=a)
    wf.add(t.step(x=4), name="d", after=[b, c])
    handle = wf.enqueue()
    [task_a] = Consumer(db.store, ["default"]).claim().tasks
    workflows.remove_and_release(db.store, lambda: db.store.task_ack_many([fenced(task_a)]), "succeeded")
    return handle


def test_the_graph_is_laid_out_by_depth_with_a_line_per_edge():
    steps = [
        {"name": n, "parents": p, "state": "waiting"}
        for n, p in (("d", ["b", "c"]), ("a", []), ("b", ["a"]), ("c", ["a"]), ("e", ["d", "a"]))
    ]
    assert workflow_view.levels(steps) == {"a": 0, "b": 1, "c": 1, "d": 2, "e": 3}
    graph = workflow_view.layout(steps)
    boxes = {b["name"]: b for b in graph["boxes"]}
    assert boxes["b"]["x"] == boxes["c"]["x"] > boxes["a"]["x"] and boxes["b"]["y"] < boxes["c"]["y"]
    assert len(graph["edges"]) == 6
    edge = next(e for e in graph["edges"] if (e["parent"], e["child"]) == ("a", "b"))
    assert edge["x1"] == boxes["a"]["x"] + graph["box_w"] and edge["x2"] == boxes["b"]["x"]


def test_a_long_chain_is_laid_out_without_recursion():
    steps = [{"name": f"s{i:05d}", "parents": [f"s{i - 1:05d}"] if i else [], "state": "ready"} for i in range(5000)]
    assert workflow_view.levels(steps)["s04999"] == 4999


def test_the_workflow_page_draws_each_step_in_its_states_colour_linked_to_its_task(app, db, web):
    handle = diamond(app, db)
    page = web.get(f"/workflows/{handle}", headers=BEARER)
    assert page.status_code == 200
    html = page.text
    assert re.search(r'id="workflow-state">running<', html)
    for name, state in (("a", "succeeded"), ("b", "ready"), ("c", "ready"), ("d", "waiting")):
        box = re.search(
            rf'<a href="/tasks/{handle.task_ids[name]}" class="step" data-step="{name}" '
            rf'data-state="{state}">.*?fill="([^"]+)"',
            html,
            re.S,
        )
        assert box and box.group(1) == workflow_view.STATE_COLOURS[state], name
    assert len(re.findall(r'<line class="edge"', html)) == 4
    assert 'data-parent="b" data-child="d"' in html


def test_a_step_task_page_links_to_its_workflow_and_a_plain_task_page_does_not(app, db, web):
    handle = diamond(app, db)
    page = web.get(f"/tasks/{handle.task_ids['b']}", headers=BEARER).text
    assert f'id="task-workflow" href="/workflows/{handle}"' in page
    assert web.get(f"/api/tasks/{handle.task_ids['d']}", headers=BEARER).json()["workflow"] == {
        "id": str(handle),
        "step": "d",
    }
    plain = db.make_task("q")
    assert "task-workflow" not in web.get(f"/tasks/{plain.id}", headers=BEARER).text


def test_an_unknown_workflow_is_a_404_and_a_malformed_id_a_400(web):
    assert web.get(f"/workflows/{uuid.uuid4()}", headers=BEARER).status_code == 404
    assert web.get("/workflows/not-an-id", headers=BEARER).status_code == 400


def test_a_workflow_over_the_drawing_limit_is_listed_not_drawn(app, db, web, monkeypatch):
    monkeypatch.setattr(workflow_view, "DRAW_MAX", 3)
    handle = diamond(app, db)
    html = web.get(f"/workflows/{handle}", headers=BEARER).text
    assert 'id="not-drawn"' in html and 'id="workflow-graph"' not in html
    assert len(re.findall(r"<tr data-step=", html)) == 3
