"""A recorded CockroachDB: a PostgreSQL wire-protocol server on 127.0.0.1 that introduces itself as
CockroachDB does and answers each statement with what a test says CockroachDB answers — rows,
command tags and errors recorded from CockroachDB's own logic tests
(``pkg/sql/logictest/testdata/logic_test/``), each cited where the test gives it.

Why a server and not a fake connection: shardq's sessions, their retry rules, psycopg's type
loaders and libpq's transaction tracking then run exactly as against a cluster. A recorded value
of the wrong type, a column of the wrong name, an error code that maps to another exception or a
statement the code did not expect fails here as it would there. What cannot be learnt here is
whether CockroachDB would have planned or accepted the statement: the conformance suite
(``tests/conformance``) checks that against CockroachDB's source.

What the server says at connect is CockroachDB's: the run-time parameters of
``statusReportParams`` (``pkg/sql/pgwire/conn.go``), ``server_version`` 13.0.0 (``PgServerVersion``,
``pkg/sql/vars.go``) and ``crdb_version``, the build's one-line description
(``CockroachDB CCL v24.3.1 (…)``, ``pkg/build/info.go`` Short). It requires no TLS and, unless
started with ``password=``, no password, as an insecure node (``--insecure``) does. With
``password=`` it asks for a cleartext password (AuthenticationCleartextPassword, as CockroachDB's
password method does: ``pkg/sql/pgwire/auth_methods.go``) and refuses any other with CockroachDB's
ErrorResponse: SQLSTATE 28P01 (``pgcode.InvalidPassword``, ``pkg/sql/pgwire/auth.go``) and
``password authentication failed for user <user>`` (``pkg/security/password.go``,
NewErrPasswordUserAuthFailed); :attr:`RecordedCockroach.refused` lists those startups.

Answers are chosen per statement by the test's ``answer`` function, which receives a
:class:`Received` (the text as sent, its bound values, and the shardq statement it is, when it is
one, or the one an ``EXPLAIN`` of it with its values inlined plans: :attr:`Received.explained`)
and returns :class:`Rows`, :class:`Command`, :class:`Error` or :class:`Disconnect`. Statements
psycopg sends on its own (``BEGIN``, ``COMMIT``, ``ROLLBACK``, ``SAVEPOINT``) are answered by the
server unless the test answers them. A statement the test does not expect answers an error that
fails the test (SQLSTATE ``XX000``), with the statement in its message.

Only the protocol psycopg and libpq use is served: startup without TLS, simple queries, and the
extended protocol (Parse/Bind/Describe/Execute/Sync/Close/Flush), results in text or in the binary
format of the types listed in :data:`TYPES`; ``COPY`` is refused.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import socket
import socketserver
import struct
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from shardq.engine import COCKROACHDB
from shardq.engine.base import Engine

#: What a 24.3 node reports as ``crdb_version`` (``pkg/build/info.go``, Info.Short: "CockroachDB
#: <distribution> <tag> (<platform>, built <time>, <go version>)").
CRDB_VERSION_24_3 = (
    "CockroachDB CCL v24.3.1 (x86_64-pc-linux-gnu, built 2024/12/09 16:40:34, go1.22.8 X:nocoverageredesign)"
)
#: A node of the oldest supported line, and one older than shardq supports.
CRDB_VERSION_23_1 = "CockroachDB CCL v23.1.30 (x86_64-pc-linux-gnu, built 2024/11/18 18:55:37, go1.19.13)"
CRDB_VERSION_22_2 = "CockroachDB CCL v22.2.19 (x86_64-pc-linux-gnu, built 2024/02/12 18:11:05, go1.19.13)"

#: Type name → (OID, binary encoder). OIDs are PostgreSQL's, which CockroachDB's types carry
#: (``pkg/sql/types/types.go``: String is oid.T_text, Int is T_int8, Uuid T_uuid, …).
TYPES: dict[str, tuple[int, Callable[[Any], bytes] | None]] = {}


def _register(name: str, oid: int, binary: Callable[[Any], bytes] | None = None) -> None:
    TYPES[name] = (oid, binary)


_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


def _timestamptz_binary(value: Any) -> bytes:
    moment = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    delta = moment - _EPOCH
    return struct.pack("!q", (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds)


_register("TEXT", 25, lambda v: str(v).encode())
_register("NAME", 19, lambda v: str(v).encode())
_register("VARCHAR", 1043, lambda v: str(v).encode())
_register("INT8", 20, lambda v: struct.pack("!q", int(v)))
_register("INT4", 23, lambda v: struct.pack("!i", int(v)))
_register("INT2", 21, lambda v: struct.pack("!h", int(v)))
_register("OID", 26, lambda v: struct.pack("!I", int(v)))
_register("FLOAT8", 701, lambda v: struct.pack("!d", float(v)))
_register("BOOL", 16, lambda v: b"\x01" if v in (True, "t", "true") else b"\x00")
_register("UUID", 2950, lambda v: uuid.UUID(str(v)).bytes)
_register("BYTES", 17, lambda v: bytes(v))
_register("TIMESTAMPTZ", 1184, _timestamptz_binary)
_register("NUMERIC", 1700)
_register("JSONB", 3802)
_register("INTERVAL", 1186)
_register("TEXT[]", 1009)
_register("UUID[]", 2951)
_register("INT8[]", 1016)


def text_of(value: Any) -> str | None:
    """A Python value in the text format CockroachDB prints it in (what logic tests record)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (list, tuple)):
        return "{" + ",".join("NULL" if v is None else str(v) for v in value) + "}"
    return str(value)


# -- what the test says ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Rows:
    """A result: ``columns`` as (name, type name of :data:`TYPES`), ``rows`` as Python values or
    the text CockroachDB prints (a logic test's expected output); ``tag`` defaults to
    ``SELECT <n>``."""

    columns: Sequence[tuple[str, str]]
    rows: Sequence[Sequence[Any]] = ()
    tag: str | None = None


@dataclasses.dataclass(frozen=True)
class Command:
    """A statement without rows, and the command tag CockroachDB completes it with."""

    tag: str


@dataclasses.dataclass(frozen=True)
class Error:
    """An ErrorResponse: CockroachDB's SQLSTATE and message (and detail and hint, if any)."""

    sqlstate: str
    message: str
    detail: str | None = None
    hint: str | None = None


@dataclasses.dataclass(frozen=True)
class Disconnect:
    """The server closes the connection without answering (a node that went away)."""


Answer = Rows | Command | Error | Disconnect


@dataclasses.dataclass(frozen=True)
class Received:
    """A statement as the server received it."""

    text: str
    params: tuple[Any, ...]
    #: the shardq named statement this is (for the engine the server was started for), or None
    name: str | None
    #: the connection's startup parameters (user, database, options, application_name)
    startup: Mapping[str, str]
    #: the connection's number, in the order the server accepted them (from 1)
    connection: int
    in_transaction: bool
    #: for ``EXPLAIN <statement>`` with the statement's values inlined as literals (how shardq
    #: asks CockroachDB for a plan), the shardq named statement explained; otherwise None
    explained: str | None = None


@dataclasses.dataclass(frozen=True)
class Startup:
    connection: int
    parameters: Mapping[str, str]


# -- statement names ------------------------------------------------------------------------------

_SOURCE_PLACEHOLDER = re.compile(r"%\(\w+\)[sb]")
_SENT_PLACEHOLDER = re.compile(r"\$\d+")
_SHARD_IDENTIFIER = re.compile(r'"crdb_internal_[a-z_]+_shard_\d+"')
_SLOT = re.compile(r"\{\w+\}")
_QUOTED_IDENTIFIER = re.compile(r'"[^"]+"')
_SPACE = re.compile(r"\s+")
_COMMENT = re.compile(r"--[^\n]*")


_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+", re.I)
#: SQL literals as psycopg renders bound values into text (ClientCursor.mogrify) or as shardq's SQL
#: writes them: strings, numbers, NULL, booleans; then any casts after one, whether psycopg's or the
#: statement's own (a placeholder's ``::UUID[]``).
_LITERAL = re.compile(
    r"E?'(?:[^']|'')*'|(?<![\w.$])-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\w.])"
    r"|\b(?:NULL|TRUE|FALSE)\b",
    re.I,
)
_CASTS = re.compile(r"\?(?:\s*::\s*[A-Za-z_]\w*(?:\[\])?)+")


def _folded(text: str) -> str:
    return _SPACE.sub(" ", _CASTS.sub("?", _LITERAL.sub("?", text))).strip()


def _canonical(text: str, *, sent: bool) -> str:
    text = _COMMENT.sub(" ", text)
    if sent:
        text = _SENT_PLACEHOLDER.sub("?", text)
        text = _QUOTED_IDENTIFIER.sub("<id>", text)
    else:
        text = _SOURCE_PLACEHOLDER.sub("?", text).replace("%%", "%")
        text = _SLOT.sub("<id>", text)
    return _SPACE.sub(" ", text).strip().rstrip(";").strip()


class StatementNames:
    """The shardq statement a received text is, by its canonical form (placeholders and quoted
    identifiers folded, comments and white space dropped)."""

    def __init__(self, engine: Engine) -> None:
        self._by_text: dict[str, str] = {}
        self._by_folded: dict[str, str] = {}
        for name, statement in sorted(engine.statements().items()):
            canonical = _canonical(statement.text, sent=False)
            self._by_text.setdefault(canonical, name)
            self._by_folded.setdefault(_folded(canonical), name)

    def __call__(self, text: str) -> str | None:
        return self._by_text.get(_canonical(text, sent=True))

    def explained(self, text: str) -> str | None:
        """The statement ``text`` asks the plan of, when it is ``EXPLAIN`` of a shardq statement
        with its values inlined (literals folded on both sides; the first name by sort order
        wins should two statements differ only in literals)."""
        if not _EXPLAIN.match(text):
            return None
        return self._by_folded.get(_folded(_canonical(_EXPLAIN.sub("", text, count=1), sent=True)))


# -- the protocol ---------------------------------------------------------------------------------

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104
_PROTOCOL_3 = 196608
_TRANSACTION_CONTROL = re.compile(r"^\s*(BEGIN|START TRANSACTION|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|END)\b", re.I)


class _Closed(Exception):
    pass


def _message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _cstring(text: str) -> bytes:
    return text.encode() + b"\x00"


class _Connection:
    def __init__(self, server: RecordedCockroach, sock: socket.socket, number: int) -> None:
        self.server = server
        self.sock = sock
        self.number = number
        self.startup: dict[str, str] = {}
        self.status = b"I"  # ReadyForQuery: idle, in a transaction (T), failed transaction (E)
        self.statements: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.portals: dict[str, tuple[str, tuple[Any, ...], tuple[int, ...]]] = {}
        #: a portal's answer, chosen at its Describe and sent at its Execute
        self.pending: dict[str, Answer] = {}
        self.out = bytearray()

    # reading
    def _read(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise _Closed
            data += chunk
        return bytes(data)

    def _read_message(self) -> tuple[bytes, bytes]:
        kind = self._read(1)
        (length,) = struct.unpack("!i", self._read(4))
        return kind, self._read(length - 4)

    def _flush(self) -> None:
        if self.out:
            self.sock.sendall(bytes(self.out))
            self.out.clear()

    # the session
    def serve(self) -> None:
        try:
            if not self._start():
                return
            while True:
                kind, body = self._read_message()
                if kind == b"X":
                    return
                self._handle(kind, body)
        except (_Closed, ConnectionError, OSError):
            return
        finally:
            self.sock.close()

    def _start(self) -> bool:
        while True:
            (length,) = struct.unpack("!i", self._read(4))
            body = self._read(length - 4)
            (code,) = struct.unpack("!i", body[:4])
            if code in (_SSL_REQUEST, _GSS_REQUEST):
                self.sock.sendall(b"N")  # no TLS: an insecure node
                continue
            if code != _PROTOCOL_3:
                return False
            fields = body[4:].split(b"\x00")
            self.startup = {
                fields[i].decode(): fields[i + 1].decode() for i in range(0, len(fields) - 2, 2) if fields[i]
            }
            break
        self.server._started(Startup(self.number, dict(self.startup)))
        if self.server.password is not None and not self._password_accepted():
            return False
        self.out += _message(b"R", struct.pack("!i", 0))
        for name, value in self.server.parameters(self.startup).items():
            self.out += _message(b"S", _cstring(name) + _cstring(value))
        self.out += _message(b"K", struct.pack("!ii", self.number, 0))
        self._ready()
        return True

    def _password_accepted(self) -> bool:
        self.sock.sendall(_message(b"R", struct.pack("!i", 3)))  # AuthenticationCleartextPassword
        kind, body = self._read_message()
        if kind == b"p" and body.rstrip(b"\x00").decode() == self.server.password:
            return True
        user = self.startup.get("user", "")
        self.server._refused(Startup(self.number, dict(self.startup)))
        self._error(Error("28P01", f"password authentication failed for user {user}"))
        self._flush()
        return False

    def _ready(self) -> None:
        self.out += _message(b"Z", self.status)
        self._flush()

    def _handle(self, kind: bytes, body: bytes) -> None:
        if kind == b"Q":
            self._simple(body[:-1].decode())
        elif kind in b"PBDEC":
            try:
                self._extended(kind, body)
            except _Failed:
                self._discard_until_sync()
        elif kind == b"S":
            self._ready()
        elif kind == b"H":
            self._flush()
        else:
            self._error(Error("08P01", f"recorded CockroachDB: unsupported message {kind!r}"))
            self._ready()

    def _discard_until_sync(self) -> None:
        while True:
            kind, _ = self._read_message()
            if kind == b"S":
                self._ready()
                return
            if kind == b"X":
                raise _Closed

    # simple protocol
    def _simple(self, text: str) -> None:
        if text.strip():
            answer = self._answer(text, ())
            if isinstance(answer, Rows):
                self._row_description(answer, ())
                self._data_rows(answer, ())
                self._complete(answer)
            elif isinstance(answer, Command):
                self._complete(answer)
            else:
                self._fail(answer)
        else:
            self.out += _message(b"I")
        self._ready()

    # extended protocol
    def _extended(self, kind: bytes, body: bytes) -> None:
        if kind == b"P":
            raw_name, rest = body.split(b"\x00", 1)
            raw_text, rest = rest.split(b"\x00", 1)
            (count,) = struct.unpack("!h", rest[:2])
            oids = struct.unpack(f"!{count}I", rest[2 : 2 + 4 * count])
            self.statements[raw_name.decode()] = (raw_text.decode(), oids)
            self.out += _message(b"1")
        elif kind == b"B":
            self._bind(body)
            self.out += _message(b"2")
        elif kind == b"D":
            target, name = body[:1], body[1:-1].decode()
            if target == b"S":
                _text, oids = self.statements[name]
                self.out += _message(b"t", struct.pack(f"!h{len(oids)}I", len(oids), *oids))
                self.out += _message(b"n")  # rows are described at Execute's Describe of the portal
            else:
                self._describe_portal(name)
        elif kind == b"E":
            name = body.split(b"\x00", 1)[0].decode()
            self._execute(name)
        elif kind == b"C":
            target, name = body[:1], body[1:-1].decode()
            (self.statements if target == b"S" else self.portals).pop(name, None)
            self.out += _message(b"3")

    def _bind(self, body: bytes) -> None:
        portal, rest = body.split(b"\x00", 1)
        statement, rest = rest.split(b"\x00", 1)
        offset = 0
        (nformats,) = struct.unpack_from("!h", rest, offset)
        offset += 2
        formats = struct.unpack_from(f"!{nformats}h", rest, offset)
        offset += 2 * nformats
        (nparams,) = struct.unpack_from("!h", rest, offset)
        offset += 2
        text, _oids = self.statements[statement.decode()]
        values: list[Any] = []
        for i in range(nparams):
            (size,) = struct.unpack_from("!i", rest, offset)
            offset += 4
            raw = None if size < 0 else rest[offset : offset + size]
            offset += max(size, 0)
            binary = (formats[i] if nformats > 1 else formats[0] if nformats == 1 else 0) == 1
            values.append(raw if raw is None or binary else raw.decode())
        (nresults,) = struct.unpack_from("!h", rest, offset)
        offset += 2
        results = struct.unpack_from(f"!{nresults}h", rest, offset)
        self.portals[portal.decode()] = (text, tuple(values), results)
        self.pending.pop(portal.decode(), None)

    def _portal_answer(self, name: str) -> Answer:
        text, values, _ = self.portals[name]
        if name not in self.pending:
            self.pending[name] = self._answer(text, values)
        return self.pending[name]

    def _describe_portal(self, name: str) -> None:
        answer = self._portal_answer(name)
        if isinstance(answer, Rows):
            self._row_description(answer, self.portals[name][2])
        elif isinstance(answer, Command):
            self.out += _message(b"n")
        else:
            self._fail(answer)
            raise _Failed

    def _execute(self, name: str) -> None:
        answer = self._portal_answer(name)
        self.pending.pop(name, None)
        if isinstance(answer, Rows):
            self._data_rows(answer, self.portals[name][2])
            self._complete(answer)
        elif isinstance(answer, Command):
            self._complete(answer)
        else:
            self._fail(answer)
            raise _Failed

    # answers
    def _answer(self, text: str, values: tuple[Any, ...]) -> Answer:
        control = _TRANSACTION_CONTROL.match(text)
        received = Received(
            text=text,
            params=values,
            name=self.server.names(text),
            startup=dict(self.startup),
            connection=self.number,
            in_transaction=self.status != b"I",
            explained=self.server.names.explained(text),
        )
        answer = self.server._answer_for(received)
        if answer is None and control:
            answer = Command(control.group(1).upper().replace("START TRANSACTION", "BEGIN").replace("END", "COMMIT"))
        if answer is None:
            answer = Error("XX000", f"recorded CockroachDB: no answer recorded for {received.name or text!r}")
        ends = bool(control) and control.group(1).upper() in ("COMMIT", "END")
        if isinstance(answer, Error) and self.status == b"T" and not ends:
            self.status = b"E"
        elif control and not isinstance(answer, Error | Disconnect):
            word = control.group(1).upper()
            if word in ("BEGIN", "START TRANSACTION"):
                self.status = b"T"
            elif word in ("COMMIT", "ROLLBACK", "END") and "TO SAVEPOINT" not in text.upper():
                self.status = b"I"
            elif "TO SAVEPOINT" in text.upper() and self.status == b"E":
                self.status = b"T"
        elif ends and isinstance(answer, Error):
            self.status = b"I"  # a failed COMMIT ends the transaction (rolled back), as on the server
        return answer

    def _fail(self, answer: Answer) -> None:
        if isinstance(answer, Disconnect):
            self.sock.close()
            raise _Closed
        assert isinstance(answer, Error)
        self._error(answer)

    def _error(self, error: Error) -> None:
        body = b"SERROR\x00VERROR\x00C" + _cstring(error.sqlstate) + b"M" + _cstring(error.message)
        if error.detail:
            body += b"D" + _cstring(error.detail)
        if error.hint:
            body += b"H" + _cstring(error.hint)
        self.out += _message(b"E", body + b"\x00")

    def _row_description(self, answer: Rows, formats: tuple[int, ...]) -> None:
        body = struct.pack("!h", len(answer.columns))
        for i, (name, type_name) in enumerate(answer.columns):
            oid = TYPES[type_name][0]
            body += _cstring(name) + struct.pack("!IhIhih", 0, 0, oid, -1, -1, _format(formats, i))
        self.out += _message(b"T", body)

    def _data_rows(self, answer: Rows, formats: tuple[int, ...]) -> None:
        for row in answer.rows:
            body = struct.pack("!h", len(row))
            for i, value in enumerate(row):
                encoded = self._encode(value, answer.columns[i][1], _format(formats, i))
                body += struct.pack("!i", -1) if encoded is None else struct.pack("!i", len(encoded)) + encoded
            self.out += _message(b"D", body)

    @staticmethod
    def _encode(value: Any, type_name: str, fmt: int) -> bytes | None:
        if value is None:
            return None
        if fmt == 1:
            encoder = TYPES[type_name][1]
            if encoder is None:
                raise ValueError(f"recorded CockroachDB: no binary format for {type_name}")
            return encoder(value)
        text = text_of(value)
        return None if text is None else text.encode()

    def _complete(self, answer: Rows | Command) -> None:
        tag = answer.tag if isinstance(answer, Command) else (answer.tag or f"SELECT {len(answer.rows)}")
        assert tag is not None
        self.out += _message(b"C", _cstring(tag))


class _Failed(Exception):
    pass


def _format(formats: tuple[int, ...], i: int) -> int:
    if not formats:
        return 0
    return formats[i] if len(formats) > 1 else formats[0]


# -- the server -----------------------------------------------------------------------------------

AnswerFunction = Callable[[Received], Answer | None]
#: what :func:`recorded_cockroach` maps a statement name to: an answer, or a function giving one
Answering = Answer | Callable[[Received], Answer]


class RecordedCockroach:
    """See the module documentation. Use as a context manager; :attr:`url` reaches it.

    ``answer`` is called for every statement (on the connection's thread: several connections may
    call it at once); None falls back to the server's own answers for transaction control, else
    to the "no answer recorded" error. :attr:`received` and :attr:`startups` list what arrived.
    """

    def __init__(
        self,
        answer: AnswerFunction | None = None,
        *,
        crdb_version: str = CRDB_VERSION_24_3,
        engine: Engine = COCKROACHDB,
        password: str | None = None,
    ) -> None:
        self.answer = answer or (lambda received: None)
        self.crdb_version = crdb_version
        #: the password a startup must give (None: none asked, as on an insecure node)
        self.password = password
        #: the startups refused for a wrong password
        self.refused: list[Startup] = []
        self.names = StatementNames(engine)
        self.received: list[Received] = []
        self.startups: list[Startup] = []
        self._lock = threading.Lock()
        self._count = 0
        recorded = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with recorded._lock:
                    recorded._count += 1
                    number = recorded._count
                _Connection(recorded, self.request, number).serve()

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="recorded-cockroach", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, database: str = "defaultdb", scheme: str = "cockroachdb") -> str:
        return f"{scheme}://root@127.0.0.1:{self.port}/{database}?sslmode=disable"

    def parameters(self, startup: Mapping[str, str]) -> dict[str, str]:
        """The run-time parameters reported at connect (``statusReportParams``,
        ``pkg/sql/pgwire/conn.go``)."""
        return {
            "server_version": "13.0.0",
            "server_encoding": "UTF8",
            "client_encoding": "UTF8",
            "application_name": startup.get("application_name", ""),
            "DateStyle": "ISO, MDY",
            "IntervalStyle": "postgres",
            "is_superuser": "on",
            "TimeZone": "UTC",
            "integer_datetimes": "on",
            "standard_conforming_strings": "on",
            "crdb_version": self.crdb_version,
            "session_authorization": startup.get("user", "root"),
        }

    def _started(self, startup: Startup) -> None:
        with self._lock:
            self.startups.append(startup)

    def _refused(self, startup: Startup) -> None:
        with self._lock:
            self.refused.append(startup)

    def _answer_for(self, received: Received) -> Answer | None:
        with self._lock:
            self.received.append(received)
        return self.answer(received)

    def names_received(self) -> list[str]:
        """The shardq statements received, in order (other text as it was sent)."""
        with self._lock:
            return [r.name or r.text.strip() for r in self.received]

    def __enter__(self) -> RecordedCockroach:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def recorded_cockroach(
    answers: Mapping[str, Answering] | AnswerFunction | None = None, **options: Any
) -> Iterator[RecordedCockroach]:
    """A :class:`RecordedCockroach` answering by statement name (or text) from ``answers``: each
    value an answer, or a function of the :class:`Received` returning one."""
    if answers is None or callable(answers):
        function = answers
    else:
        table = dict(answers)

        def function(received: Received) -> Answer | None:
            found = table.get(received.name or "") or table.get(received.text.strip())
            return found(received) if callable(found) else found

    with RecordedCockroach(function, **options) as server:
        yield server


__all__ = [
    "CRDB_VERSION_22_2",
    "CRDB_VERSION_23_1",
    "CRDB_VERSION_24_3",
    "TYPES",
    "Answer",
    "Command",
    "Disconnect",
    "Error",
    "Received",
    "RecordedCockroach",
    "Rows",
    "StatementNames",
    "recorded_cockroach",
    "text_of",
]
