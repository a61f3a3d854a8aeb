"""Bad-input fuzzing (hypothesis) of the library API and the ``shardq`` command line.

Properties, for every generated input:
  * library: the call succeeds, or raises :class:`shardq.InvalidInput` (a documented
    :class:`shardq.ShardqError`) — never another exception type;
  * command line: exit 0, or exit 2 with exactly one line on stderr and no traceback;
  * a rejected input writes nothing (the tables are compared before and after);
  * an accepted identifier or key is stored as a plain value, exactly as given: SQL in it is data.
"""

from __future__ import annotations

import importlib.util
import math
import re

import pytest
from click.testing import CliRunner
from hypothesis import assume, given
from hypothesis import strategies as st

from shardq import InvalidHandler, InvalidInput, NewTask, ReaperConfig, WorkerConfig
from shardq.admin import actions as admin
from shardq.app.loading import load_handler
from shardq.cli.main import cli
from shardq.migrations import apply as migrate
from shardq.sessions.dsn import Dsn
from tests.reliability.fuzz_support import MODES, Tally, fuzz_settings

# Things people (and attackers) put where an identifier or key goes.
INJECTIONS = [
    "q'; DROP TABLE shardq_tasks; --",
    'q"; DROP TABLE shardq_tasks; --',
    "q); DELETE FROM shardq_tasks; --",
    "' OR '1'='1",
    "q' || pg_sleep(5) || '",
    "q;",
    "q\\",
    "%(queue)s",
    "%s",
    "{shard_col}",
    "$1",
    "q\x00x",
    "q\n",
    " q",
    "é",
    "q q",
    "-q",
    ".q",
    "x" * 129,
]


def snapshot(db) -> tuple:
    return db.contents_fingerprint()


anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.lists(st.integers(), max_size=2),
)
queue_names = st.one_of(
    st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.:\-]{0,40}\Z"),
    st.text(max_size=140),
    st.sampled_from(INJECTIONS),
    anything,
)
payloads = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200),
    st.sampled_from([b"x" * (1024 * 1024), b"x" * (1024 * 1024 + 1), b"", "\x00", "'; DROP TABLE x; --"]),
    anything,
)
delays = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.booleans(),
    st.text(max_size=4),
)
keys = st.one_of(st.none(), st.text(max_size=600), st.sampled_from(INJECTIONS), st.just(""), anything)
priorities = st.one_of(st.integers(min_value=-(2**64), max_value=2**64), st.integers(-10, 10), anything)
attempts = st.one_of(st.none(), st.integers(min_value=-3, max_value=20_000), anything)


@pytest.mark.parametrize("mode", MODES)
def test_enqueue_accepts_or_rejects_cleanly_and_stores_values_verbatim(pg_db, figures, mode):
    tally = Tally(
        figures, "library: Client.enqueue (queue, payload, delay, dedupe key, priority, exclusive key, max attempts)"
    )

    @fuzz_settings(mode)
    @given(
        queue=queue_names,
        payload=payloads,
        delay=delays,
        dedupe=keys,
        priority=priorities,
        exclusive=keys,
        max_attempts=attempts,
    )
    def check(queue, payload, delay, dedupe, priority, exclusive, max_attempts):
        before = snapshot(pg_db)
        try:
            result = pg_db.client.enqueue(
                queue,
                payload,
                delay=delay,
                dedupe_key=dedupe,
                priority=priority,
                exclusive_key=exclusive,
                max_attempts=max_attempts,
            )
        except InvalidInput:
            tally.no()
            assert snapshot(pg_db) == before, "a rejected enqueue wrote something"
            return
        tally.ok()
        if result.enqueued_ids:
            row = pg_db.task_row(result.enqueued_ids[0])
            assert row["queue"] == queue
            assert bytes(row["payload"]) == (payload.encode() if isinstance(payload, str) else bytes(payload))
            assert row["dedupe_key"] == dedupe and row["exclusive_key"] == exclusive and row["priority"] == priority
        else:
            assert result.duplicates == 1 and dedupe is not None

    try:
        check()
    finally:
        tally.save()
    assert pg_db.count() >= 0  # the table is still there


@pytest.mark.parametrize("mode", MODES)
def test_enqueue_many_with_one_bad_task_writes_nothing(pg_db, figures, mode):
    tally = Tally(figures, "library: Client.enqueue_many (mixed batches, batch sizes)")
    task = st.builds(
        NewTask,
        payload=payloads,
        delay=delays,
        dedupe_key=keys,
        max_attempts=attempts,
        priority=priorities,
        exclusive_key=keys,
    )

    @fuzz_settings(mode)
    @given(
        tasks=st.lists(st.one_of(task, payloads), min_size=1, max_size=6),
        batch=st.one_of(st.integers(-2, 12), anything),
    )
    def check(tasks, batch):
        before = snapshot(pg_db)
        try:
            result = pg_db.client.enqueue_many("fuzz-many", tasks, batch_size=batch)
        except InvalidInput:
            tally.no()
            assert snapshot(pg_db) == before
            return
        tally.ok()
        assert result.enqueued + result.duplicates == len(tasks)

    try:
        check()
    finally:
        tally.save()


@pytest.mark.parametrize("mode", MODES)
def test_queue_settings_accept_or_reject_cleanly(pg_db, figures, mode):
    tally = Tally(figures, "library: queue settings (Client.set_queue)")
    names = st.sampled_from(
        [
            "lease_seconds",
            "max_attempts",
            "backoff_base",
            "backoff_cap",
            "retry_jitter",
            "exclusive_latest_only",
            "paused_enqueue",
            "paused_dequeue",
            "bogus",
            "lease",
        ]
    )
    values = st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-5, 10**12),
        st.booleans(),
        st.text(max_size=4),
        st.none(),
    )

    @fuzz_settings(mode)
    @given(
        queue=st.one_of(st.sampled_from(["qs1", "qs2"]), queue_names),
        changes=st.dictionaries(names, values, max_size=3),
    )
    def check(queue, changes):
        before = snapshot(pg_db)
        try:
            settings_after = pg_db.client.set_queue(queue, **changes)
        except InvalidInput:
            tally.no()
            assert snapshot(pg_db) == before, "a rejected setting changed the queues table"
            return
        tally.ok()
        assert settings_after.name == queue
        for name, value in changes.items():
            if value is not None:
                stored = getattr(settings_after, name)
                assert stored == value or (isinstance(value, float) and math.isclose(stored, value)), (
                    name,
                    value,
                    stored,
                )

    try:
        check()
    finally:
        tally.save()


@pytest.mark.parametrize("mode", MODES)
def test_worker_and_reaper_configs_reject_bad_values_with_invalid_input(figures, mode):
    tally = Tally(figures, "library: WorkerConfig / ReaperConfig")
    number = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**6), anything)

    @fuzz_settings(mode)
    @given(
        queues=st.one_of(st.lists(queue_names, max_size=3).map(tuple), anything),
        concurrency=number,
        batch=number,
        prefetch=number,
        lease=number,
        grace=number,
        idle_min=number,
        idle_max=number,
        ack_batch=number,
        timeout=number,
        interval=number,
        reap_batch=number,
    )
    def check(
        queues, concurrency, batch, prefetch, lease, grace, idle_min, idle_max, ack_batch, timeout, interval, reap_batch
    ):
        try:
            WorkerConfig(
                queues=queues,
                concurrency=concurrency,
                batch=batch,
                prefetch=prefetch,
                lease_seconds=lease,
                grace_seconds=grace,
                idle_min=idle_min,
                idle_max=idle_max,
                ack_batch=ack_batch,
                statement_timeout=timeout,
            ).validate()
            tally.ok()
        except InvalidInput:
            tally.no()
        try:
            ReaperConfig(interval=interval, batch=reap_batch, statement_timeout=timeout).validate()
            tally.ok()
        except InvalidInput:
            tally.no()

    try:
        check()
    finally:
        tally.save()


SECRET = re.compile(r"S3cr[0-9a-f]{10}")
secrets_ = st.uuids().map(lambda u: f"S3cr{u.hex[:10]}")


@pytest.mark.parametrize("mode", MODES)
def test_dsn_parsing_accepts_or_rejects_and_never_shows_the_password(figures, mode):
    tally = Tally(figures, "library: DSN parsing (shardq.sessions.session.Dsn.parse)")
    # Parts that cannot move the password out of its place (no URL or key=value delimiters);
    # free text below goes through the parser too, without a secret to look for.
    part = st.text(
        alphabet=st.characters(blacklist_characters="/?#@:= \t\n'\\", blacklist_categories=["Cs"]), max_size=10
    )
    # Junk after the secret never holds "/" or "@": libpq would then read the secret as a host or
    # port (shown as such, it is no longer a password anyone meant to send).
    secret_text = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=6)
    dsns = st.one_of(
        st.builds(
            lambda scheme, user, host, port, db, rest, secret, junk: (
                f"{scheme}://{user}:{secret}{junk}@{host}:{port}/{db}{rest}"
            ),
            st.sampled_from(["postgresql", "postgres", "cockroachdb", "mysql", "http", "postgresql+psycopg"]),
            part,
            st.one_of(part, st.just("[::1"), st.just("[bad")),
            st.one_of(st.integers(-1, 70000).map(str), part),
            part,
            st.one_of(st.just(""), part.map(lambda p: "?" + p), st.just("?sslmode=bogus"), st.just("?x=%zz")),
            secrets_,
            st.one_of(
                st.just(""),
                st.just("%zz"),
                st.just("%"),
                secret_text.map(lambda t: t.replace("@", "").replace("/", "")),
            ),
        ),
        st.builds(
            lambda k, secret, v, junk: f"host={v} password={secret}{junk} {k}={v}",
            part,
            secrets_,
            part,
            st.one_of(st.just(""), st.just("'"), st.just(" bogus")),
        ),
        st.builds(
            lambda secret, junk: f"postgresql://h/d?password={secret}{junk}",
            secrets_,
            st.one_of(st.just(""), st.just("%zz"), st.just("&bogus=1"), st.just("&x")),
        ),
    )

    @fuzz_settings(mode)
    @given(text=st.one_of(dsns, st.text(max_size=80), anything))
    def check(text):
        found = SECRET.search(text) if isinstance(text, str) else None
        secret = found.group(0) if found else None
        try:
            dsn = Dsn.parse(text)
        except InvalidInput as exc:
            tally.no()
            assert secret is None or secret not in str(exc), str(exc)
            assert len(str(exc).splitlines()) == 1
            return
        tally.ok()
        if secret:
            assert secret not in str(dsn) and secret not in repr(dsn) and secret not in dsn.redacted

    try:
        check()
    finally:
        tally.save()


@pytest.mark.parametrize("mode", MODES)
def test_handler_specs_load_or_raise_invalid_handler(figures, mode):
    tally = Tally(figures, "library: handler specs (MODULE:FUNCTION)")
    dotted = r"[A-Za-z_][A-Za-z0-9_]{0,8}(\.[A-Za-z_][A-Za-z0-9_]{0,8}){0,2}"
    specs = st.one_of(
        st.text(max_size=30),
        st.from_regex(rf"\A{dotted}:{dotted}\Z"),
        st.sampled_from(
            [
                "shardq.app.loading:noop",
                "shardq.app.loading:nope",
                "shardq:__version__",
                "os:path",
                "json:loads",
                "shardq.app.loading",
                ":noop",
                "shardq.app.loading:",
                "tests.reliability.crash_handlers:record",
                "a b:c",
                "os;rm:x",
            ]
        ),
        anything,
    )

    @fuzz_settings(mode)
    @given(spec=specs)
    def check(spec):
        if isinstance(spec, str) and ":" in spec:
            top = spec.split(":", 1)[0].split(".", 1)[0]
            if top and top.isidentifier():
                try:
                    found = importlib.util.find_spec(top)
                except (ImportError, ValueError):
                    found = None
                # Importing arbitrary real modules runs their code (antigravity opens a browser).
                assume(found is None or top in ("shardq", "os", "json", "tests"))
        try:
            handler = load_handler(spec)
        except InvalidHandler:
            tally.no()
            return
        tally.ok()
        assert callable(handler)

    try:
        check()
    finally:
        tally.save()


@pytest.mark.parametrize("value", [0, 1, -16, 2049, 10**9, 1.5, "16", None, True, float("nan")])
def test_bucket_counts_are_checked_before_anything_is_touched(value, figures):
    # An unreachable DSN: a bad count must be refused before any connection is tried.
    with pytest.raises(InvalidInput):
        migrate.upgrade(Dsn.parse("postgresql://nobody@127.0.0.1:1/none"), buckets=value)
    figures.add("fuzz", target="library: bucket counts (migrate)", tried=1, rejected=1)


# -- command line ------------------------------------------------------------------------------

cli_text = st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=20)
cli_value = st.one_of(
    cli_text,
    st.integers(-(10**6), 10**6).map(str),
    st.floats().map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e309", "0", "-1", "0.0", "1e-300", "999999999999"]),
)
cli_queue = st.one_of(
    st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.:\-]{0,20}\Z"),
    st.sampled_from([i for i in INJECTIONS if "\x00" not in i]),
    cli_text,
)


def run_cli(db, args: list[str], stdin: str | None = None):
    runner = CliRunner(env={"SHARDQ_DSN": db.dsn.conninfo})
    return runner.invoke(cli, args, input=stdin, catch_exceptions=True, prog_name="shardq")


def check_cli_result(result, tally, db, before, *, allowed=(0, 2)) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in allowed, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    if result.exit_code == 0:
        tally.ok()
        return
    tally.no()
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardq: "), result.stderr
    if result.exit_code == 2:
        assert snapshot(db) == before, "a rejected command wrote something"


def _options(pairs: dict) -> list[str]:
    args: list[str] = []
    for name, value in pairs.items():
        if value is not None:
            args += [name, value]
    return args


@pytest.mark.parametrize("mode", MODES)
def test_cli_enqueue_exits_0_or_2_with_one_line(pg_db, figures, mode):
    tally = Tally(
        figures, "CLI: shardq enqueue (queue, payload, --delay, --dedupe-key, --priority, --key, --max-attempts)"
    )
    opt = st.one_of(st.none(), cli_value)

    @fuzz_settings(mode)
    @given(queue=cli_queue, payload=cli_text, delay=opt, dedupe=opt, priority=opt, key=opt, attempts=opt)
    def check(queue, payload, delay, dedupe, priority, key, attempts):
        before = snapshot(pg_db)
        args = ["enqueue", queue, payload] + _options(
            {"--delay": delay, "--dedupe-key": dedupe, "--priority": priority, "--key": key, "--max-attempts": attempts}
        )
        result = run_cli(pg_db, args)
        check_cli_result(result, tally, pg_db, before)
        if result.exit_code == 0:
            assert result.stdout.startswith("enqueued ")

    try:
        check()
    finally:
        tally.save()


@pytest.mark.parametrize("mode", MODES)
def test_cli_queue_set_exits_0_or_2_with_one_line(pg_db, figures, mode):
    tally = Tally(figures, "CLI: shardq queue set (--lease, --max-attempts, --backoff-base, --backoff-cap, --jitter)")
    opt = st.one_of(st.none(), cli_value)

    @fuzz_settings(mode)
    @given(queue=cli_queue, lease=opt, attempts=opt, base=opt, cap=opt, jitter=opt)
    def check(queue, lease, attempts, base, cap, jitter):
        before = snapshot(pg_db)
        args = ["queue", "set", queue] + _options(
            {
                "--lease": lease,
                "--max-attempts": attempts,
                "--backoff-base": base,
                "--backoff-cap": cap,
                "--jitter": jitter,
            }
        )
        check_cli_result(run_cli(pg_db, args), tally, pg_db, before)

    try:
        check()
    finally:
        tally.save()


@pytest.mark.parametrize("mode", MODES)
def test_cli_work_and_reap_options_exit_0_or_2_with_one_line(pg_db, figures, mode):
    tally = Tally(figures, "CLI: shardq work / reap options (handler, queues, counts, lease, grace, timeouts)")
    opt = st.one_of(st.none(), cli_value)
    specs = st.one_of(
        st.just("shardq.app.loading:noop"), st.just("shardq.app.loading:missing"), st.just("nosuchmod:fn"), cli_text
    )

    @fuzz_settings(mode)
    @given(
        queue=cli_queue,
        spec=specs,
        concurrency=opt,
        batch=opt,
        lease=opt,
        grace=opt,
        timeout=opt,
        interval=opt,
        reap=st.booleans(),
    )
    def check(queue, spec, concurrency, batch, lease, grace, timeout, interval, reap):
        if isinstance(spec, str) and ":" in spec:
            top = spec.split(":", 1)[0].split(".", 1)[0]
            assume(not top.isidentifier() or top in ("shardq", "nosuchmod") or importlib.util.find_spec(top) is None)
        # The queue here is empty, so every accepted combination ends after one round.
        before = snapshot(pg_db)
        if reap:
            args = ["reap", "--once"] + _options({"--interval": interval, "--statement-timeout": timeout})
        else:
            args = ["work", queue, "--handler", spec, "--until-empty"] + _options(
                {
                    "--concurrency": concurrency,
                    "--batch": batch,
                    "--lease": lease,
                    "--grace": grace,
                    "--statement-timeout": timeout,
                }
            )
        result = run_cli(pg_db, args)
        check_cli_result(result, tally, pg_db, before)

    try:
        check()
    finally:
        tally.save()


@pytest.mark.parametrize("mode", MODES)
def test_cli_admin_commands_exit_cleanly(pg_db, figures, mode):
    tally = Tally(figures, "CLI: dead list/requeue/purge, cancel, migrate --buckets, --dsn")
    ids = st.one_of(st.uuids().map(str), cli_text)
    commands = st.one_of(
        st.builds(lambda q, n: ["dead", "list", q, "--limit", n], cli_queue, cli_value),
        st.builds(lambda q, i: ["dead", "requeue", q, *i], cli_queue, st.lists(ids, max_size=3)),
        st.builds(lambda q: ["dead", "purge", q], cli_queue),
        st.builds(lambda i: ["cancel", *i], st.lists(ids, max_size=3)),
        st.builds(lambda n: ["migrate", "--buckets", n], cli_value),
        st.builds(
            lambda d: ["--dsn", d, "stats"],
            st.one_of(
                cli_text,
                st.sampled_from(
                    ["mysql://x", "postgresql://a b", "postgresql://u:p@h:notaport/d", "host='unterminated", "=", "  "]
                ),
            ),
        ),
    )

    @fuzz_settings(mode)
    @given(args=commands)
    def check(args):
        if args[0] == "--dsn":
            try:
                Dsn.parse(args[1])
            except InvalidInput:
                pass
            else:
                assume(False)  # a DSN that parses would be dialled: the secrets suite covers those
        before = snapshot(pg_db)
        # cancel/requeue of ids that do not exist is a runtime "not found" (exit 1), not bad input
        check_cli_result(run_cli(pg_db, args), tally, pg_db, before, allowed=(0, 1, 2))

    try:
        check()
    finally:
        tally.save()


def test_sql_in_every_text_input_is_refused_or_stored_as_data(pg_db, figures):
    stored = 0
    for text in INJECTIONS:
        with pytest.raises(InvalidInput):
            pg_db.client.enqueue(text, b"x")
        with pytest.raises(InvalidInput):
            pg_db.client.set_queue(text, lease_seconds=5)
        with pytest.raises(InvalidInput):
            admin.dead_list(pg_db.client.store, text)
        if "\x00" in text:
            continue
        result = pg_db.client.enqueue("inj", text.encode(), dedupe_key=text, exclusive_key=text)
        row = pg_db.task_row(result.enqueued_ids[0])
        assert (row["dedupe_key"], row["exclusive_key"], bytes(row["payload"])) == (text, text, text.encode())
        stored += 1
        for args in (["enqueue", text, "x"], ["queue", "set", text, "--lease", "5"], ["dead", "purge", text]):
            before = snapshot(pg_db)
            result = run_cli(pg_db, args)
            assert result.exit_code == 2 and snapshot(pg_db) == before
    # A table's name is just another queue name: a plain value in a column, never an identifier.
    pg_db.client.enqueue("shardq_tasks", b"x", dedupe_key="shardq_dead")
    assert pg_db.tasks("queue", "dedupe_key", queue="shardq_tasks") == [
        {"queue": "shardq_tasks", "dedupe_key": "shardq_dead"}
    ]
    assert pg_db.count() == stored + 1  # every table still there, every row as written
    assert pg_db.count_queues_named("inj") == 1
    figures.add(
        "fuzz",
        target="SQL injection strings in queue names, keys, payloads (library and CLI)",
        tried=len(INJECTIONS) * 7,
        rejected=len(INJECTIONS) * 6,
        accepted=stored,
        note="queue names are limited to letters, digits and _ . : - (so quotes and semicolons are refused); "
        "keys and payloads are bound values and come back byte for byte",
    )
