"""The `shardq` command, driven as a real subprocess against a real database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.cli import SHARDQ


def seen_ids(tmp: Path) -> list[str]:
    ids = []
    for path in tmp.glob("seen.*"):
        ids += path.read_text().split()
    return ids


def test_enqueue_then_stats_json_follows_the_contract(shardq_cli):
    assert shardq_cli("enqueue", "emails", "hello").stdout.strip() == "enqueued 1"
    assert shardq_cli("enqueue", "emails", "--delay", "3600", "later").stdout.strip() == "enqueued 1"
    data = json.loads(shardq_cli("stats", "--json").stdout)
    assert data["buckets"] == 4
    q = data["queues"]["emails"]
    assert {k: q[k] for k in ("ready", "scheduled", "leased", "dead")} == {
        "ready": 1,
        "scheduled": 1,
        "leased": 0,
        "dead": 0,
    }
    assert isinstance(q["oldest_ready_age_s"], float)


def test_enqueue_lines_reads_one_task_per_line(shardq_cli):
    out = shardq_cli("enqueue", "q", "--lines", stdin="a\nb\nc\n").stdout
    assert out.strip() == "enqueued 3"


def test_enqueue_with_a_live_dedupe_key_says_it_skipped(shardq_cli):
    shardq_cli("enqueue", "q", "x", "--dedupe-key", "k")
    assert "duplicates skipped: 1" in shardq_cli("enqueue", "q", "x", "--dedupe-key", "k").stdout


def test_work_until_empty_processes_everything_and_exits_zero(shardq_cli):
    shardq_cli("enqueue", "q", "--lines", stdin="".join(f"{i}\n" for i in range(300)))
    result = shardq_cli("work", "q", "--handler", "handlers_for_test:record", "--until-empty", "--concurrency", "2")
    assert "processed 300" in result.stdout
    assert len(set(seen_ids(shardq_cli.tmp))) == 300
    assert json.loads(shardq_cli("stats", "--json").stdout)["queues"]["q"]["ready"] == 0


def test_work_raises_the_young_gc_threshold_unless_told_not_to(shardq_cli):
    from shardq.worker.collector import young_threshold
    from shardq.worker.config import WorkerConfig

    for flag in ("--gc-tuning", "--no-gc-tuning"):
        shardq_cli("enqueue", "q", "x")
        shardq_cli("work", "q", "--handler", "handlers_for_test:record_gc_threshold", "--until-empty", flag)
    seen = (shardq_cli.tmp / "seen.gc").read_text().split()
    default = subprocess.run(
        [sys.executable, "-c", "import gc; print(gc.get_threshold()[0])"], capture_output=True, text=True, check=True
    ).stdout
    assert [int(n) for n in seen] == [young_threshold(WorkerConfig(queues=("q",))), int(default)]


def test_dead_letters_can_be_listed_requeued_and_purged(shardq_cli):
    shardq_cli("enqueue", "q", "--lines", stdin="a\nb\n")
    out = shardq_cli("work", "q", "--handler", "handlers_for_test:fail_forever", "--until-empty").stdout
    assert "dead 2" in out
    listed = json.loads(shardq_cli("dead", "list", "q", "--json").stdout)
    assert {t["payload"] for t in listed} == {"a", "b"}
    assert all("poison" in t["last_error"] for t in listed)
    assert shardq_cli("dead", "requeue", "q", listed[0]["id"]).stdout.strip() == "requeued 1"
    assert json.loads(shardq_cli("stats", "--json").stdout)["queues"]["q"]["ready"] == 1
    assert shardq_cli("dead", "requeue", "q", "--all").stdout.strip() == "requeued 1"
    shardq_cli("work", "q", "--handler", "handlers_for_test:fail_forever", "--until-empty")
    assert shardq_cli("dead", "purge", "q").stdout.strip() == "purged 2"
    assert json.loads(shardq_cli("stats", "--json").stdout)["queues"]["q"]["dead"] == 0


def test_reap_once_reports_what_it_did(shardq_cli):
    assert shardq_cli("reap", "--once").stdout.strip() == "reaped 0: 0 back to ready, 0 dead"


def test_buckets_show_json(shardq_cli):
    shardq_cli("enqueue", "q", "--lines", stdin="".join(f"{i}\n" for i in range(100)))
    data = json.loads(shardq_cli("buckets", "show", "--json").stdout)
    assert data["bucket_count"] == 4 and data["resizing"] is False
    assert sum(data["rows_per_bucket"].values()) == 100


@pytest.mark.parametrize(
    "args",
    [
        ("enqueue", "bad name!", "x"),
        ("enqueue", "q", "x", "--delay", "-3"),
        ("enqueue", "q", "x", "--lines"),
        ("work", "q", "--handler", "no_such_module:f"),
        ("work", "q", "--handler", "not a spec"),
        ("work", "q", "--handler", "handlers_for_test:record", "--batch", "0"),
        ("work", "q", "--handler", "handlers_for_test:record", "--lease", "0"),
        ("work", "q", "--handler", "handlers_for_test:record", "--lease", "0.5"),
        ("queue", "set", "q", "--lease", "0.5"),
        ("migrate", "--buckets", "1"),
        ("dead", "requeue", "q", "not-a-uuid"),
        ("dead", "requeue", "q"),
        ("stats", "--bogus"),
        ("task", "not-a-uuid"),
        ("queue", "set", "q", "--keep-finished", "soon"),
        ("history", "q", "--since", "yesterday-ish"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_no_traceback(shardq_cli, args):
    result = shardq_cli(*args, check=False)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip()


def test_malformed_dsn_exits_2(shardq_cli):
    result = shardq_cli("--dsn", "mysql://nope", "stats", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_unreachable_database_exits_1_without_traceback_or_password(shardq_cli):
    result = shardq_cli("--dsn", "postgresql://app:s3cr3t-pw@127.0.0.1:1/x", "stats", check=False)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "s3cr3t-pw" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_debug_flag_shows_the_traceback(shardq_cli):
    result = shardq_cli("--debug", "enqueue", "bad name!", "x", check=False)
    assert result.returncode == 2 and "Traceback" in result.stderr


def test_embedded_database_commands(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SHARDQ_DSN"}
    env["SHARDQ_HOME"] = str(tmp_path / "home")

    def run(*args):
        return subprocess.run([SHARDQ, *args], capture_output=True, text=True, env=env, timeout=180)

    assert run("db", "status").stdout.startswith("stopped")
    url = run("db", "start").stdout.strip()
    assert url.startswith("postgresql://postgres@127.0.0.1:")
    try:
        assert run("db", "url").stdout.strip() == url
        assert run("db", "status").stdout.startswith("running")
        assert "migrated" in run("migrate").stdout
        assert run("enqueue", "q", "x").stdout.strip() == "enqueued 1"
    finally:
        assert run("db", "stop").stdout.strip() == "stopped"
    assert run("db", "status").stdout.startswith("stopped")


def test_hundred_thousand_tasks_drain_with_four_worker_processes(shardq_cli):
    shardq_cli.db.client.enqueue_many("bulk", [str(i).encode() for i in range(100_000)], batch_size=5000)
    workers = [
        subprocess.Popen(
            [SHARDQ, "work", "bulk", "--handler", "handlers_for_test:record", "--until-empty", "--batch", "200"],
            cwd=shardq_cli.tmp,
            env={
                **os.environ,
                "SHARDQ_DSN": shardq_cli.db.dsn.conninfo,
                "SHARDQ_TEST_OUT": str(shardq_cli.tmp / "seen"),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for worker in workers:
        _, err = worker.communicate(timeout=600)
        assert worker.returncode == 0, err
    ids = seen_ids(shardq_cli.tmp)
    assert len(set(ids)) == 100_000
    stats = json.loads(shardq_cli("stats", "--json").stdout)["queues"]["bulk"]
    assert (stats["ready"], stats["scheduled"], stats["leased"], stats["dead"]) == (0, 0, 0, 0)


def test_enqueue_with_priority_and_exclusive_key(shardq_cli):
    assert shardq_cli("enqueue", "q", "a", "--key", "acct", "--priority", "3").stdout.strip() == "enqueued 1"
    out = shardq_cli("enqueue", "q", "b", "--key", "acct").stdout.strip()
    assert out == "enqueued 1 (waiting in the key's backlog: 1)"
    stats = json.loads(shardq_cli("stats", "--json").stdout)["queues"]["q"]
    assert stats["ready"] == 1 and stats["backlog"] == 1


def test_queue_settings_pause_and_resume(shardq_cli):
    shardq_cli("queue", "set", "q", "--lease", "90", "--max-attempts", "4", "--jitter", "0.5")
    [settings] = json.loads(shardq_cli("queue", "show", "q", "--json").stdout)
    assert settings["lease_seconds"] == 90 and settings["max_attempts"] == 4 and settings["retry_jitter"] == 0.5
    shardq_cli("queue", "pause", "q", "--enqueue")
    refused = shardq_cli("enqueue", "q", "x", check=False)
    assert refused.returncode == 1 and "paused" in refused.stderr and "Traceback" not in refused.stderr
    shardq_cli("queue", "resume", "q")
    assert shardq_cli("enqueue", "q", "x").stdout.strip() == "enqueued 1"
    assert shardq_cli("queue", "set", "q", "--jitter", "3", check=False).returncode == 2
    short = shardq_cli("queue", "set", "q", "--lease", "0.5", check=False)
    assert short.returncode == 2 and len(short.stderr.strip().splitlines()) == 1
    assert "lease must be at least 1 second" in short.stderr
    assert json.loads(shardq_cli("queue", "show", "q", "--json").stdout)[0]["lease_seconds"] == 90
    assert shardq_cli("queue", "show", "nope", check=False).returncode == 1


def test_cancel_by_id(shardq_cli):
    shardq_cli("enqueue", "q", "x")
    [row] = shardq_cli.db.tasks("id")
    assert shardq_cli("cancel", str(row["id"])).stdout.strip() == "cancelled 1"
    missing = shardq_cli("cancel", str(row["id"]), check=False)
    assert missing.returncode == 1 and "not found" in missing.stdout


APP_MODULE = textwrap.dedent(
    """
    import os
    import shardq

    app = shardq.App(os.environ["SHARDQ_DSN"])
    not_an_app = 42

    @app.task(queue="pictures")
    def resize(path: str, width: int) -> None:
        with open(os.environ["SHARDQ_TEST_OUT"] + f".{os.getpid()}", "a") as out:
            out.write(f"{path}:{width}\\n")

    @app.task(name="mail.send", queue="mail")
    def send(to: str) -> None:
        with open(os.environ["SHARDQ_TEST_OUT"] + f".{os.getpid()}", "a") as out:
            out.write(f"mail:{to}\\n")
    """
)


def test_work_runs_an_async_handler(shardq_cli):
    ids = shardq_cli.db.client.enqueue_many("q", [b"a", b"b", b"c"]).enqueued_ids
    out = shardq_cli("work", "q", "--handler", "handlers_for_test:record_async", "--until-empty").stdout
    assert "processed 3" in out
    assert sorted(seen_ids(shardq_cli.tmp)) == sorted(ids)


def test_work_with_an_app_runs_every_queue_of_its_tasks_by_name(shardq_cli):
    (shardq_cli.tmp / "app_for_test.py").write_text(APP_MODULE)
    from shardq.arguments import encode_call

    shardq_cli.db.client.enqueue("pictures", encode_call("app_for_test.resize", {"path": "a.png", "width": 64}))
    shardq_cli.db.client.enqueue("mail", encode_call("mail.send", {"to": "x@example.com"}))
    out = shardq_cli("work", "--app", "app_for_test:app", "--until-empty").stdout
    assert "processed 2" in out
    assert sorted(seen_ids(shardq_cli.tmp)) == ["a.png:64", "mail:x@example.com"]


@pytest.mark.parametrize(
    "args,words",
    [
        (["work", "q"], "exactly one of --handler"),
        (
            ["work", "q", "--handler", "handlers_for_test:record", "--app", "app_for_test:app"],
            "exactly one of --handler",
        ),
        (["work", "--handler", "handlers_for_test:record"], "name the QUEUES"),
        (["work", "--app", "app_for_test:not_an_app"], "not a shardq.App"),
        (["work", "--app", "no_such_module:app"], "cannot import app module"),
        (["work", "q", "--handler", "handlers_for_test:NotAFunction"], "is a class, not a function"),
        (["work", "q", "--handler", "handlers_for_test:record", "--timeout", "0"], "timeout"),
        (["queue", "set", "q", "--timeout", "-1"], "timeout"),
        (["work", "q", "--handler", "handlers_for_test:NOT_CALLABLE"], "is a int, not a function"),
    ],
)
def test_work_refuses_a_bad_handler_or_app_with_one_line_and_exit_2(shardq_cli, args, words):
    (shardq_cli.tmp / "app_for_test.py").write_text(APP_MODULE)
    result = shardq_cli(*args, check=False)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and words in result.stderr


def test_queue_limits_are_set_shown_and_removed(shardq_cli):
    out = shardq_cli("queue", "set", "q", "--concurrency", "3", "--rate", "50", "--burst", "10").stdout
    assert "concurrency 3 (0 in use)" in out and "rate 50/s (burst 10)" in out
    [settings] = json.loads(shardq_cli("queue", "show", "q", "--json").stdout)
    assert (settings["concurrency_limit"], settings["rate_limit"], settings["rate_burst"]) == (3, 50, 10)
    assert settings["slots_in_use"] == 0
    stats = json.loads(shardq_cli("stats", "--json").stdout)["queues"]["q"]
    assert stats["concurrency_limit"] == 3 and stats["slots_in_use"] == 0 and stats["window"]["throttled"] == 0
    table = shardq_cli("stats").stdout
    assert "slots" in table and "0/3" in table
    shardq_cli("queue", "set", "q", "--rate", "0", "--concurrency", "0")
    [settings] = json.loads(shardq_cli("queue", "show", "q", "--json").stdout)
    assert settings["concurrency_limit"] is None and settings["rate_limit"] is None


@pytest.mark.parametrize(
    "args,words",
    [
        (["--concurrency", "-1"], "concurrency limit must be a whole number >= 0"),
        (["--concurrency", "1.5"], "'1.5' is not a valid integer"),
        (["--rate", "-2"], "rate must be a whole number >= 0"),
        (["--rate", "2.5"], "'2.5' is not a valid integer"),
        (["--rate", "10", "--burst", "0"], "burst must be a positive whole number"),
        (["--burst", "5"], "a burst needs a rate"),
    ],
)
def test_bad_queue_limits_are_refused_with_one_line_exit_2_and_nothing_written(shardq_cli, args, words):
    result = shardq_cli("queue", "set", "fresh", *args, check=False)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and words in result.stderr
    assert shardq_cli("queue", "show", "fresh", check=False).returncode == 1  # not even created


def test_task_and_history_show_a_kept_queues_finished_tasks_and_unknown_ids(shardq_cli):
    assert "keeps finished tasks 7d" in shardq_cli("queue", "set", "q", "--keep-finished", "7d").stdout
    shardq_cli("enqueue", "q", "--lines", stdin="a\nb\nc\n")
    shardq_cli("work", "q", "--handler", "handlers_for_test:record", "--until-empty")
    page = json.loads(shardq_cli("history", "q", "--json", "--limit", "2").stdout)
    assert [t["state"] for t in page["tasks"]] == ["succeeded", "succeeded"] and page["next"]
    rest = json.loads(shardq_cli("history", "q", "--json", "--after", page["next"]).stdout)
    assert len(rest["tasks"]) == 1 and rest["next"] is None
    task_id = page["tasks"][0]["id"]
    shown = json.loads(shardq_cli("task", task_id, "--json").stdout)
    assert (shown["state"], shown["queue"], shown["attempts"]) == ("succeeded", "q", 1)
    assert "succeeded" in shardq_cli("task", task_id).stdout
    unknown = shardq_cli("task", "00000000-0000-4000-8000-000000000000")
    assert unknown.returncode == 0 and "unknown" in unknown.stdout
    assert "0 finished task(s)" in shardq_cli("history", "q", "--state", "dead", "--since", "1h").stdout


def test_queue_set_keep_results_is_shown_and_says_when_the_queue_keeps_no_finished_tasks(shardq_cli):
    settings_line, note = shardq_cli("queue", "set", "q", "--keep-results").stdout.splitlines()
    assert "keeps results" not in settings_line and "keeps results only while it keeps finished tasks" in note
    both = shardq_cli("queue", "set", "q", "--keep-finished", "1d").stdout
    assert "keeps finished tasks 1d, keeps results" in both and "note" not in both
    shown = json.loads(shardq_cli("queue", "show", "q", "--json").stdout)
    assert shown[0]["keep_results"] is True
    assert "keeps results" not in shardq_cli("queue", "set", "q", "--no-keep-results").stdout
