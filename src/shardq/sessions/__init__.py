"""The one way into the database, and the only package that imports psycopg.

:mod:`.dsn` (addresses, redaction), :mod:`.rules` (the 40001/40003 rules and error translation),
:mod:`.session` and :mod:`.session_async` (a connection that runs plans, and on the sync one DDL,
COPY, EXPLAIN and rolled-back transactions; the two laid out and named alike), :mod:`.borrowed`
(sessions on a caller's connection, sync and asyncio side by side),
:mod:`.per_thread` (one session per thread), :mod:`.store` (the task store) and :mod:`.embedded`
(the embedded PostgreSQL). Internal: the public API is :mod:`shardq`.
"""
