"""Alembic environment for shardq.

shardq has no ORM models (``target_metadata = None``, no autogenerate): every revision is explicit
DDL through ``op.execute``. :mod:`shardq.migrations.apply` runs this environment with an already-open
SQLAlchemy connection in ``config.attributes["connection"]`` and the requested bucket count in
``config.attributes["buckets"]``. On CockroachDB the connection is in autocommit, because
CockroachDB runs schema changes atomically only one statement at a time.
"""

from alembic import context

target_metadata = None

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run shardq migrations through `shardq migrate` (shardq.migrations.apply.upgrade)")

context.configure(
    connection=connection,
    target_metadata=target_metadata,
    transaction_per_migration=True,
)
with context.begin_transaction():
    context.run_migrations()
