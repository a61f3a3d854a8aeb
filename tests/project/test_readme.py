"""The README's Python examples run as written, against the embedded PostgreSQL.

The ```python blocks of the sections "Tasks", "Command line" (the handler ``send_email``, which the
Python API example works with), "Python API (bytes payloads)" and "asyncio" are read from
README.md and executed. What is substituted, and only that:

* ``myapp.tasks`` is the first Tasks block written to a temporary package; ``shardq.App()`` and
  ``shardq.connect()`` find the test database through ``$SHARDQ_DSN``;
* the names an example leaves to the reader: ``deliver`` and ``ready`` (stubs that record),
  ``paths``, ``url`` (the test database), ``now``, ``signup`` (defers ``emails.send``), the
  module ``myapp.mail``;
* the placeholders ``INSERT INTO orders …`` (an insert into a table made for it) and the id
  ``"3f0c…"`` (an id that matches no task);
* the last asyncio block has top-level ``await``s: it runs inside an ``async def``.

Where an example is wrong, the README is fixed, not this test. ``SKIPPED`` lists the blocks of
these sections that do not run here, with the reason.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import sys
import textwrap
import uuid
from pathlib import Path

import psycopg
import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
SECTIONS = ("Tasks", "Command line", "Python API (bytes payloads)", "asyncio")
#: (section, index of the python block in it) -> why it does not run here
SKIPPED: dict[tuple[str, int], str] = {
    # The first Tasks block declares ``fetch``, which needs httpx when it runs: it is declared
    # (the block runs as myapp.tasks) but never deferred, so httpx is not needed.
}
PLACEHOLDERS = {"INSERT INTO orders …": "INSERT INTO orders VALUES (1)", '"3f0c…"': f'"{uuid.UUID(int=0)}"'}


def python_blocks() -> dict[str, list[str]]:
    """The ```python blocks of each section of README.md (by its ``## `` heading), in order."""
    blocks: dict[str, list[str]] = {}
    section = ""
    for part in re.split(r"^(## .+)$", README.read_text(), flags=re.MULTILINE):
        if part.startswith("## "):
            section = part[3:].strip()
            continue
        blocks.setdefault(section, []).extend(re.findall(r"^```python\n(.*?)^```", part, re.MULTILINE | re.DOTALL))
    return blocks


def substituted(code: str) -> str:
    for placeholder, value in PLACEHOLDERS.items():
        code = code.replace(placeholder, value)
    return code


@pytest.fixture
def blocks() -> dict[str, list[str]]:
    found = python_blocks()
    return {section: found.get(section, []) for section in SECTIONS}


@pytest.fixture
def myapp(pg_db, tmp_path, monkeypatch, blocks):
    """``myapp.tasks`` from the README on the test database, with ``deliver``/``ready`` stubbed."""
    monkeypatch.setenv("SHARDQ_DSN", pg_db.dsn.conninfo)
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(blocks["Tasks"][0])
    (package / "mail.py").write_text("def deliver(*args, **kwargs):\n    raise AssertionError('not replaced')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("myapp", "myapp.tasks", "myapp.mail"):
        sys.modules.pop(name, None)
    import myapp.tasks as tasks

    tasks.delivered = []
    tasks.ready = lambda to: True
    tasks.deliver = lambda *args, **kwargs: tasks.delivered.append(args)
    pg_db.sql("CREATE TABLE orders (id int)")
    yield tasks
    tasks.app.close()
    for name in ("myapp", "myapp.tasks", "myapp.mail"):
        sys.modules.pop(name, None)


def namespace(tasks, pg_db) -> dict:
    """What an example running beside ``myapp.tasks`` sees."""
    return {
        **vars(tasks),
        "paths": ["a.png", "b.png", "c.png"],
        "url": pg_db.dsn.conninfo,
        "now": dt.datetime.now(dt.UTC),
        "psycopg": psycopg,
    }


def test_every_python_block_of_these_sections_is_run_or_skipped_with_a_reason(blocks):
    assert [len(blocks[s]) for s in SECTIONS] == [4, 1, 1, 2], "a README example was added or removed: run it here"
    assert all(key[0] in SECTIONS and key[1] < len(blocks[key[0]]) for key in SKIPPED)


def test_the_tasks_examples_declare_defer_in_a_transaction_and_schedule(myapp, pg_db, blocks):
    scope = namespace(myapp, pg_db)
    exec(substituted(blocks["Tasks"][1]), scope)
    # resize_image once and once per path, emails.send twice (one delayed 30 s, one in the transaction)
    assert pg_db.count() == 1 + 3 + 2
    assert pg_db.sql("SELECT count(*) AS n FROM orders")[0]["n"] == 1
    exec(substituted(blocks["Tasks"][2]), scope)
    [schedule] = myapp.app.schedules.values()
    assert schedule.task == "myapp.tasks.cleanup" and schedule.queue == "maintenance"
    counts = myapp.app.work(until_empty=True)
    assert counts.acked == 1 + 3 + 1  # the delayed send waits
    assert len(myapp.delivered) == 1


def test_the_testing_example_runs_as_a_test(myapp, pg_db, blocks):
    import myapp.mail as mail

    myapp.deliver = lambda *args, **kwargs: mail.deliver(*args, **kwargs)  # the example patches myapp.mail
    scope = namespace(myapp, pg_db)
    scope["signup"] = lambda address: myapp.send.defer(to=address, when=scope["now"])
    exec(substituted(blocks["Tasks"][3]), scope)
    with pytest.MonkeyPatch.context() as monkeypatch:
        scope["test_signup_sends_the_welcome_mail"](monkeypatch)


def test_the_python_api_example_runs(pg_db, monkeypatch, blocks):
    monkeypatch.setenv("SHARDQ_DSN", pg_db.dsn.conninfo)
    delivered: list[bytes] = []
    scope: dict = {"deliver": delivered.append}
    exec(blocks["Command line"][0], scope)  # send_email, the handler the Python API example runs
    exec(substituted(blocks["Python API (bytes payloads)"][0]), scope)
    assert scope["stats"].acked == 3 and sorted(delivered) == [b"a", b"b", b"c"]
    scope["client"].close()


def test_the_asyncio_examples_run(myapp, pg_db, blocks):
    delivered: list[bytes] = []

    async def deliver(payload: bytes) -> None:
        delivered.append(payload)

    exec(substituted(blocks["asyncio"][0]), {"deliver": deliver, "__name__": "readme_asyncio"})
    assert sorted(delivered) == [b"a", b"b", b"c"]  # c has the higher priority

    before = pg_db.count()  # the first block's delayed task waits
    scope = namespace(myapp, pg_db)
    body = textwrap.indent(substituted(blocks["asyncio"][1]), "    ")
    exec(f"async def example():\n{body}\n    await app.aclose()\n", scope)
    asyncio.run(scope["example"]())
    # send twice (one delayed), resize_image per path, and the one committed in the transaction
    assert pg_db.count() - before == 2 + 3 + 1
