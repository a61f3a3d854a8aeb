"""Test helpers for the Spark bulk enqueue: failing a run's chunks inside the database.

The COPY writer commits chunks on Spark's executors, out of reach of a driver-side hook, so a
failure part-way through a run is made where it would really happen: in a chunk's transaction.
A trigger on the chunk ledger lets the first ``after`` chunks of each matching run commit and
makes the claim of every later one fail (or pause the queue in that transaction), which rolls
that chunk back whole, whichever writer runs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_FUNCTION = "shardq_test_fail_chunks"


@contextmanager
def chunks_fail_after(db, run_like: str, after: int, *, pause_queue: str | None = None) -> Iterator[None]:
    """While active, a chunk claim of a run whose id is LIKE ``run_like`` fails once ``after``
    chunks of that run have committed. With ``pause_queue`` the claim does not fail but pauses
    that queue for enqueue in the chunk's own transaction (the writer then finds it paused and
    rolls the chunk back, the pause with it). (``db.sql`` passes parameters, so ``%`` is doubled.)"""
    action = (
        f"UPDATE shardq_queues SET paused_enqueue = true WHERE name = '{pause_queue}';"
        if pause_queue
        else "RAISE EXCEPTION 'chunk %% of %% refused by the test', NEW.chunk, NEW.run_id;"
    )
    db.sql(f"""
        CREATE OR REPLACE FUNCTION {_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.chunk >= 0 AND NEW.run_id LIKE '{run_like.replace("%", "%%")}' AND (
                SELECT count(*) FROM shardq_spark_chunks WHERE run_id = NEW.run_id AND chunk >= 0) >= {int(after)}
               -- a claim of a chunk written before does nothing (ON CONFLICT), and commits
               AND NOT EXISTS (SELECT 1 FROM shardq_spark_chunks WHERE run_id = NEW.run_id AND chunk = NEW.chunk)
            THEN {action}
            END IF;
            RETURN NEW;
        END $$""")
    db.sql(
        f"CREATE TRIGGER {_FUNCTION} BEFORE INSERT ON shardq_spark_chunks FOR EACH ROW EXECUTE FUNCTION {_FUNCTION}()"
    )
    try:
        yield
    finally:
        db.sql(f"DROP TRIGGER IF EXISTS {_FUNCTION} ON shardq_spark_chunks")
        db.sql(f"DROP FUNCTION IF EXISTS {_FUNCTION}()")
