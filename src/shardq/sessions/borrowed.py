"""Statements on a connection the caller owns, inside the caller's transaction (transactional
enqueue), sync and asyncio side by side: :class:`BorrowedSession` and :func:`borrow` over a
psycopg ``Connection`` or a SQLAlchemy ``Session``/``Connection``; :class:`AsyncBorrowedSession`
and :func:`borrow_async` over a psycopg ``AsyncConnection`` or a SQLAlchemy
``AsyncSession``/``AsyncConnection``, on the psycopg driver.

Both are their session (:class:`shardq.sessions.session.Session`,
:class:`shardq.sessions.session_async.AsyncSession`) with the connection handed in: the same plans
and error translation; nothing commits, rolls back or closes the caller's connection, even a
broken one; no 40001 retry and no reconnect."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg

from shardq.engine import engine_for_server
from shardq.errors import DatabaseUnavailable, InvalidInput
from shardq.sessions.dsn import Dsn
from shardq.sessions.rules import discard_if_broken
from shardq.sessions.session import Session
from shardq.sessions.session_async import AsyncSession

T = TypeVar("T")


class BorrowedSession(Session):
    """Named statements run on a connection the caller owns, inside the caller's transaction.

    Guarantees: nothing here commits, rolls back or closes the connection; with a connection
    outside autocommit every statement joins the caller's transaction (begun by the first one if
    none is open), so the caller's commit or rollback decides whether what shardq wrote exists.
    Errors are translated like everywhere else.

    Does not: retry a 40001 (the caller's transaction is aborted, so only the caller can re-run
    it: the error surfaces as :class:`SerializationConflict`), reconnect, or LISTEN.
    """

    def __init__(self, connection: psycopg.Connection[Any], *, application_name: str = "shardq") -> None:
        super().__init__(Dsn(connection.info.dsn), application_name=application_name, max_retries=0)
        self._conn = connection
        self._engine = engine_for_server(connection.info.parameter_status)
        self._in_transaction = True  # statements are never re-sent on their own
        self.borrowed = True

    def connection(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is None or conn.closed:
            raise DatabaseUnavailable("the connection given to shardq is closed")
        return conn

    def _discard(self) -> None:
        """Never close the caller's connection, even a broken one."""

    def close(self) -> None:
        """Nothing to close: the connection stays the caller's."""

    def transaction(self, body: Callable[[Session], T]) -> T:
        """``body`` inside the caller's transaction (an autocommit connection gets a transaction
        of its own, committed at the end, as autocommit asks). Run once: no retry."""
        conn = self.connection()
        try:
            if conn.autocommit:
                with conn.transaction():
                    return body(self)
            return body(self)
        except psycopg.Error as exc:
            raise discard_if_broken(self, exc) from exc


class AsyncBorrowedSession(AsyncSession):
    """Named statements on a ``psycopg.AsyncConnection`` the caller owns, inside the caller's
    transaction. Guarantees and limits as :class:`BorrowedSession`: nothing here
    commits, rolls back or closes the connection (a connection outside autocommit has its
    transaction begun by the first statement if none is open); no 40001 retry (the caller's
    transaction is aborted: :class:`SerializationConflict` surfaces), no reconnect."""

    def __init__(self, connection: psycopg.AsyncConnection[Any], *, application_name: str = "shardq") -> None:
        super().__init__(Dsn(connection.info.dsn), application_name=application_name, max_retries=0)
        self._conn = connection
        self._engine = engine_for_server(connection.info.parameter_status)
        self._in_transaction = True  # statements are never re-sent on their own
        self.borrowed = True

    async def connection(self) -> psycopg.AsyncConnection[Any]:
        conn = self._conn
        if conn is None or conn.closed:
            raise DatabaseUnavailable("the connection given to shardq is closed")
        return conn

    async def _discard(self) -> None:
        """Never close the caller's connection, even a broken one."""

    async def close(self) -> None:
        """Nothing to close: the connection stays the caller's."""

    def abandon(self) -> None:
        """Nothing to close: the connection stays the caller's."""

    async def transaction(self, body: Callable[[AsyncSession], Awaitable[T]]) -> T:
        """``body`` inside the caller's transaction (an autocommit connection gets a transaction
        of its own, committed at the end, as autocommit asks). Run once: no retry."""
        conn = await self.connection()
        try:
            if conn.autocommit:
                async with conn.transaction():
                    return await body(self)
            return await body(self)
        except psycopg.Error as exc:
            raise discard_if_broken(self, exc) from exc


def borrow(connection: object) -> BorrowedSession:
    """A :class:`BorrowedSession` over ``connection``: a psycopg (3) ``Connection``, or a
    SQLAlchemy ``Session`` or ``Connection`` whose driver is psycopg (``postgresql+psycopg://`` or
    ``cockroachdb+psycopg://``). Anything else is :class:`InvalidInput`."""
    if isinstance(connection, psycopg.Connection):
        return BorrowedSession(connection)
    if is_async_connection(connection):
        raise InvalidInput(
            f"connection= got an asyncio {type(connection).__name__}: use the asyncio call"
            " (defer_async, or AsyncClient.enqueue), not the sync one"
        )
    driver = _sqlalchemy_driver_connection(connection)
    if isinstance(driver, psycopg.Connection):
        return BorrowedSession(driver)
    if driver is not None:
        raise InvalidInput(
            f"connection= needs the psycopg (3) driver under SQLAlchemy, not {type(driver).__module__}"
            " (use a postgresql+psycopg:// or cockroachdb+psycopg:// URL)"
        )
    raise InvalidInput(
        f"connection= takes a psycopg Connection or a SQLAlchemy Session or Connection, not {type(connection).__name__}"
    )


def _sqlalchemy_driver_connection(connection: object) -> object | None:
    """The DBAPI connection under a SQLAlchemy ``Session`` or ``Connection`` (joining the
    Session's transaction), or None when ``connection`` is neither."""
    try:
        from sqlalchemy.engine import Connection as SAConnection
        from sqlalchemy.orm import Session as SASession
    except ImportError:  # SQLAlchemy is a dependency, but be exact about what was given
        return None
    if isinstance(connection, SASession):
        connection = connection.connection()  # begins (or joins) the Session's transaction
    if isinstance(connection, SAConnection):
        if not connection.in_transaction():
            # What SQLAlchemy's autobegin does on a first execute: without it the caller's
            # commit() would have no transaction to commit.
            connection.begin()
        return connection.connection.driver_connection
    return None


async def borrow_async(connection: object) -> AsyncBorrowedSession:
    """An :class:`AsyncBorrowedSession` over ``connection``: a psycopg (3) ``AsyncConnection``, or
    a SQLAlchemy ``AsyncSession`` or ``AsyncConnection`` whose driver is psycopg
    (``postgresql+psycopg://``), joining its transaction. Anything else is :class:`InvalidInput`."""
    if isinstance(connection, psycopg.AsyncConnection):
        return AsyncBorrowedSession(connection)
    if isinstance(connection, psycopg.Connection):
        raise InvalidInput("a sync connection needs the sync call (defer / Client.enqueue), not the asyncio one")
    driver = await _sqlalchemy_async_driver_connection(connection)
    if isinstance(driver, psycopg.AsyncConnection):
        return AsyncBorrowedSession(driver)
    if driver is not None:
        raise InvalidInput(
            f"connection= needs the psycopg (3) driver under SQLAlchemy, not {type(driver).__module__}"
            " (use a postgresql+psycopg:// or cockroachdb+psycopg:// URL)"
        )
    raise InvalidInput(
        "connection= takes a psycopg AsyncConnection or a SQLAlchemy AsyncSession or AsyncConnection,"
        f" not {type(connection).__name__}"
    )


def is_async_connection(connection: object) -> bool:
    """Whether ``connection`` is an asyncio connection object (psycopg ``AsyncConnection``,
    SQLAlchemy ``AsyncSession``/``AsyncConnection``): the sync calls refuse those."""
    if isinstance(connection, psycopg.AsyncConnection):
        return True
    try:
        from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
        from sqlalchemy.ext.asyncio import AsyncSession as SAAsyncSession
    except ImportError:
        return False
    return isinstance(connection, (SAAsyncSession, SAAsyncConnection))


async def _sqlalchemy_async_driver_connection(connection: object) -> object | None:
    """The DBAPI driver connection under a SQLAlchemy ``AsyncSession`` or ``AsyncConnection``
    (joining, or beginning as SQLAlchemy's autobegin would, its transaction), or None when
    ``connection`` is neither."""
    try:
        from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
        from sqlalchemy.ext.asyncio import AsyncSession as SAAsyncSession
    except ImportError:
        return None
    if isinstance(connection, SAAsyncSession):
        connection = await connection.connection()  # begins (or joins) the session's transaction
    if isinstance(connection, SAAsyncConnection):
        if not connection.in_transaction():
            await connection.begin()
        raw = await connection.get_raw_connection()
        return raw.driver_connection
    return None
