"""The one way into the database, and the only package that imports psycopg.

:mod:`.dsn` (addresses, redaction), :mod:`.rules` (the 40001/40003 rules and error translation),
:mod:`.session` and :mod:`.session_async` (a connection that runs plans), :mod:`.utility` (DDL,
COPY, EXPLAIN, rolled-back transactions), :mod:`.borrowed` (sessions on a caller's connection),
:mod:`.per_thread` (one session per thread), :mod:`.store` (the task store) and :mod:`.embedded`
(the embedded PostgreSQL). Internal: the public API is :mod:`shardq`.
"""
