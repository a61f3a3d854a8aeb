"""Statements a sync session sends outside the ordinary named-statement path: DDL with its slots
filled (:meth:`SpecialStatements.execute_ddl`), SQL composed elsewhere (migrations' probes, admin),
a transaction that is always rolled back (:meth:`SpecialStatements.rolled_back`, ``shardq doctor``),
``COPY … FROM STDIN`` (the Spark COPY writer) and EXPLAIN for query-plan checks. Mixed into
:class:`shardq.sessions.session.Session`; none of these is retried after a 40001 on its own."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from shardq.errors import InvalidInput
from shardq.sessions.rules import _translate

if TYPE_CHECKING:
    from shardq.engine.base import Engine
    from shardq.sessions.dsn import Dsn


T = TypeVar("T")


class SpecialStatements:
    """See the module documentation."""

    if TYPE_CHECKING:
        dsn: Dsn
        _conn: psycopg.Connection[Any] | None

        @property
        def engine(self) -> Engine: ...

        def _connection(self) -> psycopg.Connection[Any]: ...

        def _query(self, name: str, identifiers: Mapping[str, str] | None = None) -> Any: ...

        def _discard(self) -> None: ...

        _in_transaction: bool

    def rolled_back(self, body: Callable[[Any], T]) -> T:
        """Run ``body(self)`` inside one transaction that is always rolled back, whatever it
        did: for checks that must never change the database (``shardq doctor``). Not retried."""
        conn = self._connection()
        outer, self._in_transaction = self._in_transaction, True  # see Session._transaction_block
        try:
            with conn.transaction(force_rollback=True):
                return body(self)
        except psycopg.Error as exc:
            if self._conn is not None and (self._conn.closed or self._conn.broken):
                self._discard()
            raise _translate(exc, self.dsn) from exc
        finally:
            self._in_transaction = outer

    def explain(self, name: str, params: Mapping[str, Any] | None = None) -> str:
        """The engine's EXPLAIN output for a named statement with these values, as text (one line
        per row the server returned), for query-plan checks: see
        :meth:`shardq.engine.Engine.explain_reads_whole_table`."""
        engine = self.engine
        query = self._query(name)
        try:
            conn = self._connection()
            text = query if isinstance(query, str) else query.as_string(conn)
            explain, values = engine.explain_query(
                text, params or {}, lambda text, values: psycopg.ClientCursor(conn).mogrify(text, values))
            rows = conn.execute(explain, values).fetchall()
        except psycopg.Error as exc:
            raise _translate(exc, self.dsn) from exc
        lines = (next(iter(row.values())) for row in rows)
        # A JSON plan arrives decoded; hand it back as the JSON text the server wrote.
        return "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)

    def execute_ddl(
        self,
        name: str,
        *,
        identifiers: Mapping[str, str] | None = None,
        literals: Mapping[str, int] | None = None,
    ) -> None:
        """Run a named DDL statement whose ``{slots}`` take identifiers or integer literals.

        DDL takes no bind parameters (neither database plans a utility statement with them), so
        this is the one place a value enters SQL text: only ``int`` values, rendered by
        ``psycopg.sql.Literal``; names go through ``psycopg.sql.Identifier``. No 40001 retry here:
        CockroachDB retries an autocommit schema change itself, and inside
        :meth:`transaction` the body is retried as a whole.
        """
        slots: dict[str, Any] = {k: sql.Identifier(v) for k, v in (identifiers or {}).items()}
        for key, value in (literals or {}).items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidInput(f"DDL literal {key} must be a whole number")
            slots[key] = sql.Literal(value)
        statement = self.engine.statements()[name]
        self.execute_raw(sql.SQL(statement.text).format(**slots))

    def execute_raw(self, query: Any, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run SQL that is not a named statement: DDL composed with ``psycopg.sql`` (migrations,
        resizing, Spark staging) or admin probes. Same error translation; no 40001 retry."""
        try:
            with self._connection().cursor(row_factory=dict_row) as cur:
                cur.execute(query, params)
                return cur.fetchall() if cur.description is not None else []
        except psycopg.Error as exc:
            if self._conn is not None and (self._conn.closed or self._conn.broken):
                self._discard()
            raise _translate(exc, self.dsn) from exc

    def copy_in(self, name: str, data: memoryview | list[Any], identifiers: Mapping[str, str] | None = None) -> None:
        """``COPY … FROM STDIN`` of the named statement with ``data`` (bytes, or a list of them),
        on this session's connection, in its transaction (errors are translated by
        :meth:`shardq.sessions.session.Session.transaction`)."""
        conn = self._connection()
        with conn.cursor() as cur, cur.copy(self._query(name, identifiers)) as copy:
            step = 1 << 20
            for part in data if isinstance(data, list) else [data]:
                view = memoryview(part)
                for start in range(0, len(view), step):
                    copy.write(view[start:start + step])

