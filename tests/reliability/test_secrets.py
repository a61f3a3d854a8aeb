"""Passwords in DSNs never appear in logs (``--debug``, ``--log-json``), errors or output.

The embedded server trusts loopback connections, so a DSN may carry any password and still
connect: every command below really runs, with the password in ``--dsn`` or ``SHARDQ_DSN``.
"""

from __future__ import annotations

import signal
import subprocess
from urllib.parse import quote

import pytest
from psycopg.conninfo import conninfo_to_dict

from shardq import Client, DatabaseError, InvalidInput
from shardq.sessions.dsn import Dsn
from tests.reliability.harness import REPO, SHARDQ, wait_until

PASSWORD = "pw-S3cr3t:@/%x y"  # needs URL-encoding; both spellings are searched for


def _forms() -> list[str]:
    return [PASSWORD, quote(PASSWORD, safe=""), "S3cr3t"]


def _url(db, password: str = PASSWORD, port: int | None = None, dbname: str | None = None) -> str:
    params = conninfo_to_dict(db.dsn.conninfo)
    return (
        f"postgresql://{params.get('user', 'postgres')}:{quote(password, safe='')}@{params['host']}:"
        f"{port or params['port']}/{dbname or params['dbname']}"
    )


def _leaks(text: str) -> list[str]:
    return [form for form in _forms() if form in text]


def _run(args: list[str], env: dict | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    import os

    full = {k: v for k, v in os.environ.items() if k != "SHARDQ_DSN"}
    full.update(env or {}, PYTHONPATH=str(REPO))
    return subprocess.run([SHARDQ, *args], capture_output=True, text=True, env=full, cwd=REPO, input=stdin, timeout=120)


@pytest.mark.parametrize(
    "both_ways", [pytest.param(False, id="fast"), pytest.param(True, id="full", marks=pytest.mark.slow)]
)
def test_cli_output_logs_and_errors_never_show_the_password(pg_db, figures, both_ways):
    url = _url(pg_db)
    closed = _url(pg_db, port=1)
    not_migrated = _url(pg_db, dbname="postgres")
    runs = [
        (["--debug", "--log-json", "--dsn", url, "enqueue", "q", "x", "--dedupe-key", "k"], None),
        (["--debug", "--dsn", url, "enqueue", "q", "--lines"], "a\nb\nc\n"),
        (["--debug", "--log-json", "--dsn", url, "stats"], None),
        (["--debug", "--dsn", url, "stats", "--json"], None),
        (["--debug", "--log-json", "--dsn", url, "queue", "show"], None),
        (["--debug", "--log-json", "--dsn", url, "buckets", "show", "--json"], None),
        (
            [
                "--debug",
                "--log-json",
                "--dsn",
                url,
                "work",
                "q",
                "--handler",
                "shardq.app.loading:noop",
                "--until-empty",
            ],
            None,
        ),
        (["--debug", "--log-json", "--dsn", url, "reap", "--once"], None),
        (["--debug", "--log-json", "--dsn", url, "dead", "list", "q"], None),
        (["--debug", "--log-json", "--dsn", url, "migrate"], None),
        # failures, with tracebacks (--debug) and without
        (["--debug", "--log-json", "--dsn", closed, "stats"], None),
        (["--dsn", closed, "stats"], None),
        (["--debug", "--dsn", closed, "migrate"], None),
        (["--debug", "--log-json", "--dsn", not_migrated, "stats"], None),
        (["--debug", "--dsn", url, "enqueue", "bad name!", "x"], None),
        (["--debug", "--dsn", url.replace("@", "@[", 1), "stats"], None),  # malformed
        (["--debug", "--dsn", url.replace("%", "%z", 1), "stats"], None),  # malformed
        (["--debug", "--dsn", f"host=127.0.0.1 port=1 password='{PASSWORD}' dbname=x", "stats"], None),
        (["--debug", "--dsn", f"host=127.0.0.1 password='{PASSWORD}", "stats"], None),  # unterminated quote
    ]
    leaks, outputs, codes = [], 0, []
    for number, (args, stdin) in enumerate(runs):
        # fast: each command once, alternately with --dsn and SHARDQ_DSN; full: both ways
        for via_env in (False, True) if both_ways else (bool(number % 2),):
            if via_env:  # the same, with the DSN in SHARDQ_DSN instead of --dsn
                at = args.index("--dsn")
                result = _run(args[:at] + args[at + 2 :], env={"SHARDQ_DSN": args[at + 1]}, stdin=stdin)
            else:
                result = _run(args, stdin=stdin)
            outputs += 2  # stdout and stderr
            codes.append(result.returncode)
            found = _leaks(result.stdout + result.stderr)
            if found:
                leaks.append((args, found, (result.stdout + result.stderr)[-500:]))
    figures.add(
        "secrets",
        check="CLI stdout/stderr with --debug/--log-json, successes and failures, "
        + ("each with --dsn and with SHARDQ_DSN" if both_ways else "--dsn or SHARDQ_DSN (fast)"),
        outputs=outputs,
        leaks=len(leaks),
    )
    assert not leaks, leaks
    assert 0 in codes and 1 in codes and 2 in codes  # the runs did succeed and fail


def test_a_worker_logging_connection_failures_never_shows_the_password(pg_db, tmp_path, figures):
    closed = _url(pg_db, port=1)
    log = tmp_path / "worker.log"
    import os

    env = {k: v for k, v in os.environ.items() if k != "SHARDQ_DSN"}
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            [SHARDQ, "--debug", "--log-json", "--dsn", closed, "work", "q", "--handler", "shardq.app.loading:noop"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )
    try:
        wait_until(lambda: log.read_text().count("claim failed") >= 3, 60, what="logged connection failures")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    text = log.read_text()
    figures.add(
        "secrets",
        check="`shardq work` JSON debug logs while the database is unreachable",
        outputs=1,
        leaks=len(_leaks(text)),
    )
    assert proc.returncode == 0
    assert not _leaks(text), text[-1000:]


def test_library_errors_and_reprs_never_show_the_password(pg_db, figures):
    texts = []
    dsn = Dsn.parse(_url(pg_db))
    texts += [str(dsn), repr(dsn), dsn.redacted]
    client = Client(_url(pg_db, port=1))
    with pytest.raises(DatabaseError) as caught:
        client.stats()
    texts.append(str(caught.value))
    texts.append(repr(caught.value))
    client.close()
    for bad in (
        _url(pg_db).replace("@", "@[", 1),
        _url(pg_db).replace("%", "%z", 1),
        f"password='{PASSWORD}",
        f"postgresql://u:{PASSWORD}@h:1/d",
    ):
        try:
            texts.append(str(Dsn.parse(bad)))
        except InvalidInput as exc:
            texts.append(str(exc))
    leaks = [t for t in texts if _leaks(t)]
    figures.add(
        "secrets",
        check="library: Dsn str/repr, connection errors, malformed-DSN errors",
        outputs=len(texts),
        leaks=len(leaks),
    )
    assert not leaks, leaks
