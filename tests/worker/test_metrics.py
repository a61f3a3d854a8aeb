"""Worker observability: the on_event hooks, Prometheus metrics over HTTP, structured log lines."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from shardq import Permanent
from shardq.cli.logs import JsonLines
from shardq.maintenance.reaper import Reaper
from shardq.worker.metrics import WorkerMetrics
from tests.support.factories import utcnow

SHARDQ = str(Path(sys.executable).with_name("shardq"))


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample of the endpoint as {(name, sorted labels): value}."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        body = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def run_worker(db, handler, **options):
    options.setdefault("until_empty", True)
    worker = db.client.worker(["q"], handler, **options)
    return worker.run(install_signal_handlers=False)


def poison(task):
    if task.payload == b"poison":
        raise Permanent("poison")


def test_metrics_endpoint_counts_claims_outcomes_polls_and_durations(db):
    db.client.enqueue_many("q", [b"ok"] * 8 + [b"poison"] * 2)
    metrics = WorkerMetrics(queues=["q"])
    polls = []

    def on_event(event, task, details):
        if event == "claim":
            polls.extend(details["polls"])
        metrics.on_event(event, task, details)

    server = metrics.serve(0, "127.0.0.1")
    try:
        stats = run_worker(db, poison, on_event=on_event, events=metrics.EVENTS, batch=3)
        samples = scrape(server.url)
    finally:
        server.close()
    q = (("queue", "q"),)
    assert samples[("shardq_tasks_claimed_total", q)] == 10
    assert samples[("shardq_tasks_acked_total", q)] == 8
    assert samples[("shardq_tasks_dead_total", q)] == 2
    assert samples[("shardq_tasks_retried_total", q)] == 0
    assert samples[("shardq_tasks_lease_lost_total", q)] == 0
    assert samples[("shardq_handler_duration_seconds_count", q)] == 10
    # one observation per claim statement (promotions of due scheduled tasks are not claims); a
    # PostgreSQL round claim reports one poll per bucket it took tasks from, timed on the first
    timed = [p for p in polls if p[2] is not None]
    assert samples[("shardq_claim_duration_seconds_count", q)] == len(timed) <= stats.claim_statements
    empty = [p for p in polls if p[3] == 0]
    assert samples[("shardq_empty_polls_total", q)] == len(empty)
    # until_empty stops after a whole round of empty polls: one per bucket at least (one
    # statement per round on PostgreSQL)
    assert len(empty) >= len(db.store.claim_groups(db.layout.visit_count, 0))
    per_bucket = {
        dict(labels)["bucket"]: v for (name, labels), v in samples.items() if name == "shardq_bucket_claims_total"
    }
    assert sum(per_bucket.values()) == 10
    assert per_bucket == {str(b): float(n) for b, n in stats.per_bucket_claims.items()}


def test_claims_a_flow_limit_refused_are_counted(db):
    db.client.set_queue("q", rate=20, burst=1)
    db.client.enqueue_many("q", [b"ok"] * 4)
    metrics = WorkerMetrics(queues=["q"])
    server = metrics.serve(0, "127.0.0.1")
    try:
        totals = run_worker(db, lambda task: None, on_event=metrics.on_event, events=metrics.EVENTS)
        samples = scrape(server.url)
    finally:
        server.close()
    assert totals.acked == 4 and totals.throttled > 0
    assert samples[("shardq_claims_throttled_total", (("queue", "q"),))] == totals.throttled


def test_each_worker_metrics_has_its_own_registry():
    first, second = WorkerMetrics(), WorkerMetrics()
    first.on_event("claim", None, {"polls": [(0, "q", 0.01, 5)]})
    assert first.registry.get_sample_value("shardq_tasks_claimed_total", {"queue": "q"}) == 5
    assert second.registry.get_sample_value("shardq_tasks_claimed_total", {"queue": "q"}) is None


def test_the_worker_reports_claim_polls_and_handler_runs_to_on_event(db):
    db.client.enqueue_many("q", [b"a", b"b", b"poison"])
    events = []
    run_worker(db, poison, on_event=lambda event, task, details: events.append((event, task, details)))
    claims = [d for e, t, d in events if e == "claim"]
    assert all(t is None for e, t, d in events if e == "claim")
    polls = [p for d in claims for p in d["polls"]]
    assert sum(found for _, _, _, found in polls) == 3
    assert all((seconds is None or seconds >= 0) and queue == "q" for _, queue, seconds, _ in polls)
    assert any(seconds is not None for _, _, seconds, _ in polls)
    handled = [(t.payload, d["outcome"]) for e, t, d in events if e == "handled"]
    assert sorted(handled) == [(b"a", "ack"), (b"b", "ack"), (b"poison", "fail")]
    assert all(d["seconds"] >= 0 for e, t, d in events if e == "handled")
    assert sorted(e for e, t, d in events if e in ("acked", "dead")) == ["acked", "acked", "dead"]


def test_shardq_work_serves_metrics_while_it_runs(pg_db, tmp_path):
    env = {**os.environ, "SHARDQ_DSN": pg_db.dsn.conninfo}
    process = subprocess.Popen(
        [
            SHARDQ,
            "work",
            "q",
            "--handler",
            "shardq.app.loading:noop",
            "--metrics-port",
            "0",
            "--metrics-host",
            "127.0.0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        line = process.stderr.readline()
        assert line.startswith("metrics: http://127.0.0.1:"), line
        body = urllib.request.urlopen(line.split()[1], timeout=10).read().decode()
        names = {family.name for family in text_string_to_metric_families(body)}
        assert {
            "shardq_tasks_claimed",
            "shardq_tasks_acked",
            "shardq_claim_duration_seconds",
            "shardq_handler_duration_seconds",
            "shardq_empty_polls",
            "shardq_bucket_claims",
        } <= names
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "processed 0" in out


# -- logs ---------------------------------------------------------------------------------------
def test_task_events_are_logged_with_their_context_at_debug(db, caplog):
    db.client.enqueue_many("q", [b"ok", b"poison"])
    with caplog.at_level(logging.DEBUG, logger="shardq.worker"):
        run_worker(db, poison)
    by_event = {}
    for record in caplog.records:
        if hasattr(record, "event"):
            by_event.setdefault(record.event, []).append(record)
    assert len(by_event["claimed"]) == 2 and len(by_event["handled"]) == 2
    assert [r.levelno for r in by_event["acked"]] == [logging.DEBUG]
    assert [r.levelno for r in by_event["dead"]] == [logging.INFO]
    dead = by_event["dead"][0]
    assert dead.queue == "q" and dead.attempt == 1 and isinstance(dead.bucket, int)
    assert len(dead.task_id) == 36 and "poison" in dead.getMessage()


def test_per_task_lines_are_not_logged_at_the_default_level(db, caplog):
    db.client.enqueue_many("q", [b"ok"] * 5)
    with caplog.at_level(logging.WARNING, logger="shardq.worker"):
        run_worker(db, poison)
    assert not [r for r in caplog.records if hasattr(r, "event")]


def test_the_reaper_logs_each_reaped_task_at_debug(db, caplog):
    task = db.make_task("q", state="leased", lease_expires_at=utcnow().replace(year=2000), attempts=1)
    with caplog.at_level(logging.DEBUG, logger="shardq.maintenance.reaper"):
        Reaper(db.store).run_once()
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "expired"]
    assert (record.task_id, record.queue, record.bucket, record.attempt) == (task.id, "q", task.key.bucket, 1)


def test_json_lines_carry_the_task_context():
    record = logging.LogRecord("shardq.worker", logging.INFO, __file__, 1, "task %s dead", ("abc",), None)
    for name, value in dict(event="dead", task_id="abc", queue="q", bucket=3, attempt=2).items():
        setattr(record, name, value)
    data = json.loads(JsonLines().format(record))
    assert data["message"] == "task abc dead"
    assert {k: data[k] for k in ("event", "task_id", "queue", "bucket", "attempt")} == {
        "event": "dead",
        "task_id": "abc",
        "queue": "q",
        "bucket": 3,
        "attempt": 2,
    }


def test_cli_log_json_with_info_level_prints_one_json_line_per_dead_letter(pg_db, tmp_path):
    pg_db.client.enqueue_many("q", [b"poison"] * 2)
    (tmp_path / "handlers_for_test.py").write_text(
        "import shardq\ndef poison(task):\n    raise shardq.Permanent('poison')\n"
    )
    result = subprocess.run(
        [
            SHARDQ,
            "--log-json",
            "--log-level",
            "info",
            "work",
            "q",
            "--handler",
            "handlers_for_test:poison",
            "--until-empty",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "SHARDQ_DSN": pg_db.dsn.conninfo},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    dead = [line for line in lines if line.get("event") == "dead"]
    assert len(dead) == 2
    assert all({"task_id", "queue", "bucket", "attempt"} <= set(line) for line in dead)
    assert not [line for line in lines if line.get("event") == "acked"]


def test_the_grafana_dashboard_queries_only_metrics_workers_export():
    import re

    dashboard = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-shardq.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = set(re.findall(r"\b(shardq_[a-z_]+)", " ".join(exprs)))
    metrics = WorkerMetrics(queues=["q"])
    metrics.on_event("claim", None, {"polls": [(0, "q", 0.01, 1)]})
    exported = {s.name for family in metrics.registry.collect() for s in family.samples}
    assert used and used <= exported, used - exported
