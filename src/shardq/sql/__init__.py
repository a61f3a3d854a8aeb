"""Named SQL statements, loaded once from the ``.sql`` files shipped in ``shardq.sql``.

Every statement shardq runs lives in ``sql/``: ``common/`` for statements that are the
same on both databases, ``postgresql/`` and ``cockroachdb/`` for the ones that differ
(an engine's file overrides a common statement of the same name; :mod:`shardq.engine` picks
the folder). A block starts with
``-- name: <entity>_<verb>[_qualifier]`` followed by ``-- `` description lines and the
statement text. Values are always bind parameters (``%(name)s``); runtime identifiers fill
``{slot}`` placeholders through ``psycopg.sql.Identifier`` in :mod:`shardq.sessions.rules`: CockroachDB's
discovered shard column (``{shard_col}``), and names a caller passes explicitly (for example a Spark
staging table, ``{stage}``). Literal braces in a statement must be doubled."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

#: The engines' statement folders under ``sql/`` (besides ``common``).
FOLDERS = ("postgresql", "cockroachdb")


_BLOCK_HEADER = re.compile(r"^-- name: ([a-z0-9_]+)\s*$", re.MULTILINE)


# A {slot} that is not part of a doubled {{literal}} brace.
_SLOT = re.compile(r"(?<!\{)\{([a-z_][a-z0-9_]*)\}(?!\})")


@dataclass(frozen=True)
class Statement:
    """One named statement: its name, what it is for, and its SQL text."""

    name: str
    description: str
    text: str

    @property
    def slots(self) -> frozenset[str]:
        """The identifier slots (``{name}``) the text has to be composed with."""
        return frozenset(_SLOT.findall(self.text))

    @property
    def templated(self) -> bool:
        """True when the text has identifier slots to fill."""
        return bool(self.slots)


def parse(source: str) -> dict[str, Statement]:
    """Split the text of one ``.sql`` file into its named statements."""
    statements: dict[str, Statement] = {}
    headers = list(_BLOCK_HEADER.finditer(source))
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(source)
        body = source[header.end() : end].strip("\n")
        description_lines: list[str] = []
        sql_lines: list[str] = []
        for line in body.splitlines():
            if not sql_lines and line.startswith("--"):
                description_lines.append(line.removeprefix("--").strip())
            else:
                sql_lines.append(line)
        name = header.group(1)
        if name in statements:
            raise ValueError(f"statement {name!r} is defined twice in one file")
        text = "\n".join(sql_lines).strip().rstrip(";")
        if not text:
            raise ValueError(f"statement {name!r} has no SQL")
        statements[name] = Statement(name, " ".join(description_lines), text)
    return statements


def _read_folder(folder: str) -> dict[str, Statement]:
    found: dict[str, Statement] = {}
    root = resources.files("shardq.sql").joinpath(folder)
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            for name, statement in parse(entry.read_text(encoding="utf-8")).items():
                if name in found:
                    raise ValueError(f"statement {name!r} is defined in two files of {folder}/")
                found[name] = statement
    return found


# An array parameter: ``%(name)s::TYPE[]``.
_ARRAY_PARAMETER = re.compile(r"%\((\w+)\)s(::[A-Za-z0-9_]+\[\])")


def binary_array_parameters(text: str) -> str:
    """``%(name)s::TYPE[]`` -> ``%(name)b::TYPE[]``: the array is sent in PostgreSQL's binary
    format. psycopg renders a text array element by element in Python (quoting, escaping, hex for
    bytea); the binary form costs a fraction of that per element for UUIDs and bytea, which are most of
    an enqueue's or an ack's client CPU (figures: docs/loadtest.md, "What the hot path was tuned with"). The explicit cast keeps the statement's types whatever
    element type psycopg picks."""
    return _ARRAY_PARAMETER.sub(r"%(\1)b\2", text)


@cache
def statements_for(folder: str, *, binary: bool = False) -> dict[str, Statement]:
    """All statements of one engine: ``sql/common``, overridden by the engine's own ``folder``.
    With ``binary`` array parameters are sent in binary (:func:`binary_array_parameters`; the engine
    decides: :meth:`shardq.engine.Engine.statements`)."""
    if folder not in FOLDERS:
        raise ValueError(f"no SQL folder {folder!r}")
    merged = dict(_read_folder("common"))
    merged.update(_read_folder(folder))
    if binary:
        merged = {
            name: Statement(st.name, st.description, binary_array_parameters(st.text)) for name, st in merged.items()
        }
    return merged
